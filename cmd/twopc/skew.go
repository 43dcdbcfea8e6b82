package main

// Doctor's clock-skew check: on a sharded cluster, the clock of each shard
// that holds the log against the router's, judged by the rule the
// library's own check uses (internal/clockskew; PROTOCOL.md, Clocks).

import (
	"context"
	"fmt"
	"strings"

	"github.com/twopc/twopc/internal/clockskew"
	"github.com/twopc/twopc/internal/schema"
)

const checkClockSkew = "clock-skew"

// clockSkewReport is the clock-skew check's figures in doctor's JSON; nil
// where the log is not behind a router.
type clockSkewReport struct {
	Probe string `json:"probeCollection"`
	// Sharded says doctor sharded the probe collection in this run.
	Sharded bool        `json:"probeCollectionShardedNow"`
	Bound   float64     `json:"boundSeconds"`
	Verdict string      `json:"verdict"` // within, unsure, beyond or unmeasured (clockskew.Verdict)
	Shards  []shardSkew `json:"shards"`
	// Unmeasured are shards that hold the log but no chunk of the probe
	// collection.
	Unmeasured []string `json:"unmeasured,omitempty"`
}

// shardSkew is one shard's clock minus the router's: Skew ± Error, the
// interval [Low, High], in seconds.
type shardSkew struct {
	Shard string  `json:"shard"`
	Skew  float64 `json:"skewSeconds"`
	Error float64 `json:"errorSeconds"`
	Low   float64 `json:"lowSeconds"`
	High  float64 `json:"highSeconds"`
}

// clockSkew measures the skew of each shard that holds the log (cn.txns)
// against the router, sharding the probe collection first if it is not,
// and reports the figures, whether the largest is within the bound and
// every such shard was measured, and what it found.
func clockSkew(ctx context.Context, cn *conn) (*clockSkewReport, bool, string) {
	router, err := schema.Router(ctx, cn.txns.Database())
	switch {
	case err != nil:
		return nil, false, fmt.Sprintf("could not tell whether the server is a router: %v", err)
	case !router:
		return nil, true, "not a sharded cluster: one server's clock both stamps the commits and judges the statements' horizons; nothing to measure"
	}
	probe := cn.txns.Database().Collection(cn.txns.Name() + schema.ClockProbeSuffix)
	ns := schema.Namespace(probe)
	sk := &clockSkewReport{Probe: ns, Bound: seconds(clockskew.Bound(clockskew.PageHorizon, clockskew.CheckpointHorizon)), Shards: []shardSkew{}}
	if sk.Sharded, err = clockskew.Prepare(ctx, probe); err != nil {
		return sk, false, fmt.Sprintf("the probe collection %s could not be sharded: %v; shard it on {_id: \"hashed\"} as a user who may "+
			"(sh.shardCollection(\"%s\", {_id: \"hashed\"})), then run doctor again", ns, err, ns)
	}
	rep, err := clockskew.Probe(ctx, cn.txns, probe)
	if err != nil {
		return sk, false, fmt.Sprintf("the probe through the router failed: %v", err)
	}
	ok, detail := judgeSkew(rep, sk)
	return sk, ok, detail
}

// judgeSkew applies the rule to a probe's report (clockskew.Judge with
// the library's horizons), fills in sk's figures, and returns whether the
// check passes (every shard that holds the log measured and within the
// bound) and what it found. It reads no clock.
func judgeSkew(rep *clockskew.Report, sk *clockSkewReport) (bool, string) {
	ns := rep.Probe
	if !rep.Prepared {
		return false, fmt.Sprintf("the probe collection %s is not sharded on {_id: \"hashed\"}", ns)
	}
	j := clockskew.Judge(rep.Readings, clockskew.PageHorizon, clockskew.CheckpointHorizon)
	sk.Verdict, sk.Unmeasured = j.Verdict.String(), rep.Unreached
	figures := make([]string, len(rep.Readings))
	for i, r := range rep.Readings {
		sk.Shards = append(sk.Shards, shardSkew{Shard: r.Shard, Skew: seconds(r.Skew()), Error: seconds(r.Error()),
			Low: seconds(r.Low), High: seconds(r.High)})
		figures[i] = r.Shard + " " + r.String()
	}
	var said []string
	switch j.Verdict {
	case clockskew.Within:
		said = append(said, fmt.Sprintf("largest %v on shard %s, within the bound %v", j.Largest, j.Largest.Shard, j.Bound))
	case clockskew.Unsure:
		said = append(said, fmt.Sprintf("largest %v on shard %s: the round trips were too slow to show it within the bound %v; run doctor nearer the cluster",
			j.Largest, j.Largest.Shard, j.Bound))
	case clockskew.Beyond:
		said = append(said, fmt.Sprintf("largest %v on shard %s, PAST the bound %v: no money moves by it, but a shard behind the router by about "+
			"the page horizon lets a statement's next page pass over an entry committed there, and by about the checkpoint horizon lets a "+
			"checkpoint save a wrong sum; synchronize every member's clock (NTP)", j.Largest, j.Largest.Shard, j.Bound))
	default:
		said = append(said, "no shard that holds the log was measured")
	}
	said = append(said, fmt.Sprintf("shard minus router, per shard that holds the log: %s", strings.Join(figures, ", ")))
	if len(rep.Unreached) > 0 {
		said = append(said, fmt.Sprintf("not measured: %s, which hold the log but no chunk of %s (a shard added after it was sharded); "+
			"drop it, and doctor shards it anew over every shard", strings.Join(rep.Unreached, ", "), ns))
	}
	said = append(said, fmt.Sprintf("the bound is a quarter of the page tokens' horizon (%v; the checkpoints' is %v), by probe documents in %s",
		clockskew.PageHorizon, clockskew.CheckpointHorizon, ns)+sharded(sk.Sharded))
	return j.OK() && len(rep.Unreached) == 0, strings.Join(said, "; ")
}

// sharded says that doctor sharded the probe collection now.
func sharded(now bool) string {
	if now {
		return ", sharded on {_id: \"hashed\"} now"
	}
	return ""
}
