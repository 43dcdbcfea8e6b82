package twopc_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc"
)

func TestTransferCommitsAndSettles(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithApplication("A1"))
	b.open(map[string]int64{"A": 1000, "B": 1000})

	txn, err := b.c.Transfer(ctx, "A", "B", 100)
	require.NoError(t, err)
	require.True(t, txn.State.Committed(), "state %s", txn.State)
	assert.Equal(t, "A1", txn.Application)

	require.NoError(t, b.c.Settle(ctx))
	assert.Equal(t, int64(900), b.balance("A"))
	assert.Equal(t, int64(1100), b.balance("B"))
	d := b.txn(txn.ID)
	assert.Equal(t, twopc.StateDone, d.State)
	assert.Equal(t, "A", d.Source)
	assert.Equal(t, "B", d.Destination)
	assert.Equal(t, int64(100), d.Value)
	assert.False(t, d.LastModified.IsZero())
	assert.Empty(t, b.account("A").Pending)
	assert.Empty(t, b.account("B").Pending)
	assert.Contains(t, b.account("A").Fenced, twopc.LegFence(txn, 0), "settled legs are fenced")
	b.checkSettled(map[string]int64{"A": 1000, "B": 1000})

	got, err := b.c.Get(ctx, txn.ID)
	require.NoError(t, err)
	assert.Equal(t, twopc.StateDone, got.State)
}

func TestTransferSyncSettleReturnsDone(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	b.open(map[string]int64{"A": 10, "B": 0})
	txn, err := b.c.Transfer(ctx, "A", "B", 10)
	require.NoError(t, err)
	assert.Equal(t, twopc.StateDone, txn.State)
	assert.Equal(t, twopc.StateDone, b.txn(txn.ID).State)
	b.checkSettled(map[string]int64{"A": 10, "B": 0})
}

func TestTransferAccountIDTypes(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	oid := bson.NewObjectID()
	for _, id := range []any{oid, int64(7), "s"} {
		require.NoError(t, b.c.OpenAccount(ctx, id, 100))
	}
	_, err := b.c.Transfer(ctx, oid, int64(7), 30)
	require.NoError(t, err)
	_, err = b.c.Transfer(ctx, int64(7), "s", 20)
	require.NoError(t, err)
	assert.Equal(t, int64(70), b.balance(oid))
	assert.Equal(t, int64(110), b.balance(int64(7)))
	assert.Equal(t, int64(120), b.balance("s"))
}

func TestTransferInsufficientFundsCancels(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	b.open(map[string]int64{"A": 50, "B": 0})
	txn, err := b.c.Transfer(ctx, "A", "B", 51)
	require.ErrorIs(t, err, twopc.ErrInsufficientFunds)
	require.NotNil(t, txn)
	assert.Equal(t, twopc.StateCanceled, txn.State)
	assert.Equal(t, "insufficient_funds", b.txn(txn.ID).Reason)
	assert.Contains(t, b.account("B").Fenced, twopc.LegFence(txn, 1), "rolled back legs are fenced")
	b.checkSettled(map[string]int64{"A": 50, "B": 0})

	// Exactly the balance is allowed.
	_, err = b.c.Transfer(ctx, "A", "B", 50)
	require.NoError(t, err)
	assert.Equal(t, int64(0), b.balance("A"))
}

func TestTransferAllowNegative(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithAllowNegative())
	b.open(map[string]int64{"A": 10, "B": 0})
	_, err := b.c.Transfer(ctx, "A", "B", 25)
	require.NoError(t, err)
	require.NoError(t, b.c.Settle(ctx))
	assert.Equal(t, int64(-15), b.balance("A"))
	assert.Equal(t, int64(25), b.balance("B"))
}

func TestTransferMissingAccountCancels(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	b.open(map[string]int64{"A": 100})
	// An id with no account: refused before the insert, nothing written.
	for _, dir := range [][2]string{{"A", "nobody"}, {"nobody", "A"}} {
		txn, err := b.c.Transfer(ctx, dir[0], dir[1], 10)
		require.ErrorIs(t, err, twopc.ErrAccountNotFound)
		assert.Nil(t, txn)
		assert.Empty(t, b.txns())
		assert.Equal(t, int64(100), b.balance("A"))
		assert.Empty(t, b.account("A").Pending)
	}
	// An account deleted after the coordinator saw it: the leg cannot
	// apply, and the transaction is rolled back, canceled.
	for _, dir := range [][2]string{{"A", "gone"}, {"gone", "A"}} {
		b.seenThenDeleted(b.c, "gone")
		txn, err := b.c.Transfer(ctx, dir[0], dir[1], 10)
		require.ErrorIs(t, err, twopc.ErrAccountNotFound)
		assert.Equal(t, twopc.StateCanceled, txn.State)
		assert.Equal(t, int64(100), b.balance("A"))
		assert.Empty(t, b.account("A").Pending)
		_, err = b.db.Collection("accounts").DeleteOne(ctx, bson.D{{Key: "_id", Value: "gone"}}) // its tombstone
		require.NoError(t, err)
	}
}

