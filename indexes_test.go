package twopc_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
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

// isFerretDB reports whether db's server is FerretDB (buildInfo names it).
func isFerretDB(t *testing.T, db *mongo.Database) bool {
	t.Helper()
	var info struct {
		FerretDB string `bson:"ferretdbVersion"`
	}
	require.NoError(t, db.RunCommand(testCtx(t), bson.D{{Key: "buildInfo", Value: 1}}).Decode(&info))
	return info.FerretDB != ""
}

// findRecorder records the find commands a client sends.
type findRecorder struct {
	mu    sync.Mutex
	finds []bson.Raw
}

func (f *findRecorder) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if e.CommandName != "find" {
			return
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		f.finds = append(f.finds, append(bson.Raw(nil), e.Command...))
	}}
}

func (f *findRecorder) recorded() []bson.Raw {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]bson.Raw(nil), f.finds...)
}

// planScans explains find command cmd on db and returns the plan and
// whether it scans a collection: MongoDB's winning plan names COLLSCAN;
// the dev server's (SQLite's query plan, through FerretDB) has a SCAN of
// a table where it does not SEARCH one by an index.
func planScans(t *testing.T, db *mongo.Database, cmd bson.Raw) (string, bool) {
	t.Helper()
	find := bson.D{}
	for _, k := range []string{"find", "filter", "sort", "projection", "limit", "comment"} {
		if v, err := cmd.LookupErr(k); err == nil {
			find = append(find, bson.E{Key: k, Value: v})
		}
	}
	var plan bson.M
	require.NoError(t, db.RunCommand(testCtx(t), bson.D{{Key: "explain", Value: find}}).Decode(&plan))
	text := fmt.Sprint(plan["queryPlanner"])
	if isFerretDB(t, db) {
		return text, regexp.MustCompile(`\bSCAN \S`).MatchString(text)
	}
	return text, strings.Contains(text, "COLLSCAN")
}

// TestIndexesMadeByTheCoordinator: a coordinator whose caller never called
// EnsureIndexes makes the library's indexes itself, before its first read
// that needs them, so that no read of a transfer, of the low-water mark,
// of a Recoverer pass, of a statement or of an account's transactions
// scans the log or the accounts:
// each find they send is explained, and none is a collection scan. (Audit
// reads everything by design, and is not run.)
func TestIndexesMadeByTheCoordinator(t *testing.T) {
	ctx := testCtx(t)
	s := mongotest.Shared(t)
	db := mongotest.NewDatabaseOn(t, s)
	rec := &findRecorder{}
	recorded := mongotest.ConnectURI(t, s.URI, options.Client().SetMonitor(rec.monitor())).Database(db.Name())
	c, err := twopc.NewCoordinator(recorded, twopc.WithSyncSettle(), twopc.WithStatementHorizon(0), twopc.WithFrozenMark()) // no EnsureIndexes
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	require.NoError(t, c.OpenAccount(ctx, "A", 1000))
	require.NoError(t, c.OpenAccount(ctx, "B", 0))
	other := mongotest.ConnectURI(t, s.URI, options.Client().SetMonitor(rec.monitor())).Database(db.Name())
	c2, err := twopc.NewCoordinator(other, twopc.WithSyncSettle(), twopc.WithFrozenMark()) // has seen no account
	require.NoError(t, err)
	t.Cleanup(func() { _ = c2.Close(context.Background()) })
	for i := range 3 {
		_, err := c.Transfer(ctx, "A", "B", 10, twopc.WithKey(fmt.Sprint("k", i)))
		require.NoError(t, err)
	}
	_, err = c2.Transfer(ctx, "A", "B", 1)
	require.NoError(t, err)
	_, err = c.Hold(ctx, "A", "B", 5, twopc.WithExpiry(time.Hour))
	require.NoError(t, err)
	_, err = twopc.ReadMark(ctx, c)
	require.NoError(t, err)
	_, err = twopc.NewRecoverer(c).RecoverOnce(ctx)
	require.NoError(t, err)
	_, err = c.Statement(ctx, "", "A", twopc.StatementQuery{})
	require.NoError(t, err)
	_, err = c.BalanceAt(ctx, "", "A", time.Now().Add(time.Hour))
	require.NoError(t, err)
	_, err = c.GetByKey(ctx, "k1")
	require.NoError(t, err)
	_, err = c.Transactions(ctx, "", "A", twopc.TransactionQuery{States: []twopc.State{twopc.StateDone}})
	require.NoError(t, err)

	seen := map[string]bool{}
	for _, cmd := range rec.recorded() {
		text, scans := planScans(t, db, cmd)
		assert.False(t, scans, "a collection scan for %s:\n%s", cmd, text)
		filter := cmd.Lookup("filter").String()
		coll, _ := cmd.Lookup("find").StringValueOK()
		comment, _ := cmd.Lookup("comment").StringValueOK()
		switch {
		case comment == twopc.MarkComment:
			seen["mark"] = true
		case coll == "transactions_checkpoints":
			seen["checkpoint"] = true
		case coll == "accounts":
			seen["accounts"] = true
		case strings.Contains(filter, `"lastModified": {"$lt"`):
			seen["stale scan"] = true
		case strings.Contains(filter, `"state": "applied"`):
			seen["applied scan"] = true
		case strings.Contains(filter, `"committedAt"`):
			seen["statement"] = true
		case strings.Contains(filter, `"accounts"`) && strings.Contains(filter, `"created"`):
			seen["transactions"] = true
		}
	}
	for _, shape := range []string{"mark", "stale scan", "applied scan", "statement", "checkpoint", "accounts", "transactions"} {
		assert.Truef(t, seen[shape], "no %s read was recorded", shape)
	}
}

