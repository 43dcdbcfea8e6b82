package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/twopc/twopc/internal/schema"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

var statusCommand = &command{
	name:    "status",
	summary: "transactions by state, the oldest unfinished one, which applications are active, the change feeds",
	help: `Status counts the transactions by state, gives the age of the oldest
unfinished one (initial, pending, applied or canceling: by its
lastModified, against the server's clock), and, for each application,
how many transactions it was the last to write in the last --window and
when. A coordinator writes its name on the transactions it creates; a
recoverer or canceler writes its own on those it takes over. So a stale
transaction with no application active means no recoverer is running;
settling an applied transaction keeps its owner's name. Holds (state
held) are not unfinished work: status counts them and names the one held
longest, by heldAt.

Status lists each change feed of the log (see twopc help feed), deleted
ones too: the last batch it published, its sequencer's epoch (raised by
each takeover), the sequencer holding its lease and when that lease ends
by the server's clock ("none" if none holds it; one that lapsed with a
holder named is a sequencer that stopped without letting go: the next
Feed.Run takes over then), how often the sequencer was taken over, how
many transactions wait to be numbered (how far the sequencer is behind;
the count stops at what one round of a sequencer takes, 1000 at most),
and whether it was deleted. --json: feeds, one object each.

On a database with no transactions collection of the name --transactions
gives, status says so, naming the collections it has, and exits 1.

Examples:
  MONGODB_URI=mongodb://127.0.0.1:27017/bank twopc status
  twopc status --uri mongodb://127.0.0.1:27017 --db bank --window 1h
  twopc status --json | jq .states.pending
  twopc status --json | jq '.feeds | map({name, published, waiting})'`,
	run: runStatus,
}

// states are the seven states, in the order output lists them.
var states = []string{"initial", "pending", "applied", "done", "canceling", "canceled", "held"}

// unfinishedStates are the states of transactions under way, each within
// its lease: not final, and not held (a hold waits for its caller).
var unfinishedStates = []string{"initial", "pending", "applied", "canceling"}

type statusReport struct {
	Database     string           `json:"database"`
	Collection   string           `json:"collection"`
	ServerTime   time.Time        `json:"serverTime"`
	States       map[string]int64 `json:"states"`
	Other        int64            `json:"other"` // in no state the protocol knows
	Total        int64            `json:"total"`
	Unfinished   int64            `json:"unfinished"`
	Oldest       *oldestTxn       `json:"oldestUnfinished"`
	OldestHeld   *oldestTxn       `json:"oldestHeld"` // the hold held longest; its age is how long it has been held
	Window       float64          `json:"windowSeconds"`
	Applications []appActivity    `json:"applications"`
	// Feeds are the log's change feeds, deleted ones too, by name.
	Feeds []feedStatusJSON `json:"feeds"`
}

type oldestTxn struct {
	ID           string    `json:"id"`
	State        string    `json:"state"`
	Application  string    `json:"application"`
	LastModified time.Time `json:"lastModified"`
	Age          float64   `json:"ageSeconds"`
	age          time.Duration
}

type appActivity struct {
	Application  string    `json:"application"`
	Transactions int64     `json:"transactions"`
	LastWrite    time.Time `json:"lastWrite"`
	Age          float64   `json:"ageSeconds"`
	age          time.Duration
}

func runStatus(ctx context.Context, cl *cli, cmd *command, args []string) error {
	fs := cl.flagSet(cmd)
	var g globals
	g.register(fs, withApplication)
	window := fs.Duration("window", 10*time.Minute, "how far back to look for active applications")
	if _, err := cl.parse(cmd, fs, args, 0, 0); err != nil {
		return err
	}
	if *window <= 0 {
		return cl.usage(cmd, fs, "--window must be positive")
	}
	cn, err := g.connect(ctx, cl)
	if err != nil {
		return err
	}
	defer cn.close()
	rep, err := status(ctx, cn, *window)
	if err != nil {
		return err
	}
	if g.json {
		return cl.printJSON(rep)
	}
	rep.print(cl.stdout, *window)
	return nil
}