func TestTransferWithKeyIsIdempotent(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	b.open(map[string]int64{"A": 100, "B": 0})
	first, err := b.c.Transfer(ctx, "A", "B", 30, twopc.WithKey("order-1"))
	require.NoError(t, err)
	again, err := b.c.Transfer(ctx, "A", "B", 30, twopc.WithKey("order-1"))
	require.NoError(t, err)
	assert.Equal(t, first.ID, again.ID)
	// Another coordinator of another application sees the same key.
	other := b.coordinator(twopc.WithApplication("other"))
	third, err := other.Transfer(ctx, "A", "B", 30, twopc.WithKey("order-1"))
	require.NoError(t, err)
	assert.Equal(t, first.ID, third.ID)
	assert.Equal(t, int64(70), b.balance("A"))
	assert.Len(t, b.txns(), 1)

	_, err = b.c.Transfer(ctx, "A", "B", 31, twopc.WithKey("order-1"))
	require.ErrorIs(t, err, twopc.ErrKeyConflict)

	// A canceled transfer's key keeps answering with its reason.
	_, err = b.c.Transfer(ctx, "A", "B", 1000, twopc.WithKey("order-2"))
	require.ErrorIs(t, err, twopc.ErrInsufficientFunds)
	txn, err := b.c.Transfer(ctx, "A", "B", 1000, twopc.WithKey("order-2"))
	require.ErrorIs(t, err, twopc.ErrInsufficientFunds)
	assert.Equal(t, twopc.StateCanceled, txn.State)
	require.NoError(t, b.c.Settle(ctx))
	b.checkSettled(map[string]int64{"A": 100, "B": 0})
}

func TestTransferWithKeyConcurrent(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	b.open(map[string]int64{"A": 100, "B": 0})
	const n = 8
	ids := make(chan bson.ObjectID, n)
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		c := b.coordinator()
		go func() {
			txn, err := c.Transfer(ctx, "A", "B", 40, twopc.WithKey("same"))
			if txn != nil {
				ids <- txn.ID
			}
			errs <- err
		}()
	}
	var first bson.ObjectID
	for i := 0; i < n; i++ {
		err := <-errs
		if err != nil {
			require.ErrorIs(t, err, twopc.ErrInProgress)
		}
	}
	close(ids)
	for id := range ids {
		if first.IsZero() {
			first = id
		}
		assert.Equal(t, first, id)
	}
	assert.Len(t, b.txns(), 1)
	b.recoverAll() // settles the winner's transfer, if its settling is still under way
	b.checkSettled(map[string]int64{"A": 100, "B": 0})
	assert.Equal(t, int64(60), b.balance("A"))
	assert.Equal(t, int64(40), b.balance("B"))
}

func TestReverse(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	b.open(map[string]int64{"A": 100, "B": 0})
	txn, err := b.c.Transfer(ctx, "A", "B", 40)
	require.NoError(t, err)
	back, err := b.c.Reverse(ctx, txn.ID)
	require.NoError(t, err)
	assert.Equal(t, "B", back.Source)
	again, err := b.c.Reverse(ctx, txn.ID)
	require.NoError(t, err)
	assert.Equal(t, back.ID, again.ID, "reversing twice moves money back once")
	assert.Equal(t, int64(100), b.balance("A"))
	assert.Equal(t, int64(0), b.balance("B"))
	_, err = b.c.Reverse(ctx, bson.NewObjectID())
	require.ErrorIs(t, err, twopc.ErrTxnNotFound)
}

func TestCoordinatorOptionsAndClose(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	_, err := twopc.NewCoordinator(nil)
	require.Error(t, err)
	_, err = twopc.NewCoordinator(b.db, twopc.WithStaleAfter(0))
	require.Error(t, err)
	_, err = twopc.NewCoordinator(b.db, twopc.WithApplication(""))
	require.Error(t, err)
	_, err = twopc.NewCoordinator(b.db, twopc.WithCollections("x", "x"))
	require.Error(t, err)
	_, err = twopc.NewCoordinator(b.db, twopc.WithRetries(0))
	require.Error(t, err)

	c, err := twopc.NewCoordinator(b.db)
	require.NoError(t, err)
	require.NoError(t, c.Close(ctx))
	require.NoError(t, c.Close(ctx))
	_, err = c.Transfer(ctx, "A", "B", 1)
	require.ErrorIs(t, err, twopc.ErrClosed)
}

