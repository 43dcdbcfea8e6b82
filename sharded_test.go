package twopc_test

// Tests that only a sharded cluster can run: the GitHub workflow's sharded
// job (.github/workflows/ci.yml) starts one of two shards, each a replica
// set of three members, and two routers, sets TWOPC_TEST_SHARDED=1 and
// MONGODB_URI to both routers, and internal/mongotest shards the accounts,
// the log and its side collections of every test database on
// {_id: "hashed"}. Anywhere else each test skips, naming the job
// (mongotest.RequireSharded).

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/internal/mongotest"
)

// shardedCtx is a context for a sharded test, longer than testCtx: a
// cluster of nine processes on one runner, under the race detector.
func shardedCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// startedCommand is a command a client sent, as its monitor saw it.
type startedCommand struct {
	name string
	db   string
	cmd  bson.Raw
}

// commandRecorder records every command a client starts.
type commandRecorder struct {
	mu   sync.Mutex
	cmds []startedCommand
}

func (l *commandRecorder) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		c := startedCommand{name: e.CommandName, db: e.DatabaseName, cmd: append(bson.Raw(nil), e.Command...)}
		l.mu.Lock()
		defer l.mu.Unlock()
		l.cmds = append(l.cmds, c)
	}}
}

func (l *commandRecorder) recorded() []startedCommand {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.cmds)
}

// explainedKinds are the commands whose routing TestShardedExplainEachCommand
// explains. An insert is routed by its document's _id, and needs none.
var explainedKinds = map[string]bool{
	"find": true, "update": true, "delete": true, "findAndModify": true, "aggregate": true, "count": true,
}

// notExplained are the fields of a command as sent that are not the
// command's own (the session, the cluster time, the database, the server
// API) or that explain refuses inside the command it explains (the write
// and read concerns, the read preference, a time limit); "ordered" has no
// meaning for one statement.
var notExplained = map[string]bool{
	"lsid": true, "txnNumber": true, "autocommit": true, "startTransaction": true,
	"$clusterTime": true, "$db": true, "$readPreference": true,
	"writeConcern": true, "readConcern": true, "maxTimeMS": true, "ordered": true,
	"apiVersion": true, "apiStrict": true, "apiDeprecationErrors": true,
}

// statement is one statement of a recorded command, as explain takes it.
type statement struct {
	name   string   // find, update, delete, findAndModify, aggregate, count
	db     string   // its database
	coll   string   // its collection
	cmd    bson.D   // the command to explain: the statement alone
	filter bson.Raw // the documents it reads or writes
	write  bool
}

// statementsOf splits a recorded command into statements: an update or a
// delete into one command per statement, each alone; any other command is
// one statement, without the fields explain refuses.
func statementsOf(t *testing.T, c startedCommand) []statement {
	t.Helper()
	coll, _ := c.cmd.Lookup(c.name).StringValueOK()
	st := statement{name: c.name, db: c.db, coll: coll}
	own := func() bson.D {
		var d bson.D
		elems, err := c.cmd.Elements()
		require.NoError(t, err)
		for _, e := range elems {
			if !notExplained[e.Key()] {
				d = append(d, bson.E{Key: e.Key(), Value: e.Value()})
			}
		}
		return d
	}
	lookupDoc := func(doc bson.Raw, key string) bson.Raw {
		v, err := doc.LookupErr(key)
		if err != nil {
			return bson.Raw{5, 0, 0, 0, 0} // no filter: {}
		}
		d, ok := v.DocumentOK()
		require.True(t, ok, "%s of %s is not a document", key, c.cmd)
		return d
	}
	switch c.name {
	case "update", "delete":
		array, field := "updates", "q"
		if c.name == "delete" {
			array = "deletes"
		}
		arr, ok := c.cmd.Lookup(array).ArrayOK()
		require.True(t, ok, "%s without %s: %s", c.name, array, c.cmd)
		values, err := arr.Values()
		require.NoError(t, err)
		var all []statement
		for _, v := range values {
			one := st
			one.write = true
			one.filter = lookupDoc(v.Document(), field)
			one.cmd = bson.D{{Key: c.name, Value: coll}, {Key: array, Value: bson.A{v}}}
			all = append(all, one)
		}
		return all
	case "findAndModify":
		st.write = true
		st.filter = lookupDoc(c.cmd, "query")
	case "count":
		st.filter = lookupDoc(c.cmd, "query")
	case "aggregate":
		st.filter = bson.Raw{5, 0, 0, 0, 0}
		if pipeline, ok := c.cmd.Lookup("pipeline").ArrayOK(); ok {
			if first, err := pipeline.IndexErr(0); err == nil {
				st.filter = lookupDoc(first.Document(), "$match")
			}
		}
	default: // find
		st.filter = lookupDoc(c.cmd, "filter")
	}
	st.cmd = own()
	return []statement{st}
}

// byID says how filter names _id at its top level: "eq" for an equality
// (a value, or {$eq: v}), "in" with the number of ids for {$in: [...]},
// "" otherwise.
func byID(filter bson.Raw) (string, int) {
	v, err := filter.LookupErr("_id")
	if err != nil {
		return "", 0
	}
	doc, ok := v.DocumentOK()
	if !ok {
		return "eq", 1
	}
	elems, _ := doc.Elements()
	if len(elems) == 0 || !strings.HasPrefix(elems[0].Key(), "$") {
		return "eq", 1 // an _id that is itself a document
	}
	if _, err := doc.LookupErr("$eq"); err == nil {
		return "eq", 1
	}
	if in, err := doc.LookupErr("$in"); err == nil {
		if arr, ok := in.ArrayOK(); ok {
			values, _ := arr.Values()
			return "in", len(values)
		}
	}
	return "", 0
}

// broadcastOf names the documented read (COMMANDS.md) that filter, a read
// not by _id, is, by its top-level field names: "state" (the low-water
// mark's read, recovery's scans by state and created, the audit's reads
// and counts by state), "accounts" (statements by accounts and
// committedAt, an account's transactions by accounts and created), "key"
// (statement checkpoints), "tombstone" (listing a ledger's accounts), and
// an empty filter on the accounts: the audit reading every account. ""
// for any other read.
func broadcastOf(st statement) string {
	elems, _ := st.filter.Elements()
	fields := map[string]bool{}
	for _, e := range elems {
		fields[e.Key()] = true
	}
	switch {
	case fields["state"]:
		return "state"
	case fields["accounts"]:
		return "accounts"
	case fields["key"]:
		return "key"
	case fields["tombstone"]:
		return "tombstone"
	case len(elems) == 0 && st.name == "find" && strings.HasPrefix(st.coll, "accounts"):
		return "every account (audit)"
	}
	return ""
}

