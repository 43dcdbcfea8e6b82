package twopc_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/internal/mongotest"
)

// The refund book's writes under faults (issue 48, item 5): as the capture
// book's, retried on transient errors, read back after an attempt whose
// outcome is unknown, and never leaving a refund's amount locked for a
// lease by a call that failed.

// failNextApplied makes the next update command on b's collection coll
// run, then answer with a write-concern error (64, WriteConcernFailed: a
// write applied whose durability is unknown, not a transient error), once,
// through the fail point failCommand. It returns a function that requires
// that it fired.
func (b *bank) failNextApplied(coll string) (fired func()) {
	b.t.Helper()
	admin := b.db.Client().Database("admin")
	configure := func(mode any, data bson.D) int64 {
		var reply struct {
			Count int64 `bson:"count"`
		}
		require.NoError(b.t, admin.RunCommand(testCtx(b.t), bson.D{
			{Key: "configureFailPoint", Value: "failCommand"},
			{Key: "mode", Value: mode},
			{Key: "data", Value: data},
		}).Decode(&reply))
		return reply.Count
	}
	before := configure(bson.D{{Key: "times", Value: 1}}, bson.D{
		{Key: "failCommands", Value: bson.A{"update"}},
		{Key: "namespace", Value: b.db.Name() + "." + coll},
		{Key: "writeConcernError", Value: bson.D{{Key: "code", Value: int32(64)}, {Key: "errmsg", Value: "waiting for replication timed out"}}},
	})
	b.t.Cleanup(func() {
		_ = admin.RunCommand(testCtx(b.t), bson.D{{Key: "configureFailPoint", Value: "failCommand"}, {Key: "mode", Value: "off"}}).Err()
	})
	return func() {
		b.t.Helper()
		assert.Equal(b.t, before+1, configure("off", nil), "the fail point failed one %s command", coll)
	}
}

// soldOnce is a sale A → B of 100 refunded 10 once, so that its book
// exists (a reservation is then an update).
func soldOnce(t *testing.T, b *bank) *twopc.Txn {
	t.Helper()
	ctx := testCtx(t)
	b.open(map[string]int64{"A": 100, "B": 0, "C": 0})
	sale, err := b.c.Transfer(ctx, "A", "B", 100)
	require.NoError(t, err)
	_, err = b.c.Refund(ctx, sale.ID, 10)
	require.NoError(t, err)
	return sale
}

// TestRefundBookLostReply: the reservation's reply lost after the server
// applied it (the front drops the connection), keyed and not: the write is
// tried again, finds the book moved on, reads it back and finds the
// refund's own entry, reserved already: the refund is made once.
func TestRefundBookLostReply(t *testing.T) {
	for _, keyed := range []bool{true, false} {
		t.Run(map[bool]string{true: "keyed", false: "unkeyed"}[keyed], func(t *testing.T) {
			ctx := testCtx(t)
			b := newFaultBank(t, twopc.WithFrozenMark(), twopc.WithSyncSettle())
			sale := soldOnce(t, b)
			var opts []twopc.TransferOption
			if keyed {
				opts = append(opts, twopc.WithKey("lost-reply"))
			}
			before, err := b.server.Faults.Stats(ctx)
			require.NoError(t, err)
			require.NoError(t, b.server.Faults.Add(ctx, mongotest.Fault{Command: "update", Kind: mongotest.DropAfterForward, Count: 1}))
			refund, err := b.c.Refund(ctx, sale.ID, 20, opts...)
			require.NoError(t, err)
			after, err := b.server.Faults.Stats(ctx)
			require.NoError(t, err)
			assert.Equal(t, int64(1), after.DropAfterForward-before.DropAfterForward, "the fault was injected")
			assert.Equal(t, twopc.StateDone, refund.State)
			book := b.book(sale.ID)
			assert.Len(t, book.Refunds, 2)
			assert.Equal(t, int64(70), book.Left)
			assert.Equal(t, []int64{30, 70, 0}, []int64{b.balance("A"), b.balance("B"), b.balance("C")})
		})
	}
}

