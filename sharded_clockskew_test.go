package twopc_test

// The shards' clock skew, measured through the router (a sharded cluster
// only; see sharded_explain_test.go).

import (
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/internal/clockskew"
	"github.com/twopc/twopc/internal/mongotest"
	"github.com/twopc/twopc/internal/schema"
)

// TestShardedClockSkew: the probe through the router, on a log sharded on
// {_id: "hashed"} over the cluster's shards. Before the probe collection
// is sharded the probe writes nothing and says so; Prepare shards it,
// once. Then the probe gives one reading per shard that holds the log,
// each sane: an interval narrower than a second around a skew smaller
// than a second (one host runs every member here), not past the bound;
// each from a probe document that the router's explain places on that
// very shard (the hash and the chunks agree with the server's); one
// document a shard, however often probed. A coordinator on the log then
// measures once, in the background, and says at info level that every
// shard is within the bound, naming each.
func TestShardedClockSkew(t *testing.T) {
	mongotest.RequireSharded(t)
	ctx := shardedCtx(t)
	b := newBank(t)
	log := b.db.Collection("transactions")
	probe := b.db.Collection("transactions" + schema.ClockProbeSuffix)

	rep, err := clockskew.Probe(ctx, log, probe)
	require.NoError(t, err)
	assert.True(t, rep.Router)
	assert.False(t, rep.Prepared, "the probe collection is not sharded yet")
	assert.Empty(t, rep.Readings)
	names, err := b.db.ListCollectionNames(ctx, bson.D{{Key: "name", Value: probe.Name()}})
	require.NoError(t, err)
	assert.Empty(t, names, "nothing written before it is sharded")

	made, err := clockskew.Prepare(ctx, probe)
	require.NoError(t, err)
	assert.True(t, made)
	made, err = clockskew.Prepare(ctx, probe)
	require.NoError(t, err)
	assert.False(t, made, "sharded already")

	perShard, err := mongotest.ChunksPerShard(ctx, b.db.Client(), schema.Namespace(log))
	require.NoError(t, err)
	logShards := slices.Sorted(maps.Keys(perShard))
	require.GreaterOrEqual(t, len(logShards), 2, "the harness spreads the log over the shards")

	for range 2 { // the second probe upserts the same documents
		rep, err = clockskew.Probe(ctx, log, probe)
		require.NoError(t, err)
	}
	require.True(t, rep.Prepared)
	assert.Equal(t, logShards, rep.LogShards)
	assert.Empty(t, rep.Unreached)
	require.Len(t, rep.Readings, len(logShards), "one reading per shard that holds the log")
	for i, r := range rep.Readings {
		assert.Equal(t, logShards[i], r.Shard)
		assert.LessOrEqual(t, r.Low, r.High, "%s", r.Shard)
		assert.Less(t, r.High-r.Low, time.Second, "%s: round trips", r.Shard)
		assert.Less(t, max(r.Skew(), -r.Skew()), time.Second, "%s: %v", r.Shard, r)
		var out bson.Raw
		require.NoError(t, b.db.RunCommand(ctx, bson.D{
			{Key: "explain", Value: bson.D{{Key: "find", Value: probe.Name()}, {Key: "filter", Value: bson.D{{Key: "_id", Value: r.ID}}}}},
			{Key: "verbosity", Value: "queryPlanner"},
		}).Decode(&out))
		route, err := routingOf(out)
		require.NoError(t, err, "%s", out)
		assert.Equal(t, []string{r.Shard}, route.shards, "the probe document %d of shard %s", r.ID, r.Shard)
		t.Logf("shard %s: %v (shard minus router), probe document %d", r.Shard, r, r.ID)
	}
	j := clockskew.Judge(rep.Readings, clockskew.PageHorizon, clockskew.CheckpointHorizon)
	assert.NotEqual(t, clockskew.Beyond, j.Verdict, "largest %v on %s, bound %v", j.Largest, j.Largest.Shard, j.Bound)
	n, err := probe.CountDocuments(ctx, bson.D{})
	require.NoError(t, err)
	assert.Equal(t, int64(len(logShards)), n, "one probe document a shard")

	h := &kept{ch: make(chan slog.Record, 100)}
	c := b.coordinator(twopc.WithLogger(slog.New(h)))
	b.open(map[string]int64{"A": 100, "B": 0})
	_, err = c.Transfer(ctx, "A", "B", 10)
	require.NoError(t, err)
	require.True(t, twopc.SkewCheckStarted(c))
	select {
	case <-twopc.SkewCheckEnded(c):
	case <-ctx.Done():
		t.Fatal("the check did not end")
	}
	var said []slog.Record
	for _, r := range h.all() {
		if strings.Contains(r.Message, "clock skew") {
			said = append(said, r)
		}
	}
	require.Len(t, said, 1, "one line")
	assert.Equal(t, slog.LevelInfo, said[0].Level, said[0].Message)
	assert.Contains(t, said[0].Message, "within the bound")
	var figures string
	said[0].Attrs(func(a slog.Attr) bool {
		if a.Key == "shards" {
			figures = a.Value.String()
		}
		return true
	})
	for _, s := range logShards {
		assert.Contains(t, figures, s+" ", "the line gives each shard's figure")
	}
	n, err = probe.CountDocuments(ctx, bson.D{})
	require.NoError(t, err)
	assert.Equal(t, int64(len(logShards)), n, "the coordinator's probe used the same documents")
}
