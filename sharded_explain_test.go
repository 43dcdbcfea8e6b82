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
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/internal/mongotest"
)

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

	// A change feed's life (C43–C49); history below waits for it.
	feed := feedLife(t, ctx, c)

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
	require.NoError(t, feed.Delete(ctx))

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
			class := routeClass(st)
			if st.changeStream {
				seen[class] = true // explain does not take a change stream
				continue
			}
			route := explainRouting(ctx, t, b.db.Client(), st)
			kind, ids := byID(st.filter)
			switch {
			case kind == "eq":
				assert.Len(t, route.shards, 1, "%s on %s by _id reaches %v: %v", st.name, st.coll, route.shards, st.cmd)
				if st.name == "find" || st.name == "count" || st.name == "findAndModify" {
					assert.Equal(t, "SINGLE_SHARD", route.stage, "%s on %s by _id: %v", st.name, st.coll, st.cmd)
				}
			case kind == "in":
				assert.NotEmpty(t, route.shards, "%v", st.cmd)
				assert.LessOrEqual(t, len(route.shards), ids, "%s on %s by %d ids reaches %v: %v", st.name, st.coll, ids, route.shards, st.cmd)
			case class == "" && st.write:
				t.Errorf("a write that does not name _id, sent to %v: %s %v", route.shards, st.name, st.cmd)
			case class == "":
				t.Errorf("a read neither by _id nor a documented broadcast, sent to %v: %s %v", route.shards, st.name, st.cmd)
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
		"the low-water mark's read", "update transactions_feeds", "findAndModify transactions_feeds",
		"broadcast: feed tags", "broadcast: feeds", "broadcast: change stream", "broadcast write: feeds",
	} {
		assert.True(t, seen[want], "no %s was recorded", want)
	}
}
