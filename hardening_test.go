package twopc_test

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/internal/mongotest"
	"github.com/twopc/twopc/internal/schema"
)

// These tests replay, one each, the sequences of the second adversarial
// review (of safety with no timing assumption and no per-process policy);
// each failed before its fix.

// 1. Ids the server takes for one document are one account: a
// self-transfer between int32(1) and int64(1) nested in a document created
// money. They are refused, as are id forms whose equality the library
// cannot decide, and nothing is written.
func TestReview1EquivalentIDs(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	dec, err := bson.ParseDecimal128("1")
	require.NoError(t, err)
	cases := []struct {
		name     string
		src, dst any
	}{
		{"nested int32 and int64", bson.D{{Key: "n", Value: int32(1)}}, bson.D{{Key: "n", Value: int64(1)}}},
		{"nested int64 and double", bson.D{{Key: "n", Value: int64(7)}}, bson.D{{Key: "n", Value: 7.0}}},
		{"deeper", bson.D{{Key: "a", Value: bson.D{{Key: "b", Value: int32(2)}}}}, bson.D{{Key: "a", Value: bson.D{{Key: "b", Value: 2.0}}}}},
		{"in an array", bson.D{{Key: "a", Value: bson.A{int32(1), "x"}}}, bson.D{{Key: "a", Value: bson.A{int64(1), "x"}}}},
		{"minus zero", bson.D{{Key: "z", Value: math.Copysign(0, -1)}}, bson.D{{Key: "z", Value: int32(0)}}},
		{"Decimal128", dec, int64(1)},
		{"nested Decimal128", bson.D{{Key: "n", Value: dec}}, bson.D{{Key: "n", Value: int64(1)}}},
		{"Symbol", bson.Symbol("acct"), "acct"},
		{"nested Symbol", bson.D{{Key: "s", Value: bson.Symbol("a")}}, "b"},
		{"map of two keys", bson.M{"a": int32(1), "b": int32(2)}, "b"},
		{"nested map of two keys", bson.D{{Key: "m", Value: map[string]any{"a": 1, "b": 2}}}, "b"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := b.c.Transfer(ctx, tc.src, tc.dst, 100)
			require.ErrorIs(t, err, twopc.ErrInvalidTransfer)
		})
	}
	assert.Empty(t, b.txns(), "nothing written")

	// The sequence itself: a balance of 0, a transfer to "itself".
	require.NoError(t, b.c.OpenAccount(ctx, bson.D{{Key: "n", Value: int32(1)}}, 0))
	_, err = b.c.Transfer(ctx, bson.D{{Key: "n", Value: int32(1)}}, bson.D{{Key: "n", Value: int64(1)}}, 100)
	require.ErrorIs(t, err, twopc.ErrInvalidTransfer)
	a, err := b.c.Account(ctx, bson.D{{Key: "n", Value: int64(1)}})
	require.NoError(t, err)
	assert.Zero(t, a.Balance)
	assert.Zero(t, a.PendingCredit)

	// Ids the server keeps apart stay two accounts: field order matters.
	ab := bson.D{{Key: "a", Value: int32(1)}, {Key: "b", Value: int32(2)}}
	ba := bson.D{{Key: "b", Value: int32(2)}, {Key: "a", Value: int32(1)}}
	require.NoError(t, b.c.OpenAccount(ctx, ab, 100))
	require.NoError(t, b.c.OpenAccount(ctx, ba, 0))
	_, err = b.c.Transfer(ctx, ab, ba, 40)
	require.NoError(t, err)
	bal, err := b.c.Balance(ctx, ba)
	require.NoError(t, err)
	assert.Equal(t, int64(40), bal)
}

