package twopc_test

// Keyed transfers raced through several routers (a sharded cluster only;
// see sharded_explain_test.go).

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/internal/mongotest"
)

// TestShardedKeyedTransfersFromSeveralRouters: one coordinator per router
// (clients connected to each host of MONGODB_URI alone), and for each of
// 40 idempotency keys, four calls at once, two through each router, with
// the same transfer. Each key has exactly one transaction in the log,
// every call that returned a transaction returned that one, and it moved
// its money once.
func TestShardedKeyedTransfersFromSeveralRouters(t *testing.T) {
	mongotest.RequireSharded(t)
	ctx := shardedCtx(t)
	b := newBank(t)
	routers := mongotest.RouterClients(t)
	require.GreaterOrEqual(t, len(routers), 2, "MONGODB_URI names %d router(s); the sharded job names two", len(routers))
	coordinators := make([]*twopc.Coordinator, len(routers))
	for i, client := range routers {
		c, err := twopc.NewCoordinator(client.Database(b.db.Name()), twopc.WithApplication(fmt.Sprintf("router-%d", i)))
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close(context.Background()) })
		coordinators[i] = c
	}
	sources, srcOpening, _ := openMany(b, "S", 4, 1_000_000)
	dests, dstOpening, _ := openMany(b, "D", 4, 0)
	opening := map[string]int64{}
	for _, m := range []map[string]int64{srcOpening, dstOpening} {
		for id, v := range m {
			opening[id] = v
		}
	}

	const keys, callersPerRouter = 40, 2
	key := func(k int) string { return fmt.Sprintf("order-%02d", k) }
	type call struct {
		k, router int
		txn       *twopc.Txn
		err       error
	}
	calls := make([]call, 0, keys*len(routers)*callersPerRouter)
	for k := range keys {
		for r := range routers {
			for range callersPerRouter {
				calls = append(calls, call{k: k, router: r})
			}
		}
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := &calls[i]
			<-start
			cl.txn, cl.err = coordinators[cl.router].Transfer(ctx, sources[cl.k%4], dests[cl.k%4], int64(cl.k+1), twopc.WithKey(key(cl.k)))
		}()
	}
	close(start)
	wg.Wait()
	for _, c := range coordinators {
		require.NoError(t, c.Settle(ctx))
	}
	require.NoError(t, b.c.Settle(ctx))
	b.recoverAll()

	txns := b.db.Collection("transactions")
	n, err := txns.CountDocuments(ctx, bson.D{})
	require.NoError(t, err)
	assert.EqualValues(t, keys, n, "one transaction per key in the log, nothing else")
	moved := map[string]int64{}
	errs := map[string]int{}
	for k := range keys {
		n, err := txns.CountDocuments(ctx, bson.D{{Key: "key", Value: key(k)}})
		require.NoError(t, err)
		assert.EqualValuesf(t, 1, n, "transactions of key %s", key(k))
		got, err := b.c.GetByKey(ctx, key(k))
		require.NoError(t, err)
		assert.Equalf(t, twopc.StateDone, got.State, "the transfer of key %s", key(k))
		if got.State == twopc.StateDone {
			moved[dests[k%4]] += int64(k + 1)
		}
		for _, cl := range calls {
			if cl.k != k {
				continue
			}
			errs[fmt.Sprint(cl.err)]++
			if cl.txn != nil {
				assert.Equalf(t, got.ID, cl.txn.ID, "a call of key %s through router %d returned another transaction", key(k), cl.router)
			}
			assert.NotErrorIsf(t, cl.err, twopc.ErrKeyConflict, "key %s through router %d", key(k), cl.router)
		}
	}
	t.Logf("calls' errors: %v", errs)
	for _, d := range dests {
		assert.Equalf(t, moved[d], b.balance(d), "%s received each key's transfer once", d)
	}
	b.checkSettled(opening)
}
