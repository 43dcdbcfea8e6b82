package twopc_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/internal/mongotest"
)

// kinds lists the kinds of a report's violations.
func kinds(rep *twopc.AuditReport) []string {
	var out []string
	for _, v := range rep.Violations {
		out = append(out, v.Kind)
	}
	return out
}

// An audit of a healthy system, run over and over while transfers (some
// refused, some crashed and recovered) go on, never reports a violation:
// a marker read while its transfer settles is read again before it is
// reported. Once everything is finished, the stated totals are decided
// and hold.
func TestAuditLiveSystemIsHealthy(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	fees := b.db.Collection("fees")
	c := b.coordinator(twopc.WithLedger("fees", fees), twopc.WithStepHook(func(ctx context.Context, s twopc.Step, _ *twopc.Txn) error {
		if ctx.Value(simKey{}) != nil && rand.IntN(50) == 0 {
			return errCrash
		}
		return nil
	}))
	opening := map[string]int64{}
	for i := 0; i < 6; i++ {
		opening[fmt.Sprint("acct-", i)] = 500
	}
	b.open(opening)
	feeLedger, err := c.Ledger("fees")
	require.NoError(t, err)
	require.NoError(t, feeLedger.OpenAccount(ctx, "fee", 0))

	const workers, each = 4, 25
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 3))
			wctx := context.WithValue(ctx, simKey{}, true)
			for n := 0; n < each; n++ {
				src, dst := fmt.Sprint("acct-", rng.IntN(6)), fmt.Sprint("acct-", rng.IntN(6))
				if src == dst {
					continue
				}
				v := 1 + rng.Int64N(300)
				_, _ = c.TransferLegs(wctx, []twopc.Leg{{Account: src, Amount: -v}, {Account: dst, Amount: v - 1}, {Ledger: "fees", Account: "fee", Amount: 1}})
			}
		}(w)
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	audits := 0
	for running := true; running; audits++ {
		select {
		case <-done:
			running = false
		default:
		}
		rep, err := c.Audit(ctx, twopc.WithAuditBatch(2), twopc.WithExpectedTotal("", 3000), twopc.WithExpectedTotal("fees", 0))
		require.NoError(t, err)
		select {
		case <-done:
			// The load may have ended before this audit began: it read a
			// quiet system, whose totals are not the ones stated (the fees
			// moved); the audit after recovery checks that.
			continue
		default:
		}
		require.Emptyf(t, rep.Violations, "audit %d during the load", audits)
		require.NoError(t, rep.Err())
	}
	require.NoError(t, c.Settle(ctx))
	b.recoverAll(twopc.WithLedger("fees", fees))
	b.serverPastTxns()

	rep, err := c.Audit(ctx, twopc.WithExpectedTotal("", 3000-int64(feesHeld(t, c))), twopc.WithExpectedTotal("fees", int64(feesHeld(t, c))))
	require.NoError(t, err)
	require.True(t, rep.OK(), "%v", rep.Violations)
	assert.Zero(t, rep.Unfinished)
	assert.Zero(t, rep.Markers)
	assert.Equal(t, 6, rep.Accounts[""])
	assert.Equal(t, 1, rep.Accounts["fees"])
	assert.Equal(t, map[string][]string{"": {""}, "fees": {""}}, rep.Assets, "accounts of no asset")
	require.Len(t, rep.Totals, 2)
	for _, tc := range rep.Totals {
		assert.True(t, tc.Decided && tc.OK, "%+v", tc)
	}
	assert.Positive(t, rep.Transactions[twopc.StateDone])
	t.Logf("%d audits during the load, none found a violation; at the end: %v", audits, rep.Transactions)

	// A stated total the accounts do not hold, with nothing in flight, is
	// a violation.
	rep, err = c.Audit(ctx, twopc.WithExpectedTotal("", 1))
	require.NoError(t, err)
	require.Equal(t, []string{twopc.ViolationTotal}, kinds(rep))
	require.ErrorIs(t, rep.Err(), twopc.ErrAuditFailed)
	_, err = c.Audit(ctx, twopc.WithExpectedTotal("tokyo", 1))
	require.ErrorIs(t, err, twopc.ErrUnknownLedger)
}

// feesHeld is the fee account's balance.
func feesHeld(t *testing.T, c *twopc.Coordinator) int64 {
	t.Helper()
	l, err := c.Ledger("fees")
	require.NoError(t, err)
	b, err := l.Balance(testCtx(t), "fee")
	require.NoError(t, err)
	return b
}

