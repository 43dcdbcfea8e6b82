package twopc_test

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc"
)

// mergedApplies returns, from recorded write commands, the leg counts of
// the apply statements on the accounts collection that push more than
// one marker: the coalesced applies.
func mergedApplies(t *testing.T, cmds []bson.Raw) []int {
	t.Helper()
	var out []int
	for _, cmd := range cmds {
		if coll, ok := cmd.Lookup("update").StringValueOK(); !ok || coll != "accounts" {
			continue
		}
		stmts, ok := cmd.Lookup("updates").ArrayOK()
		if !ok {
			continue
		}
		vals, err := stmts.Values()
		require.NoError(t, err)
		for _, v := range vals {
			each, err := v.Document().LookupErr("u", "$push", "pendingTransactions", "$each")
			if err != nil {
				continue
			}
			markers, _ := each.Array().Values()
			if len(markers) > 1 {
				out = append(out, len(markers))
			}
		}
	}
	return out
}

// batchInto is a TransferBatch of one transfer of value from each of
// payers into dst.
func batchInto(payers []string, dst string, value int64) []twopc.TransferRequest {
	reqs := make([]twopc.TransferRequest, len(payers))
	for i, p := range payers {
		reqs[i] = twopc.TransferRequest{Source: p, Destination: dst, Value: value}
	}
	return reqs
}

// TestCoalescedApplyOneStatementPerAccount: the legs of transfers applied
// together that name one account go to it in one statement; the money
// is exact, each leg once.
func TestCoalescedApplyOneStatementPerAccount(t *testing.T) {
	b := newBank(t)
	rec := &writeRecorder{}
	c, err := twopc.NewCoordinator(rec.database(b), twopc.WithSyncSettle())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	ctx := testCtx(t)
	opening := map[string]int64{"hot": 0}
	var payers []string
	for i := 0; i < 20; i++ {
		p := fmt.Sprint("payer", i)
		payers = append(payers, p)
		opening[p] = 100
	}
	b.open(opening)
	res, err := c.TransferBatch(ctx, batchInto(payers, "hot", 7))
	require.NoError(t, err)
	for i, r := range res {
		require.NoErrorf(t, r.Err, "transfer %d", i)
	}
	assert.Equal(t, []int{20}, mergedApplies(t, rec.recorded()), "the hot account's twenty credits in one statement")
	b.checkSettled(opening)
	assert.EqualValues(t, 140, b.balance("hot"))
}

// TestCoalescedApplyFloorBetweenTwo: two legs of one group name one
// account with a floor between them, where only one fits: the merged
// statement does not match, the legs go one statement each, and exactly
// one applies.
func TestCoalescedApplyFloorBetweenTwo(t *testing.T) {
	b := newBank(t, twopc.WithSyncSettle())
	ctx := testCtx(t)
	b.open(map[string]int64{"X": 0, "Y": 0})
	require.NoError(t, b.c.OpenAccount(ctx, "F", 100, twopc.AccountFloor(0)))
	require.NoError(t, b.c.OpenAccount(ctx, "G", 100))
	res, err := b.c.TransferBatch(ctx, []twopc.TransferRequest{
		{Source: "F", Destination: "X", Value: 80}, {Source: "F", Destination: "Y", Value: 80},
		{Source: "G", Destination: "X", Value: 80}, {Source: "G", Destination: "Y", Value: 80},
	})
	require.NoError(t, err)
	for _, pair := range [][2]int{{0, 1}, {2, 3}} {
		ok, short := 0, 0
		for _, i := range pair {
			switch {
			case res[i].Err == nil:
				ok++
			case assert.ErrorIs(t, res[i].Err, twopc.ErrInsufficientFunds):
				short++
			}
		}
		assert.Equal(t, 1, ok, "one of the two debits fits")
		assert.Equal(t, 1, short)
	}
	b.checkSettled(map[string]int64{"X": 0, "Y": 0, "F": 100, "G": 100})
	assert.EqualValues(t, 20, b.balance("F"))
	assert.EqualValues(t, 20, b.balance("G"))
}

// TestCoalescedApplyOneLegAlreadyApplied: a merged apply one of whose legs
// another process applied first matches nothing; its legs then go one
// statement each, and every leg is applied once.
func TestCoalescedApplyOneLegAlreadyApplied(t *testing.T) {
	var b *bank
	var once sync.Once
	b = newBank(t, twopc.WithSyncSettle(), twopc.WithStepHook(func(_ context.Context, s twopc.Step, txn *twopc.Txn) error {
		if s == twopc.StepApply {
			// The first transfer's credit, applied as another process
			// (a recoverer rolling it forward) would, before the group's
			// apply is sent.
			once.Do(func() { b.applyLegByHand(txn, 1) })
		}
		return nil
	}))
	ctx := testCtx(t)
	opening := map[string]int64{"hot": 0, "p0": 50, "p1": 50, "p2": 50}
	b.open(opening)
	res, err := b.c.TransferBatch(ctx, batchInto([]string{"p0", "p1", "p2"}, "hot", 10))
	require.NoError(t, err)
	for i, r := range res {
		require.NoErrorf(t, r.Err, "transfer %d", i)
	}
	b.checkSettled(opening)
	assert.EqualValues(t, 30, b.balance("hot"))
}