// shapeOf is v with its values left out: the keys and operators of a
// filter, which say how it is routed.
func shapeOf(v bson.RawValue) string {
	switch v.Type {
	case bson.TypeEmbeddedDocument:
		elems, _ := v.Document().Elements()
		parts := make([]string, len(elems))
		for i, e := range elems {
			parts[i] = e.Key() + ":" + shapeOf(e.Value())
		}
		return "{" + strings.Join(parts, ",") + "}"
	case bson.TypeArray:
		values, _ := v.Array().Values()
		if len(values) > 0 && values[0].Type == bson.TypeEmbeddedDocument {
			return "[" + shapeOf(values[0]) + ",…]"
		}
		return "[…]"
	default:
		return "?"
	}
}

// routing is what explain through the router says of a statement.
type routing struct {
	stage  string   // the router's stage: SINGLE_SHARD, SHARD_MERGE, SHARD_WRITE…; an aggregate's mergeType
	shards []string // the shards the statement is sent to
}

// explainRouting explains st through the router (queryPlanner verbosity:
// nothing runs) and reads the shards it targets (routingOf).
func explainRouting(ctx context.Context, t *testing.T, client *mongo.Client, st statement) routing {
	t.Helper()
	var out bson.Raw
	err := client.Database(st.db).RunCommand(ctx, bson.D{
		{Key: "explain", Value: st.cmd},
		{Key: "verbosity", Value: "queryPlanner"},
	}).Decode(&out)
	require.NoError(t, err, "explain %v", st.cmd)
	r, err := routingOf(out)
	require.NoError(t, err, "explain of %v through the router: %s", st.cmd, out)
	return r
}

// routingOf reads the router's explain of a statement: a find's, count's,
// update's, delete's or findAndModify's queryPlanner.winningPlan has the
// router's stage and the shards, each with its shardName; an aggregate's
// explain has a document of the shards, keyed by name, and its mergeType.
func routingOf(out bson.Raw) (routing, error) {
	var r routing
	if plan, err := out.LookupErr("queryPlanner", "winningPlan"); err == nil {
		doc, ok := plan.DocumentOK()
		if !ok {
			return r, errors.New("winningPlan is not a document")
		}
		r.stage, _ = doc.Lookup("stage").StringValueOK()
		shards, ok := doc.Lookup("shards").ArrayOK()
		if !ok {
			return r, errors.New("the winning plan names no shards: not a router's explain")
		}
		values, err := shards.Values()
		if err != nil {
			return r, err
		}
		for _, v := range values {
			name, ok := v.Document().Lookup("shardName").StringValueOK()
			if !ok {
				return r, fmt.Errorf("a shard without a shardName: %s", v)
			}
			r.shards = append(r.shards, name)
		}
		return r, nil
	}
	shards, err := out.LookupErr("shards")
	if err != nil {
		return r, errors.New("neither a winning plan nor shards")
	}
	doc, ok := shards.DocumentOK()
	if !ok {
		return r, errors.New("shards is not a document")
	}
	elems, err := doc.Elements()
	if err != nil {
		return r, err
	}
	for _, e := range elems {
		r.shards = append(r.shards, e.Key())
	}
	r.stage, _ = out.Lookup("mergeType").StringValueOK()
	return r, nil
}

