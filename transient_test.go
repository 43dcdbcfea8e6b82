package twopc_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc"
)

// failNext makes the next update command on b's collection coll fail once
// with a primary's step-down (ShutdownInProgress, 91, labelled
// RetryableWriteError), through MongoDB's test fail point failCommand
// (a mongod started with enableTestCommands answers it; so does the dev
// server's front). With statements, only the statements at those indexes
// fail, each with a write error of its own (the dev server's
// writeErrorIndexes: see examples/devserver/failpoint.go), as a mongos
// reports a shard's failover for some statements of a command; the
// others run (a real mongod, which has no such field, fails the whole
// command instead). It returns a function that turns the fail point off and
// requires that it failed a command; it is turned off when the test ends
// too.
func (b *bank) failNext(coll string, statements ...int) (fired func()) {
	b.t.Helper()
	return b.failNextWith(coll, 91, bson.A{"RetryableWriteError"}, statements...)
}

// failNextWith is failNext with the error code and labels given.
// devServer reports whether the bank's server is the dev server, by what
// the server says of itself (FerretDB's buildInfo names its version), not
// by how the harness reached it: MONGODB_URI may name a dev server too.
// Its failCommand honours writeErrorIndexes; MongoDB's has none.
func (b *bank) devServer() bool {
	b.t.Helper()
	var info bson.M
	require.NoError(b.t, b.db.Client().Database("admin").RunCommand(testCtx(b.t), bson.D{{Key: "buildInfo", Value: 1}}).Decode(&info))
	_, ok := info["ferretdbVersion"]
	return ok
}

func (b *bank) failNextWith(coll string, code int32, labels bson.A, statements ...int) (fired func()) {
	b.t.Helper()
	data := bson.D{
		{Key: "failCommands", Value: bson.A{"update"}},
		{Key: "namespace", Value: b.db.Name() + "." + coll},
		{Key: "errorCode", Value: code},
		{Key: "errorLabels", Value: labels},
	}
	if len(statements) > 0 {
		data = append(data, bson.E{Key: "writeErrorIndexes", Value: statements})
	}
	admin := b.db.Client().Database("admin")
	configure := func(mode any, data bson.D) int64 {
		var reply struct {
			Count int64 `bson:"count"`
		}
		require.NoError(b.t, admin.RunCommand(testCtx(b.t), bson.D{
			{Key: "configureFailPoint", Value: "failCommand"},
			{Key: "mode", Value: mode},
			{Key: "data", Value: data},
		}).Decode(&reply))
		return reply.Count // the times it was entered so far
	}
	before := configure(bson.D{{Key: "times", Value: 1}}, data)
	b.t.Cleanup(func() {
		_ = admin.RunCommand(testCtx(b.t), bson.D{{Key: "configureFailPoint", Value: "failCommand"}, {Key: "mode", Value: "off"}}).Err()
	})
	return func() {
		b.t.Helper()
		assert.Equal(b.t, before+1, configure("off", nil), "the fail point failed one %s command", coll)
	}
}

// TestTransientApplyErrorIsRetried: a transfer whose apply command fails
// once with a primary's step-down, as the command's error or as one
// statement's write error, completes and moves the money exactly once: it
// is neither canceled with ErrInvalidAccount nor applied twice.
func TestTransientApplyErrorIsRetried(t *testing.T) {
	for name, statements := range map[string][]int{
		"command":          nil,
		"debit statement":  {0},
		"credit statement": {1},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := testCtx(t)
			b := newBank(t)
			b.open(map[string]int64{"A": 100, "B": 0})
			fired := b.failNext("accounts", statements...)
			txn, err := b.c.Transfer(ctx, "A", "B", 30)
			fired()
			require.NoError(t, err, "a transient error is retried, never a refusal")
			assert.True(t, txn.State.Committed(), "state %s", txn.State)
			require.NoError(t, b.c.Settle(ctx))
			b.checkSettled(map[string]int64{"A": 100, "B": 0})
			assert.Equal(t, int64(70), b.balance("A"), "debited once")
			assert.Equal(t, int64(30), b.balance("B"), "credited once")
		})
	}
}