// TestCoalescedApplyDeliveredAgain: every merged apply (and every other
// write) delivered again after the transfers settled, and again after
// the fence lines passed them, and the writes of a group whose sender
// died before its commit delivered again after recovery finished it:
// nothing moves twice.
func TestCoalescedApplyDeliveredAgain(t *testing.T) {
	b := newBank(t)
	ctx := testCtx(t)
	opening := map[string]int64{"hot": 0}
	var payers []string
	for i := 0; i < 6; i++ {
		p := fmt.Sprint("payer", i)
		payers = append(payers, p)
		opening[p] = 100
	}
	b.open(opening)

	// Settled, then delivered again, then again past the line.
	rec := &writeRecorder{}
	c, err := twopc.NewCoordinator(rec.database(b), twopc.WithSyncSettle())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	res, err := c.TransferBatch(ctx, batchInto(payers[:3], "hot", 10))
	require.NoError(t, err)
	for _, r := range res {
		require.NoError(t, r.Err)
	}
	require.Equal(t, []int{3}, mergedApplies(t, rec.recorded()))
	states := b.accountStates()
	resendAll(t, b.db, rec.recorded())
	assert.Equal(t, states, b.accountStates(), "delivered again after the settle")
	var last time.Time
	for _, r := range res {
		if r.Txn.Created.After(last) {
			last = r.Txn.Created
		}
	}
	b.moveLine(last, "hot", payers[0], payers[1], payers[2])
	resendAll(t, b.db, rec.recorded())
	assert.Equal(t, states, b.accountStates(), "delivered again past the fence line")

	// The sender dies after the merged apply, before its commit; a
	// recoverer finishes the transfers; the writes come again.
	rec2 := &writeRecorder{}
	dying, err := twopc.NewCoordinator(rec2.database(b), twopc.WithApplication("dying"), twopc.WithStaleAfter(time.Minute),
		twopc.WithStepHook(func(_ context.Context, s twopc.Step, _ *twopc.Txn) error {
			if s == twopc.StepCommit {
				return errCrash
			}
			return nil
		}))
	require.NoError(t, err)
	t.Cleanup(func() { _ = dying.Close(context.Background()) })
	res, err = dying.TransferBatch(ctx, batchInto(payers[3:], "hot", 10))
	require.NoError(t, err)
	for _, r := range res {
		require.ErrorIs(t, r.Err, errCrash)
	}
	require.Equal(t, []int{3}, mergedApplies(t, rec2.recorded()))
	rep := b.recoverAll()
	assert.Equal(t, 3, rep.RolledForward)
	b.checkSettled(opening)
	states = b.accountStates()
	resendAll(t, b.db, rec2.recorded())
	assert.Equal(t, states, b.accountStates(), "the dead sender's writes delivered again")
	assert.EqualValues(t, 60, b.balance("hot"))
}

// TestCoalescedApplyCreditBoundAboveQuarter: two credits applied together
// into an idle account whose balance is above MaxInt64/4. Alone, or one
// after the other, the first applies (nothing in flight: the exact bound)
// and the second is refused (a leg in flight, and the balance above the
// quarter: ErrBalanceOverflow). A merged statement must match only where
// its legs would pass in some serial order, so it must not take both on
// the exact bound of their sum.
func TestCoalescedApplyCreditBoundAboveQuarter(t *testing.T) {
	b := newBank(t, twopc.WithSyncSettle())
	ctx := testCtx(t)
	const big = math.MaxInt64 - 100
	opening := map[string]int64{"big": big, "p0": 10, "p1": 10}
	b.open(opening)
	res, err := b.c.TransferBatch(ctx, batchInto([]string{"p0", "p1"}, "big", 10))
	require.NoError(t, err)
	ok, over := 0, 0
	for _, r := range res {
		switch {
		case r.Err == nil:
			ok++
		case assert.ErrorIs(t, r.Err, twopc.ErrBalanceOverflow):
			over++
		}
	}
	assert.Equal(t, 1, ok, "one credit applies while nothing else is in flight")
	assert.Equal(t, 1, over, "the other meets a leg in flight on a balance above MaxInt64/4")
	b.checkSettled(opening)
}

// TestCoalescedApplyTransientStatementError: a failover reported for the
// merged statement alone (a shard's write error for that statement), for
// it and a single leg's, or for the whole apply command, is an unknown
// outcome: the merged legs go again alone, every transfer completes, and
// every leg applies once.
func TestCoalescedApplyTransientStatementError(t *testing.T) {
	for name, statements := range map[string][]int{"merged": {1}, "merged and single": {0, 1}, "command": nil} {
		t.Run(name, func(t *testing.T) {
			b := newBank(t)
			ctx := testCtx(t)
			opening := map[string]int64{"hot": 0, "p0": 50, "p1": 50, "p2": 50}
			b.open(opening)
			// Statements: p0's debit, hot's three credits merged, p1's and
			// p2's debits.
			fired := b.failNext("accounts", statements...)
			res, err := b.c.TransferBatch(ctx, batchInto([]string{"p0", "p1", "p2"}, "hot", 10))
			fired()
			require.NoError(t, err)
			for i, r := range res {
				require.NoErrorf(t, r.Err, "transfer %d", i)
			}
			require.NoError(t, b.c.Settle(ctx))
			b.checkSettled(opening)
			assert.EqualValues(t, 30, b.balance("hot"))
		})
	}
}
