package twopc_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc"
)

// One _id, one owner: concurrent calls whose transactions carry one _id
// and land in one insert group end as if they had come one after the
// other. Each test forms the group with HoldInserts (no sleeps), checks
// the answers and the money, then delivers every write command again
// after the fences are gone: nothing moves.

// callResult is one call's answer.
type callResult struct {
	txn *twopc.Txn
	err error
}

// inOneInsertGroup runs calls at once on c, with c's insert stage held
// until all of them wait in it, so that their inserts go in one write, and
// returns their answers in order.
func inOneInsertGroup(t *testing.T, c *twopc.Coordinator, calls ...func() (*twopc.Txn, error)) []callResult {
	t.Helper()
	waiting := make(chan struct{}, len(calls))
	release := twopc.HoldInserts(c, func() { waiting <- struct{}{} })
	out := make([]callResult, len(calls))
	var wg sync.WaitGroup
	for i, call := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i].txn, out[i].err = call()
		}()
	}
	for range calls {
		<-waiting
	}
	release()
	wg.Wait()
	return out
}

// sameIDBank is a bank whose coordinator records every write it sends.
type sameIDBank struct {
	*bank
	w *writeRecorder
	c *twopc.Coordinator
}

func newSameIDBank(t *testing.T, opts ...twopc.Option) *sameIDBank {
	b := newBank(t)
	w := &writeRecorder{}
	c, err := twopc.NewCoordinator(w.database(b), append([]twopc.Option{
		twopc.WithApplication("grouped"), twopc.WithSyncSettle(), twopc.WithClock(steppingClock()),
	}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	// Calls with one key wait for each other in one coordinator (see
	// TestTransferSameKeyInOneCoordinatorWaits); these tests check the
	// insert group's rule beneath that, as calls of several coordinators
	// meet it.
	twopc.LetKeysOverlap(c)
	return &sameIDBank{bank: b, w: w, c: c}
}

// steppingClock is the time a millisecond later at each reading, so that
// the calls of one group, made in the same millisecond, each get a
// transaction time of their own: a call that wrongly took itself for the
// owner would send leg writes under a time the log does not hold.
func steppingClock() func() time.Time {
	var mu sync.Mutex
	var n time.Duration
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		n++
		return time.Now().Add(n * time.Millisecond)
	}
}

// replayAll finishes everything, removes every fence, delivers every
// recorded write again and checks that no account changed and the
// balances are what the done transactions say.
func (b *sameIDBank) replayAll(opening map[string]int64) {
	b.t.Helper()
	b.recoverAll()
	b.checkSettled(opening)
	b.unfenceAll()
	before := b.accountStates()
	cmds := b.w.recorded()
	require.NotEmpty(b.t, cmds)
	resendAll(b.t, b.db, cmds)
	b.recoverAll()
	require.Equal(b.t, before, b.accountStates(), "a write delivered again moved money (%d commands)", len(cmds))
	b.checkSettled(opening)
}

// owners counts the answers that are the stored transaction, committed,
// and checks each other answer is one WithKey allows: ErrInProgress or
// the stored transaction.
func ownedOnce(t *testing.T, stored txnDoc, rs []callResult) {
	t.Helper()
	for i, r := range rs {
		if r.err != nil {
			require.ErrorIsf(t, r.err, twopc.ErrInProgress, "call %d", i)
			continue
		}
		require.Equalf(t, stored.ID, r.txn.ID, "call %d", i)
		require.Equalf(t, stored.Created, r.txn.Created.UTC(), "call %d was told of a transaction time the log does not hold", i)
	}
}

func TestSameKeySameTransferInOneInsertGroup(t *testing.T) {
	ctx := testCtx(t)
	b := newSameIDBank(t)
	opening := map[string]int64{"A": 1000, "B": 0}
	b.open(opening)
	call := func() (*twopc.Txn, error) { return b.c.Transfer(ctx, "A", "B", 100, twopc.WithKey("k")) }
	rs := inOneInsertGroup(t, b.c, call, call, call)

	txns := b.txns()
	require.Len(t, txns, 1)
	ownedOnce(t, txns[0], rs)
	ok := 0
	for _, r := range rs {
		if r.err == nil {
			ok++
		}
	}
	// One call inserts and drives it; the others, repeats of it in the
	// same coordinator, wait for that call and answer its outcome.
	assert.Equal(t, len(rs), ok, "every call answers the one transaction: %v", rs)
	assert.Equal(t, int64(900), b.balance("A"))

	again, err := b.c.Transfer(ctx, "A", "B", 100, twopc.WithKey("k"))
	require.NoError(t, err, "a repeat after the first finished gets its transaction")
	assert.Equal(t, txns[0].ID, again.ID)
	b.replayAll(opening)
	assert.Equal(t, int64(900), b.balance("A"))
}

func TestSameKeyOtherTransferInOneInsertGroup(t *testing.T) {
	ctx := testCtx(t)
	b := newSameIDBank(t)
	opening := map[string]int64{"A": 1000, "B": 0}
	b.open(opening)
	rs := inOneInsertGroup(t, b.c,
		func() (*twopc.Txn, error) { return b.c.Transfer(ctx, "A", "B", 100, twopc.WithKey("k")) },
		func() (*twopc.Txn, error) { return b.c.Transfer(ctx, "A", "B", 102, twopc.WithKey("k")) },
	)
	txns := b.txns()
	require.Len(t, txns, 1)
	stored := txns[0]
	var owner, conflict int
	for i, r := range rs {
		switch {
		case r.err == nil:
			owner++
			assert.Equalf(t, stored.Value, r.txn.Value, "call %d was told success for a transfer the log does not hold", i)
		case errors.Is(r.err, twopc.ErrKeyConflict):
			conflict++
		default:
			t.Errorf("call %d: %v", i, r.err)
		}
	}
	assert.Equal(t, 1, owner)
	assert.Equal(t, 1, conflict)
	assert.Equal(t, 1000-stored.Value, b.balance("A"), "the account moved by what the done transfer says")
	b.replayAll(opening)
}

func TestConcurrentReverseInOneInsertGroup(t *testing.T) {
	ctx := testCtx(t)
	b := newSameIDBank(t)
	opening := map[string]int64{"A": 1000, "B": 0}
	b.open(opening)
	paid, err := b.c.Transfer(ctx, "A", "B", 100)
	require.NoError(t, err)
	reverse := func() (*twopc.Txn, error) { return b.c.Reverse(ctx, paid.ID) }
	rs := inOneInsertGroup(t, b.c, reverse, reverse)

	var reversals []txnDoc
	for _, d := range b.txns() {
		if d.ID != paid.ID {
			reversals = append(reversals, d)
		}
	}
	require.Len(t, reversals, 1, "one reversal")
	ownedOnce(t, reversals[0], rs)
	assert.Equal(t, int64(1000), b.balance("A"), "reversed once")
	assert.Equal(t, int64(0), b.balance("B"))
	b.replayAll(opening)
	assert.Equal(t, int64(1000), b.balance("A"))
}

func TestFreshIDCollisionInOneInsertGroup(t *testing.T) {
	ctx := testCtx(t)
	collide := twopc.NewTxnID()
	var mu sync.Mutex
	n := 0
	b := newSameIDBank(t, twopc.WithTxnIDs(func() bson.ObjectID {
		mu.Lock()
		defer mu.Unlock()
		n++
		if n <= 2 {
			return collide // the first two transfers draw one id
		}
		return twopc.NewTxnID()
	}))
	opening := map[string]int64{"A": 1000, "B": 0}
	b.open(opening)
	call := func() (*twopc.Txn, error) { return b.c.Transfer(ctx, "A", "B", 100) }
	rs := inOneInsertGroup(t, b.c, call, call)
	for i, r := range rs {
		require.NoErrorf(t, r.err, "call %d", i)
	}
	assert.NotEqual(t, rs[0].txn.ID, rs[1].txn.ID, "each transfer has a transaction of its own")
	stored := map[bson.ObjectID]txnDoc{}
	for _, d := range b.txns() {
		stored[d.ID] = d
	}
	require.Len(t, stored, 2)
	for i, r := range rs {
		d, ok := stored[r.txn.ID]
		require.Truef(t, ok, "call %d", i)
		assert.Equalf(t, d.Created, r.txn.Created.UTC(), "call %d", i)
	}
	assert.Equal(t, int64(800), b.balance("A"), "both transfers happened")
	b.replayAll(opening)
	assert.Equal(t, int64(800), b.balance("A"))
}