// 2. A leg write delivered after its transaction finished and its fences
// were removed is refused by the account's fence line. Recovery removes
// no fence of this version, whatever its retention: they go with the
// line.
func TestReview2LateLegWriteAfterUnfence(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	b.open(map[string]int64{"A": 100, "B": 0})
	rec := &writeRecorder{}
	owner, err := twopc.NewCoordinator(rec.database(b), twopc.WithApplication("owner"),
		twopc.WithStaleAfter(time.Minute), twopc.WithStepHook(crashAt(twopc.StepCommit)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = owner.Close(context.Background()) })
	txn, err := owner.Transfer(ctx, "A", "B", 60)
	require.ErrorIs(t, err, errCrash, "the legs applied, the process died before its commit")
	apply := rec.recorded()[1]
	require.Equal(t, "update", apply.Index(0).Key(), "the recorded leg write")

	b.backdate(txn.ID, 2*time.Minute)
	r := twopc.NewRecoverer(b.coordinator(twopc.WithApplication("recoverer"))) // default StaleAfter and retention
	rep, err := r.RecoverOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, rep.RolledForward)
	b.backdate(txn.ID, 2*time.Minute)
	rep, err = r.RecoverOnce(ctx)
	require.NoError(t, err)
	require.Contains(t, b.account("A").Fenced, twopc.LegFence(txn, 0))
	b.moveLine(txn.Created, "A", "B")
	require.Empty(t, b.account("A").Fenced, "the fences are gone")

	// The first leg write arrives now, after every fence is gone.
	require.NoError(t, resend(ctx, b.db, apply))
	b.checkSettled(map[string]int64{"A": 100, "B": 0})
	assert.Equal(t, int64(40), b.balance("A"), "debited once")
	assert.Equal(t, int64(60), b.balance("B"))
}

// 3. An insert that arrives after the caller was told the transaction does
// not exist never moves money: after Cancel (a canceled placeholder takes
// the id), or with nothing but Get (recovery presumes abort for a stale
// pending transaction none of whose legs applied).
func TestReview3LateInsert(t *testing.T) {
	for _, cancel := range []bool{true, false} {
		name := map[bool]string{true: "canceled", false: "only Get"}[cancel]
		t.Run(name, func(t *testing.T) {
			ctx := testCtx(t)
			b := newFaultBank(t)
			b.open(map[string]int64{"A": 200, "B": 0}) // enough for both
			rec := &writeRecorder{}
			owner, err := twopc.NewCoordinator(rec.database(b), twopc.WithApplication("owner"), twopc.WithRetries(1), twopc.WithFrozenMark(),
				twopc.WithStepHook(faultAt(t, b, twopc.StepInsert, mongotest.DropBeforeForward)))
			require.NoError(t, err)
			t.Cleanup(func() { _ = owner.Close(context.Background()) })
			lost, err := owner.Transfer(ctx, "A", "B", 60)
			require.Error(t, err, "the insert never reached the server")
			require.NotNil(t, lost)
			_, err = owner.Get(ctx, lost.ID)
			require.ErrorIs(t, err, twopc.ErrTxnNotFound)
			if cancel {
				got, err := twopc.NewCanceler(owner).Cancel(ctx, lost.ID)
				require.NoError(t, err, "canceling an id never written settles it")
				assert.Equal(t, twopc.StateCanceled, got.State)
			}
			// The caller transfers again; then the first insert arrives.
			_, err = owner.Transfer(ctx, "A", "B", 60)
			require.NoError(t, err)
			require.NoError(t, owner.Settle(ctx))
			resendAll(t, b.db, rec.recorded()[:1])
			b.backdateAll(time.Hour)
			b.recoverAll()
			b.checkSettled(map[string]int64{"A": 200, "B": 0})
			assert.Equal(t, int64(140), b.balance("A"), "the money moved once")
			assert.Equal(t, twopc.StateCanceled, b.txn(lost.ID).State)
		})
	}
}

// 4. The overdraft policy travels with the transfer: a recoverer built to
// allow negative balances finishes a transfer whose owner forbade them by
// the owner's rule.
func TestReview4RecordedPolicy(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithStepHook(crashAt(twopc.StepApply)))
	b.open(map[string]int64{"A": 50, "B": 0})
	txn := b.diedAfterCredit("A", "B", 100)
	b.backdate(txn.ID, time.Hour)
	rep, err := twopc.NewRecoverer(b.coordinator(twopc.WithApplication("lenient"), twopc.WithAllowNegative())).RecoverOnce(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, rep.RolledBack)
	assert.Equal(t, "insufficient_funds", b.txn(txn.ID).Reason)
	b.checkSettled(map[string]int64{"A": 50, "B": 0})
	assert.Equal(t, int64(50), b.balance("A"), "the owner's policy forbids a negative balance")
}