// TestShardedExplainEachCommand: every kind of call the library makes is
// run through a client that records each command; then every statement of
// kind find, update, delete, findAndModify, aggregate or count is explained
// through the router, each alone. A statement naming _id by equality goes
// to one shard (SINGLE_SHARD: a read's stage, and a write's one shard; the
// router names every write's stage SHARD_WRITE); one naming _id: {$in} to
// at most as many shards as ids; every write names _id; every other read
// is one of the broadcasts COMMANDS.md documents, told by its top-level
// fields. The shapes seen and the shards each reached are logged.
func TestShardedExplainEachCommand(t *testing.T) {
	mongotest.RequireSharded(t)
	ctx := shardedCtx(t)
	b := newBank(t)
	rec := &commandRecorder{}
	db := mongotest.ConnectURI(t, b.server.URI, options.Client().SetMonitor(rec.monitor())).Database(b.db.Name())
	// WithHistory with the archive, so that a Recoverer pass archives and
	// removes (a delete) and a lookup reads the archive.
	keep := twopc.WithHistory(time.Millisecond, db.Collection("archive"))
	coordinator := func(opts ...twopc.Option) *twopc.Coordinator {
		c, err := twopc.NewCoordinator(db, append([]twopc.Option{keep}, opts...)...)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close(context.Background()) })
		return c
	}
	c := coordinator(twopc.WithSyncSettle())
	require.NoError(t, c.EnsureIndexes(ctx))
	for _, id := range []string{"A", "B", "C", "D", "E", "F"} {
		require.NoError(t, c.OpenAccount(ctx, id, 10_000))
	}

	plain, err := c.Transfer(ctx, "A", "B", 10)
	require.NoError(t, err)
	keyed, err := c.Transfer(ctx, "B", "C", 20, twopc.WithKey("explain-keyed"))
	require.NoError(t, err)
	again, err := c.Transfer(ctx, "B", "C", 20, twopc.WithKey("explain-keyed"))
	require.NoError(t, err)
	assert.Equal(t, keyed.ID, again.ID)
	results, err := c.TransferBatch(ctx, []twopc.TransferRequest{
		{Source: "C", Destination: "D", Value: 1},
		{Source: "D", Destination: "E", Value: 2, Key: "explain-batch"},
		{Source: "E", Destination: "F", Value: 3},
	})
	require.NoError(t, err)
	for i, r := range results {
		require.NoError(t, r.Err, "batch %d", i)
	}
	legs, err := c.TransferLegs(ctx, []twopc.Leg{{Account: "A", Amount: -30}, {Account: "E", Amount: 20}, {Account: "F", Amount: 10}})
	require.NoError(t, err)
	hold, err := c.Hold(ctx, "A", "B", 50)
	require.NoError(t, err)
	_, err = c.Capture(ctx, hold.ID, 20)
	require.NoError(t, err)
	voided, err := c.Hold(ctx, "C", "D", 40)
	require.NoError(t, err)
	_, err = c.Void(ctx, voided.ID)
	require.NoError(t, err)
	_, err = c.Refund(ctx, plain.ID, 3) // the book's first reservation: an insert
	require.NoError(t, err)
	_, err = c.Refund(ctx, plain.ID, 2) // the next: an update of the book
	require.NoError(t, err)
	_, err = c.Reverse(ctx, legs.ID)
	require.NoError(t, err)
	canceler := twopc.NewCanceler(c)
	placeholder, err := canceler.Cancel(ctx, bson.NewObjectID())
	require.NoError(t, err)
	assert.Equal(t, twopc.StateCanceled, placeholder.State)
	_, err = canceler.Cancel(ctx, plain.ID)
	require.ErrorIs(t, err, twopc.ErrNotCancelable)
	_, err = c.Get(ctx, plain.ID)
	require.NoError(t, err)
	_, err = c.GetByKey(ctx, "explain-keyed")
	require.NoError(t, err)
	_, err = c.Account(ctx, "A")
	require.NoError(t, err)
	_, err = c.Statement(ctx, "", "A", twopc.StatementQuery{})
	require.NoError(t, err)
	_, err = c.Transactions(ctx, "", "A", twopc.TransactionQuery{})
	require.NoError(t, err)
	page, err := c.Accounts(ctx, "", twopc.AccountQuery{Limit: 2})
	require.NoError(t, err)
	require.NotEmpty(t, page.Next)
	_, err = c.Accounts(ctx, "", twopc.AccountQuery{Limit: 2, After: page.Next})
	require.NoError(t, err)
	rep, err := c.Audit(ctx)
	require.NoError(t, err)
	assert.True(t, rep.OK(), "%+v", rep.Violations)

	// Two transfers that die, one before its legs (recovery rolls it
	// back) and one before its commit (recovery rolls it forward), then
	// Recoverer passes, which also archive and remove what is final.
	for _, step := range []twopc.Step{twopc.StepApply, twopc.StepCommit} {
		dying := coordinator(twopc.WithApplication("dying"), twopc.WithStepHook(crashAt(step)))
		txn, err := dying.Transfer(ctx, "D", "E", 5)
		require.ErrorIs(t, err, errCrash)
		require.NotNil(t, txn)
		b.backdate(txn.ID, time.Hour)
	}
	r := twopc.NewRecoverer(coordinator(twopc.WithApplication("recoverer")))
	var passes twopc.RecoveryReport
	for pass := 0; pass < 5 && (passes.Finished() < 2 || passes.Removed == 0); pass++ {
		rep, err := r.RecoverOnce(ctx)
		require.NoError(t, err)
		passes.RolledForward += rep.RolledForward
		passes.RolledBack += rep.RolledBack
		passes.Removed += rep.Removed
	}
	assert.GreaterOrEqual(t, passes.RolledForward, 1, "the transfer that died before its commit")
	assert.GreaterOrEqual(t, passes.RolledBack, 1, "the transfer that died before its legs")
	assert.Positive(t, passes.Removed, "final transfers archived and removed")
	_, err = c.Get(ctx, plain.ID) // archived: read from the archive
	require.NoError(t, err)
	_, err = twopc.ReadMark(ctx, c) // the low-water mark's read
	require.NoError(t, err)

	type row struct {
		name, coll, shape, class string
		stages                   map[string]bool
		n, least, most           int
	}
	rows := map[string]*row{}
	seen := map[string]bool{}
	explained := map[string]bool{}
	for _, c := range rec.recorded() {
		if !explainedKinds[c.name] || c.db != b.db.Name() {
			continue
		}
		for _, st := range statementsOf(t, c) {
			text := fmt.Sprint(st.cmd)
			if explained[text] {
				continue // the same statement again (the mark's reads, four a second)
			}
			explained[text] = true
			route := explainRouting(ctx, t, b.db.Client(), st)
			kind, ids := byID(st.filter)
			class := kind
			switch {
			case kind == "eq":
				assert.Len(t, route.shards, 1, "%s on %s by _id reaches %v: %v", st.name, st.coll, route.shards, st.cmd)
				if st.name == "find" || st.name == "count" || st.name == "findAndModify" {
					assert.Equal(t, "SINGLE_SHARD", route.stage, "%s on %s by _id: %v", st.name, st.coll, st.cmd)
				}
			case kind == "in":
				class = fmt.Sprintf("in(%d)", ids)
				assert.NotEmpty(t, route.shards, "%v", st.cmd)
				assert.LessOrEqual(t, len(route.shards), ids, "%s on %s by %d ids reaches %v: %v", st.name, st.coll, ids, route.shards, st.cmd)
			case st.write:
				t.Errorf("a write that does not name _id, sent to %v: %s %v", route.shards, st.name, st.cmd)
			default:
				class = broadcastOf(st)
				assert.NotEmpty(t, class, "a read neither by _id nor a documented broadcast, sent to %v: %s %v", route.shards, st.name, st.cmd)
				class = "broadcast: " + class
			}
			seen[st.name+" "+st.coll] = true
			seen[class] = true
			if comment, _ := c.cmd.Lookup("comment").StringValueOK(); comment == twopc.MarkComment {
				seen["the low-water mark's read"] = true
			}
			shape := shapeOf(bson.RawValue{Type: bson.TypeEmbeddedDocument, Value: st.filter})
			key := st.name + " " + st.coll + " " + shape
			rw := rows[key]
			if rw == nil {
				rw = &row{name: st.name, coll: st.coll, shape: shape, class: class, stages: map[string]bool{}, least: len(route.shards)}
				rows[key] = rw
			}
			rw.n++
			rw.least = min(rw.least, len(route.shards))
			rw.most = max(rw.most, len(route.shards))
			rw.stages[route.stage] = true
		}
	}
	keys := make([]string, 0, len(rows))
	for k := range rows {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	t.Logf("%-14s %-25s %-32s %-8s %-22s %s", "command", "collection", "class", "shards", "stage", "filter")
	for _, k := range keys {
		rw := rows[k]
		shards := fmt.Sprint(rw.least)
		if rw.most != rw.least {
			shards = fmt.Sprintf("%d-%d", rw.least, rw.most)
		}
		stages := slices.Sorted(maps.Keys(rw.stages))
		t.Logf("%-14s %-25s %-32s %-8s %-22s %s  (%d)", rw.name, rw.coll, rw.class, shards, strings.Join(stages, ","), rw.shape, rw.n)
	}
	// What the calls above must have sent, so that the checks above
	// covered it.
	for _, want := range []string{
		"find accounts", "update accounts", "find transactions", "update transactions",
		"findAndModify transactions", "aggregate transactions", "delete transactions",
		"find archive", "update transactions_refunds", "update transactions_checkpoints",
		"eq", "broadcast: state", "broadcast: accounts", "broadcast: key", "broadcast: tombstone",
		"the low-water mark's read",
	} {
		assert.True(t, seen[want], "no %s was recorded", want)
	}
}