// TestRefundBookAppliedThenErrored: the reservation applied, then answered
// with a write-concern error (not transient: not tried again). The book is
// read back, the refund's own entry found, and the refund is made at once,
// keyed or not: before, the call failed, a keyed repeat within the lease
// found the entry, and an unkeyed refund's amount stayed reserved for a
// lease (a minute) with nothing to make it.
func TestRefundBookAppliedThenErrored(t *testing.T) {
	for _, keyed := range []bool{true, false} {
		t.Run(map[bool]string{true: "keyed", false: "unkeyed"}[keyed], func(t *testing.T) {
			ctx := testCtx(t)
			b := newBank(t, twopc.WithSyncSettle())
			sale := soldOnce(t, b)
			var opts []twopc.TransferOption
			if keyed {
				opts = append(opts, twopc.WithKey("applied-then-errored"))
			}
			fired := b.failNextApplied("transactions_refunds")
			refund, err := b.c.Refund(ctx, sale.ID, 20, opts...)
			fired()
			require.NoError(t, err)
			assert.Equal(t, int64(20), refund.Value)
			assert.Equal(t, int64(70), refundable(t, b.c, sale.ID))
			assert.Equal(t, []int64{30, 70}, []int64{b.balance("A"), b.balance("B")})
		})
	}
}

// TestRefundBookUnknownThenFailed: the reservation applied, and its reply
// came only after the call's context ended, so the call fails with the
// reservation in the book. A keyed refund's repeat is answered at once
// (its own entry, reserved already: not ErrRefundExceeded for a lease);
// an unkeyed one, whose key no one knows, settles its own id before it
// returns (Cancel's placeholder, then the release), so the amount is
// refundable again at once.
func TestRefundBookUnknownThenFailed(t *testing.T) {
	for _, keyed := range []bool{true, false} {
		t.Run(map[bool]string{true: "keyed", false: "unkeyed"}[keyed], func(t *testing.T) {
			ctx := testCtx(t)
			b := newFaultBank(t, twopc.WithFrozenMark(), twopc.WithSyncSettle())
			sale := soldOnce(t, b)
			// All that is left (100 less 10 refunded): nothing else fits
			// while it is reserved.
			var opts []twopc.TransferOption
			if keyed {
				opts = append(opts, twopc.WithKey("unknown-then-failed"))
			}
			require.NoError(t, b.server.Faults.Add(ctx, mongotest.Fault{Command: "update", Kind: mongotest.Delay, Delay: 2 * time.Second, Count: 1}))
			short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			_, err := b.c.Refund(short, sale.ID, 90, opts...)
			cancel()
			require.Error(t, err)
			if keyed {
				refund, err := b.c.Refund(ctx, sale.ID, 90, opts...)
				require.NoError(t, err, "the repeat finds its own reservation")
				assert.Equal(t, int64(90), refund.Value)
				assert.Equal(t, int64(0), refundable(t, b.c, sale.ID))
				assert.Equal(t, []int64{100, 0}, []int64{b.balance("A"), b.balance("B")})
				return
			}
			assert.Equal(t, int64(90), refundable(t, b.c, sale.ID), "refundable again at once")
			refund, err := b.c.Refund(ctx, sale.ID, 90)
			require.NoError(t, err)
			assert.Equal(t, int64(90), refund.Value)
			assert.Equal(t, []int64{100, 0}, []int64{b.balance("A"), b.balance("B")})
		})
	}
}

// TestRefundBookReleaseRetried: a refused refund's release, the book's
// write that gives its reservation back, failed once by a step-down, is
// tried again: the book gives the amount back at once, with no sweep.
func TestRefundBookReleaseRetried(t *testing.T) {
	ctx := testCtx(t)
	var armed func()
	var fired func()
	b := newBank(t, twopc.WithSyncSettle(), twopc.WithStepHook(func(_ context.Context, s twopc.Step, tx *twopc.Txn) error {
		if s == twopc.StepCanceled && tx != nil && !tx.RefundOf.IsZero() && armed != nil {
			armed()
			armed = nil
		}
		return nil
	}))
	sale := soldOnce(t, b)
	_, err := b.c.Transfer(ctx, "B", "C", 85) // B keeps 5
	require.NoError(t, err)
	armed = func() { fired = b.failNext("transactions_refunds") }
	_, err = b.c.Refund(ctx, sale.ID, 20)
	require.ErrorIs(t, err, twopc.ErrInsufficientFunds)
	require.NotNil(t, fired, "the refund was rolled back")
	fired()
	book := b.book(sale.ID)
	assert.Len(t, book.Refunds, 1, "the refused refund's entry is gone")
	assert.Equal(t, int64(90), book.Left)
}