// 5. Cancel judges staleness by the lease recorded in the transaction: a
// canceler with a short StaleAfter does not cancel under a live owner with
// a long one.
func TestReview5CancelHonoursRecordedLease(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithApplication("owner"), twopc.WithStaleAfter(time.Hour), twopc.WithStepHook(crashAt(twopc.StepCommit)))
	b.open(map[string]int64{"A": 100, "B": 0})
	txn, err := b.c.Transfer(ctx, "A", "B", 60)
	require.ErrorIs(t, err, errCrash)
	b.backdate(txn.ID, 10*time.Second)
	hasty := twopc.NewCanceler(b.coordinator(twopc.WithApplication("hasty"), twopc.WithStaleAfter(time.Second)))
	_, err = hasty.Cancel(ctx, txn.ID)
	require.ErrorIs(t, err, twopc.ErrInProgress)
	assert.Equal(t, twopc.StatePending, b.txn(txn.ID).State)
	b.backdate(txn.ID, 2*time.Hour)
	got, err := hasty.Cancel(ctx, txn.ID)
	require.NoError(t, err)
	assert.Equal(t, twopc.StateCanceled, got.State)
	b.checkSettled(map[string]int64{"A": 100, "B": 0})
}

// 6. Every read the library decides by is a majority read: after a lost
// reply, the group commit's read of its group, the inspection of the
// accounts, and recovery's scans would otherwise see writes a failover can
// roll back.
// And every write is a majority write, on the primary, whatever the
// client's defaults (COMMANDS.md, finding F7): a commit reported to a
// caller cannot be rolled back by a failover.
func TestReview6DecisionsReadMajority(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	b.open(map[string]int64{"A": 100, "B": 0})
	var mu sync.Mutex
	var reads, writes []bson.Raw
	// The client's own defaults are weaker: w:1, reads from a secondary
	// if there is one. The coordinator must not inherit them.
	db := mongotest.ConnectURI(t, b.server.URI, options.Client().
		SetWriteConcern(writeconcern.W1()).SetReadPreference(readpref.SecondaryPreferred()).
		SetMonitor(&event.CommandMonitor{
			Started: func(_ context.Context, e *event.CommandStartedEvent) {
				mu.Lock()
				defer mu.Unlock()
				switch e.CommandName {
				case "find", "aggregate":
					reads = append(reads, append(bson.Raw(nil), e.Command...))
				case "insert", "update", "delete", "findAndModify":
					writes = append(writes, append(bson.Raw(nil), e.Command...))
				}
			}})).Database(b.db.Name())
	c, err := twopc.NewCoordinator(db, twopc.WithSyncSettle())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	require.NoError(t, c.OpenAccount(ctx, "C", 10))
	_, err = c.Transfer(ctx, "A", "B", 500) // insufficient: inspects the accounts
	require.ErrorIs(t, err, twopc.ErrInsufficientFunds)
	_, err = c.Transfer(ctx, "A", "C", 5)
	require.NoError(t, err)
	_, err = c.Get(ctx, bson.NewObjectID())
	require.ErrorIs(t, err, twopc.ErrTxnNotFound)
	_, err = twopc.NewCanceler(c).Cancel(ctx, bson.NewObjectID()) // writes a canceled placeholder
	require.NoError(t, err)
	b.backdateAll(time.Hour)
	_, err = twopc.NewRecoverer(c).RecoverOnce(ctx)
	require.NoError(t, err)
	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, reads)
	require.NotEmpty(t, writes)
	for _, cmd := range reads {
		level, _ := cmd.Lookup("readConcern", "level").StringValueOK()
		assert.Equalf(t, "majority", level, "read without majority read concern: %s", cmd)
		mode, _ := cmd.Lookup("$readPreference", "mode").StringValueOK()
		assert.Containsf(t, []string{"", "primary"}, mode, "read not from the primary: %s", cmd)
	}
	for _, cmd := range writes {
		w, _ := cmd.Lookup("writeConcern", "w").StringValueOK()
		assert.Equalf(t, "majority", w, "write without majority write concern: %s", cmd)
	}

	// WithWriteConcern replaces majority; it refuses what would give the
	// protocol nothing to decide by.
	writes = writes[:0]
	mu.Unlock()
	c1, err := twopc.NewCoordinator(db, twopc.WithWriteConcern(writeconcern.W1()), twopc.WithSyncSettle())
	require.NoError(t, err)
	_, err = c1.Transfer(ctx, "A", "C", 5)
	require.NoError(t, err)
	require.NoError(t, c1.Close(ctx))
	mu.Lock()
	require.NotEmpty(t, writes)
	for _, cmd := range writes {
		w, _ := cmd.Lookup("writeConcern", "w").AsInt64OK()
		assert.Equalf(t, int64(1), w, "write concern of WithWriteConcern(W1) not used: %s", cmd)
	}
	for _, wc := range []*writeconcern.WriteConcern{nil, writeconcern.Unacknowledged()} {
		_, err := twopc.NewCoordinator(db, twopc.WithWriteConcern(wc))
		assert.Error(t, err)
	}
}