func TestCustomCollections(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	c := b.coordinator(twopc.WithCollections("wallets", "ledger"), twopc.WithSyncSettle())
	require.NoError(t, c.OpenAccount(ctx, "A", 10))
	require.NoError(t, c.OpenAccount(ctx, "B", 0))
	_, err := c.Transfer(ctx, "A", "B", 10)
	require.NoError(t, err)
	n, err := b.db.Collection("ledger").CountDocuments(ctx, bson.D{{Key: "state", Value: "done"}})
	require.NoError(t, err)
	assert.Equal(t, int64(1), n)
	bal, err := c.Balance(ctx, "B")
	require.NoError(t, err)
	assert.Equal(t, int64(10), bal)
	_, err = c.Balance(ctx, "nobody")
	require.ErrorIs(t, err, twopc.ErrAccountNotFound)
}

func TestStepStrings(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range twopc.Steps() {
		name := s.String()
		require.NotContains(t, name, "Step(", "step %d has no name", int(s))
		require.False(t, seen[name], "duplicate step name %s", name)
		seen[name] = true
	}
	assert.Equal(t, "Step(99)", twopc.Step(99).String())
	var se *twopc.StepError
	err := error(&twopc.StepError{Step: twopc.StepCommit, Err: context.Canceled})
	require.True(t, errors.As(err, &se))
	require.ErrorIs(t, err, context.Canceled)
	assert.Contains(t, err.Error(), "commit")
}

// A Transfer whose context ends before its insert is sent writes nothing
// and says so: the context's error (errors.Is), a nil Txn, nothing in the
// log, not the unknown outcome that sends a caller to Cancel. Three ways:
// a context already canceled, a deadline already past, and a context
// canceled while the call waits in the insert stage behind another write.
func TestTransferContextEndedBeforeTheInsertIsSent(t *testing.T) {
	b := newBank(t)
	b.open(map[string]int64{"A": 100, "B": 0})

	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	txn, err := b.c.Transfer(canceled, "A", "B", 10)
	require.ErrorIs(t, err, context.Canceled)
	assert.NotContains(t, err.Error(), "unknown")
	assert.Nil(t, txn)

	past, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	txn, err = b.c.Transfer(past, "A", "B", 10, twopc.WithKey("past"))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Nil(t, txn)

	waiting := make(chan struct{}, 1)
	release := twopc.HoldInserts(b.c, func() { waiting <- struct{}{} })
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan transferResult, 1)
	go func() {
		txn, err := b.c.Transfer(ctx, "A", "B", 10)
		res <- transferResult{txn, err}
	}()
	<-waiting // in the stage, behind the write HoldInserts stands for
	cancel()
	r := <-res
	release()
	require.ErrorIs(t, r.err, context.Canceled)
	assert.Nil(t, r.txn)

	assert.Empty(t, b.txns(), "nothing written")
	assert.Equal(t, int64(100), b.balance("A"))

	// A transfer whose context is live still goes through the stage.
	txn, err = b.c.Transfer(testCtx(t), "A", "B", 10)
	require.NoError(t, err)
	assert.True(t, txn.State.Committed())
}

