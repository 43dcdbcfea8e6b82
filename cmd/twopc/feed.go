package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc"
)

var feedCommand = &command{
	name:    "feed",
	args:    "NAME | status NAME | delete NAME",
	summary: "a change feed's events, in order, or --follow them; feed status NAME its groups' lag; feed delete NAME deletes one",
	help: `Feed prints the events of change feed NAME (twopc's Coordinator.Feed:
Feed.Read; with --follow, Feed.All): what happened to each transaction
made since the feed was first run (committed, held, captured, voided,
expired, canceled), one line per event: its position, kind, time (the
event's own, by the log server's clock), transaction, legs and ID. A
feed's events are numbered into batches by its sequencer (Feed.Run, run
by the application that owns the feed; the tool never runs one), and
readers read only the batches published: feed prints them in batch
order, and within a batch by transaction id, a hold's held event before
its end (never by time, which can move). twopc status
lists the feeds, each with how far its sequencer is behind.

--after POS prints the events after position POS (default: the start).
Each line's POS is the position after its event: --after with the last
one printed continues from there. Positions are opaque: take them from
the output, never make one. --limit N prints at most N events (default
100; 0: every one published); when more follow, the last line gives the
--after POS that prints the next ones. --follow keeps reading as batches
are published, until SIGINT or SIGTERM (exit status 0; the last line
gives the --after POS to resume from), or until --limit events if
--limit is given.

What is guaranteed: every event, at least once. A reader that keeps the
position of the last event it handled, and resumes from it, gets every
event, none skipped, in the same order every time; an event read again
has the same ID (its transaction and kind), which tells a repeat. The
order is the batches': an event's time is informational, never its
place, and one may follow an event with a later time (a commit that
became visible late). A read whose position is older than what the
feed keeps, because history (twopc.WithHistory) moved transactions of a
batch at or after it out of the log, is refused, exit status 1
(twopc.ErrFeedTruncated): the reader is told it fell behind, never
handed a batch with events missing. Without --after, the read starts at
the start of what the feed keeps. A deleted feed is refused likewise
(twopc.ErrFeedDeleted), and a name no feed has (a feed exists once its
sequencer first ran). A name that is not 1 to 32 of a-z, 0-9 and _, and
a position the feed refuses (twopc.ErrInvalidFeed: not of its form, or
past the end of its batch), are usage errors.

--json prints one JSON object per line, one per event: its id, kind,
pos and at, and its transaction as --json prints transactions elsewhere
(the stored fields, ids as hex, times as RFC 3339), with the state the
event left it in (held, applied or canceled): the transaction may have
moved on since (a hold held, since captured). A failure after the first
line ends the output with a line {"error": ..., "exitStatus": N}.

twopc feed status NAME prints the feed as twopc status lists it (Feed.Status:
its published batch, sequencer, takeovers, what waits to be numbered) and
each of its subscriber groups (Feed.Subscribe): the position it saved,
how many published events it has not acknowledged (BEHIND, the count
stops at 1000), the oldest one's time and how long ago that was by the
server's clock (OLDEST WAITING), and the subscriber holding its lease.
A group whose history moved events it had not acknowledged is
"truncated". --json prints the feed as status --json lists it, with
serverTime, each group's oldest and oldestAgeSeconds (null if none
waits).

twopc feed delete NAME deletes the feed (Feed.Delete): history no longer
waits for it, its subscriber groups' positions and its indexes on the
log go, and its name is not used again (its readers and its sequencer
get twopc.ErrFeedDeleted; a sequencer still running stops at its next
batch). Deleting a feed deleted already says so, and exits 0.

Examples:
  twopc feed audit
  twopc feed audit --limit 20 --json | jq -r '.error // .id'
  twopc feed audit --after "$(cat audit.pos)" --follow
  twopc feed status audit
  twopc feed status audit --json | jq '.groups[] | {name, behind, oldestAgeSeconds}'
  twopc feed delete audit`,
	run: runFeed,
}

// defaultFeedLimit is how many events feed prints unless --limit says.
const defaultFeedLimit = 100

// feedPage is how many events one read of a feed asks for.
const feedPage = 500

