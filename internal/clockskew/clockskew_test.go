package clockskew

// The pure parts, tested without a server: go test -run Unit
// ./internal/clockskew/. The probe through a router is tested in the root
// package's TestShardedClockSkew (a sharded cluster only).

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

const ms = time.Millisecond

// TestUnitBoundIsAQuarterOfTheShorterHorizon: the skew allowed is a
// quarter of the shorter horizon, whichever order they come in: 250 ms
// for the page tokens' second and the checkpoints' minute.
func TestUnitBoundIsAQuarterOfTheShorterHorizon(t *testing.T) {
	assert.Equal(t, 250*ms, Bound(PageHorizon, CheckpointHorizon))
	assert.Equal(t, 250*ms, Bound(CheckpointHorizon, PageHorizon))
	assert.Equal(t, 15*time.Second, Bound(CheckpointHorizon))
	assert.Equal(t, 25*ms, Bound(100*ms, CheckpointHorizon), "a horizon a test shortened")
	assert.Zero(t, Bound())
	assert.Zero(t, Bound(0, time.Second))
}

// TestUnitJudgeInjectedSkews: the rule on readings injected, either side
// of the router's clock: every interval inside the bound is Within; one
// that reaches past it without lying past it is Unsure; one wholly past
// it is Beyond, whatever the others; none is Unmeasured. Largest is the
// reading that reaches farthest from zero, in either direction.
func TestUnitJudgeInjectedSkews(t *testing.T) {
	h := []time.Duration{PageHorizon, CheckpointHorizon}
	read := func(shard string, skew, err time.Duration) Reading {
		return Reading{Shard: shard, Low: skew - err, High: skew + err}
	}
	cases := []struct {
		name     string
		readings []Reading
		verdict  Verdict
		largest  string
	}{
		{"none", nil, Unmeasured, ""},
		{"close", []Reading{read("s0", 2*ms, ms), read("s1", -3*ms, ms)}, Within, "s1"},
		{"at the bound", []Reading{read("s0", 249*ms, ms)}, Within, "s0"},
		{"ahead past it", []Reading{read("s0", 1*ms, ms), read("s1", 300*ms, 10*ms)}, Beyond, "s1"},
		{"behind past it", []Reading{read("s0", -400*ms, 5*ms), read("s1", 1*ms, ms)}, Beyond, "s0"},
		{"a second behind", []Reading{read("s0", -time.Second, ms)}, Beyond, "s0"},
		{"too coarse to tell", []Reading{read("s0", 200*ms, 100*ms)}, Unsure, "s0"},
		{"coarse, and one past", []Reading{read("s0", 0, 300*ms), read("s1", 260*ms, 5*ms)}, Beyond, "s0"},
		{"coarse round trips around zero", []Reading{read("s0", 0, 400*ms)}, Unsure, "s0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			j := Judge(tc.readings, h...)
			assert.Equal(t, tc.verdict, j.Verdict)
			assert.Equal(t, 250*ms, j.Bound)
			assert.Equal(t, tc.largest, j.Largest.Shard)
			assert.Equal(t, tc.verdict == Within, j.OK())
		})
	}
	// The same skews judged against horizons a test shortened.
	j := Judge([]Reading{read("s0", 30*ms, ms)}, 100*ms, time.Second)
	assert.Equal(t, Beyond, j.Verdict, "30 ms past a quarter of 100 ms")
}

// TestUnitIntervalAccountsForBothRoundTrips: a hello that took 4 ms and a
// write that took 2 ms, 10 ms after it, on a shard 50 ms ahead of the
// router: the interval holds the true skew, and is as wide as the two
// round trips and each clock's millisecond.
func TestUnitIntervalAccountsForBothRoundTrips(t *testing.T) {
	base := time.Now() // the host's monotonic clock
	wall := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	helloSent, helloBack := base, base.Add(4*ms)
	router := wall.Add(2 * ms) // the router read its clock mid-way
	writeSent, writeBack := base.Add(14*ms), base.Add(16*ms)
	stamped := wall.Add(15*ms + 50*ms) // the shard's clock mid-write, 50 ms ahead
	r := Interval(helloSent, helloBack, router, writeSent, writeBack, stamped)
	assert.LessOrEqual(t, r.Low, 50*ms)
	assert.GreaterOrEqual(t, r.High, 50*ms)
	assert.Equal(t, 4*ms+2*ms+2*ms, r.High-r.Low, "both round trips and each clock's millisecond")
	assert.Equal(t, 46*ms, r.Low)
	assert.Equal(t, 54*ms, r.High)
	assert.Equal(t, 50*ms, r.Skew())
	assert.Equal(t, 4*ms, r.Error())
	assert.Equal(t, "+50ms ±4ms", r.String())

	// Behind: the same round trips, the shard 700 ms behind.
	r = Interval(helloSent, helloBack, router, writeSent, writeBack, wall.Add(15*ms-700*ms))
	assert.Equal(t, -700*ms, r.Skew())
	assert.Equal(t, Beyond, Judge([]Reading{r}, PageHorizon, CheckpointHorizon).Verdict)
}