// The audit finds what the protocol never leaves: a marker of a finished
// transfer, or of none, on an account of either ledger; a transaction
// untouched past its lease; an account past its marker bounds; an account
// of the wrong shape. And a total stated while a transfer is in flight is
// not decided.
func TestAuditFindsBrokenInvariants(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	fees := b.db.Collection("fees")
	c := b.coordinator(twopc.WithLedger("fees", fees), twopc.WithSyncSettle())
	b.open(map[string]int64{"A": 100, "B": 0, "C": 7})
	l, err := c.Ledger("fees")
	require.NoError(t, err)
	require.NoError(t, l.OpenAccount(ctx, "fee", 0))
	txn, err := c.TransferLegs(ctx, []twopc.Leg{{Account: "A", Amount: -10}, {Account: "B", Amount: 9}, {Ledger: "fees", Account: "fee", Amount: 1}})
	require.NoError(t, err)
	require.Equal(t, twopc.StateDone, txn.State)
	rep, err := c.Audit(ctx, twopc.WithExpectedTotal("", 106), twopc.WithExpectedTotal("fees", 1))
	require.NoError(t, err)
	require.True(t, rep.OK(), "healthy before the corruption: %v", rep.Violations)

	// A marker of the done transfer put back on B, and one of a
	// transaction that never was on the fee account.
	ghost := bson.NewObjectID()
	ghost[len(ghost)-1] = 0 // a transaction id, as the library makes them
	push := func(coll string, id string, marker bson.ObjectID) {
		_, err := b.db.Collection(coll).UpdateOne(ctx, bson.D{{Key: "_id", Value: id}},
			bson.D{{Key: "$push", Value: bson.D{{Key: "pendingTransactions", Value: marker}}}})
		require.NoError(t, err)
	}
	push("accounts", "B", twopc.LegMarker(txn.ID, 1))
	push("fees", "fee", ghost)
	rep, err = c.Audit(ctx)
	require.NoError(t, err)
	require.Len(t, rep.Violations, 2, "%v", rep.Violations)
	byTxn := map[bson.ObjectID]twopc.Violation{}
	for _, v := range rep.Violations {
		assert.Equal(t, twopc.ViolationOrphanMarker, v.Kind)
		byTxn[v.Txn] = v
	}
	assert.Equal(t, "B", byTxn[txn.ID].Account)
	assert.Equal(t, "", byTxn[txn.ID].Ledger)
	assert.Contains(t, byTxn[txn.ID].Detail, "is done")
	assert.Equal(t, "fee", byTxn[ghost].Account)
	assert.Equal(t, "fees", byTxn[ghost].Ledger)
	assert.Contains(t, byTxn[ghost].Detail, "does not exist")
	require.ErrorIs(t, rep.Err(), twopc.ErrAuditFailed)
	assert.Contains(t, rep.Err().Error(), "orphan-marker account \"\"/B txn "+txn.ID.Hex())

	// Cleaned up, then a transfer left pending by a crash: not stale at
	// first, stale once untouched past its lease and the grace; its
	// marker is not an orphan; totals are not decided while it is in
	// flight; and with bounds of zero markers, A is past them.
	for coll, id := range map[string]string{"accounts": "B", "fees": "fee"} {
		_, err := b.db.Collection(coll).UpdateOne(ctx, bson.D{{Key: "_id", Value: id}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "pendingTransactions", Value: bson.A{}}}}})
		require.NoError(t, err)
	}
	crashing := b.coordinator(twopc.WithStepHook(crashAt(twopc.StepCommit)), twopc.WithStaleAfter(time.Minute))
	stuck, err := crashing.Transfer(ctx, "A", "C", 5)
	require.ErrorIs(t, err, errCrash)
	rep, err = c.Audit(ctx, twopc.WithExpectedTotal("", 106))
	require.NoError(t, err)
	require.True(t, rep.OK(), "%v", rep.Violations)
	assert.Equal(t, 1, rep.Unfinished)
	assert.Equal(t, 2, rep.Markers)
	require.Len(t, rep.Totals, 1)
	assert.False(t, rep.Totals[0].Decided, "a transfer in flight")
	b.backdate(stuck.ID, 2*time.Minute)
	rep, err = c.Audit(ctx, twopc.WithStaleGrace(30*time.Second), twopc.WithMarkerBounds(0, 0))
	require.NoError(t, err)
	require.Equal(t, []string{twopc.ViolationStale}, kinds(rep), "bounds of 0 mean the defaults")
	assert.Equal(t, stuck.ID, rep.Violations[0].Txn)
	assert.GreaterOrEqual(t, rep.OldestUnfinished, 2*time.Minute)
	rep, err = c.Audit(ctx, twopc.WithStaleGrace(time.Hour))
	require.NoError(t, err)
	require.True(t, rep.OK(), "within its lease and the grace: %v", rep.Violations)
	crashing2 := b.coordinator(twopc.WithStepHook(crashAt(twopc.StepCommit)))
	_, err = crashing2.Transfer(ctx, "A", "C", 1)
	require.ErrorIs(t, err, errCrash)
	rep, err = c.Audit(ctx, twopc.WithStaleGrace(time.Hour), twopc.WithMarkerBounds(1, 5))
	require.NoError(t, err)
	require.ElementsMatch(t, []string{twopc.ViolationMarkerBound, twopc.ViolationMarkerBound}, kinds(rep), "A and C hold two markers each")

	// A held credit left on an account with no leg in flight.
	_, err = b.db.Collection("accounts").UpdateOne(ctx, bson.D{{Key: "_id", Value: "B"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "pendingCredit", Value: int64(3)}}}})
	require.NoError(t, err)
	rep, err = c.Audit(ctx, twopc.WithStaleGrace(time.Hour))
	require.NoError(t, err)
	require.Equal(t, []string{twopc.ViolationHeldWithoutMarker}, kinds(rep))
	assert.Equal(t, "B", rep.Violations[0].Account)
	_, err = b.db.Collection("accounts").UpdateOne(ctx, bson.D{{Key: "_id", Value: "B"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "pendingCredit", Value: int64(0)}}}})
	require.NoError(t, err)

	// An account of the wrong shape.
	_, err = b.db.Collection("accounts").UpdateOne(ctx, bson.D{{Key: "_id", Value: "B"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "balance", Value: "nine"}}}})
	require.NoError(t, err)
	rep, err = c.Audit(ctx, twopc.WithStaleGrace(time.Hour))
	require.NoError(t, err)
	require.Equal(t, []string{twopc.ViolationMalformed}, kinds(rep))
	assert.Contains(t, rep.Violations[0].Detail, "balance is a string")
}

