// Findings of an adversarial review of the repeats (issue 47), each a test
// that failed before its fix.

package twopc_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/internal/mongotest"
)

// TestRepeatReviewRepeatAfterAccountGoneInferredAsset: a keyed transfer naming
// no asset between two USD accounts commits (its asset inferred: USD). Its
// destination is then closed (deleted). A repeat with the key, from a
// coordinator that has not seen the accounts, must answer the committed
// transaction ("a repeat returns that one even after its accounts are
// gone"), not ErrKeyConflict.
func TestRepeatReviewRepeatAfterAccountGoneInferredAsset(t *testing.T) {
	b := newBank(t, twopc.WithSyncSettle())
	ctx := testCtx(t)
	b.openAsset("USD", map[string]int64{"A": 100, "B": 0})
	first, err := b.c.Transfer(ctx, "A", "B", 10, twopc.WithKey("review47-gone"))
	require.NoError(t, err)
	require.Equal(t, "USD", first.Asset)

	_, err = b.db.Collection("accounts").DeleteOne(ctx, bson.D{{Key: "_id", Value: "B"}})
	require.NoError(t, err)

	c2 := b.coordinator()
	again, err := c2.Transfer(ctx, "A", "B", 10, twopc.WithKey("review47-gone"))
	require.NoError(t, err, "the repeat of a committed transfer")
	require.Equal(t, first.ID, again.ID)
}

// TestRepeatReviewRepeatAboveMaxAmountInferredAsset: the same, refused before
// the insert by WithMaxAmount of the repeating coordinator.
func TestRepeatReviewRepeatAboveMaxAmountInferredAsset(t *testing.T) {
	b := newBank(t, twopc.WithSyncSettle())
	ctx := testCtx(t)
	b.openAsset("USD", map[string]int64{"A": 100, "B": 0})
	first, err := b.c.Transfer(ctx, "A", "B", 10, twopc.WithKey("review47-max"))
	require.NoError(t, err)

	c2 := b.coordinator(twopc.WithMaxAmount(5))
	again, err := c2.Transfer(ctx, "A", "B", 10, twopc.WithKey("review47-max"))
	require.NoError(t, err, "the repeat of a committed transfer")
	require.Equal(t, first.ID, again.ID)
}

