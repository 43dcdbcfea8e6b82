package twopc_test

import (
	"context"
	"flag"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/internal/mongotest"
)

var replayTransfers = flag.Int("replay.transfers", 80, "transfers per duplicate-and-delay run (make soak: 600)")

// writeRecorder records every write command its clients send, as sent, so
// that a test can deliver each again later: a duplicate, or a request that
// sat in the network while everything else happened.
type writeRecorder struct {
	mu       sync.Mutex
	commands []bson.Raw
}

var writeCommands = map[string]bool{"insert": true, "update": true, "delete": true, "findAndModify": true}

func (w *writeRecorder) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if !writeCommands[e.CommandName] {
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		w.commands = append(w.commands, append(bson.Raw(nil), e.Command...))
	}}
}

// recorded returns the commands recorded so far, in the order they were sent.
func (w *writeRecorder) recorded() []bson.Raw {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]bson.Raw(nil), w.commands...)
}

// database is b's database through a client that records its writes, with
// retryable writes off.
func (w *writeRecorder) database(b *bank) *mongo.Database {
	return mongotest.ConnectURI(b.t, b.server.URI, options.Client().SetRetryWrites(false).SetMonitor(w.monitor())).Database(b.db.Name())
}

// resend delivers cmd to db again, without the session and cluster fields
// the driver added to the original (it adds its own), and returns the
// server's answer. A write the server refuses is an answer, not a failure.
func resend(ctx context.Context, db *mongo.Database, cmd bson.Raw) error {
	elems, err := cmd.Elements()
	if err != nil {
		return err
	}
	var out bson.D
	for _, e := range elems {
		switch e.Key() {
		case "$db", "lsid", "$clusterTime", "txnNumber", "$readPreference", "apiVersion", "apiStrict", "apiDeprecationErrors":
			continue
		}
		out = append(out, bson.E{Key: e.Key(), Value: e.Value()})
	}
	return db.RunCommand(ctx, out).Err()
}

// resendAll delivers every command again, in the order recorded.
func resendAll(t *testing.T, db *mongo.Database, cmds []bson.Raw) {
	t.Helper()
	ctx := testCtx(t)
	for _, cmd := range cmds {
		_ = resend(ctx, db, cmd) // refusals are expected
	}
}

// accountState is what the checker compares before and after a replay.
type accountState struct {
	Balance int64           `bson:"balance"`
	Credit  int64           `bson:"pendingCredit"`
	Debit   int64           `bson:"pendingDebit"`
	Pending []bson.ObjectID `bson:"pendingTransactions"`
}

func (b *bank) accountStates() map[string]accountState {
	b.t.Helper()
	out := map[string]accountState{}
	accountStatesIn(b.t, b.db, "", out)
	require.NotEmpty(b.t, out)
	return out
}

// accountStatesIn adds to out the state of every account of db (not
// tombstones), keyed by prefix and id.
func accountStatesIn(t *testing.T, db *mongo.Database, prefix string, out map[string]accountState) {
	t.Helper()
	cur, err := db.Collection("accounts").Find(testCtx(t), bson.D{{Key: "tombstone", Value: bson.D{{Key: "$ne", Value: true}}}})
	require.NoError(t, err)
	var docs []struct {
		ID    string       `bson:"_id"`
		State accountState `bson:",inline"`
	}
	require.NoError(t, cur.All(testCtx(t), &docs))
	for _, d := range docs {
		out[prefix+d.ID] = d.State
	}
}

// ageFinal makes every final transaction look finished an hour ago, so that
// the next recovery pass removes their fences: a write delivered after that
// meets only the accounts' fence lines.
func (b *bank) ageFinal() { ageFinalIn(b.t, b.db) }

// ageFinalIn makes every final transaction in db's log look finished two
// hours ago.
func ageFinalIn(t *testing.T, db *mongo.Database) {
	t.Helper()
	_, err := db.Collection("transactions").UpdateMany(testCtx(t),
		bson.D{{Key: "state", Value: bson.D{{Key: "$in", Value: bson.A{"done", "canceled"}}}}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "lastModified", Value: time.Now().Add(-2 * time.Hour)}}}})
	require.NoError(t, err)
}

// unfenceAll recovers until every transaction is final, then moves every
// account's fence line (tombstones' too) past the latest of them, as the
// next apply or rollback on each does once the low-water mark has passed
// them: every fence is gone, and only the lines refuse their legs.
func (b *bank) unfenceAll() {
	b.t.Helper()
	for i := 0; i < 5; i++ {
		b.backdateAll(time.Hour)
		b.ageFinal()
		b.recoverAll()
	}
	var latest time.Time
	for _, d := range b.txns() {
		require.Truef(b.t, d.State.Final() || d.State == twopc.StateHeld, "transaction %s is %s after five recovery passes", d.ID.Hex(), d.State)
		if d.Created.After(latest) {
			latest = d.Created
		}
	}
	b.moveLine(latest, accountIDs(b.t, b.db.Collection("accounts"))...)
	for _, id := range accountIDs(b.t, b.db.Collection("accounts")) {
		require.Emptyf(b.t, b.account(id).Fenced, "fences on %v", id)
	}
}

// accountIDs returns the _id of every document in accounts.
func accountIDs(t *testing.T, accounts *mongo.Collection) []any {
	t.Helper()
	var docs []struct {
		ID any `bson:"_id"`
	}
	cur, err := accounts.Find(testCtx(t), bson.D{})
	require.NoError(t, err)
	require.NoError(t, cur.All(testCtx(t), &docs))
	ids := make([]any, len(docs))
	for i, d := range docs {
		ids[i] = d.ID
	}
	return ids
}

// TestDuplicateAndDelay records every write command a simulation run sends
// (crashes, stalls, cancels racing owners, recoverers of other
// applications, lost replies), lets everything finish and recovery remove
// every fence, then delivers every recorded command again, as a network
// that duplicated and delayed each of them would; then recovers and checks
// that no balance moved, no marker is left, and every transaction is final.
func TestDuplicateAndDelay(t *testing.T) {
	seeds := simSeeds()
	for _, seed := range seeds[:min(2, len(seeds))] {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			b := newFaultBank(t)
			cfg := defaultSimConfig(seed)
			cfg.transfers = *replayTransfers
			cfg.clientTimeout = 2 * time.Second
			cfg.faults = []mongotest.Fault{
				{Kind: mongotest.DropAfterForward, Probability: 0.01, Seed: int64(seed)},
				{Kind: mongotest.DropBeforeForward, Probability: 0.01, Seed: int64(seed) + 1},
			}
			cfg.recorder = &writeRecorder{}
			stats := runSimulation(t, &simBank{bank: b, assets: true}, cfg) // assets and limits in the mix
			t.Logf("seed %d: %s", seed, stats)

			b.unfenceAll()
			before := b.accountStates()
			cmds := cfg.recorder.recorded()
			require.NotEmpty(t, cmds)
			resendAll(t, b.db, cmds)
			b.backdateAll(time.Hour)
			b.recoverAll()
			require.Equal(t, before, b.accountStates(), "a replayed write moved money (%d commands replayed)", len(cmds))
			for _, d := range b.txns() {
				require.Truef(t, d.State.Final(), "transaction %s is %s after the replay", d.ID.Hex(), d.State)
			}
			t.Logf("seed %d: %d write commands delivered again, no balance moved", seed, len(cmds))
		})
	}
}
