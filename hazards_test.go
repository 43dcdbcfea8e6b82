package twopc_test

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/internal/mongotest"
)

// These tests replay, one each, the sequences an adversarial review of the
// protocol found; each failed before its fix.

// fakeClock is a claim clock that a test moves by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Now()} }

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// A leg must not apply to an account that did not exist when its
// transaction was rolled back and was opened afterwards: the rollback
// leaves a tombstone fence that OpenAccount adopts.
func TestHazardAccountOpenedAfterRollback(t *testing.T) {
	cases := []struct {
		missing string // the account that does not exist at rollback
		opening int64  // the balance it is opened with afterwards
		other   map[string]int64
	}{
		{missing: "B", opening: 0, other: map[string]int64{"A": 100}},
		{missing: "A", opening: 100, other: map[string]int64{"B": 0}},
	}
	for _, tc := range cases {
		t.Run("missing "+tc.missing, func(t *testing.T) {
			ctx := testCtx(t)
			s := newStall(twopc.StepApply)
			b := newBank(t, twopc.WithStepHook(s.hook), twopc.WithApplication("app"))
			b.open(tc.other)
			// Deleted after the coordinator saw it: the transfer is not
			// refused before its insert (a tombstone's only origin now).
			b.seenThenDeleted(b.c, tc.missing)
			res := stalledTransfer(t, b, s, "A", "B", 60)
			id := b.txns()[0].ID
			b.backdate(id, time.Hour) // another Coordinator's canceler takes over only a stale transaction
			got, err := twopc.NewCanceler(b.coordinator(twopc.WithApplication("app"))).Cancel(ctx, id)
			require.NoError(t, err)
			require.Equal(t, twopc.StateCanceled, got.State)
			_, err = b.c.Balance(ctx, tc.missing)
			require.ErrorIs(t, err, twopc.ErrAccountNotFound, "a tombstone is not an account")

			// The operator sees "account not found" and opens it.
			require.NoError(t, b.c.OpenAccount(ctx, tc.missing, tc.opening))
			close(s.release)
			require.ErrorIs(t, (<-res).err, twopc.ErrCanceled)
			opening := map[string]int64{tc.missing: tc.opening}
			for id, bal := range tc.other {
				opening[id] = bal
			}
			b.checkSettled(opening)
			assert.Equal(t, twopc.StateCanceled, b.txn(id).State)
			// Once the line passes the transfer, its fence goes.
			b.moveLine(b.txn(id).Created, tc.missing)
			assert.Empty(t, b.account(tc.missing).Fenced)
			require.Error(t, b.c.OpenAccount(ctx, tc.missing, 1), "an account that exists is not opened twice")
		})
	}
}

// A tombstone whose last fence is removed stays, holding the fence line
// that refuses the canceled transfer's legs (deleting it raced OpenAccount
// and forgot the line).
func TestHazardTombstoneKept(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	b.open(map[string]int64{"A": 100})
	b.seenThenDeleted(b.c, "ghost")
	txn, err := b.c.Transfer(ctx, "A", "ghost", 10)
	require.ErrorIs(t, err, twopc.ErrAccountNotFound)
	assert.Contains(t, b.account("ghost").Fenced, twopc.LegFence(txn, 1))
	b.moveLine(txn.Created, "ghost")
	var ghost struct {
		Tombstone    bool            `bson:"tombstone"`
		Fenced       []bson.ObjectID `bson:"fencedLegs"`
		FencedBefore time.Time       `bson:"fencedBefore"`
	}
	require.NoError(t, b.db.Collection("accounts").FindOne(ctx, bson.D{{Key: "_id", Value: "ghost"}}).Decode(&ghost))
	assert.True(t, ghost.Tombstone)
	assert.Empty(t, ghost.Fenced)
	assert.Equal(t, txn.Created, ghost.FencedBefore, "the fence line passed the canceled transfer")
	_, err = b.c.Balance(ctx, "ghost")
	require.ErrorIs(t, err, twopc.ErrAccountNotFound, "a tombstone is not an account")
}

