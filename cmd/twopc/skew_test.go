package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/twopc/twopc/internal/clockskew"
)

// TestUnitDoctorJudgesClockSkew: doctor's clock-skew check on probe
// reports injected (the probe itself runs only through a sharded
// cluster's router: TestShardedClockSkew, and TestDoctor in the sharded
// job). Shards within 250 ms pass; a shard 400 ms behind, a reading too
// coarse to tell, a shard that holds the log unmeasured, or a probe
// collection not sharded fail the check (doctor's exit status 1), each
// saying why; the figures are in the JSON.
func TestUnitDoctorJudgesClockSkew(t *testing.T) {
	read := func(shard string, skew, err time.Duration) clockskew.Reading {
		return clockskew.Reading{Shard: shard, Low: skew - err, High: skew + err}
	}
	report := func(unreached []string, readings ...clockskew.Reading) *clockskew.Report {
		return &clockskew.Report{Router: true, Prepared: true, Probe: "bank.transactions_clockprobe",
			LogShards: []string{"s0", "s1"}, Readings: readings, Unreached: unreached}
	}
	cases := []struct {
		name string
		rep  *clockskew.Report
		ok   bool
		says []string
	}{
		{"within", report(nil, read("s0", 2*time.Millisecond, time.Millisecond), read("s1", -3*time.Millisecond, time.Millisecond)),
			true, []string{"largest -3ms ±1ms on shard s1, within the bound 250ms", "s0 +2ms ±1ms, s1 -3ms ±1ms"}},
		{"behind", report(nil, read("s0", 2*time.Millisecond, time.Millisecond), read("s1", -400*time.Millisecond, time.Millisecond)),
			false, []string{"largest -400ms ±1ms on shard s1, PAST the bound 250ms", "NTP"}},
		{"too coarse", report(nil, read("s0", 200*time.Millisecond, 100*time.Millisecond)),
			false, []string{"too slow to show it within the bound"}},
		{"a shard unmeasured", report([]string{"s1"}, read("s0", 2*time.Millisecond, time.Millisecond)),
			false, []string{"not measured: s1", "drop it"}},
		{"not sharded", &clockskew.Report{Router: true, Probe: "bank.transactions_clockprobe"},
			false, []string{"not sharded on {_id: \"hashed\"}"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sk := &clockSkewReport{}
			ok, detail := judgeSkew(tc.rep, sk)
			assert.Equal(t, tc.ok, ok, detail)
			for _, s := range tc.says {
				assert.Contains(t, detail, s)
			}
			assert.Len(t, sk.Shards, len(tc.rep.Readings))
		})
	}
	sk := &clockSkewReport{}
	judgeSkew(report(nil, read("s0", -400*time.Millisecond, 2*time.Millisecond)), sk)
	assert.Equal(t, "beyond", sk.Verdict)
	assert.Equal(t, []shardSkew{{Shard: "s0", Skew: -0.4, Error: 0.002, Low: -0.402, High: -0.398}}, sk.Shards)
}