// TestTransientGroupCommitErrorIsRetried: a failover in the middle of a
// group commit (the update of the transactions that commits several
// transfers together fails once, as a whole or for its middle statement)
// leaves every transfer committed exactly once, with the balances right.
func TestTransientGroupCommitErrorIsRetried(t *testing.T) {
	for name, statements := range map[string][]int{
		"command":          nil,
		"middle statement": {1},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := testCtx(t)
			b := newBank(t)
			b.open(map[string]int64{"A": 1000, "B": 0})
			g := newCommitGate()
			c, idx, waiting := b.gatedCoordinator(g, nil)

			g.holdNext("alone")
			r1 := transferAsync(ctx, c, 1)
			g.waitHeld(t, "alone")
			results := map[int64]<-chan transferResult{1: r1}
			for v := int64(2); v <= 4; v++ {
				results[v] = transferAsync(ctx, c, v)
			}
			for range 3 {
				waitFor(t, waiting, "a commit waits for the group")
			}
			fired := b.failNext("transactions", statements...)
			g.release <- struct{}{}

			requireCommitted(t, results)
			fired()
			_, groups := g.counts()
			require.NotEmpty(t, groups, "a group write")
			assert.Equal(t, 3, groups[0], "2, 3 and 4 in one group")
			for v := int64(1); v <= 4; v++ {
				assert.Equal(t, 1, idx.hookCalls(v), "%d committed once", v)
				assert.True(t, b.txn(idx.id(v)).State.Committed(), "%d committed", v)
			}
			require.NoError(t, c.Settle(ctx))
			b.checkSettled(map[string]int64{"A": 1000, "B": 0})
			assert.Equal(t, int64(1+2+3+4), b.balance("B"))
			assert.Equal(t, int64(1000-10), b.balance("A"))
			assert.Equal(t, twopc.StateDone, b.txn(idx.id(3)).State, "settled")
		})
	}
}

// TestMoveToDoneStatementErrors: the move to done of a batch is one
// statement per transaction, and each statement's error is its own. A
// transient error of the middle statement is retried (every transaction
// done); a refusal of it leaves that transaction alone applied, for the
// settle to finish later, and the others done.
func TestMoveToDoneStatementErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		code    int32
		labels  bson.A
		applied int
	}{
		"transient": {91, bson.A{"RetryableWriteError"}, 0},
		"refused":   {2, bson.A{}, 1},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := testCtx(t)
			b := newBank(t)
			b.open(map[string]int64{"A": 1000, "B": 0})
			var once sync.Once
			var fired func()
			hooked := b.coordinator(twopc.WithSyncSettle(), twopc.WithStepHook(func(_ context.Context, s twopc.Step, _ *twopc.Txn) error {
				if s == twopc.StepDone {
					once.Do(func() { fired = b.failNextWith("transactions", tc.code, tc.labels, 1) })
				}
				return nil
			}))
			reqs := []twopc.TransferRequest{{Source: "A", Destination: "B", Value: 1}, {Source: "A", Destination: "B", Value: 2}, {Source: "A", Destination: "B", Value: 3}}
			res, err := hooked.TransferBatch(ctx, reqs)
			require.NoError(t, err)
			require.NotNil(t, fired, "the batch was moved to done")
			fired()
			applied := tc.applied
			if !b.devServer() && applied > 0 {
				// MongoDB's failCommand has no writeErrorIndexes: the
				// whole command is refused, and every transaction of it
				// left applied.
				applied = len(reqs)
			}
			states := map[twopc.State]int{}
			for i, r := range res {
				require.NotNilf(t, r.Txn, "transfer %d: %v", i, r.Err)
				states[b.txn(r.Txn.ID).State]++
			}
			assert.Equal(t, filterZero(map[twopc.State]int{twopc.StateDone: len(reqs) - applied, twopc.StateApplied: applied}), filterZero(states), "one statement's error is its own transaction's")
			require.NoError(t, hooked.Settle(ctx))
			b.recoverAll()
			b.checkSettled(map[string]int64{"A": 1000, "B": 0})
			assert.Equal(t, int64(6), b.balance("B"))
			for _, r := range res {
				assert.Equal(t, twopc.StateDone, b.txn(r.Txn.ID).State)
			}
		})
	}
}

// filterZero drops the states counted zero times.
func filterZero(m map[twopc.State]int) map[twopc.State]int {
	for k, v := range m {
		if v == 0 {
			delete(m, k)
		}
	}
	return m
}
