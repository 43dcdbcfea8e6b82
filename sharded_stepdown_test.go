package twopc_test

// A shard's primary stepped down in the middle of transfers (a sharded
// cluster only; see sharded_explain_test.go).

import (
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/internal/mongotest"
)

// helloPrimary is the part of hello that names the primary.
type helloPrimary struct {
	Me       string `bson:"me"`
	Primary  string `bson:"primary"`
	Writable bool   `bson:"isWritablePrimary"`
}

// TestShardedShardPrimaryStepDown: transfers run (through a client with
// the driver's defaults, retryable writes on, as an application's) while
// one shard's primary, reached directly from config.shards, is stepped
// down and another member elected. No transfer is canceled for it: no
// call fails with a refusal (ErrInvalidAccount and the like, which a
// failover's errors must never be taken for), and no transaction ends
// canceled for a refused leg; a call that failed meanwhile left its
// transaction for recovery, which finished it. The one refusal a failover
// may cause, as PROTOCOL.md says, is ErrTooLate (nothing moved), for a
// transfer stamped around the step-down whose insert the election held
// past the mark's margin. Transfers go on after the
// election (30 committed that started after it), and the money is
// conserved.
func TestShardedShardPrimaryStepDown(t *testing.T) {
	mongotest.RequireSharded(t)
	ctx := shardedCtx(t)
	s := mongotest.Shared(t)
	b := &bank{t: t, server: s, db: mongotest.NewDatabaseOn(t, s)}
	// Retries and a bound that outlast an election (seconds): the library
	// retries a failover's errors itself, backing off from 10 ms.
	b.c = b.coordinator(twopc.WithRetries(12), twopc.WithCallTimeout(2*time.Minute))
	require.NoError(t, b.c.EnsureIndexes(ctx))
	accounts, opening, total := openMany(b, "P", 10, 1_000_000)

	shards, err := mongotest.Shards(ctx, b.db.Client())
	require.NoError(t, err)
	require.Len(t, shards, 2, "the sharded job's cluster has two shards")
	uri, err := shards[0].ReplicaSetURI()
	require.NoError(t, err)
	shard := mongotest.ConnectURI(t, uri).Database("admin")
	var before helloPrimary
	require.NoError(t, shard.RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Decode(&before))
	require.NotEmpty(t, before.Primary, "shard %s has a primary", shards[0].ID)

	var calls outcomes
	var committed, afterElection atomic.Int64
	warm, elected, enough := make(chan struct{}), make(chan struct{}), make(chan struct{})
	quit := make(chan struct{}) // closed when the test ends, however
	var warmOnce, enoughOnce sync.Once
	var wg sync.WaitGroup
	defer func() {
		close(quit)
		wg.Wait()
	}()
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(4, uint64(w)))
			for ctx.Err() == nil && !closed(enough) && !closed(quit) {
				after := closed(elected)
				src := rng.IntN(len(accounts))
				dst := (src + 1 + rng.IntN(len(accounts)-1)) % len(accounts)
				var oc outcome
				if w == 0 { // one worker sends batches
					results, err := b.c.TransferBatch(ctx, []twopc.TransferRequest{
						{Source: accounts[src], Destination: accounts[dst], Value: 3},
						{Source: accounts[dst], Destination: accounts[src], Value: 2},
					})
					if err != nil {
						oc = calls.add("batch", nil, err, bson.ObjectID{})
					}
					for _, r := range results {
						oc = calls.add("batch", r.Txn, r.Err, bson.ObjectID{})
					}
				} else {
					txn, err := b.c.Transfer(ctx, accounts[src], accounts[dst], int64(1+rng.IntN(50)))
					oc = calls.add("transfer", txn, err, bson.ObjectID{})
				}
				if oc.said != saidCommitted {
					continue
				}
				if committed.Add(1) == 20 {
					warmOnce.Do(func() { close(warm) })
				}
				if after && afterElection.Add(1) >= 30 {
					enoughOnce.Do(func() { close(enough) })
				}
			}
		}()
	}

	select {
	case <-warm:
	case <-ctx.Done():
		t.Fatalf("no 20 transfers committed before the step-down: %v", ctx.Err())
	}
	// The primary hands over to a caught-up secondary (each shard has
	// three electable members) and may not stand again for 30 s.
	sent := time.Now()
	err = shard.RunCommand(ctx, bson.D{{Key: "replSetStepDown", Value: 30}, {Key: "secondaryCatchUpPeriodSecs", Value: 10}}).Err()
	if err != nil && !mongo.IsNetworkError(err) { // a server before 4.2 closed the connections
		t.Fatalf("replSetStepDown on %s: %v", before.Primary, err)
	}
	var after helloPrimary
	tick := time.NewTicker(100 * time.Millisecond)
	for after.Me == "" || after.Me == before.Primary || !after.Writable {
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("no new primary on shard %s after the step-down of %s: %v", shards[0].ID, before.Primary, ctx.Err())
		}
		after = helloPrimary{}
		if err := shard.RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Decode(&after); err != nil {
			t.Logf("hello on shard %s: %v", shards[0].ID, err)
		}
	}
	tick.Stop()
	electedAt := time.Now()
	t.Logf("shard %s: primary %s stepped down, %s elected", shards[0].ID, before.Primary, after.Me)
	close(elected)
	wg.Wait()
	require.NoError(t, ctx.Err(), "transfers after the election: %d committed", afterElection.Load())
	assert.GreaterOrEqual(t, afterElection.Load(), int64(30), "transfers committed after the election")

	list := calls.list()
	for _, oc := range list {
		if r := refusal(oc.err); !errors.Is(r, twopc.ErrTooLate) { // too late: judged below, by its time
			assert.NoErrorf(t, r, "a %s refused during the failover: %v", oc.kind, oc.err)
		}
	}
	// A transfer whose insert the election held up past the mark's margin
	// meets lines already past its time, which was stamped before its
	// first send: refused, ErrTooLate, nothing moved, as PROTOCOL.md says a
	// failover may do. Only one stamped around the step-down may be.
	failover := func(id bson.ObjectID) bool {
		var d struct {
			Created time.Time `bson:"created"`
		}
		require.NoError(t, b.db.Collection("transactions").FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Decode(&d))
		return !d.Created.Before(sent.Add(-2*time.Second)) && !d.Created.After(electedAt.Add(2*time.Second))
	}
	counts := checkOutcomes(ctx, t, b, list)
	t.Logf("calls: %v", counts)
	for _, oc := range list {
		if oc.id.IsZero() {
			continue
		}
		got, err := b.c.Get(ctx, oc.id)
		require.NoError(t, err)
		if got.State != twopc.StateCanceled {
			continue
		}
		if got.Reason == "too_late" {
			assert.Truef(t, failover(oc.id), "%s %s too late, stamped away from the failover (%v)", oc.kind, oc.id.Hex(), oc.err)
			continue
		}
		// Else canceled only as recovery rolls back what its caller left
		// before any leg applied: never for a refused leg.
		assert.Containsf(t, []string{"stale_pending", "stale_initial"}, got.Reason,
			"%s %s canceled (%v)", oc.kind, oc.id.Hex(), oc.err)
		assert.Errorf(t, oc.err, "%s %s canceled, its call reported no error", oc.kind, oc.id.Hex())
	}
	auditTotal(ctx, t, b, total)
	b.checkSettled(opening)
}