// feedNames is what a feed's name may be, as Coordinator.Feed checks it
// (twopc.ErrInvalidFeed): checked before connecting, as checkKey checks a
// key. The library's check stays the one that decides (feedError).
var feedNames = regexp.MustCompile(`^[a-z0-9_]{1,32}$`)

func runFeed(ctx context.Context, cl *cli, cmd *command, args []string) error {
	fs := cl.flagSet(cmd)
	var g globals
	g.register(fs, 0)
	after := fs.String("after", "", "print the events after position `POS`, as a line printed it (default: the start)")
	limit := fs.Int("limit", defaultFeedLimit, "print at most `N` events (0: every one published; with --follow, no limit unless given)")
	follow := fs.Bool("follow", false, "keep reading as batches are published, until SIGINT or SIGTERM")
	pos, err := cl.parse(cmd, fs, args, 1, 2)
	if err != nil {
		return err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if sub := pos[0]; sub == "delete" || sub == "status" {
		if len(pos) < 2 {
			return cl.usage(cmd, fs, "missing NAME: twopc feed %s NAME", sub)
		}
		for _, name := range []string{"after", "limit", "follow"} {
			if given[name] {
				return cl.usage(cmd, fs, "--%s is for reading a feed: feed %s takes none", name, sub)
			}
		}
		if err := checkFeedName(pos[1]); err != nil {
			return cl.usage(cmd, fs, "%v", err)
		}
		if sub == "status" {
			return cl.feedStatus(ctx, &g, pos[1])
		}
		return cl.deleteFeed(ctx, &g, pos[1])
	}
	if len(pos) > 1 {
		return cl.usage(cmd, fs, "unexpected argument %q", pos[1])
	}
	name := pos[0]
	if err := checkFeedName(name); err != nil {
		return cl.usage(cmd, fs, "%v", err)
	}
	if *limit < 0 {
		return cl.usage(cmd, fs, "--limit must not be negative")
	}
	n := *limit
	if *follow && !given["limit"] {
		n = 0 // until interrupted
	}

	cn, c, err := feedConnect(ctx, cl, &g, name)
	if err != nil {
		return err
	}
	defer cn.close()
	defer func() { _ = closeCoordinator(c) }()
	out := &feedOutput{cl: cl, w: cl.stdout, json: g.json}
	feed := c.Feed(name)
	if *follow {
		return out.follow(ctx, feed, twopc.Position(*after), n)
	}
	return out.read(ctx, feed, twopc.Position(*after), n)
}

// checkFeedName refuses a name Coordinator.Feed would.
func checkFeedName(name string) error {
	if !feedNames.MatchString(name) {
		return fmt.Errorf("feed name %q: a name is 1 to 32 of a-z, 0-9 and _", name)
	}
	return nil
}

// feedConnect connects, makes the coordinator the feed is read through,
// and refuses (exit status 1) a name no feed of the log has: reading it
// would print nothing, which says "no event yet" of a feed mistyped, or
// of a database or log that is not the feed's.
func feedConnect(ctx context.Context, cl *cli, g *globals, name string) (*conn, *twopc.Coordinator, error) {
	cn, err := g.connect(ctx, cl)
	if err != nil {
		return nil, nil, err
	}
	c, err := cn.coordinator()
	if err != nil {
		cn.close()
		return nil, nil, err
	}
	names, err := c.Feeds(ctx)
	if err == nil && !contains(names, name) {
		err = refused(fmt.Errorf("no feed %q on log %q of database %s: a feed exists once its sequencer (Feed.Run) first ran; twopc status lists the feeds",
			name, cn.txns.Name(), cn.db.Name()))
	}
	if err != nil {
		_ = closeCoordinator(c)
		cn.close()
		return nil, nil, err
	}
	return cn, c, nil
}

// feedError is the tool's error for a feed's error: a bad name or
// position is a usage error; a feed truncated or deleted, a refusal.
func feedError(err error) error {
	switch {
	case errors.Is(err, twopc.ErrInvalidFeed):
		return usageErrorf("%v", err)
	case errors.Is(err, twopc.ErrFeedTruncated):
		return refused(fmt.Errorf("%w: its events there left the log (twopc.WithHistory) before this reader read them, and cannot be read again", err))
	case errors.Is(err, twopc.ErrFeedDeleted):
		return refused(fmt.Errorf("%w: deleted by Feed.Delete (twopc feed delete); its name is not used again", err))
	}
	return err
}

// feedOutput prints a feed's events: a line each for people, or a JSON
// object each with --json.
type feedOutput struct {
	cl      *cli
	w       io.Writer
	json    bool
	u       units
	printed int
}

// feedEventJSON is an event as feed --json prints it, one a line.
type feedEventJSON struct {
	ID          string    `json:"id"`
	Kind        string    `json:"kind"`
	Pos         string    `json:"pos"`
	At          time.Time `json:"at"`
	Transaction jsonDoc   `json:"transaction"`
}

// The widths of the columns of an event's line: each line is printed
// as it is read (--follow), so its columns cannot be measured first.
const (
	feedPosWidth  = 7
	feedKindWidth = 9  // "committed"
	feedLegsWidth = 28 // a longer summary pushes the event's ID along
)

// header says what is printed: the events of feed name after position
// after, and how reading goes on (how, "" for a read to the end).
func (o *feedOutput) header(name string, after twopc.Position, how string) {
	if o.json {
		return
	}
	from := "the start"
	if after != "" {
		from = string(after)
	}
	fmt.Fprintf(o.w, "Feed %s, events after %s%s:\n", name, from, how)
}

// columns names the columns, before the first event.
func (o *feedOutput) columns() {
	if !o.json && o.printed == 0 {
		fmt.Fprintf(o.w, "%-*s  %-*s  %-24s  %-24s  %-*s  %s\n", feedPosWidth, "POS", feedKindWidth, "KIND", "AT", "TRANSACTION",
			feedLegsWidth, "LEGS", "EVENT")
	}
}

// event prints e.
func (o *feedOutput) event(e twopc.Event) error {
	t, err := eventTxn(e.Txn)
	if err != nil {
		return err
	}
	if o.json {
		o.printed++
		return o.cl.printJSONLine(feedEventJSON{ID: e.ID, Kind: string(e.Kind), Pos: string(e.Pos), At: e.At.UTC(), Transaction: jsonDoc{t}})
	}
	o.columns()
	o.printed++
	_, err = fmt.Fprintf(o.w, "%-*s  %-*s  %s  %s  %-*s  %s\n", feedPosWidth, e.Pos, feedKindWidth, e.Kind, timestamp(e.At), e.Txn.ID.Hex(),
		feedLegsWidth, legSummary(t, &o.u), e.ID)
	return err
}

// fail ends the output with err: under --json, once an event's line went
// out, a last line {"error": ..., "exitStatus": N} (cli.exit adds no
// error document after JSON written), so that a reader of the lines
// sees the failure in them.
func (o *feedOutput) fail(err error) error {
	err = feedError(err)
	if o.json && o.cl.wroteJSON {
		_ = o.cl.printJSONLine(jsonError{Error: o.cl.message(err), ExitStatus: exitCode(err)})
	}
	return err
}

// read prints up to limit events after position after (0: every one
// published), and where to go on from.
func (o *feedOutput) read(ctx context.Context, feed *twopc.Feed, after twopc.Position, limit int) error {
	next, more := after, false
	for first := true; !more; first = false {
		want := feedPage
		if limit > 0 {
			want = min(feedPage, limit-o.printed+1) // one more than the limit: do more follow?
		}
		evs, p, err := feed.Read(ctx, next, want)
		if err != nil {
			return o.fail(err)
		}
		if first {
			// Only now: a usage error (a bad position) prints nothing on
			// stdout.
			o.header(feed.Name(), after, "")
		}
		for _, e := range evs {
			if limit > 0 && o.printed == limit {
				more = true
				break
			}
			if err := o.event(e); err != nil {
				return o.fail(err)
			}
			next = e.Pos
		}
		if !more {
			next = p
		}
		if len(evs) < want {
			break // every published batch read
		}
	}
	if o.json {
		return nil
	}
	if o.printed == 0 {
		fmt.Fprintln(o.w, "No events.")
	}
	o.u.note(o.w)
	if more {
		fmt.Fprintf(o.w, "More follow: --after %s\n", next)
	} else {
		fmt.Fprintf(o.w, "End of the published events: --after %s reads the ones published next.\n", next)
	}
	return nil
}

// follow prints the events after position after as they are published
// (Feed.All), until ctx ends (SIGINT, SIGTERM: exit status 0) or limit
// events were printed (0: no limit).
func (o *feedOutput) follow(ctx context.Context, feed *twopc.Feed, after twopc.Position, limit int) error {
	how := ", following until interrupted"
	if limit > 0 {
		how = fmt.Sprintf(", following until %s or interrupted", plural(int64(limit), "event"))
	}
	// One read first: a bad position, a feed deleted or truncated, is
	// told before anything is printed.
	if _, _, err := feed.Read(ctx, after, 1); err != nil {
		if ctx.Err() != nil {
			return nil // stopped by a signal before it began
		}
		return o.fail(err)
	}
	o.header(feed.Name(), after, how)
	o.columns()
	next := after
	for e, err := range feed.All(ctx, after) {
		if err != nil {
			if ctx.Err() != nil {
				break // stopped by a signal: not a failure
			}
			return o.fail(err)
		}
		if err := o.event(e); err != nil {
			return o.fail(err)
		}
		next = e.Pos
		if limit > 0 && o.printed == limit {
			break
		}
	}
	if o.json {
		return nil
	}
	o.u.note(o.w)
	fmt.Fprintf(o.w, "Stopped after %s", plural(int64(o.printed), "event"))
	if next != "" {
		fmt.Fprintf(o.w, ": --after %s continues from here", next)
	}
	fmt.Fprintln(o.w, ".")
	return nil
}

// eventTxn is an event's transaction as a document the tool reads and
// prints as it does the log's: the library's Txn carries the stored
// fields' names. A transaction of legs stores no source or destination;
// their nil values are left out.
func eventTxn(t twopc.Txn) (*txnDoc, error) {
	raw, err := bson.Marshal(t)
	if err == nil && len(t.Legs) > 0 {
		var d bson.D
		if err = bson.Unmarshal(raw, &d); err == nil {
			kept := d[:0]
			for _, e := range d {
				if (e.Key == "source" || e.Key == "destination") && e.Value == nil {
					continue
				}
				kept = append(kept, e)
			}
			raw, err = bson.Marshal(kept)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("transaction %s: %w", t.ID.Hex(), err)
	}
	doc := parseTxn(raw)
	return &doc, nil
}

// feedDeleteReport is what feed delete --json prints.
type feedDeleteReport struct {
	Feed           string `json:"feed"`
	Deleted        bool   `json:"deleted"`
	AlreadyDeleted bool   `json:"alreadyDeleted"` // deleted before: nothing changed
	Published      int64  `json:"published"`      // the last batch it published
}

// deleteFeed deletes feed name (Feed.Delete) and says what it did. A
// feed deleted already is deleted again (what an interrupted delete left,
// its groups and indexes, goes), and said so.
func (cl *cli) deleteFeed(ctx context.Context, g *globals, name string) error {
	cn, c, err := feedConnect(ctx, cl, g, name)
	if err != nil {
		return err
	}
	defer cn.close()
	defer func() { _ = closeCoordinator(c) }()
	feed := c.Feed(name)
	st, err := feed.Status(ctx)
	if err != nil {
		return feedError(err)
	}
	if err := feed.Delete(ctx); err != nil {
		return feedError(err)
	}
	rep := feedDeleteReport{Feed: name, Deleted: true, AlreadyDeleted: st.Deleted, Published: st.Published}
	if g.json {
		return cl.printJSON(rep)
	}
	if st.Deleted {
		fmt.Fprintf(cl.stdout, "Feed %s was deleted already: nothing changed.\n", name)
		return nil
	}
	batches := "batches"
	if st.Published == 1 {
		batches = "batch"
	}
	fmt.Fprintf(cl.stdout, "Deleted feed %s (it had published %d %s): its readers and its sequencer now get twopc.ErrFeedDeleted, "+
		"history no longer waits for it, and its subscriber groups' positions and its indexes on the log are gone. "+
		"Its name is not used again. A sequencer still running stops at its next batch.\n", name, st.Published, batches)
	return nil
}