// outcome is what a call reported of its transaction, and the transaction.
type outcome struct {
	kind string // transfer, batch, hold, capture, void
	id   bson.ObjectID
	hold bson.ObjectID // a capture's or void's hold
	said reported
	err  error
}

// reported is what a call said became of its transaction.
type reported int

const (
	saidUnknown   reported = iota // an error that leaves the outcome to the log
	saidCommitted                 // the money moved
	saidCanceled                  // rolled back: nothing moved
)

func (r reported) String() string {
	return [...]string{"unknown", "committed", "canceled"}[r]
}

// refusals are the errors of a transfer that was rolled back and ended
// canceled, nothing moved (Transfer's documentation).
var refusals = []error{
	twopc.ErrInsufficientFunds, twopc.ErrAccountNotFound, twopc.ErrBalanceOverflow, twopc.ErrInvalidAccount,
	twopc.ErrTooLate, twopc.ErrCanceled, twopc.ErrLimitExceeded, twopc.ErrTooManyHolds,
}

// refusal is the refusal err wraps, if any.
func refusal(err error) error {
	for _, r := range refusals {
		if errors.Is(err, r) {
			return r
		}
	}
	return nil
}

// reportedOf reads what a call that returned txn and err said: a Txn past
// the commit point says the money moved, even beside an error; a Txn
// canceled, or a refusal, says it did not; anything else leaves it to the
// log.
func reportedOf(txn *twopc.Txn, err error) reported {
	switch {
	case txn != nil && txn.State.Committed():
		return saidCommitted
	case txn != nil && txn.State == twopc.StateCanceled, refusal(err) != nil:
		return saidCanceled
	}
	return saidUnknown
}

// outcomes collects the calls of concurrent workers.
type outcomes struct {
	mu  sync.Mutex
	all []outcome
}

func (o *outcomes) add(kind string, txn *twopc.Txn, err error, hold bson.ObjectID) outcome {
	oc := outcome{kind: kind, hold: hold, said: reportedOf(txn, err), err: err}
	if txn != nil {
		oc.id = txn.ID
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.all = append(o.all, oc)
	return oc
}

func (o *outcomes) list() []outcome {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.all)
}

// checkOutcomes finishes what is left (the settler, then recovery passes)
// and checks every call against its transaction as the log holds it
// (Get): each is final; none reported committed is canceled, none
// reported canceled is done; a capture reported committed ended its hold
// captured, a void reported its hold canceled. It returns how many calls
// said each thing.
func checkOutcomes(ctx context.Context, t *testing.T, b *bank, calls []outcome) map[string]int {
	t.Helper()
	require.NoError(t, b.c.Settle(ctx))
	b.recoverAll()
	counts := map[string]int{}
	for _, oc := range calls {
		counts[oc.kind+" "+oc.said.String()]++
		if oc.id.IsZero() {
			continue // nothing of it was written, or it did not say what
		}
		got, err := b.c.Get(ctx, oc.id)
		require.NoError(t, err, "%s %s", oc.kind, oc.id.Hex())
		assert.Truef(t, got.State.Final(), "%s %s is %s after recovery", oc.kind, oc.id.Hex(), got.State)
		switch oc.said {
		case saidCommitted:
			assert.Equalf(t, twopc.StateDone, got.State, "%s %s was reported committed", oc.kind, oc.id.Hex())
		case saidCanceled:
			assert.Equalf(t, twopc.StateCanceled, got.State, "%s %s was reported canceled (%v)", oc.kind, oc.id.Hex(), oc.err)
		}
		if oc.kind == "capture" && oc.said == saidCommitted {
			h, err := b.c.Get(ctx, oc.hold)
			require.NoError(t, err)
			assert.Equalf(t, twopc.StateDone, h.State, "hold %s of a committed final capture", oc.hold.Hex())
		}
	}
	return counts
}

// auditTotal asserts that an audit finds nothing wrong and that the
// default ledger holds total.
func auditTotal(ctx context.Context, t *testing.T, b *bank, total int64) {
	t.Helper()
	rep, err := b.c.Audit(ctx, twopc.WithExpectedTotal("", total))
	require.NoError(t, err)
	assert.True(t, rep.OK(), "%+v", rep.Violations)
	require.Len(t, rep.Totals, 1)
	assert.True(t, rep.Totals[0].Decided, "nothing is in flight")
	assert.Equal(t, total, rep.Totals[0].Actual, "the ledger's money")
}

// openMany opens n accounts named prefix00, prefix01, … with balance each.
func openMany(b *bank, prefix string, n int, balance int64) ([]string, map[string]int64, int64) {
	opening := map[string]int64{}
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s%02d", prefix, i)
		opening[ids[i]] = balance
	}
	b.open(opening)
	return ids, opening, int64(n) * balance
}

// closed reports whether ch is closed.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// chunkMover moves chunks of collections between the shards, one move a
// tick, until stopped.
type chunkMover struct {
	t      *testing.T
	client *mongo.Client // through a router
	ns     []string      // database.collection
	shards []string
	moved  map[string]int // successful moves per collection
	// enough is closed once every collection has moved at least least
	// times.
	enough chan struct{}
	least  int
}

