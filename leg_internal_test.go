package twopc

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc/internal/mongotest"
	"github.com/twopc/twopc/internal/schema"
)

// Two legs of one transfer that land on one document (ids the library
// took for two accounts and the server for one, as a case-insensitive
// collation would make "a" and "A") keep apart: each has its own marker.
// With one marker per transaction, the credit's marker made the debit look
// applied and the transfer of 100 from an account of 0 to itself committed
// 100 out of nothing. Validation refuses such a transfer before this point;
// the drive is called directly, past it.
func TestLegMarkersKeepTwoLegsOnOneDocumentApart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := NewCoordinator(mongotest.NewDatabase(t), WithSyncSettle())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	require.NoError(t, c.OpenAccount(ctx, "D", 0))
	r := &record{
		Txn: Txn{ID: newTxnID(), Source: "D", Destination: "D", Value: 100, State: StatePending,
			Application: c.application, Created: time.Now().UTC().Truncate(time.Millisecond)},
		Claim: bson.NewObjectID(), LeaseMs: c.staleAfter.Milliseconds(),
	}
	cur, err := c.insert(ctx, r, new(bool))
	require.NoError(t, err)
	_, err = newEngine(c).drive(ctx, &owned{rec: cur, claimedAt: c.now()}, true)
	require.ErrorIs(t, err, ErrInsufficientFunds)
	a, err := c.Account(ctx, "D")
	require.NoError(t, err)
	assert.Zero(t, a.Balance)
	assert.Zero(t, a.PendingCredit)
	assert.Empty(t, a.PendingTransactions)
	got, err := c.Get(ctx, r.ID)
	require.ErrorIs(t, err, ErrMalformedTxn, "the stored transfer is one validation refuses")
	assert.Equal(t, StateCanceled, got.State)
}

// Every id the library makes ends in a zero byte, so that leg markers are
// never another transaction's id.
func TestTxnIDsLeaveTheMarkerByteFree(t *testing.T) {
	for i := 0; i < 1000; i++ {
		id := newTxnID()
		require.Zero(t, id[len(id)-1])
		require.Equal(t, id, schema.Marker(id, 0))
		require.NotEqual(t, id, schema.Marker(id, 1))
		require.Equal(t, id, schema.TxnOfMarker(schema.Marker(id, 1)))
	}
	require.Zero(t, keyID("order-1")[11])
}

// A settle batch that names one transaction twice (two members of one
// batched group naming the same document) settles it once: its legs on
// one account close in one statement, which must not count a leg twice.
// Before the legs were grouped by marker, the hot account's credit of 7
// was added twice and the source's hold released twice.
func TestSettleBatchNamingOneTransactionTwice(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := NewCoordinator(mongotest.NewDatabase(t), WithSyncSettle(), WithStepHook(func(_ context.Context, s Step, _ *Txn) error {
		if s == StepSettle {
			return context.Canceled // committed, left applied
		}
		return nil
	}))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	require.NoError(t, c.OpenAccount(ctx, "A", 100))
	require.NoError(t, c.OpenAccount(ctx, "B", 0))
	txn, _ := c.Transfer(ctx, "A", "B", 7)
	require.NotNil(t, txn)
	require.Equal(t, StateApplied, txn.State)
	r, err := c.log.read(ctx, txn.ID)
	require.NoError(t, err)
	failed, err := c.ledgers.closeLegs(ctx, []*record{r, r, r})
	require.NoError(t, err)
	require.Empty(t, failed)
	for id, want := range map[string]int64{"A": 93, "B": 7} {
		var a account
		require.NoError(t, c.ledger.accounts.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Decode(&a))
		b, _ := a.balance()
		assert.Equal(t, want, b, "balance of %s", id)
		assert.Zero(t, a.credit(), "pendingCredit of %s", id)
		assert.Zero(t, a.heldDebit(), "pendingDebit of %s", id)
		assert.Empty(t, a.pending(), "markers on %s", id)
	}
}

// A settle batch whose merged statement for an account matches nothing
// (another settler closed one of its legs) sends the legs again one by
// one; one of those that fails is reported for every transaction of the
// batch that carried it, duplicates included (review: the batch [t1, t2,
// t2] reported t2 failed at index 1 only, and index 2 was marked done
// with its leg open).
func TestSettleFallbackFailureReportsEveryOwner(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := mongotest.NewDatabase(t)
	c, err := NewCoordinator(db, WithStepHook(func(_ context.Context, s Step, _ *Txn) error {
		if s == StepSettle {
			return context.Canceled // committed, left applied
		}
		return nil
	}))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	for id, b := range map[string]int64{"A": 100, "B": 100, "hot": 0} {
		require.NoError(t, c.OpenAccount(ctx, id, b))
	}
	t1, _ := c.Transfer(ctx, "A", "hot", 5)
	t2, _ := c.Transfer(ctx, "B", "hot", 5)
	require.Equal(t, StateApplied, t1.State)
	require.Equal(t, StateApplied, t2.State)
	// Another settler closed t1's credit; then hot's fencedLegs is
	// broken, so t2's credit, sent alone, fails with a write error.
	_, err = db.Collection("accounts").UpdateOne(ctx, bson.D{{Key: "_id", Value: "hot"}}, bson.D{
		{Key: "$pull", Value: bson.D{{Key: fieldPending, Value: schema.Marker(t1.ID, 1)}}},
		{Key: "$set", Value: bson.D{{Key: fieldFencedLegs, Value: "broken"}}},
	})
	require.NoError(t, err)
	r1, err := c.log.read(ctx, t1.ID)
	require.NoError(t, err)
	r2, err := c.log.read(ctx, t2.ID)
	require.NoError(t, err)
	failed, err := c.ledgers.closeLegs(ctx, []*record{r1, r2, r2})
	require.Error(t, err)
	assert.Contains(t, failed, 1)
	assert.Contains(t, failed, 2, "the duplicate of t2 is failed too")
}

// closeAllModel refuses to merge legs whose settle amounts overflow int64
// when summed (review: a credit of MaxInt64 and a refund of MaxInt64-1 on
// one account, each fine alone, wrapped when summed); closeLegs then
// closes them one by one.
func TestUnitCloseAllModelOverflow(t *testing.T) {
	id := schema.Marker(bson.NewObjectID(), 0)
	credit := leg{account: "A", delta: math.MaxInt64, marker: schema.Marker(id, 0)}
	refund := leg{account: "A", delta: -math.MaxInt64, marker: schema.Marker(id, 1), hold: true}
	_, ok := closeAllModel([]leg{credit, refund})
	assert.False(t, ok, "the balance sum overflows")
	_, ok = closeAllModel([]leg{{account: "A", delta: 5, marker: schema.Marker(id, 2)}, {account: "A", delta: -5, marker: schema.Marker(id, 3)}})
	assert.True(t, ok)
}
