package twopc_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/internal/mongotest"
	"github.com/twopc/twopc/internal/schema"
)

// TestClockSkewCheckOnlyBehindARouter: a coordinator checks the shards'
// clock skew only when its log is behind a sharded cluster's router
// (mongotest.Sharded: the GitHub workflow's sharded job). Elsewhere a
// transfer and a statement start nothing and log nothing of it; behind a
// router the check runs once, in the background, and, the probe
// collection not being sharded (twopc doctor shards it; a coordinator
// never does), says so at info level. Either way the coordinator makes no
// probe collection.
func TestClockSkewCheckOnlyBehindARouter(t *testing.T) {
	ctx := testCtx(t)
	h := &kept{ch: make(chan slog.Record, 100)}
	b := newBank(t, twopc.WithLogger(slog.New(h)))
	b.open(map[string]int64{"A": 100, "B": 0})
	_, err := b.c.Transfer(ctx, "A", "B", 10)
	require.NoError(t, err)
	_, err = b.c.Statement(ctx, "", "A", twopc.StatementQuery{})
	require.NoError(t, err)

	sharded := mongotest.Sharded()
	require.Equal(t, sharded, twopc.SkewCheckStarted(b.c), "the check runs behind a router, and only there")
	if sharded {
		select {
		case <-twopc.SkewCheckEnded(b.c):
		case <-ctx.Done():
			t.Fatal("the check did not end")
		}
	}
	var said []slog.Record
	for _, r := range h.all() {
		if strings.Contains(r.Message, "clock skew") {
			said = append(said, r)
		}
	}
	if sharded {
		require.Len(t, said, 1, "one line")
		assert.Equal(t, slog.LevelInfo, said[0].Level)
		assert.Contains(t, said[0].Message, "not measured")
	} else {
		assert.Empty(t, said)
	}
	names, err := b.db.ListCollectionNames(ctx, bson.D{{Key: "name", Value: "transactions" + schema.ClockProbeSuffix}})
	require.NoError(t, err)
	assert.Empty(t, names, "a coordinator makes no probe collection")

	require.NoError(t, b.c.Close(ctx))
	select {
	case <-twopc.SkewCheckEnded(b.c):
	case <-time.After(time.Minute):
		t.Fatal("Close left the check running")
	}
}