// run moves chunk after chunk, each of the collections in turn, to the
// shard it is not on, until stop is closed. A move the cluster refuses
// (another migration of the collection, a range still being cleaned) is
// logged and the next is tried; the moves made are counted.
func (m *chunkMover) run(ctx context.Context, stop <-chan struct{}) {
	admin := m.client.Database("admin")
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		ns := m.ns[i%len(m.ns)]
		chunks, err := mongotest.Chunks(ctx, m.client, ns)
		if err != nil {
			m.t.Logf("chunks of %s: %v", ns, err)
			continue
		}
		chunk := chunks[(i/len(m.ns))%len(chunks)]
		to := m.shards[0]
		if to == chunk.Shard {
			to = m.shards[1]
		}
		// _waitForDelete: the donor deletes the moved range before the
		// command returns, instead of after orphanCleanupDelaySecs (15
		// minutes by default); a range cannot move back to a shard that
		// still has to delete it, and this loop moves ranges back and
		// forth.
		err = admin.RunCommand(ctx, bson.D{
			{Key: "moveChunk", Value: ns},
			{Key: "bounds", Value: bson.A{chunk.Min, chunk.Max}},
			{Key: "to", Value: to},
			{Key: "_waitForDelete", Value: true},
		}).Err()
		if err != nil {
			m.t.Logf("moveChunk %s %s from %s to %s: %v", ns, chunk.Min, chunk.Shard, to, err)
			continue
		}
		m.moved[ns]++
		if !closed(m.enough) && m.everyAtLeast() {
			close(m.enough)
		}
	}
}

func (m *chunkMover) everyAtLeast() bool {
	for _, ns := range m.ns {
		if m.moved[ns] < m.least {
			return false
		}
	}
	return true
}