// 7. A rollback delivered after the fences were removed cannot leave a
// fence (or tombstone) that nothing removes: the fence line refuses it.
func TestReview7LateRollbackLeavesNoFence(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithApplication("app"))
	b.open(map[string]int64{"A": 100})
	rec := &writeRecorder{}
	c, err := twopc.NewCoordinator(rec.database(b), twopc.WithApplication("app"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	b.seenThenDeleted(c, "ghost") // c takes it to exist
	opened := len(rec.recorded())
	txn, err := c.Transfer(ctx, "A", "ghost", 10) // rolled back: fences both, a tombstone for ghost
	require.ErrorIs(t, err, twopc.ErrAccountNotFound)
	b.moveLine(txn.Created, "A", "ghost") // the line passes it: its fences go
	require.Empty(t, b.account("A").Fenced)
	require.Empty(t, b.account("ghost").Fenced)
	resendAll(t, b.db, rec.recorded()[opened:]) // every write of the transfer, the rollback's fences among them
	assert.Empty(t, b.account("A").Fenced, "a late fence was added to A")
	assert.Empty(t, b.account("ghost").Fenced, "a late fence was added to the tombstone")
	assert.Equal(t, int64(100), b.balance("A"))
	_, err = b.c.Balance(ctx, "ghost")
	require.ErrorIs(t, err, twopc.ErrAccountNotFound)
}

// 8a. An account opened where a rollback left a tombstone, after that
// tombstone's fences were removed (tombstones used to be deleted then,
// racing OpenAccount), adopts the tombstone's fence line: the stalled
// owner's leg, delivered after all that, does not apply to it.
func TestReview8OpenAccountOnUnfencedTombstone(t *testing.T) {
	ctx := testCtx(t)
	s := newStall(twopc.StepApply)
	b := newBank(t, twopc.WithStepHook(s.hook), twopc.WithApplication("app"))
	b.open(map[string]int64{"A": 100})
	b.seenThenDeleted(b.c, "B") // the transfer's insert is not refused
	res := stalledTransfer(t, b, s, "A", "B", 60)
	id := b.txns()[0].ID
	b.backdate(id, time.Hour) // another Coordinator's canceler takes over only a stale transaction
	_, err := twopc.NewCanceler(b.coordinator(twopc.WithApplication("app"))).Cancel(ctx, id)
	require.NoError(t, err)
	b.moveLine(b.txn(id).Created, "B")
	require.Empty(t, b.account("B").Fenced)
	require.NoError(t, b.c.OpenAccount(ctx, "B", 0), "the tombstone is adopted")
	close(s.release)
	require.ErrorIs(t, (<-res).err, twopc.ErrCanceled)
	b.checkSettled(map[string]int64{"A": 100, "B": 0})
	var acct struct {
		FencedBefore time.Time `bson:"fencedBefore"`
	}
	require.NoError(t, b.db.Collection("accounts").FindOne(ctx, bson.D{{Key: "_id", Value: "B"}}).Decode(&acct))
	assert.False(t, acct.FencedBefore.Before(b.txn(id).Created), "the opened account kept the fence line past the transfer")
}

// 8b. A reversal canceled for want of funds can be tried again: the next
// attempt takes the next derived key, and reversing twice still moves the
// money back once.
func TestReview8ReverseAfterCanceledReverse(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	b.open(map[string]int64{"A": 100, "B": 0, "C": 0})
	txn, err := b.c.Transfer(ctx, "A", "B", 60)
	require.NoError(t, err)
	_, err = b.c.Transfer(ctx, "B", "C", 60) // B spends it
	require.NoError(t, err)
	_, err = b.c.Reverse(ctx, txn.ID)
	require.ErrorIs(t, err, twopc.ErrInsufficientFunds)
	_, err = b.c.Transfer(ctx, "C", "B", 60) // refunded
	require.NoError(t, err)
	rev, err := b.c.Reverse(ctx, txn.ID)
	require.NoError(t, err)
	again, err := b.c.Reverse(ctx, txn.ID)
	require.NoError(t, err)
	assert.Equal(t, rev.ID, again.ID)
	assert.Equal(t, int64(100), b.balance("A"), "reversed once")
	assert.Equal(t, int64(0), b.balance("B"))
}

// 8c. A credit is refused when the credits already in flight to the
// account would, once settled, take its balance past MaxInt64: a committed
// transfer always settles.
func TestReview8CreditBoundCountsInFlight(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithStepHook(failAt(twopc.StepSettle)))
	b.open(map[string]int64{"A": 100, "B": 100, "full": math.MaxInt64 - 100})
	first, err := b.c.Transfer(ctx, "A", "full", 60)
	require.NoError(t, err, "fits: nothing else in flight")
	_, err = b.c.Transfer(ctx, "B", "full", 60)
	require.ErrorIs(t, err, twopc.ErrBalanceOverflow, "with the first credit in flight it would not settle")
	rep := b.recoverAll()
	assert.Equal(t, 1, rep.Settled)
	assert.Equal(t, twopc.StateDone, b.txn(first.ID).State)
	assert.Equal(t, int64(math.MaxInt64-40), b.balance("full"))
	b.checkSettled(map[string]int64{"A": 100, "B": 100, "full": math.MaxInt64 - 100})
}