// Within one coordinator, a call with the key of a call still running (a
// client retrying a request in flight) waits for it and returns its
// outcome: the same transaction, no ErrInProgress "elsewhere". The first
// call stalls before its legs; the second is let run only once it waits.
// Before the fix the second call got ErrInProgress naming this very
// coordinator. A key used for another transfer still gets ErrKeyConflict.
func TestTransferSameKeyInOneCoordinatorWaits(t *testing.T) {
	ctx := testCtx(t)
	s := newStall(twopc.StepApply)
	b := newBank(t, twopc.WithStepHook(s.hook), twopc.WithSyncSettle())
	b.open(map[string]int64{"A": 100, "B": 0})
	waiting := make(chan struct{}, 4)
	twopc.OnKeyWait(b.c, func() { waiting <- struct{}{} })
	first := stalledTransfer(t, b, s, "A", "B", 40, twopc.WithKey("order-1"))
	second := make(chan transferResult, 1)
	go func() {
		txn, err := b.c.Transfer(ctx, "A", "B", 40, twopc.WithKey("order-1"))
		second <- transferResult{txn, err}
	}()
	var r2 transferResult
	select {
	case <-waiting: // the retry waits for the call in flight
	case r2 = <-second:
		close(s.release)
		t.Fatalf("the retry did not wait for the call in flight: %v", r2.err)
	}
	close(s.release)
	r1 := <-first
	r2 = <-second
	require.NoError(t, r1.err)
	require.NoError(t, r2.err, "the retry answers with the first call's outcome")
	assert.Equal(t, r1.txn.ID, r2.txn.ID)
	assert.Equal(t, twopc.StateDone, r2.txn.State)
	assert.Equal(t, int64(60), b.balance("A"), "moved once")
	_, err := b.c.Transfer(ctx, "A", "B", 41, twopc.WithKey("order-1"))
	require.ErrorIs(t, err, twopc.ErrKeyConflict)
}

// GetByKey finds a transfer by its idempotency key, in the log and, once
// moved there, in the archive; a reversal by its derived key; an unknown
// key is ErrTxnNotFound and a bad one ErrInvalidTransfer.
func TestGetByKey(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	archive := b.db.Collection("archive")
	c := b.coordinator(twopc.WithHistory(time.Millisecond, archive), twopc.WithSyncSettle())
	b.open(map[string]int64{"A": 100, "B": 0})
	paid, err := c.Transfer(ctx, "A", "B", 30, twopc.WithKey("order-7"))
	require.NoError(t, err)
	got, err := c.GetByKey(ctx, "order-7")
	require.NoError(t, err)
	assert.Equal(t, paid.ID, got.ID)
	assert.Equal(t, twopc.StateDone, got.State)
	assert.Equal(t, "order-7", got.Key)

	rev, err := c.Reverse(ctx, paid.ID)
	require.NoError(t, err)
	got, err = c.GetByKey(ctx, "reverse:"+paid.ID.Hex())
	require.NoError(t, err)
	assert.Equal(t, rev.ID, got.ID)

	// Moved to the archive by hand, as an older version's history did:
	// still found.
	var doc bson.Raw
	require.NoError(t, b.db.Collection("transactions").FindOneAndDelete(ctx, bson.D{{Key: "_id", Value: paid.ID}}).Decode(&doc))
	_, err = archive.InsertOne(ctx, doc)
	require.NoError(t, err)
	got, err = c.GetByKey(ctx, "order-7")
	require.NoError(t, err)
	assert.Equal(t, paid.ID, got.ID)

	_, err = c.GetByKey(ctx, "order-8")
	require.ErrorIs(t, err, twopc.ErrTxnNotFound)
	_, err = c.GetByKey(ctx, "")
	require.ErrorIs(t, err, twopc.ErrInvalidTransfer)
}

// A retry whose context ends while it waits for the call in flight with
// its key is told the key's transfer is in progress (ErrInProgress, and
// the context's error), never "not made": the call it waited for then
// moves the money. A call of other keys in the same wait would be told it
// wrote nothing, not that its key's transfer was not made.
func TestTransferSameKeyWaitEndsInProgress(t *testing.T) {
	ctx := testCtx(t)
	s := newStall(twopc.StepApply)
	b := newBank(t, twopc.WithStepHook(s.hook), twopc.WithSyncSettle())
	b.open(map[string]int64{"A": 100, "B": 0})
	waiting := make(chan struct{}, 4)
	twopc.OnKeyWait(b.c, func() { waiting <- struct{}{} })
	first := stalledTransfer(t, b, s, "A", "B", 10, twopc.WithKey("order-1"))
	retryCtx, cancel := context.WithCancel(ctx)
	retry := make(chan transferResult, 1)
	go func() {
		txn, err := b.c.Transfer(retryCtx, "A", "B", 10, twopc.WithKey("order-1"))
		retry <- transferResult{txn, err}
	}()
	<-waiting
	cancel()
	r := <-retry
	require.ErrorIs(t, r.err, twopc.ErrInProgress)
	require.ErrorIs(t, r.err, context.Canceled)
	assert.NotContains(t, r.err.Error(), "not made")
	close(s.release)
	f := <-first
	require.NoError(t, f.err)
	assert.Equal(t, int64(90), b.balance("A"), "the key's transfer moved")
	got, err := b.c.GetByKey(ctx, "order-1")
	require.NoError(t, err)
	assert.Equal(t, f.txn.ID, got.ID)
}