// TestUnitHashedLongIsTheServers: the hash is MongoDB's hashed index's:
// the server's own startup check (hasher.cpp) wants 42 to hash to
// -944302157085130861.
func TestUnitHashedLongIsTheServers(t *testing.T) {
	assert.Equal(t, int64(-944302157085130861), HashedLong(42))
	assert.NotEqual(t, HashedLong(1), HashedLong(2))
}

// chunk is a config.chunks document of a collection sharded on
// {_id: "hashed"}; nil for min or max is MinKey or MaxKey.
func chunk(t *testing.T, shard string, lo, hi *int64) bson.Raw {
	t.Helper()
	end := func(v *int64, inf any) bson.D {
		if v == nil {
			return bson.D{{Key: "_id", Value: inf}}
		}
		return bson.D{{Key: "_id", Value: *v}}
	}
	raw, err := bson.Marshal(bson.D{
		{Key: "_id", Value: bson.NewObjectID()},
		{Key: "shard", Value: shard},
		{Key: "min", Value: end(lo, bson.MinKey{})},
		{Key: "max", Value: end(hi, bson.MaxKey{})},
	})
	require.NoError(t, err)
	return raw
}

// TestUnitProbeIDsHashIntoTheirShard: of chunks split at 0 and at 2^62
// over two shards, each shard that holds the log gets the first _id that
// hashes into one of its chunks; a shard with no chunk is unreached, and
// a shard that does not hold the log gets none.
func TestUnitProbeIDsHashIntoTheirShard(t *testing.T) {
	zero, high := int64(0), int64(1)<<62
	var chunks []Chunk
	for _, raw := range []bson.Raw{
		chunk(t, "s0", nil, &zero),
		chunk(t, "s1", &zero, &high),
		chunk(t, "s2", &high, nil),
	} {
		c, err := parseChunk(raw)
		require.NoError(t, err)
		chunks = append(chunks, c)
	}
	ids, unreached := probeIDs(chunks, []string{"s0", "s1", "s3"})
	assert.Equal(t, []string{"s3"}, unreached)
	require.Len(t, ids, 2)
	assert.Less(t, HashedLong(ids["s0"]), int64(0))
	h := HashedLong(ids["s1"])
	assert.True(t, h >= 0 && h < high, "%d", h)
	for n := int64(0); n < ids["s1"]; n++ {
		h := HashedLong(n)
		assert.False(t, h >= 0 && h < high, "%d hashes into s1 before %d", n, ids["s1"])
	}

	// The ends: MinKey holds the least long, MaxKey the greatest.
	assert.True(t, chunks[0].holds(math.MinInt64))
	assert.False(t, chunks[0].holds(0))
	assert.True(t, chunks[1].holds(0))
	assert.True(t, chunks[2].holds(math.MaxInt64))
}

// TestUnitParseChunkRefusesOtherKeys: a chunk whose bounds are not longs
// (a collection not sharded on a hashed key) is refused.
func TestUnitParseChunkRefusesOtherKeys(t *testing.T) {
	raw, err := bson.Marshal(bson.D{
		{Key: "shard", Value: "s0"},
		{Key: "min", Value: bson.D{{Key: "_id", Value: "a"}}},
		{Key: "max", Value: bson.D{{Key: "_id", Value: bson.MaxKey{}}}},
	})
	require.NoError(t, err)
	_, err = parseChunk(raw)
	assert.Error(t, err)
}

// TestUnitHashedIDEntry: only an entry sharded on {_id: "hashed"} is a
// prepared probe collection; an unsharded one MongoDB 8.0 tracks, a
// dropped one and another key are not.
func TestUnitHashedIDEntry(t *testing.T) {
	key := func(d bson.D) bson.Raw {
		raw, err := bson.Marshal(d)
		require.NoError(t, err)
		return raw
	}
	hashed := key(bson.D{{Key: "_id", Value: "hashed"}})
	assert.True(t, (&catalogEntry{Key: hashed}).hashedID())
	assert.False(t, (*catalogEntry)(nil).hashedID())
	assert.False(t, (&catalogEntry{Key: hashed, Dropped: true}).hashedID())
	assert.False(t, (&catalogEntry{Key: key(bson.D{{Key: "_id", Value: int32(1)}}), Unsplittable: true}).hashedID())
	assert.False(t, (&catalogEntry{Key: key(bson.D{{Key: "_id", Value: int32(1)}})}).hashedID())
	assert.False(t, (&catalogEntry{Key: key(bson.D{{Key: "a", Value: "hashed"}})}).hashedID())
}
