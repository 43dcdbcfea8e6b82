package tutorial_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/twopc/twopc/internal/mongotest"
	"github.com/twopc/twopc/internal/tutorial"
)

func TestMain(m *testing.M) { mongotest.Main(m) }

type account struct {
	Balance int64           `bson:"balance"`
	Pending []bson.ObjectID `bson:"pendingTransactions"`
}

func balanceOf(t *testing.T, ctx context.Context, b *tutorial.Bank, id any) account {
	t.Helper()
	var a account
	require.NoError(t, b.Accounts.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Decode(&a))
	return a
}

// commands records the names of the commands a client sends.
type commands struct {
	mu    sync.Mutex
	names []string
}

func (c *commands) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.names = append(c.names, e.CommandName)
	}}
}

// TestTransfer moves 100 from A to B with the tutorial's protocol and checks
// the balances, the emptied pendingTransactions, the transaction's final
// state, and that it took exactly the tutorial's eight commands: one insert
// and seven updates.
func TestTransfer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var cmds commands
	db := mongotest.NewDatabase(t, options.Client().SetMonitor(cmds.monitor()))
	b := tutorial.New(db)
	require.NoError(t, b.OpenAccount(ctx, "A", 1000))
	require.NoError(t, b.OpenAccount(ctx, "B", 1000))

	cmds.mu.Lock()
	cmds.names = nil
	cmds.mu.Unlock()
	id, err := b.Transfer(ctx, "A", "B", 100)
	require.NoError(t, err)
	cmds.mu.Lock()
	got := append([]string(nil), cmds.names...)
	cmds.mu.Unlock()
	assert.Equal(t, []string{"insert", "update", "update", "update", "update", "update", "update", "update"}, got)
	assert.Len(t, got, tutorial.Commands)

	a, bb := balanceOf(t, ctx, b, "A"), balanceOf(t, ctx, b, "B")
	assert.Equal(t, int64(900), a.Balance)
	assert.Equal(t, int64(1100), bb.Balance)
	assert.Empty(t, a.Pending)
	assert.Empty(t, bb.Pending)
	var txn struct {
		State  string `bson:"state"`
		Value  int64  `bson:"value"`
		Source string `bson:"source"`
	}
	require.NoError(t, b.Transactions.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Decode(&txn))
	assert.Equal(t, "done", txn.State)
	assert.Equal(t, int64(100), txn.Value)
	assert.Equal(t, "A", txn.Source)
}

// TestConcurrentTransfers runs transfers among four accounts from eight
// goroutines and checks that every one ends done and every balance is its
// opening balance plus its net transfers: nothing lost, nothing made.
func TestConcurrentTransfers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db := mongotest.NewDatabase(t)
	b := tutorial.New(db)
	ids := []string{"A", "B", "C", "D"}
	for _, id := range ids {
		require.NoError(t, b.OpenAccount(ctx, id, 1000))
	}
	const workers, each = 8, 5
	want := map[string]int64{"A": 1000, "B": 1000, "C": 1000, "D": 1000}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				src, dst := ids[(w+i)%4], ids[(w+i+1+w%3)%4]
				if src == dst {
					dst = ids[(w+i+1)%4]
				}
				value := int64(1 + w + i)
				if _, err := b.Transfer(ctx, src, dst, value); err != nil {
					errs <- fmt.Errorf("%s→%s: %w", src, dst, err)
					continue
				}
				mu.Lock()
				want[src] -= value
				want[dst] += value
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	var total int64
	for _, id := range ids {
		a := balanceOf(t, ctx, b, id)
		assert.Equalf(t, want[id], a.Balance, "balance of %s", id)
		assert.Emptyf(t, a.Pending, "pending on %s", id)
		total += a.Balance
	}
	assert.Equal(t, int64(4000), total)
	n, err := b.Transactions.CountDocuments(ctx, bson.D{{Key: "state", Value: "done"}})
	require.NoError(t, err)
	assert.Equal(t, int64(workers*each), n)
}

// TestEnsureRecoveryIndex makes the recovery's index twice (idempotent) and
// checks that the transactions carry it, by its keys in order, beside
// _id's.
func TestEnsureRecoveryIndex(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b := tutorial.New(mongotest.NewDatabase(t))
	require.NoError(t, b.EnsureRecoveryIndex(ctx))
	require.NoError(t, b.EnsureRecoveryIndex(ctx), "a second time")
	specs, err := b.Transactions.Indexes().ListSpecifications(ctx)
	require.NoError(t, err)
	var indexes [][]string
	for _, s := range specs {
		elems, err := s.KeysDocument.Elements()
		require.NoError(t, err)
		var keys []string
		for _, e := range elems {
			keys = append(keys, e.Key())
		}
		indexes = append(indexes, keys)
	}
	assert.ElementsMatch(t, [][]string{{"_id"}, {"state", "lastModified"}}, indexes)
}