// TestShardedChunksMoveDuringTransfers: concurrent transfers (which the
// coordinator's group commit batches), batches, and holds captured or
// voided run between 20 accounts while a goroutine moves chunks of the
// accounts and of the log between the two shards, one after another,
// until the workload ends (which waits for three moves of each). Then,
// after recovery: the money is conserved (the audit's total, and every
// balance its opening plus its done transactions), every transaction is
// final, and every call's report agrees with its transaction: none
// reported committed is canceled, none reported canceled is done. A call
// whose outcome is unknown is decided by its transaction, which recovery
// finished.
func TestShardedChunksMoveDuringTransfers(t *testing.T) {
	mongotest.RequireSharded(t)
	ctx := shardedCtx(t)
	b := newBank(t)
	accounts, opening, total := openMany(b, "M", 20, 1_000_000)
	shards, err := mongotest.Shards(ctx, b.db.Client())
	require.NoError(t, err)
	require.Len(t, shards, 2, "the sharded job's cluster has two shards")
	mover := &chunkMover{
		t: t, client: b.db.Client(),
		ns:     []string{b.db.Name() + ".accounts", b.db.Name() + ".transactions"},
		shards: []string{shards[0].ID, shards[1].ID},
		moved:  map[string]int{}, enough: make(chan struct{}), least: 3,
	}
	stop, moverDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(moverDone)
		mover.run(ctx, stop)
	}()

	var calls outcomes
	var wg sync.WaitGroup
	// Each worker makes rounds calls at least, and more until the mover
	// has moved enough chunks, or for four minutes.
	const rounds = 10
	deadline := time.Now().Add(4 * time.Minute)
	more := func(i int) bool {
		return ctx.Err() == nil && (i < rounds || !closed(mover.enough) && time.Now().Before(deadline))
	}
	pick := func(rng *rand.Rand) (string, string) {
		src := rng.IntN(len(accounts))
		return accounts[src], accounts[(src+1+rng.IntN(len(accounts)-1))%len(accounts)]
	}
	for w := range 6 { // concurrent Transfer calls: group-committed
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(1, uint64(w)))
			for i := 0; more(i); i++ {
				src, dst := pick(rng)
				txn, err := b.c.Transfer(ctx, src, dst, int64(1+rng.IntN(100)))
				calls.add("transfer", txn, err, bson.ObjectID{})
			}
		}()
	}
	wg.Add(1)
	go func() { // batches
		defer wg.Done()
		rng := rand.New(rand.NewPCG(2, 0))
		for i := 0; more(i); i++ {
			reqs := make([]twopc.TransferRequest, 8)
			for j := range reqs {
				src, dst := pick(rng)
				reqs[j] = twopc.TransferRequest{Source: src, Destination: dst, Value: int64(1 + rng.IntN(100))}
			}
			results, err := b.c.TransferBatch(ctx, reqs)
			if err != nil {
				calls.add("batch", nil, err, bson.ObjectID{})
				continue
			}
			for _, r := range results {
				calls.add("batch", r.Txn, r.Err, bson.ObjectID{})
			}
		}
	}()
	for w := range 2 { // holds, captured in part or voided
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(3, uint64(w)))
			for i := 0; more(i); i++ {
				src, dst := pick(rng)
				value := int64(2 + rng.IntN(100))
				hold, err := b.c.Hold(ctx, src, dst, value)
				calls.add("hold", hold, err, bson.ObjectID{})
				if err != nil || hold == nil || hold.State != twopc.StateHeld {
					continue
				}
				if i%2 == 0 {
					txn, err := b.c.Capture(ctx, hold.ID, value/2)
					calls.add("capture", txn, err, hold.ID)
				} else {
					txn, err := b.c.Void(ctx, hold.ID)
					calls.add("void", txn, err, hold.ID)
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-moverDone
	require.NoError(t, ctx.Err(), "the workload ran out of time: moves %v", mover.moved)
	t.Logf("chunks moved: %v", mover.moved)
	for _, ns := range mover.ns {
		assert.GreaterOrEqual(t, mover.moved[ns], mover.least, "chunks of %s moved during the workload", ns)
	}

	// A hold that a failed call left held (its capture or void, or the
	// hold's own call, failed) is voided now, once recovery has finished
	// what the calls left, so that every transaction can be final.
	require.NoError(t, b.c.Settle(ctx))
	b.recoverAll()
	for _, d := range b.txns() {
		if d.State != twopc.StateHeld {
			continue
		}
		txn, err := b.c.Void(ctx, d.ID)
		require.NoError(t, err, "void of leftover hold %s", d.ID.Hex())
		calls.add("void", txn, nil, d.ID)
	}
	counts := checkOutcomes(ctx, t, b, calls.list())
	t.Logf("calls: %v", counts)
	for _, kind := range []string{"transfer", "batch", "capture", "void"} {
		assert.Positive(t, counts[kind+" committed"]+counts[kind+" canceled"], "no %s was decided", kind)
	}
	assert.Positive(t, counts["transfer committed"])
	auditTotal(ctx, t, b, total)
	b.checkSettled(opening)
}

// helloPrimary is the part of hello that names the primary.
type helloPrimary struct {
	Me       string `bson:"me"`
	Primary  string `bson:"primary"`
	Writable bool   `bson:"isWritablePrimary"`
}

// TestShardedShardPrimaryStepDown: transfers run (through a client with
// the driver's defaults, retryable writes on, as an application's) while
// one shard's primary, reached directly from config.shards, is stepped
// down and another member elected. No transfer is canceled for it: no
// call fails with a refusal (ErrInvalidAccount and the like, which a
// failover's errors must never be taken for), and no transaction ends
// canceled for a refused leg; a call that failed meanwhile left its
// transaction for recovery, which finished it. Transfers go on after the
// election (30 committed that started after it), and the money is
// conserved.
func TestShardedShardPrimaryStepDown(t *testing.T) {
	mongotest.RequireSharded(t)
	ctx := shardedCtx(t)
	s := mongotest.Shared(t)
	b := &bank{t: t, server: s, db: mongotest.NewDatabaseOn(t, s)}
	// Retries and a bound that outlast an election (seconds): the library
	// retries a failover's errors itself, backing off from 10 ms.
	b.c = b.coordinator(twopc.WithRetries(12), twopc.WithCallTimeout(2*time.Minute))
	require.NoError(t, b.c.EnsureIndexes(ctx))
	accounts, opening, total := openMany(b, "P", 10, 1_000_000)

	shards, err := mongotest.Shards(ctx, b.db.Client())
	require.NoError(t, err)
	require.Len(t, shards, 2, "the sharded job's cluster has two shards")
	uri, err := shards[0].ReplicaSetURI()
	require.NoError(t, err)
	shard := mongotest.ConnectURI(t, uri).Database("admin")
	var before helloPrimary
	require.NoError(t, shard.RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Decode(&before))
	require.NotEmpty(t, before.Primary, "shard %s has a primary", shards[0].ID)

	var calls outcomes
	var committed, afterElection atomic.Int64
	warm, elected, enough := make(chan struct{}), make(chan struct{}), make(chan struct{})
	quit := make(chan struct{}) // closed when the test ends, however
	var warmOnce, enoughOnce sync.Once
	var wg sync.WaitGroup
	defer func() {
		close(quit)
		wg.Wait()
	}()
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(4, uint64(w)))
			for ctx.Err() == nil && !closed(enough) && !closed(quit) {
				after := closed(elected)
				src := rng.IntN(len(accounts))
				dst := (src + 1 + rng.IntN(len(accounts)-1)) % len(accounts)
				var oc outcome
				if w == 0 { // one worker sends batches
					results, err := b.c.TransferBatch(ctx, []twopc.TransferRequest{
						{Source: accounts[src], Destination: accounts[dst], Value: 3},
						{Source: accounts[dst], Destination: accounts[src], Value: 2},
					})
					if err != nil {
						oc = calls.add("batch", nil, err, bson.ObjectID{})
					}
					for _, r := range results {
						oc = calls.add("batch", r.Txn, r.Err, bson.ObjectID{})
					}
				} else {
					txn, err := b.c.Transfer(ctx, accounts[src], accounts[dst], int64(1+rng.IntN(50)))
					oc = calls.add("transfer", txn, err, bson.ObjectID{})
				}
				if oc.said != saidCommitted {
					continue
				}
				if committed.Add(1) == 20 {
					warmOnce.Do(func() { close(warm) })
				}
				if after && afterElection.Add(1) >= 30 {
					enoughOnce.Do(func() { close(enough) })
				}
			}
		}()
	}

	select {
	case <-warm:
	case <-ctx.Done():
		t.Fatalf("no 20 transfers committed before the step-down: %v", ctx.Err())
	}
	// The primary hands over to a caught-up secondary (each shard has
	// three electable members) and may not stand again for 30 s.
	err = shard.RunCommand(ctx, bson.D{{Key: "replSetStepDown", Value: 30}, {Key: "secondaryCatchUpPeriodSecs", Value: 10}}).Err()
	if err != nil && !mongo.IsNetworkError(err) { // a server before 4.2 closed the connections
		t.Fatalf("replSetStepDown on %s: %v", before.Primary, err)
	}
	var after helloPrimary
	tick := time.NewTicker(100 * time.Millisecond)
	for after.Me == "" || after.Me == before.Primary || !after.Writable {
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("no new primary on shard %s after the step-down of %s: %v", shards[0].ID, before.Primary, ctx.Err())
		}
		after = helloPrimary{}
		if err := shard.RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Decode(&after); err != nil {
			t.Logf("hello on shard %s: %v", shards[0].ID, err)
		}
	}
	tick.Stop()
	t.Logf("shard %s: primary %s stepped down, %s elected", shards[0].ID, before.Primary, after.Me)
	close(elected)
	wg.Wait()
	require.NoError(t, ctx.Err(), "transfers after the election: %d committed", afterElection.Load())
	assert.GreaterOrEqual(t, afterElection.Load(), int64(30), "transfers committed after the election")

	list := calls.list()
	for _, oc := range list {
		assert.NoErrorf(t, refusal(oc.err), "a %s refused during the failover: %v", oc.kind, oc.err)
	}
	counts := checkOutcomes(ctx, t, b, list)
	t.Logf("calls: %v", counts)
	for _, oc := range list {
		if oc.id.IsZero() {
			continue
		}
		got, err := b.c.Get(ctx, oc.id)
		require.NoError(t, err)
		if got.State != twopc.StateCanceled {
			continue
		}
		// Canceled only as recovery rolls back what its caller left
		// before any leg applied: never for a refused leg.
		assert.Containsf(t, []string{"stale_pending", "stale_initial"}, got.Reason,
			"%s %s canceled (%v)", oc.kind, oc.id.Hex(), oc.err)
		assert.Errorf(t, oc.err, "%s %s canceled, its call reported no error", oc.kind, oc.id.Hex())
	}
	auditTotal(ctx, t, b, total)
	b.checkSettled(opening)
}