func status(ctx context.Context, cn *conn, window time.Duration) (*statusReport, error) {
	now, err := cn.serverNow(ctx)
	if err != nil {
		return nil, err
	}
	if err := cn.hasLog(ctx); err != nil {
		return nil, err
	}
	rep := &statusReport{Database: cn.db.Name(), Collection: cn.txns.Name(), ServerTime: now,
		States: map[string]int64{}, Window: seconds(window), Applications: []appActivity{}}
	for _, s := range states {
		n, err := cn.txns.CountDocuments(ctx, bson.D{{Key: schema.State, Value: s}})
		if err != nil {
			return nil, fmt.Errorf("count %s transactions: %w", s, err)
		}
		rep.States[s] = n
		rep.Total += n
	}
	for _, s := range unfinishedStates {
		rep.Unfinished += rep.States[s]
	}
	if rep.Other, err = cn.txns.CountDocuments(ctx, bson.D{{Key: schema.State, Value: bson.D{{Key: "$nin", Value: states}}}}); err != nil {
		return nil, fmt.Errorf("count transactions in other states: %w", err)
	}
	rep.Total += rep.Other

	if rep.Oldest, err = oldest(ctx, cn, now, bson.D{{Key: "$in", Value: unfinishedStates}}, schema.LastModified); err != nil {
		return nil, fmt.Errorf("oldest unfinished transaction: %w", err)
	}
	if rep.OldestHeld, err = oldest(ctx, cn, now, "held", schema.HeldAt); err != nil {
		return nil, fmt.Errorf("oldest held transaction: %w", err)
	}

	if rep.Applications, err = activity(ctx, cn.txns, now, window); err != nil {
		return nil, fmt.Errorf("active applications: %w", err)
	}
	if rep.Feeds, err = feedStatuses(ctx, cn, now); err != nil {
		return nil, fmt.Errorf("change feeds: %w", err)
	}
	return rep, nil
}

// oldest is the transaction in state (a value or a condition) whose
// time field since (lastModified, or a hold's heldAt, which only the write
// that made it held sets) is the earliest, and its age since then; nil if
// there is none. A document without the field is aged by lastModified.
func oldest(ctx context.Context, cn *conn, now time.Time, state any, since string) (*oldestTxn, error) {
	raw, err := cn.txns.FindOne(ctx, bson.D{{Key: schema.State, Value: state}},
		options.FindOne().SetSort(bson.D{{Key: since, Value: 1}})).Raw()
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		return nil, nil
	case err != nil:
		return nil, err
	}
	t := parseTxn(raw)
	at, ok := raw.Lookup(since).TimeOK()
	if !ok {
		at = t.lastModified
	}
	return &oldestTxn{ID: t.idString(), State: t.state, Application: t.application,
		LastModified: t.lastModified, Age: seconds(max(now.Sub(at), 0)), age: age(now, at)}, nil
}

