package twopc_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/twopc/twopc"
)

// A ledger's trouble is its own transfers' trouble. With Beijing's
// deployment stopped, transfers between two banks wait for it (in the
// apply step, as a driver waits to select a server), while transfers
// whose legs are all at Shanghai, on the same coordinator, run and finish,
// each with its own outcome, before Beijing comes back; then Beijing is
// started again and the waiting transfers finish too.
func TestLedgerDownHoldsOnlyItsOwnTransfers(t *testing.T) {
	ownServers(t)
	ctx := testCtx(t)
	bk := newBanks(t)
	opening := map[string]map[string]int64{
		"shanghai": {"A": 1000, "S1": 1000, "S2": 1000, "poor": 5},
		"beijing":  {"B": 0},
	}
	bk.open(opening)

	// Beijing stops before the coordinator's client for it is made, so
	// that client has never seen it up: its operations wait to select a
	// server (as long as the test takes, rather than fail fast as the
	// banks' clients do) instead of failing on a connection to a server it
	// still believes up.
	bk.stop(1)
	patient := options.Client().SetServerSelectionTimeout(2 * time.Minute).SetTimeout(2 * time.Minute)
	inApply := make(chan struct{}, 64)
	c, err := twopc.NewCoordinator(bk.database(0),
		twopc.WithApplication("isolation"),
		twopc.WithLedger("shanghai", bk.database(0).Collection("accounts")),
		twopc.WithLedger("beijing", bk.database(1, patient).Collection("accounts")),
		twopc.WithStepHook(func(_ context.Context, s twopc.Step, tx *twopc.Txn) error {
			// The cross transfers wait at Beijing from their first read of
			// it on: the read, before the insert, of the accounts this
			// coordinator has not seen.
			if s == twopc.StepExists && slices.ContainsFunc(tx.AllLegs(), func(l twopc.Leg) bool { return l.Ledger == "beijing" }) {
				inApply <- struct{}{}
			}
			return nil
		}))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })

	const cross = 2
	crossDone := make(chan error, cross)
	for i := 0; i < cross; i++ {
		go func() {
			_, err := c.TransferLegs(ctx, crossLegs(10), twopc.WithKey(fmt.Sprintf("cross-%d", i)))
			crossDone <- err
		}()
	}
	for i := 0; i < cross; i++ {
		<-inApply
	}

	// Shanghai alone: concurrent transfers, one refused for its own reason.
	local := []twopc.TransferRequest{
		{Legs: []twopc.Leg{{Ledger: "shanghai", Account: "S1", Amount: -5}, {Ledger: "shanghai", Account: "S2", Amount: 5}}},
		{Legs: []twopc.Leg{{Ledger: "shanghai", Account: "S2", Amount: -7}, {Ledger: "shanghai", Account: "S1", Amount: 7}}},
		{Legs: []twopc.Leg{{Ledger: "shanghai", Account: "poor", Amount: -50}, {Ledger: "shanghai", Account: "S1", Amount: 50}}},
	}
	for round := 0; round < 3; round++ {
		errs := make(chan error, len(local))
		for _, q := range local {
			go func() {
				_, err := c.TransferLegs(ctx, q.Legs)
				errs <- err
			}()
		}
		failed := 0
		for range local {
			if err := <-errs; err != nil {
				require.ErrorIs(t, err, twopc.ErrInsufficientFunds, "a transfer at Shanghai alone failed for another ledger's trouble")
				failed++
			}
		}
		assert.Equal(t, 1, failed, "round %d: only the overdraft fails", round)
		res, err := c.TransferBatch(ctx, local)
		require.NoError(t, err)
		for i, r := range res {
			if i == 2 {
				require.ErrorIs(t, r.Err, twopc.ErrInsufficientFunds)
				continue
			}
			require.NoErrorf(t, r.Err, "round %d, batch transfer %d", round, i)
		}
	}
	select {
	case err := <-crossDone:
		t.Fatalf("a transfer to Beijing returned while Beijing was down, before the transfers at Shanghai were held up by it: %v", err)
	default:
	}

	// One batch of both kinds: its transfers at Shanghai alone commit
	// while its transfer to Beijing waits.
	mixed := []twopc.TransferRequest{
		{Legs: local[0].Legs, Key: "mixed-0"},
		{Legs: crossLegs(10), Key: "mixed-1"},
		{Legs: local[1].Legs, Key: "mixed-2"},
	}
	batchDone := make(chan []twopc.TransferResult, 1)
	go func() {
		res, err := c.TransferBatch(ctx, mixed)
		assert.NoError(t, err)
		batchDone <- res
	}()
	require.Eventually(t, func() bool {
		n, err := bk.log.Collection("transactions").CountDocuments(ctx, bson.D{
			{Key: "key", Value: bson.D{{Key: "$in", Value: bson.A{"mixed-0", "mixed-2"}}}},
			{Key: "state", Value: bson.D{{Key: "$in", Value: bson.A{"applied", "done"}}}},
		})
		return err == nil && n == 2
	}, time.Minute, 20*time.Millisecond, "the batch's transfers at Shanghai alone did not commit while Beijing was down")
	select {
	case err := <-crossDone:
		t.Fatalf("a transfer to Beijing returned while Beijing was down: %v", err)
	case <-batchDone:
		t.Fatal("the batch returned while its transfer to Beijing could not be made")
	default:
	}

	// Beijing comes back: the transfers waiting for it finish.
	bk.start(1)
	for i := 0; i < cross; i++ {
		require.NoError(t, <-crossDone, "a transfer to Beijing, once Beijing is back")
	}
	for i, r := range <-batchDone {
		require.NoErrorf(t, r.Err, "batch transfer %d", i)
	}
	require.NoError(t, c.Settle(ctx))
	bk.recoverAll()
	bk.check(opening)
	assert.Equal(t, int64(1000-(cross+1)*10), bk.balance("shanghai", "A"))
	assert.Equal(t, int64((cross+1)*10), bk.balance("beijing", "B"))
}
