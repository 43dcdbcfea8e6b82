package main

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc/internal/native"
)

func TestDoctor(t *testing.T) {
	f := newFixture(t)
	r := f.run("doctor", "--json")
	require.Equal(t, exitOK, r.code, r.stdout+r.stderr)
	var rep doctorReport
	r.decode(t, &rep)
	require.True(t, rep.OK)
	checks := map[string]checkEntry{}
	for _, c := range rep.Checks {
		checks[c.Name] = c
	}
	for _, name := range []string{checkInc, checkClaim, checkLocalTime, checkReadMajority, checkWriteMajority, checkScratchDrop, checkShardKeys, checkClockSkew} {
		require.True(t, checks[name].OK, "%s: %s", name, checks[name].Detail)
	}
	require.Contains(t, checks[checkInc].Detail, "ended at 1000")
	require.Contains(t, checks[checkClaim].Detail, "1 of 20")
	hasTxns, err := native.Supported(f.ctx, f.db)
	require.NoError(t, err)
	require.Equal(t, hasTxns, checks[checkTransactions].OK, checks[checkTransactions].Detail)
	require.NotEmpty(t, rep.Server.Version)
	// The shard keys are read only through a router: elsewhere there are none.
	if rep.Server.Topology == "sharded cluster (mongos)" {
		require.Contains(t, checks[checkShardKeys].Detail, f.db.Name()+".transactions: ")
	} else {
		require.Equal(t, "not a sharded cluster: no shard keys", checks[checkShardKeys].Detail)
	}
	// The shards' clocks are measured only through a router: one figure per
	// shard that holds the log, within the bound. Elsewhere: nothing to measure.
	if rep.Server.Topology == "sharded cluster (mongos)" {
		require.NotNil(t, rep.ClockSkew)
		require.Equal(t, "within", rep.ClockSkew.Verdict, checks[checkClockSkew].Detail)
		require.NotEmpty(t, rep.ClockSkew.Shards)
		require.Empty(t, rep.ClockSkew.Unmeasured)
		require.Contains(t, checks[checkClockSkew].Detail, "within the bound 250ms")
	} else {
		require.Nil(t, rep.ClockSkew)
		require.Contains(t, checks[checkClockSkew].Detail, "not a sharded cluster")
		require.Contains(t, checks[checkClockSkew].Detail, "nothing to measure")
	}

	// The scratch collection is gone.
	names, err := f.db.ListCollectionNames(f.ctx, bson.D{})
	require.NoError(t, err)
	for _, n := range names {
		require.NotContains(t, n, "twopc_doctor")
	}

	r = f.run("doctor")
	require.Equal(t, exitOK, r.code, r.stdout+r.stderr)
	require.Contains(t, r.stdout, "The server gives what twopc needs.")
}