// TestIndexesManagedElsewhere: under WithManagedIndexes the coordinator
// makes no index; a Recoverer pass, a statement and the mark's reading
// fail with ErrMissingIndex naming the missing ones, and succeed once the
// indexes exist (made elsewhere: EnsureIndexes of another coordinator).
// Transfers need none.
func TestIndexesManagedElsewhere(t *testing.T) {
	ctx := testCtx(t)
	db := mongotest.NewDatabase(t)
	c, err := twopc.NewCoordinator(db, twopc.WithManagedIndexes(), twopc.WithSyncSettle(), twopc.WithFrozenMark())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	require.NoError(t, c.OpenAccount(ctx, "A", 100))
	require.NoError(t, c.OpenAccount(ctx, "B", 0))
	_, err = c.Transfer(ctx, "A", "B", 10)
	require.NoError(t, err, "a transfer reads by _id only")

	_, err = twopc.NewRecoverer(c).RecoverOnce(ctx)
	require.ErrorIs(t, err, twopc.ErrMissingIndex)
	for _, name := range []string{"state_1_created_1", "accounts_1_committedAt_1", "accounts_1_created_1__id_1", "key_1_at_-1"} {
		assert.Contains(t, err.Error(), name)
	}
	_, err = c.Statement(ctx, "", "A", twopc.StatementQuery{})
	require.ErrorIs(t, err, twopc.ErrMissingIndex)
	_, err = c.Transactions(ctx, "", "A", twopc.TransactionQuery{})
	require.ErrorIs(t, err, twopc.ErrMissingIndex)
	_, err = twopc.ReadMark(ctx, c)
	require.ErrorIs(t, err, twopc.ErrMissingIndex)
	assert.Equal(t, []string{"_id_"}, indexNames(t, db.Collection("transactions")), "the _id index alone: nothing made")

	other, err := twopc.NewCoordinator(db)
	require.NoError(t, err)
	require.NoError(t, other.EnsureIndexes(ctx))
	_, err = twopc.NewRecoverer(c).RecoverOnce(ctx)
	require.NoError(t, err, "checked again: found")
	_, err = c.Statement(ctx, "", "A", twopc.StatementQuery{})
	require.NoError(t, err)
	_, err = c.Transactions(ctx, "", "A", twopc.TransactionQuery{})
	require.NoError(t, err)
	_, err = twopc.ReadMark(ctx, c)
	require.NoError(t, err)
}

// indexNames lists the names of coll's indexes, but the shard key's that
// the sharded job's collections have (mongotest.IsShardKeyIndex).
func indexNames(t *testing.T, coll *mongo.Collection) []string {
	t.Helper()
	cur, err := coll.Indexes().List(testCtx(t))
	require.NoError(t, err)
	var all []struct {
		Name string `bson:"name"`
	}
	require.NoError(t, cur.All(testCtx(t), &all))
	names := make([]string, 0, len(all))
	for _, ix := range all {
		if !mongotest.IsShardKeyIndex(ix.Name) {
			names = append(names, ix.Name)
		}
	}
	return names
}

// EnsureIndexes makes the indexes the protocol reads by, and no other
// (no index for a field only development versions wrote), and is
// idempotent (FerretDB v1 drops the connection when one createIndexes
// names several existing indexes, so the second call used to fail there).
func TestEnsureIndexesIdempotent(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t) // calls EnsureIndexes
	require.NoError(t, b.c.EnsureIndexes(ctx), "a second time")
	assert.ElementsMatch(t, []string{"_id_", "state_1_created_1", "accounts_1_committedAt_1", "accounts_1_created_1__id_1"},
		indexNames(t, b.db.Collection("transactions")))
	assert.ElementsMatch(t, []string{"_id_", "key_1_at_-1"}, indexNames(t, b.db.Collection("transactions_checkpoints")))
}

// TestArchiveIndexes: with WithHistory's archive, the coordinator makes
// the indexes statements and Transactions read the archive by, and no
// other; under WithManagedIndexes a missing one on the archive is named.
func TestArchiveIndexes(t *testing.T) {
	ctx := testCtx(t)
	db := mongotest.NewDatabase(t)
	archive := db.Collection("archive")
	managed, err := twopc.NewCoordinator(db, twopc.WithManagedIndexes(), twopc.WithHistory(time.Hour, archive))
	require.NoError(t, err)
	t.Cleanup(func() { _ = managed.Close(context.Background()) })
	plain, err := twopc.NewCoordinator(db) // no archive: makes none there
	require.NoError(t, err)
	require.NoError(t, plain.EnsureIndexes(ctx))
	_, err = managed.Transactions(ctx, "", "A", twopc.TransactionQuery{})
	require.ErrorIs(t, err, twopc.ErrMissingIndex)
	assert.Contains(t, err.Error(), "archive {accounts: 1, created: 1, _id: 1}")
	assert.Contains(t, err.Error(), "archive {accounts: 1, committedAt: 1}")
	assert.NotContains(t, err.Error(), "transactions {", "the log's are there")

	c, err := twopc.NewCoordinator(db, twopc.WithHistory(time.Hour, archive))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	require.NoError(t, c.EnsureIndexes(ctx))
	require.NoError(t, c.EnsureIndexes(ctx), "a second time")
	assert.ElementsMatch(t, []string{"_id_", "accounts_1_committedAt_1", "accounts_1_created_1__id_1"}, indexNames(t, archive))
	_, err = managed.Transactions(ctx, "", "A", twopc.TransactionQuery{})
	require.NoError(t, err, "checked again: found")
}