// review47ApplyCommands runs a TransferBatch of n transfers between
// distinct accounts through a coordinator with opts, WithWriteBatch(2) and a bound of two minutes,
// and returns the update commands sent to the accounts collection by the
// batch before its commit (the apply's), and the results.
func review47ApplyCommands(t *testing.T, b *bank, prefix string, n int, opts ...twopc.Option) (int, []twopc.TransferResult) {
	t.Helper()
	ctx := testCtx(t)
	var mu sync.Mutex
	counting := false
	applies := 0
	mon := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if e.CommandName != "update" {
			return
		}
		if coll, _ := e.Command.Lookup("update").StringValueOK(); coll != "accounts" {
			return
		}
		updates, _ := e.Command.Lookup("updates").ArrayOK()
		values, err := updates.Values()
		if err != nil || len(values) == 0 {
			return
		}
		doc, _ := values[0].DocumentOK()
		u, _ := doc.Lookup("u").DocumentOK()
		push, ok := u.Lookup("$push").DocumentOK()
		if !ok {
			return
		}
		if _, err := push.LookupErr("pendingTransactions"); err != nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if counting {
			applies++
		}
	}}
	db := mongotest.ConnectURI(t, b.server.URI, options.Client().SetMonitor(mon)).Database(b.db.Name())
	// Its bound is two minutes more than the default: a batch of 200 at a
	// write batch of 2 passed the default (20 s) beside make test's other
	// parts, and this counts commands, not time.
	c, err := twopc.NewCoordinator(db, append([]twopc.Option{twopc.WithWriteBatch(2), twopc.WithSyncSettle(), twopc.WithCallTimeout(2 * time.Minute)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	reqs := make([]twopc.TransferRequest, n)
	for i := range reqs {
		src, dst := fmt.Sprintf("%s-s%d", prefix, i), fmt.Sprintf("%s-d%d", prefix, i)
		require.NoError(t, c.OpenAccount(ctx, src, 10))
		require.NoError(t, c.OpenAccount(ctx, dst, 0))
		reqs[i] = twopc.TransferRequest{Source: src, Destination: dst, Value: 1}
	}
	mu.Lock()
	counting = true
	mu.Unlock()
	res, err := c.TransferBatch(ctx, reqs)
	require.NoError(t, err)
	return applies, res
}

// TestRepeatReviewBatchLegsLeftUnsentBeyondFirstCommand: the apply stage's
// write leaves every command after a ledger's first unsent when less than
// an eighth of StaleAfter is left before the group's deadline
// (ledgerapply.go), but that deadline is now half of the takeover lease
// (5 s by default) after the claim: with the default StaleAfter (1 min) it
// is never 7.5 s away, so a group's legs beyond its first command are
// always left unsent and go again, alone, round after round. A batch of
// 40 transfers at WithWriteBatch(2) then takes far more apply commands
// than its 40 (80 legs, 2 a command), as it does with a StaleAfter of 5 s.
func TestRepeatReviewBatchLegsLeftUnsentBeyondFirstCommand(t *testing.T) {
	b := newBank(t)
	const n = 200
	short, res := review47ApplyCommands(t, b, "short", n, twopc.WithStaleAfter(5*time.Second))
	for i, r := range res {
		require.NoErrorf(t, r.Err, "transfer %d (StaleAfter 5s)", i)
	}
	long, res := review47ApplyCommands(t, b, "long", n)
	failed := 0
	for _, r := range res {
		if r.Err != nil {
			if failed == 0 {
				t.Logf("first failure: %v", r.Err)
			}
			failed++
		}
	}
	t.Logf("apply commands: %d with StaleAfter 5s, %d with the default; %d transfers failed with the default", short, long, failed)
	require.Zero(t, failed)
	require.LessOrEqual(t, long, short+n/2, "the default StaleAfter should not multiply the apply commands")
}

// TestRepeatReviewBatchHeldUpByOneRepeat: a TransferBatch is "many independent
// transfers ... one transfer's failure (... a repeated key ...) is its own
// ... while the others go on". A keyed request whose first attempt is
// pending under a live owner in another coordinator waits for that
// owner's takeover lease (here it never passes within the bound), and
// runOn drives none of the batch's new transfers until every repeat of it
// has been judged: the bound ends, and the new transfer, which nothing
// stopped, fails with it and is left pending.
func TestRepeatReviewBatchHeldUpByOneRepeat(t *testing.T) {
	b := newBank(t)
	ctx := testCtx(t)
	b.open(map[string]int64{"A": 100, "B": 0, "C": 100, "D": 0})
	s := newStall(twopc.StepApply)
	owner := b.coordinator(twopc.WithTakeoverAfter(time.Minute), twopc.WithStepHook(s.hook))
	first := make(chan error, 1)
	go func() {
		_, err := owner.Transfer(ctx, "A", "B", 10, twopc.WithKey("review47-batch"))
		first <- err
	}()
	<-s.reached // inserted, pending, its owner alive (stalled before its legs)
	defer close(s.release)

	c2 := b.coordinator(twopc.WithCallTimeout(2 * time.Second))
	res, err := c2.TransferBatch(ctx, []twopc.TransferRequest{
		{Source: "A", Destination: "B", Value: 10, Key: "review47-batch"},
		{Source: "C", Destination: "D", Value: 5},
	})
	require.NoError(t, err)
	t.Logf("repeat: %v", res[0].Err)
	require.ErrorIs(t, res[0].Err, twopc.ErrInProgress)
	require.NoError(t, res[1].Err, "the batch's other, independent transfer")
}

// TestRepeatReviewRepeatOfRefusalConflictsByCachedAsset: the coordinator
// remembers two accounts as holding no asset; they are re-opened (by
// another coordinator) holding USD. A keyed transfer naming no asset is
// made by the stale memory with no asset, refused by the server's asset
// clause and canceled under its key (ErrAssetMismatch: "an account changed
// since it was read" ... "a repeat answers the same refusal"). Its failed
// apply read the accounts again, so the repeat infers USD and is compared
// with the first attempt's legs by its own inference: ErrKeyConflict for
// the key's own transaction.
func TestRepeatReviewRepeatOfRefusalConflictsByCachedAsset(t *testing.T) {
	b := newBank(t)
	ctx := testCtx(t)
	b.open(map[string]int64{"X": 100, "Y": 0}) // seen by b.c: no asset
	other := b.coordinator()
	for _, id := range []string{"X", "Y"} {
		_, err := b.db.Collection("accounts").DeleteOne(ctx, bson.D{{Key: "_id", Value: id}})
		require.NoError(t, err)
	}
	require.NoError(t, other.OpenAccount(ctx, "X", 100, twopc.AccountAsset("USD")))
	require.NoError(t, other.OpenAccount(ctx, "Y", 0, twopc.AccountAsset("USD")))

	first, err := b.c.Transfer(ctx, "X", "Y", 10, twopc.WithKey("review47-refused"))
	require.ErrorIs(t, err, twopc.ErrAssetMismatch)
	require.Equal(t, twopc.StateCanceled, first.State)

	again, err := b.c.Transfer(ctx, "X", "Y", 10, twopc.WithKey("review47-refused"))
	require.ErrorIs(t, err, twopc.ErrAssetMismatch, "the repeat answers the first attempt's refusal")
	require.NotErrorIs(t, err, twopc.ErrKeyConflict)
	require.Equal(t, first.ID, again.ID)
}