// A retry of a leg write re-checks the claim: after a network error, time
// passes for the owner (its own clock), its claim goes stale, another
// application cancels and the fences are removed; the retry must not be
// sent on the lost claim.
func TestHazardRetryAfterClaimLost(t *testing.T) {
	ctx := testCtx(t)
	clock := newFakeClock()
	var b *bank
	var calls atomic.Int32
	reached, release := make(chan struct{}), make(chan struct{})
	b = newFaultBank(t, twopc.WithFrozenMark(), twopc.WithApplication("owner"), twopc.WithClock(clock.now),
		twopc.WithStepHook(func(ctx context.Context, s twopc.Step, _ *twopc.Txn) error {
			if s != twopc.StepApply {
				return nil
			}
			switch calls.Add(1) {
			case 1: // the first attempt is reset before the server sees it
				return b.server.Faults.Add(ctx, mongotest.Fault{Kind: mongotest.DropBeforeForward, Count: 1})
			case 2: // the retry is held, as by a long reconnect
				close(reached)
				<-release
			}
			return nil
		}))
	b.open(map[string]int64{"A": 100, "B": 0})
	res := make(chan error, 1)
	go func() {
		_, err := b.c.Transfer(ctx, "A", "B", 60)
		res <- err
	}()
	<-reached
	id := b.txns()[0].ID
	clock.advance(time.Hour) // the owner's clock sees the hour pass too
	b.backdate(id, time.Hour)
	_, err := twopc.NewCanceler(b.coordinator(twopc.WithApplication("canceler"))).Cancel(ctx, id)
	require.NoError(t, err)
	b.moveLine(b.txn(id).Created, "A", "B") // the fences are gone
	require.Empty(t, b.account("A").Fenced)
	require.Empty(t, b.account("B").Fenced)
	close(release)
	require.ErrorIs(t, <-res, twopc.ErrCanceled)
	b.checkSettled(map[string]int64{"A": 100, "B": 0})
}

// A process configured with a shorter StaleAfter, or fence retention, than
// the owner's does not take over or unfence by its own rules alone.
func TestHazardShortStaleAfterHonoursOwnersLease(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithStepHook(crashAt(twopc.StepCommit)), twopc.WithStaleAfter(time.Minute))
	b.open(map[string]int64{"A": 100, "B": 0})
	txn, err := b.c.Transfer(ctx, "A", "B", 60)
	require.ErrorIs(t, err, errCrash)
	b.backdate(txn.ID, 10*time.Second) // stale by 100ms, fresh by a minute
	hasty := twopc.NewRecoverer(b.coordinator(twopc.WithApplication("hasty"), twopc.WithStaleAfter(100*time.Millisecond)))
	rep, err := hasty.RecoverOnce(ctx)
	require.NoError(t, err)
	assert.Zero(t, rep.Finished(), "taken over by a StaleAfter shorter than the owner's")
	assert.Equal(t, twopc.StatePending, b.txn(txn.ID).State)

	b.backdate(txn.ID, 2*time.Minute)
	rep, err = hasty.RecoverOnce(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, rep.RolledForward)
	// Fences are not recovery's to remove: they go with the line, which
	// moves only past finished transactions, whatever a process's lease.
	b.backdate(txn.ID, 2*time.Minute)
	rep, err = hasty.RecoverOnce(ctx)
	require.NoError(t, err)
	assert.Contains(t, b.account("A").Fenced, twopc.LegFence(txn, 0))
	b.checkSettled(map[string]int64{"A": 100, "B": 0})
}

// A step hook's error stops the caller even when it wraps a timeout, which
// the retry loop would otherwise take for a transient failure.
func TestHazardHookTimeoutIsNotRetried(t *testing.T) {
	ctx := testCtx(t)
	var fired atomic.Bool
	b := newBank(t, twopc.WithStepHook(func(_ context.Context, s twopc.Step, _ *twopc.Txn) error {
		if s == twopc.StepApply && fired.CompareAndSwap(false, true) {
			return context.DeadlineExceeded
		}
		return nil
	}))
	b.open(map[string]int64{"A": 100, "B": 0})
	_, err := b.c.Transfer(ctx, "A", "B", 60)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, int64(100), b.balance("A"), "a write was made after the hook failed")
}

// A leg the server refuses (here pendingTransactions is not an array) rolls
// the transaction back rather than leaving it pending with the debit held.
func TestHazardRefusedLegRollsBack(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	b.open(map[string]int64{"A": 100})
	_, err := b.db.Collection("accounts").InsertOne(ctx, bson.D{{Key: "_id", Value: "B"}, {Key: "balance", Value: int64(0)}, {Key: "pendingTransactions", Value: "oops"}})
	require.NoError(t, err)
	txn, err := b.c.Transfer(ctx, "A", "B", 60)
	require.ErrorIs(t, err, twopc.ErrInvalidAccount)
	assert.Equal(t, twopc.StateCanceled, b.txn(txn.ID).State)
	assert.Equal(t, int64(100), b.balance("A"))
}

