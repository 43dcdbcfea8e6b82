package twopc_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/internal/mongotest"
	"github.com/twopc/twopc/internal/statements"
)

// accountStatements counts the write statements sent to the accounts
// collection.
type accountStatements struct{ n atomic.Int64 }

func (s *accountStatements) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if coll, _ := e.Command.Lookup(e.CommandName).StringValueOK(); coll == "accounts" {
			s.n.Add(int64(statements.Count(e.CommandName, e.Command)))
		}
	}}
}

// TestSettleOneStatementPerAccount: the legs a settle batch has
// on one account close in one statement: ten transfers into one account,
// committed and left applied, settle in 11 account statements (ten
// sources, one for the hot account), not 20; the money is right.
func TestSettleOneStatementPerAccount(t *testing.T) {
	b := newBank(t)
	ctx := testCtx(t)
	opening := map[string]int64{"hot": 0}
	for _, id := range []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"} {
		opening[id] = 100
	}
	b.open(opening)
	committed := b.coordinator(twopc.WithStepHook(failAt(twopc.StepSettle)))
	var wg sync.WaitGroup
	for id := range opening {
		if id == "hot" {
			continue
		}
		wg.Add(1)
		go func(id string) {
			defer wg.Done()
			txn, err := committed.Transfer(ctx, id, "hot", 7)
			assert.True(t, err == nil || txn.State == twopc.StateApplied, "%s: %v", id, err)
		}(id)
	}
	wg.Wait()
	require.NoError(t, committed.Close(ctx))

	var counted accountStatements
	db := mongotest.ConnectURI(t, b.server.URI, options.Client().SetMonitor(counted.monitor())).Database(b.db.Name())
	c, err := twopc.NewCoordinator(db, twopc.WithApplication("recoverer"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	rep, err := twopc.NewRecoverer(c).RecoverOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 10, rep.Settled)
	assert.EqualValues(t, 11, counted.n.Load(), "one statement per account")
	b.checkSettled(opening)
	assert.EqualValues(t, 70, b.balance("hot"))
}

// TestSettleMergedFallsBackLegByLeg: when one of an account's
// legs in a settle batch was closed by another settler first, the
// account's one statement matches nothing, and its legs are closed one by
// one: each exactly once.
func TestSettleMergedFallsBackLegByLeg(t *testing.T) {
	b := newBank(t)
	ctx := testCtx(t)
	opening := map[string]int64{"hot": 0, "a": 100, "b": 100, "c": 100}
	b.open(opening)
	committed := b.coordinator(twopc.WithStepHook(failAt(twopc.StepSettle)))
	var first *twopc.Txn
	for _, id := range []string{"a", "b", "c"} {
		txn, err := committed.Transfer(ctx, id, "hot", 5)
		require.NoError(t, err, "committed; its settling fails in the background")
		require.Equal(t, twopc.StateApplied, txn.State)
		if first == nil {
			first = txn
		}
	}
	// Another settler closed the first transfer's credit on hot already.
	_, err := b.db.Collection("accounts").UpdateOne(ctx,
		bson.D{{Key: "_id", Value: "hot"}, {Key: "pendingTransactions", Value: twopc.LegMarker(first.ID, 1)}},
		bson.D{
			{Key: "$pull", Value: bson.D{{Key: "pendingTransactions", Value: twopc.LegMarker(first.ID, 1)}}},
			{Key: "$addToSet", Value: bson.D{{Key: "fencedLegs", Value: twopc.LegFence(first, 1)}}},
			{Key: "$inc", Value: bson.D{{Key: "balance", Value: int64(5)}, {Key: "pendingCredit", Value: int64(-5)}}},
		})
	require.NoError(t, err)
	require.NoError(t, committed.Close(ctx))
	rep, err := twopc.NewRecoverer(b.coordinator(twopc.WithApplication("recoverer"))).RecoverOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, rep.Settled)
	b.checkSettled(opening)
	assert.EqualValues(t, 15, b.balance("hot"), "each credit once")
}
