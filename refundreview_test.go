package twopc_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc"
)

// TestRefundGiveBackDeliveredLate: a canceled refund's give-backs, and
// every other write of it, delivered again after an entry of the same
// refund id but another amount was reserved (as a second call under the
// same key would, were it let): a give-back removes only the entry of its
// own id and amount, so what is left plus what is reserved stays what the
// transfer moved. (Before, a give-back matched the id alone and added its
// own amount: the book said 140 of a transfer of 100 was left.)
func TestRefundGiveBackDeliveredLate(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	rec := &writeRecorder{}
	c, err := twopc.NewCoordinator(rec.database(b), twopc.WithSyncSettle())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	b.open(map[string]int64{"A": 100, "B": 0, "C": 0})
	sale, err := b.c.Transfer(ctx, "A", "B", 100)
	require.NoError(t, err)
	_, err = b.c.Transfer(ctx, "B", "C", 100) // B spent it: a refund now is refused
	require.NoError(t, err)
	refused, err := c.Refund(ctx, sale.ID, 50, twopc.WithKey("refund-1"))
	require.ErrorIs(t, err, twopc.ErrInsufficientFunds)
	// Another amount reserved under the refund's id.
	_, err = b.db.Collection("transactions_refunds").UpdateOne(ctx, bson.D{{Key: "_id", Value: sale.ID}}, bson.D{
		{Key: "$inc", Value: bson.D{{Key: "left", Value: -10}}},
		{Key: "$push", Value: bson.D{{Key: "refunds", Value: bson.D{{Key: "id", Value: refused.ID}, {Key: "amount", Value: int64(10)}, {Key: "at", Value: time.Now()}}}}},
	})
	require.NoError(t, err)
	resendAll(t, b.db, rec.recorded())

	var book struct {
		Left    int64 `bson:"left"`
		Refunds []struct {
			Amount int64 `bson:"amount"`
		} `bson:"refunds"`
	}
	require.NoError(t, b.db.Collection("transactions_refunds").FindOne(ctx, bson.D{{Key: "_id", Value: sale.ID}}).Decode(&book))
	reserved := int64(0)
	for _, e := range book.Refunds {
		reserved += e.Amount
	}
	assert.Equal(t, int64(100), book.Left+reserved, "left %d and reserved %v: what the transfer moved", book.Left, book.Refunds)
	assert.LessOrEqual(t, refundable(t, b.c, sale.ID), int64(100))
}

// TestRefundKeyOfAnotherTransfersRefund: a key already made the refund of
// another transfer with the same legs (two sales from A to B of 100, a
// refund of 10 of the first under key k). Refund of the second sale
// under k is answered with the first sale's refund and no error: the
// caller is told the second sale was refunded, nothing of it was, and
// its book says so (a repeat compares legs and metadata, not refundOf).
func TestRefundKeyOfAnotherTransfersRefund(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	b.open(map[string]int64{"A": 200, "B": 0})
	first, err := b.c.Transfer(ctx, "A", "B", 100)
	require.NoError(t, err)
	second, err := b.c.Transfer(ctx, "A", "B", 100)
	require.NoError(t, err)
	_, err = b.c.Refund(ctx, first.ID, 10, twopc.WithKey("k"))
	require.NoError(t, err)

	got, err := b.c.Refund(ctx, second.ID, 10, twopc.WithKey("k"))
	if err == nil {
		assert.Equal(t, second.ID, got.RefundOf, "Refund of the second sale succeeded with a refund of the first")
	} else {
		assert.ErrorIs(t, err, twopc.ErrKeyConflict)
	}
	assert.Equal(t, int64(100), refundable(t, b.c, second.ID))
	assert.Equal(t, int64(10), b.balance("A"), "one refund of 10 moved")
}

// TestRefundSweepWaitsForTheRefundersLease: a refund stalled before its
// insert, by a refunder whose lease is a minute, is not given back by
// another coordinator's sweep a second later, though that coordinator's
// own lease (200 ms) has run out: the reservation records its refunder's
// lease, as a capture's does (TestReviewCaptureSweepIgnoresCapturersLease).
func TestRefundSweepWaitsForTheRefundersLease(t *testing.T) {
	b := newBank(t, twopc.WithSyncSettle())
	ctx := testCtx(t)
	b.open(map[string]int64{"A": 1000, "B": 0})
	paid, err := b.c.Transfer(ctx, "A", "B", 100)
	require.NoError(t, err)
	s := newStall(twopc.StepInsert)
	slow := b.coordinator(twopc.WithApplication("slow"), twopc.WithStaleAfter(time.Minute), twopc.WithStepHook(s.hook), twopc.WithSyncSettle())
	res := make(chan error, 1)
	go func() {
		_, err := slow.Refund(ctx, paid.ID, 100)
		res <- err
	}()
	<-s.reached
	var shift atomic.Int64
	later := b.coordinator(twopc.WithApplication("later"), twopc.WithStaleAfter(200*time.Millisecond), twopc.WithFrozenMark(),
		twopc.WithHostClock(func() time.Time { return time.Now().Add(time.Duration(shift.Load())) }))
	require.NoError(t, twopc.SyncClock(ctx, later))
	shift.Store(int64(time.Second))
	_, lerr := later.Refund(ctx, paid.ID, 10)
	close(s.release)
	serr := <-res
	assert.ErrorIs(t, lerr, twopc.ErrRefundExceeded, "the slow refund holds the room, within its refunder's lease")
	assert.NoError(t, serr, "the refund within its lease was canceled under its refunder")
	assert.EqualValues(t, 1000, b.balance("A"))
}