// A document recovery cannot decode, or that the protocol could not have
// written, is counted failed and does not stop the pass; one with a value
// that would turn both legs into debits is not driven at all.
func TestHazardMalformedDocumentsDoNotStopRecovery(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithStepHook(crashAt(twopc.StepCommit)))
	b.open(map[string]int64{"A": 100, "B": 100})
	txn, err := b.c.Transfer(ctx, "A", "B", 60)
	require.ErrorIs(t, err, errCrash)
	old := time.Now().Add(-2 * time.Hour)
	_, err = b.db.Collection("transactions").InsertMany(ctx, []any{
		bson.D{{Key: "_id", Value: 1}, {Key: "source", Value: "A"}, {Key: "destination", Value: "B"},
			{Key: "value", Value: 100.5}, {Key: "state", Value: "pending"}, {Key: "lastModified", Value: old}, {Key: "created", Value: old}},
		bson.D{{Key: "_id", Value: bson.NewObjectID()}, {Key: "source", Value: "A"}, {Key: "destination", Value: "B"},
			{Key: "value", Value: int64(math.MinInt64)}, {Key: "state", Value: "pending"}, {Key: "lastModified", Value: old}, {Key: "created", Value: old}},
		bson.D{{Key: "_id", Value: bson.NewObjectID()}, {Key: "source", Value: "A"}, {Key: "destination", Value: "B"},
			{Key: "value", Value: "ten"}, {Key: "state", Value: "pending"}, {Key: "lastModified", Value: old}, {Key: "created", Value: old}},
	})
	require.NoError(t, err)
	b.backdate(txn.ID, time.Hour)
	rep, err := twopc.NewRecoverer(b.coordinator(twopc.WithApplication("r"))).RecoverOnce(ctx)
	require.ErrorIs(t, err, twopc.ErrMalformedTxn)
	assert.Equal(t, 2, rep.Failed, "the undecodable value and MinInt64; _id 1 is not scanned")
	assert.Equal(t, 1, rep.RolledForward)
	assert.Equal(t, twopc.StateDone, b.txn(txn.ID).State)
	assert.Equal(t, int64(40), b.balance("A"))
	assert.Equal(t, int64(160), b.balance("B"))
}

// Idempotency keys hold without any index: the key derives the _id. The
// coordinator makes none here (WithManagedIndexes, and nothing made
// elsewhere), and the log keeps its _id index alone throughout.
func TestHazardKeyWithoutIndexes(t *testing.T) {
	ctx := testCtx(t)
	db := mongotest.NewDatabase(t)
	c, err := twopc.NewCoordinator(db, twopc.WithSyncSettle(), twopc.WithManagedIndexes()) // no index made
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	require.NoError(t, c.OpenAccount(ctx, "A", 100))
	require.NoError(t, c.OpenAccount(ctx, "B", 0))
	t1, err := c.Transfer(ctx, "A", "B", 30, twopc.WithKey("order-1"))
	require.NoError(t, err)
	t2, err := c.Transfer(ctx, "A", "B", 30, twopc.WithKey("order-1"))
	require.NoError(t, err)
	assert.Equal(t, t1.ID, t2.ID)
	bal, err := c.Balance(ctx, "A")
	require.NoError(t, err)
	assert.Equal(t, int64(70), bal)
	assert.Equal(t, []string{"_id_"}, indexNames(t, db.Collection("transactions")), "no index but _id's")
}

// Nil receivers and zero values give errors, not panics.
func TestHazardNilReceivers(t *testing.T) {
	ctx := testCtx(t)
	require.NotPanics(t, func() {
		_, err := twopc.NewRecoverer(nil).RecoverOnce(ctx)
		require.Error(t, err)
		_, err = twopc.NewCanceler(nil).Cancel(ctx, bson.NewObjectID())
		require.Error(t, err)
		var k *twopc.Canceler
		_, err = k.Cancel(ctx, bson.NewObjectID())
		require.Error(t, err)
	})
}