// activity counts, per application, the transactions it last wrote since
// now-window, and when it last wrote one. It reads every transaction, as
// the counts by state do: no index of the log is kept by lastModified
// (each would cost every state write).
func activity(ctx context.Context, txns *mongo.Collection, now time.Time, window time.Duration) ([]appActivity, error) {
	match := bson.D{
		{Key: schema.State, Value: bson.D{{Key: "$in", Value: states}}},
		{Key: schema.LastModified, Value: bson.D{{Key: "$gte", Value: now.Add(-window)}}},
	}
	var rows []struct {
		App  bson.RawValue `bson:"_id"`
		N    int64         `bson:"n"`
		Last time.Time     `bson:"last"`
	}
	group := bson.D{{Key: "_id", Value: "$application"}, {Key: "n", Value: bson.D{{Key: "$sum", Value: 1}}}}
	cur, err := txns.Aggregate(ctx, mongo.Pipeline{
		{{Key: "$match", Value: match}},
		{{Key: "$group", Value: append(group, bson.E{Key: "last", Value: bson.D{{Key: "$max", Value: "$lastModified"}}})}},
	})
	latest := err != nil // FerretDB v1 has no $max in $group: read each application's latest
	var se mongo.ServerError
	if err != nil && errors.As(err, &se) {
		cur, err = txns.Aggregate(ctx, mongo.Pipeline{{{Key: "$match", Value: match}}, {{Key: "$group", Value: group}}})
	}
	if err != nil {
		return nil, err
	}
	if err := cur.All(ctx, &rows); err != nil {
		return nil, err
	}
	out := make([]appActivity, 0, len(rows))
	for _, r := range rows {
		a := appActivity{Transactions: r.N, LastWrite: r.Last}
		a.Application, _ = r.App.StringValueOK()
		if latest {
			var doc struct {
				LastModified time.Time `bson:"lastModified"`
			}
			f := append(bson.D{}, match...)
			if a.Application == "" {
				f = append(f, bson.E{Key: schema.Application, Value: bson.D{{Key: "$in", Value: bson.A{nil, ""}}}})
			} else {
				f = append(f, bson.E{Key: schema.Application, Value: a.Application})
			}
			err := txns.FindOne(ctx, f, options.FindOne().SetSort(bson.D{{Key: schema.LastModified, Value: -1}}).
				SetProjection(bson.D{{Key: schema.LastModified, Value: 1}})).Decode(&doc)
			if err != nil && !errors.Is(err, mongo.ErrNoDocuments) {
				return nil, err
			}
			a.LastWrite = doc.LastModified
		}
		a.age = age(now, a.LastWrite)
		a.Age = seconds(max(now.Sub(a.LastWrite), 0))
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].LastWrite.After(out[j].LastWrite) })
	return out, nil
}

func (r *statusReport) print(w io.Writer, window time.Duration) {
	fmt.Fprintf(w, "Database %s, transactions in %q; server time %s\n\n", r.Database, r.Collection, timestamp(r.ServerTime))
	fmt.Fprintln(w, "Transactions by state:")
	tw := table(w)
	for _, s := range states {
		fmt.Fprintf(tw, "  %s\t%d\n", s, r.States[s])
	}
	if r.Other > 0 {
		fmt.Fprintf(tw, "  other\t%d\t(in no state the protocol knows: edited by hand, or another program's)\n", r.Other)
	}
	fmt.Fprintf(tw, "  total\t%d\n", r.Total)
	_ = tw.Flush()
	fmt.Fprintln(w)
	if r.Oldest == nil {
		fmt.Fprintln(w, "No unfinished transaction.")
	} else {
		o := r.Oldest
		fmt.Fprintf(w, "Oldest unfinished: %s, %s, untouched for %v (application %q); %s unfinished in all.\n",
			o.ID, o.State, o.age, o.Application, plural(r.Unfinished, "transaction"))
	}
	if o := r.OldestHeld; o != nil {
		fmt.Fprintf(w, "Oldest hold: %s, held for %v (application %q); %s held in all (capture or void them; see twopc help capture).\n",
			o.ID, o.age, o.Application, plural(r.States["held"], "transaction"))
	}
	fmt.Fprintln(w)
	if len(r.Applications) == 0 {
		fmt.Fprintf(w, "No application wrote a transaction in the last %v: no coordinator created one, no recoverer took one over.\n", window)
	} else {
		fmt.Fprintf(w, "Applications that last wrote transactions in the last %v:\n", window)
		tw = table(w)
		fmt.Fprintln(tw, "  APPLICATION\tTRANSACTIONS\tLAST WRITE")
		for _, a := range r.Applications {
			name := a.Application
			if name == "" {
				name = "(none)"
			}
			fmt.Fprintf(tw, "  %s\t%d\t%v ago\n", name, a.Transactions, a.age)
		}
		_ = tw.Flush()
	}
	fmt.Fprintln(w)
	printFeeds(w, r.Feeds, r.ServerTime)
}