// TestShardedKeyedTransfersFromSeveralRouters: one coordinator per router
// (clients connected to each host of MONGODB_URI alone), and for each of
// 40 idempotency keys, four calls at once, two through each router, with
// the same transfer. Each key has exactly one transaction in the log,
// every call that returned a transaction returned that one, and it moved
// its money once.
func TestShardedKeyedTransfersFromSeveralRouters(t *testing.T) {
	mongotest.RequireSharded(t)
	ctx := shardedCtx(t)
	b := newBank(t)
	routers := mongotest.RouterClients(t)
	require.GreaterOrEqual(t, len(routers), 2, "MONGODB_URI names %d router(s); the sharded job names two", len(routers))
	coordinators := make([]*twopc.Coordinator, len(routers))
	for i, client := range routers {
		c, err := twopc.NewCoordinator(client.Database(b.db.Name()), twopc.WithApplication(fmt.Sprintf("router-%d", i)))
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close(context.Background()) })
		coordinators[i] = c
	}
	sources, srcOpening, _ := openMany(b, "S", 4, 1_000_000)
	dests, dstOpening, _ := openMany(b, "D", 4, 0)
	opening := map[string]int64{}
	for _, m := range []map[string]int64{srcOpening, dstOpening} {
		for id, v := range m {
			opening[id] = v
		}
	}

	const keys, callersPerRouter = 40, 2
	key := func(k int) string { return fmt.Sprintf("order-%02d", k) }
	type call struct {
		k, router int
		txn       *twopc.Txn
		err       error
	}
	calls := make([]call, 0, keys*len(routers)*callersPerRouter)
	for k := range keys {
		for r := range routers {
			for range callersPerRouter {
				calls = append(calls, call{k: k, router: r})
			}
		}
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := &calls[i]
			<-start
			cl.txn, cl.err = coordinators[cl.router].Transfer(ctx, sources[cl.k%4], dests[cl.k%4], int64(cl.k+1), twopc.WithKey(key(cl.k)))
		}()
	}
	close(start)
	wg.Wait()
	for _, c := range coordinators {
		require.NoError(t, c.Settle(ctx))
	}
	require.NoError(t, b.c.Settle(ctx))
	b.recoverAll()

	txns := b.db.Collection("transactions")
	n, err := txns.CountDocuments(ctx, bson.D{})
	require.NoError(t, err)
	assert.EqualValues(t, keys, n, "one transaction per key in the log, nothing else")
	moved := map[string]int64{}
	errs := map[string]int{}
	for k := range keys {
		n, err := txns.CountDocuments(ctx, bson.D{{Key: "key", Value: key(k)}})
		require.NoError(t, err)
		assert.EqualValuesf(t, 1, n, "transactions of key %s", key(k))
		got, err := b.c.GetByKey(ctx, key(k))
		require.NoError(t, err)
		assert.Equalf(t, twopc.StateDone, got.State, "the transfer of key %s", key(k))
		if got.State == twopc.StateDone {
			moved[dests[k%4]] += int64(k + 1)
		}
		for _, cl := range calls {
			if cl.k != k {
				continue
			}
			errs[fmt.Sprint(cl.err)]++
			if cl.txn != nil {
				assert.Equalf(t, got.ID, cl.txn.ID, "a call of key %s through router %d returned another transaction", key(k), cl.router)
			}
			assert.NotErrorIsf(t, cl.err, twopc.ErrKeyConflict, "key %s through router %d", key(k), cl.router)
		}
	}
	t.Logf("calls' errors: %v", errs)
	for _, d := range dests {
		assert.Equalf(t, moved[d], b.balance(d), "%s received each key's transfer once", d)
	}
	b.checkSettled(opening)
}