// 8d. Recovery leaves alone transaction documents this library did not
// write: a tutorial-protocol transfer stuck applied (its credit already in
// the balance) is not settled a second time, nor an initial one canceled.
func TestReview8ForeignDocumentsLeftAlone(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	applied, initial := bson.NewObjectID(), bson.NewObjectID()
	old := time.Now().Add(-2 * time.Hour)
	_, err := b.db.Collection("accounts").InsertMany(ctx, []any{
		bson.D{{Key: "_id", Value: "A"}, {Key: "balance", Value: int64(40)}, {Key: "pendingTransactions", Value: bson.A{applied}}},
		bson.D{{Key: "_id", Value: "B"}, {Key: "balance", Value: int64(60)}, {Key: "pendingTransactions", Value: bson.A{applied}}},
	})
	require.NoError(t, err)
	_, err = b.db.Collection("transactions").InsertMany(ctx, []any{
		bson.D{{Key: "_id", Value: applied}, {Key: "source", Value: "A"}, {Key: "destination", Value: "B"},
			{Key: "value", Value: int64(60)}, {Key: "state", Value: "applied"}, {Key: "lastModified", Value: old}},
		bson.D{{Key: "_id", Value: initial}, {Key: "source", Value: "A"}, {Key: "destination", Value: "B"},
			{Key: "value", Value: int64(10)}, {Key: "state", Value: "initial"}, {Key: "lastModified", Value: old}},
	})
	require.NoError(t, err)
	rep := b.recoverAll()
	assert.Equal(t, twopc.RecoveryReport{}, rep)
	assert.Equal(t, int64(60), b.balance("B"), "a tutorial credit settled twice")
	assert.Equal(t, twopc.StateApplied, b.txn(applied).State)
	assert.Equal(t, twopc.StateInitial, b.txn(initial).State)
	_, err = twopc.NewCanceler(b.c).Cancel(ctx, initial)
	require.ErrorIs(t, err, twopc.ErrMalformedTxn)
}

// The tests below replay what a review of the fixes above found.

// A fresh id that collides with another transaction's is not answered with
// that transaction's outcome: the transfer takes another id and happens.
func TestReviewFreshIDCollision(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	b.open(map[string]int64{"A": 100, "B": 0})
	first, err := b.c.Transfer(ctx, "A", "B", 10)
	require.NoError(t, err)
	var calls int
	c := b.coordinator(twopc.WithSyncSettle(), twopc.WithTxnIDs(func() bson.ObjectID {
		calls++
		if calls == 1 {
			return first.ID // the collision
		}
		return twopc.NewTxnID()
	}))
	second, err := c.Transfer(ctx, "A", "B", 10) // the same source, destination and value
	require.NoError(t, err)
	assert.NotEqual(t, first.ID, second.ID)
	assert.Equal(t, int64(80), b.balance("A"), "both transfers happened")
	b.checkSettled(map[string]int64{"A": 100, "B": 0})
}

