package twopc_test

import (
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
// others run. It returns a function that turns the fail point off and
// requires that it failed a command; it is turned off when the test ends
// too.
func (b *bank) failNext(coll string, statements ...int) (fired func()) {
	b.t.Helper()
	data := bson.D{
		{Key: "failCommands", Value: bson.A{"update"}},
		{Key: "namespace", Value: b.db.Name() + "." + coll},
		{Key: "errorCode", Value: 91},
		{Key: "errorLabels", Value: bson.A{"RetryableWriteError"}},
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
