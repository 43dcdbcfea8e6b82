package twopc_test

// Chunks moved between the shards while transfers run (a sharded cluster
// only; see sharded_explain_test.go).

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/internal/mongotest"
)

// chunkMover moves chunks of collections between the shards, one move a
// tick, until stopped.
type chunkMover struct {
	t      *testing.T
	client *mongo.Client // through a router
	ns     []string      // database.collection
	shards []string
	moved  map[string]int // successful moves per collection
	// enough is closed once every collection has moved at least least
	// times.
	enough chan struct{}
	least  int
}

// run moves chunk after chunk, each of the collections in turn, to the
// shard it is not on, until stop is closed. A move the cluster refuses
// (another migration of the collection, a range still being cleaned) is
// logged and the next is tried; the moves made are counted.
func (m *chunkMover) run(ctx context.Context, stop <-chan struct{}) {
	admin := m.client.Database("admin")
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		ns := m.ns[i%len(m.ns)]
		chunks, err := mongotest.Chunks(ctx, m.client, ns)
		if err != nil {
			m.t.Logf("chunks of %s: %v", ns, err)
			continue
		}
		chunk := chunks[(i/len(m.ns))%len(chunks)]
		to := m.shards[0]
		if to == chunk.Shard {
			to = m.shards[1]
		}
		// _waitForDelete: the donor deletes the moved range before the
		// command returns, instead of after orphanCleanupDelaySecs (15
		// minutes by default); a range cannot move back to a shard that
		// still has to delete it, and this loop moves ranges back and
		// forth.
		err = admin.RunCommand(ctx, bson.D{
			{Key: "moveChunk", Value: ns},
			{Key: "bounds", Value: bson.A{chunk.Min, chunk.Max}},
			{Key: "to", Value: to},
			{Key: "_waitForDelete", Value: true},
		}).Err()
		if err != nil {
			m.t.Logf("moveChunk %s %s from %s to %s: %v", ns, chunk.Min, chunk.Shard, to, err)
			continue
		}
		m.moved[ns]++
		if !closed(m.enough) && m.everyAtLeast() {
			close(m.enough)
		}
	}
}

func (m *chunkMover) everyAtLeast() bool {
	for _, ns := range m.ns {
		if m.moved[ns] < m.least {
			return false
		}
	}
	return true
}

// TestShardedChunksMoveDuringTransfers: concurrent transfers (which the
// coordinator's group commit batches), batches, and holds captured or
// voided run between 20 accounts while a goroutine moves chunks of the
// accounts and of the log between the two shards, one after another,
// until the workload ends (which waits for three moves of each). Then,
// after recovery: the money is conserved (the audit's total, and every
// balance its opening plus its done transactions), every transaction is
// final, and every call's report agrees with its transaction: none
// reported committed is canceled, none reported canceled is done. A call
// whose outcome is unknown is decided by its transaction, which recovery
// finished.
func TestShardedChunksMoveDuringTransfers(t *testing.T) {
	mongotest.RequireSharded(t)
	ctx := shardedCtx(t)
	b := newBank(t)
	accounts, opening, total := openMany(b, "M", 20, 1_000_000)
	shards, err := mongotest.Shards(ctx, b.db.Client())
	require.NoError(t, err)
	require.Len(t, shards, 2, "the sharded job's cluster has two shards")
	mover := &chunkMover{
		t: t, client: b.db.Client(),
		ns:     []string{b.db.Name() + ".accounts", b.db.Name() + ".transactions"},
		shards: []string{shards[0].ID, shards[1].ID},
		moved:  map[string]int{}, enough: make(chan struct{}), least: 3,
	}
	stop, moverDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(moverDone)
		mover.run(ctx, stop)
	}()

	var calls outcomes
	var wg sync.WaitGroup
	// Each worker makes rounds calls at least, and more until the mover
	// has moved enough chunks, or for four minutes.
	const rounds = 10
	deadline := time.Now().Add(4 * time.Minute)
	more := func(i int) bool {
		return ctx.Err() == nil && (i < rounds || !closed(mover.enough) && time.Now().Before(deadline))
	}
	pick := func(rng *rand.Rand) (string, string) {
		src := rng.IntN(len(accounts))
		return accounts[src], accounts[(src+1+rng.IntN(len(accounts)-1))%len(accounts)]
	}
	for w := range 6 { // concurrent Transfer calls: group-committed
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(1, uint64(w)))
			for i := 0; more(i); i++ {
				src, dst := pick(rng)
				txn, err := b.c.Transfer(ctx, src, dst, int64(1+rng.IntN(100)))
				calls.add("transfer", txn, err, bson.ObjectID{})
			}
		}()
	}
	wg.Add(1)
	go func() { // batches
		defer wg.Done()
		rng := rand.New(rand.NewPCG(2, 0))
		for i := 0; more(i); i++ {
			reqs := make([]twopc.TransferRequest, 8)
			for j := range reqs {
				src, dst := pick(rng)
				reqs[j] = twopc.TransferRequest{Source: src, Destination: dst, Value: int64(1 + rng.IntN(100))}
			}
			results, err := b.c.TransferBatch(ctx, reqs)
			if err != nil {
				calls.add("batch", nil, err, bson.ObjectID{})
				continue
			}
			for _, r := range results {
				calls.add("batch", r.Txn, r.Err, bson.ObjectID{})
			}
		}
	}()
	for w := range 2 { // holds, captured in part or voided
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(3, uint64(w)))
			for i := 0; more(i); i++ {
				src, dst := pick(rng)
				value := int64(2 + rng.IntN(100))
				hold, err := b.c.Hold(ctx, src, dst, value)
				calls.add("hold", hold, err, bson.ObjectID{})
				if err != nil || hold == nil || hold.State != twopc.StateHeld {
					continue
				}
				if i%2 == 0 {
					txn, err := b.c.Capture(ctx, hold.ID, value/2)
					calls.add("capture", txn, err, hold.ID)
				} else {
					txn, err := b.c.Void(ctx, hold.ID)
					calls.add("void", txn, err, hold.ID)
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-moverDone
	require.NoError(t, ctx.Err(), "the workload ran out of time: moves %v", mover.moved)
	t.Logf("chunks moved: %v", mover.moved)
	for _, ns := range mover.ns {
		assert.GreaterOrEqual(t, mover.moved[ns], mover.least, "chunks of %s moved during the workload", ns)
	}

	// A hold that a failed call left held (its capture or void, or the
	// hold's own call, failed) is voided now, once recovery has finished
	// what the calls left, so that every transaction can be final.
	require.NoError(t, b.c.Settle(ctx))
	b.recoverAll()
	for _, d := range b.txns() {
		if d.State != twopc.StateHeld {
			continue
		}
		txn, err := b.c.Void(ctx, d.ID)
		require.NoError(t, err, "void of leftover hold %s", d.ID.Hex())
		calls.add("void", txn, nil, d.ID)
	}
	counts := checkOutcomes(ctx, t, b, calls.list())
	t.Logf("calls: %v", counts)
	for _, kind := range []string{"transfer", "batch", "capture", "void"} {
		assert.Positive(t, counts[kind+" committed"]+counts[kind+" canceled"], "no %s was decided", kind)
	}
	assert.Positive(t, counts["transfer committed"])
	auditTotal(ctx, t, b, total)
	b.checkSettled(opening)
}