// A transfer that begins and ends while the audit reads the accounts (in
// flight at neither end) is seen in part: the totals are not decided, and
// no violation is reported.
func TestAuditTotalsUndecidedWhenATransferRanDuringTheScan(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	b.open(map[string]int64{"A": 0, "Z": 100})
	var once sync.Once
	var transferErr error
	db := mongotest.ConnectURI(t, b.server.URI, options.Client().SetMonitor(&event.CommandMonitor{
		Started: func(_ context.Context, e *event.CommandStartedEvent) {
			if e.CommandName == "getMore" && e.Command.Lookup("collection").StringValue() == "accounts" {
				// A has been read; Z has not.
				once.Do(func() { _, transferErr = b.c.Transfer(ctx, "Z", "A", 30) })
			}
		}})).Database(b.db.Name())
	c, err := twopc.NewCoordinator(db)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	rep, err := c.Audit(ctx, twopc.WithAuditBatch(1), twopc.WithExpectedTotal("", 100))
	require.NoError(t, err)
	require.NoError(t, transferErr)
	require.Len(t, rep.Totals, 1)
	// On MongoDB the sum is 70 (A read before the transfer, Z after); a
	// server whose cursor is a snapshot (FerretDB) reads 100. Either way
	// a transfer ran during the scan.
	assert.False(t, rep.Totals[0].Decided)
	assert.True(t, rep.OK(), "%v", rep.Violations)
	b.serverPastTxns()
	rep, err = c.Audit(ctx, twopc.WithExpectedTotal("", 100))
	require.NoError(t, err)
	assert.True(t, rep.Totals[0].Decided && rep.Totals[0].OK, "%+v", rep.Totals)
}

// The audit reads the held holds, then their accounts: two reads, never
// one snapshot. A hold voided between them takes its amount and marker off
// the account, so the account holds less than the two holds read held; the
// other hold, still held and whole, is not a violation. The void runs in
// the command monitor, as the audit's read of the accounts starts.
func TestAuditHoldVoidedBetweenItsReads(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	b.open(map[string]int64{"A": 100, "B": 0, "C": 0})
	kept, err := b.c.Hold(ctx, "A", "B", 10)
	require.NoError(t, err)
	voided, err := b.c.Hold(ctx, "A", "C", 20)
	require.NoError(t, err)
	var once sync.Once
	var voidErr error
	db := mongotest.ConnectURI(t, b.server.URI, options.Client().SetMonitor(&event.CommandMonitor{
		Started: func(_ context.Context, e *event.CommandStartedEvent) {
			if e.CommandName == "find" && e.Command.Lookup("find").StringValue() == "accounts" {
				once.Do(func() { _, voidErr = b.c.Void(ctx, voided.ID) })
			}
		}})).Database(b.db.Name())
	c, err := twopc.NewCoordinator(db)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	rep, err := c.Audit(ctx, twopc.WithExpectedTotal("", 100))
	require.NoError(t, err)
	require.NoError(t, voidErr)
	assert.Equal(t, twopc.StateCanceled, b.txn(voided.ID).State, "voided during the audit")
	assert.Equal(t, 2, rep.Held, "both were held when the audit read them")
	assert.True(t, rep.OK(), "%v", rep.Violations)

	// The check still finds a hold whose account lost its amount: the
	// second look confirms it.
	_, err = b.db.Collection("accounts").UpdateOne(ctx, bson.D{{Key: "_id", Value: "A"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "pendingDebit", Value: int64(0)}}}})
	require.NoError(t, err)
	rep, err = c.Audit(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{twopc.ViolationHoldNotOnAccount}, kinds(rep), "%v", rep.Violations)
	require.Len(t, rep.Violations, 1)
	assert.Equal(t, kept.ID, rep.Violations[0].Txn)
}