// TestUnitExplainRouting checks, without a server, how
// TestShardedExplainEachCommand reads what it explains: a command as the
// driver sends it split into statements without the fields explain
// refuses, filters told apart by how they name _id or which broadcast
// they are, and a router's explain of a find and of an aggregate read
// for the shards they reach (a mongod's explain, which names none, is
// refused).
func TestUnitExplainRouting(t *testing.T) {
	raw := func(d bson.D) bson.Raw {
		b, err := bson.Marshal(d)
		require.NoError(t, err)
		return b
	}
	session := bson.D{
		{Key: "lsid", Value: bson.D{{Key: "id", Value: bson.NewObjectID()}}},
		{Key: "txnNumber", Value: int64(3)},
		{Key: "$clusterTime", Value: bson.D{{Key: "clusterTime", Value: bson.Timestamp{T: 1}}}},
		{Key: "writeConcern", Value: bson.D{{Key: "w", Value: "majority"}}},
		{Key: "$db", Value: "db"},
	}
	q1 := bson.D{{Key: "_id", Value: "A"}, {Key: "balance", Value: bson.D{{Key: "$gte", Value: 5}}}}
	q2 := bson.D{{Key: "_id", Value: "B"}}
	update := append(bson.D{
		{Key: "update", Value: "accounts"},
		{Key: "ordered", Value: false},
		{Key: "updates", Value: bson.A{
			bson.D{{Key: "q", Value: q1}, {Key: "u", Value: bson.D{{Key: "$inc", Value: bson.D{{Key: "balance", Value: -5}}}}}},
			bson.D{{Key: "q", Value: q2}, {Key: "u", Value: bson.D{{Key: "$inc", Value: bson.D{{Key: "balance", Value: 5}}}}}},
		}},
	}, session...)
	sts := statementsOf(t, startedCommand{name: "update", db: "db", cmd: raw(update)})
	require.Len(t, sts, 2, "one statement each")
	for i, q := range []bson.D{q1, q2} {
		assert.True(t, sts[i].write)
		assert.Equal(t, "accounts", sts[i].coll)
		assert.Equal(t, raw(q), sts[i].filter)
		require.Len(t, sts[i].cmd, 2, "update and its one statement: %v", sts[i].cmd)
		assert.Equal(t, "update", sts[i].cmd[0].Key)
		assert.Equal(t, "updates", sts[i].cmd[1].Key)
		sent := raw(sts[i].cmd) // as explain will carry it
		assert.Equal(t, raw(q), sent.Lookup("updates", "0", "q").Document())
	}

	find := append(bson.D{
		{Key: "find", Value: "transactions"},
		{Key: "filter", Value: bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: bson.A{1, 2, 3}}}}}},
		{Key: "limit", Value: int64(1)},
		{Key: "readConcern", Value: bson.D{{Key: "level", Value: "majority"}}},
		{Key: "maxTimeMS", Value: int64(500)},
		{Key: "$readPreference", Value: bson.D{{Key: "mode", Value: "primary"}}},
	}, session...)
	sts = statementsOf(t, startedCommand{name: "find", db: "db", cmd: raw(find)})
	require.Len(t, sts, 1)
	var keys []string
	for _, e := range sts[0].cmd {
		keys = append(keys, e.Key)
	}
	assert.Equal(t, []string{"find", "filter", "limit"}, keys, "what explain takes, nothing else")
	kind, n := byID(sts[0].filter)
	assert.Equal(t, "in", kind)
	assert.Equal(t, 3, n)

	count := bson.D{
		{Key: "aggregate", Value: "transactions"},
		{Key: "pipeline", Value: bson.A{
			bson.D{{Key: "$match", Value: bson.D{{Key: "state", Value: "done"}}}},
			bson.D{{Key: "$group", Value: bson.D{{Key: "_id", Value: 1}, {Key: "n", Value: bson.D{{Key: "$sum", Value: 1}}}}}},
		}},
		{Key: "cursor", Value: bson.D{}},
	}
	sts = statementsOf(t, startedCommand{name: "aggregate", db: "db", cmd: raw(count)})
	require.Len(t, sts, 1)
	assert.Equal(t, raw(bson.D{{Key: "state", Value: "done"}}), sts[0].filter, "the $match of CountDocuments")
	assert.Equal(t, "state", broadcastOf(sts[0]))

	fam := append(bson.D{
		{Key: "findAndModify", Value: "transactions"},
		{Key: "query", Value: bson.D{{Key: "_id", Value: bson.D{{Key: "$eq", Value: 7}}}, {Key: "state", Value: "pending"}}},
		{Key: "update", Value: bson.D{{Key: "$set", Value: bson.D{{Key: "state", Value: "applied"}}}}},
		{Key: "new", Value: true},
	}, session...)
	sts = statementsOf(t, startedCommand{name: "findAndModify", db: "db", cmd: raw(fam)})
	require.Len(t, sts, 1)
	assert.True(t, sts[0].write)
	kind, _ = byID(sts[0].filter)
	assert.Equal(t, "eq", kind)

	for _, tc := range []struct {
		filter bson.D
		kind   string
	}{
		{bson.D{{Key: "_id", Value: bson.NewObjectID()}}, "eq"},
		{bson.D{{Key: "_id", Value: bson.D{{Key: "bank", Value: "x"}, {Key: "n", Value: 1}}}}, "eq"},
		{bson.D{{Key: "_id", Value: bson.D{{Key: "$type", Value: "objectId"}}}, {Key: "state", Value: "applied"}}, ""},
		{bson.D{{Key: "state", Value: "held"}}, ""},
	} {
		kind, _ := byID(raw(tc.filter))
		assert.Equal(t, tc.kind, kind, "%v", tc.filter)
	}
	for _, tc := range []struct {
		st   statement
		want string
	}{
		{statement{name: "find", coll: "transactions", filter: raw(bson.D{{Key: "_id", Value: bson.D{{Key: "$type", Value: "objectId"}}}, {Key: "state", Value: bson.D{{Key: "$in", Value: bson.A{"initial", "pending"}}}}})}, "state"},
		{statement{name: "find", coll: "transactions", filter: raw(bson.D{{Key: "accounts", Value: "|A"}, {Key: "committedAt", Value: bson.D{{Key: "$type", Value: "date"}}}})}, "accounts"},
		{statement{name: "find", coll: "transactions_checkpoints", filter: raw(bson.D{{Key: "key", Value: "|A"}, {Key: "removal", Value: true}})}, "key"},
		{statement{name: "find", coll: "accounts", filter: raw(bson.D{{Key: "tombstone", Value: bson.D{{Key: "$ne", Value: true}}}})}, "tombstone"},
		{statement{name: "find", coll: "accounts", filter: raw(bson.D{})}, "every account (audit)"},
		{statement{name: "find", coll: "transactions", filter: raw(bson.D{})}, ""},
		{statement{name: "find", coll: "accounts", filter: raw(bson.D{{Key: "balance", Value: 1}})}, ""},
	} {
		assert.Equal(t, tc.want, broadcastOf(tc.st), "%s %s %s", tc.st.name, tc.st.coll, tc.st.filter)
	}

	r, err := routingOf(raw(bson.D{{Key: "queryPlanner", Value: bson.D{
		{Key: "mongosPlannerVersion", Value: 1},
		{Key: "winningPlan", Value: bson.D{
			{Key: "stage", Value: "SINGLE_SHARD"},
			{Key: "shards", Value: bson.A{bson.D{{Key: "shardName", Value: "sh01"}, {Key: "winningPlan", Value: bson.D{{Key: "stage", Value: "IDHACK"}}}}}},
		}},
	}}}))
	require.NoError(t, err)
	assert.Equal(t, routing{stage: "SINGLE_SHARD", shards: []string{"sh01"}}, r)
	r, err = routingOf(raw(bson.D{
		{Key: "mergeType", Value: "mongos"},
		{Key: "splitPipeline", Value: bson.D{}},
		{Key: "shards", Value: bson.D{{Key: "sh01", Value: bson.D{}}, {Key: "sh02", Value: bson.D{}}}},
	}))
	require.NoError(t, err)
	assert.Equal(t, routing{stage: "mongos", shards: []string{"sh01", "sh02"}}, r)
	_, err = routingOf(raw(bson.D{{Key: "queryPlanner", Value: bson.D{{Key: "winningPlan", Value: bson.D{{Key: "stage", Value: "IXSCAN"}}}}}}))
	assert.Error(t, err, "a mongod's explain names no shards")

	assert.Equal(t, "{_id:{$in:[…]},state:?}",
		shapeOf(bson.RawValue{Type: bson.TypeEmbeddedDocument, Value: raw(bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: bson.A{1, 2}}}}, {Key: "state", Value: "held"}})}))
}