// A host whose clock runs ahead does not move fence lines into the future,
// where they would refuse every other host's transfers on those accounts.
func TestReviewClockAheadDoesNotCloseAccounts(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	b.open(map[string]int64{"A": 100, "B": 0})
	ahead := b.coordinator(twopc.WithSyncSettle(), twopc.WithClock(func() time.Time { return time.Now().Add(2 * time.Hour) }))
	txn, err := ahead.Transfer(ctx, "A", "B", 10)
	require.NoError(t, err)
	b.backdate(txn.ID, 2*time.Minute) // final for longer than its retention
	b.recoverAll()
	_, err = b.c.Transfer(ctx, "A", "B", 10)
	require.NoError(t, err, "a transfer from a host on time")
	b.ageFinal()
	b.recoverAll()
	b.checkSettled(map[string]int64{"A": 100, "B": 0})
}

// Accounts of the wrong shape give a clear error and a canceled transfer,
// never a transfer stuck pending or committed and unable to settle.
func TestReviewOffShapeAccounts(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	b.open(map[string]int64{"A": 100})
	_, err := b.db.Collection("accounts").InsertMany(ctx, []any{
		bson.D{{Key: "_id", Value: "scalarFences"}, {Key: "balance", Value: int64(0)}, {Key: "pendingTransactions", Value: bson.A{}}, {Key: "fencedLegs", Value: "x"}},
		bson.D{{Key: "_id", Value: "noPending"}, {Key: "balance", Value: int64(math.MaxInt64 / 2)}},
	})
	require.NoError(t, err)
	txn, err := b.c.Transfer(ctx, "A", "scalarFences", 10)
	require.ErrorIs(t, err, twopc.ErrInvalidAccount)
	assert.Equal(t, twopc.StateCanceled, b.txn(txn.ID).State)
	// A fence line of a type that sorts above dates would never move
	// ($max keeps it), so a write that dropped the fences below the mark
	// would leave them refused by nothing: such an account takes no leg,
	// and its fences stay. (MaxKey is one too; the dev server cannot
	// store it, see DIFFERENCES.md.)
	// An array holding a date matches $type "date": refused too, or the
	// rollback's line write would replace it with the (earlier) mark.
	fence := schema.Fence(time.Now(), schema.Marker(bson.NewObjectID(), 0))
	_, err = twopc.ReadMark(ctx, b.c) // so that rollbacks send their line writes
	require.NoError(t, err)
	far := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
	for id, line := range map[string]any{"regexLine": bson.Regex{Pattern: "x"}, "timestampLine": bson.Timestamp{T: 1}, "arrayLine": bson.A{far}} {
		_, err := b.db.Collection("accounts").InsertOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: "balance", Value: int64(0)},
			{Key: "fencedLegs", Value: bson.A{fence}}, {Key: "fencedBefore", Value: line}})
		require.NoError(t, err)
		txn, err := b.c.Transfer(ctx, "A", id, 10)
		require.ErrorIsf(t, err, twopc.ErrInvalidAccount, "%s", id)
		assert.Equal(t, twopc.StateCanceled, b.txn(txn.ID).State)
		var doc struct {
			Fences  []bson.ObjectID `bson:"fencedLegs"`
			Balance int64           `bson:"balance"`
			Line    bson.RawValue   `bson:"fencedBefore"`
		}
		require.NoError(t, b.db.Collection("accounts").FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Decode(&doc))
		assert.Equalf(t, []bson.ObjectID{fence}, doc.Fences, "%s: its fence stays", id)
		assert.NotEqualf(t, bson.TypeDateTime, doc.Line.Type, "%s: its line was not replaced", id)
		assert.Zero(t, doc.Balance)
	}
	_, err = b.c.Transfer(ctx, "A", "noPending", 10)
	require.NoError(t, err, "nothing in flight: the exact bound applies")
	assert.Equal(t, int64(math.MaxInt64/2+10), b.balance("noPending"))
	assert.Equal(t, int64(90), b.balance("A"))
}
