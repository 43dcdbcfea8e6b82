package twopc

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/twopc/twopc/internal/clockskew"
)

// unitSkew is a coordinator's clock skew check with the default horizons
// whose probe is probe, logging to the handler returned.
func unitSkew(probe func(context.Context) (*clockskew.Report, error)) (*skewCheck, *said) {
	h := &said{}
	return &skewCheck{probe: probe, page: statementHorizon, ckpt: checkpointHorizon,
		logger: slog.New(h), done: make(chan struct{})}, h
}

// ended waits for the check to end, failing the test after a minute.
func ended(t *testing.T, s *skewCheck) {
	t.Helper()
	select {
	case <-s.done:
	case <-time.After(time.Minute):
		t.Fatal("the check did not end")
	}
}

// reading is a probe's reading of shard, skew ± err.
func reading(shard string, skew, err time.Duration) clockskew.Reading {
	return clockskew.Reading{Shard: shard, Low: skew - err, High: skew + err}
}

// TestUnitClockSkewCheckSays: what the check logs for each probe's
// outcome, skews injected: a shard 400 ms behind the router is one
// warning naming it and its figure, saying what may go wrong and that no
// money moves by it; shards within the bound are one info line; a probe
// collection not sharded, or a probe that failed, is one info line that
// says how to measure; not a router, nothing.
func TestUnitClockSkewCheckSays(t *testing.T) {
	prepared := func(readings ...clockskew.Reading) *clockskew.Report {
		return &clockskew.Report{Router: true, Prepared: true, Probe: "db.transactions_clockprobe",
			LogShards: []string{"s0", "s1"}, Readings: readings}
	}
	cases := []struct {
		name  string
		rep   *clockskew.Report
		err   error
		warn  []string // what the one warning says, if one is wanted
		info  []string // what the one info line says, if one is wanted
		quiet bool     // nothing at all
	}{
		{name: "a shard behind", rep: prepared(reading("s0", -400*time.Millisecond, time.Millisecond), reading("s1", 2*time.Millisecond, time.Millisecond)),
			warn: []string{"no money moves by it", "page", "checkpoint", "NTP"}},
		{name: "too coarse to tell", rep: prepared(reading("s0", 200*time.Millisecond, 100*time.Millisecond)),
			warn: []string{"may be"}},
		{name: "within", rep: prepared(reading("s0", -3*time.Millisecond, time.Millisecond), reading("s1", 2*time.Millisecond, time.Millisecond)),
			info: []string{"within the bound"}},
		{name: "no probe collection", rep: &clockskew.Report{Router: true, Probe: "db.transactions_clockprobe"},
			info: []string{"not measured", "twopc doctor"}},
		{name: "failed", err: errors.New("unauthorized"), info: []string{"could not be measured", "nothing is lost", "twopc doctor"}},
		{name: "not a router", rep: &clockskew.Report{}, quiet: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, h := unitSkew(func(context.Context) (*clockskew.Report, error) { return tc.rep, tc.err })
			s.start()
			ended(t, s)
			warns, infos := h.at(slog.LevelWarn), h.at(slog.LevelInfo)
			switch {
			case tc.quiet:
				assert.Empty(t, warns)
				assert.Empty(t, infos)
			case tc.warn != nil:
				require.Len(t, warns, 1)
				assert.Empty(t, infos)
				for _, w := range tc.warn {
					assert.Contains(t, warns[0], w)
				}
			default:
				assert.Empty(t, warns)
				require.Len(t, infos, 1)
				for _, w := range tc.info {
					assert.Contains(t, infos[0], w)
				}
			}
		})
	}

	// The warning names the shard and its figure.
	s, h := unitSkew(func(context.Context) (*clockskew.Report, error) {
		return prepared(reading("s0", 1*time.Millisecond, time.Millisecond), reading("s1", -400*time.Millisecond, time.Millisecond)), nil
	})
	s.start()
	ended(t, s)
	h.mu.Lock()
	defer h.mu.Unlock()
	require.Len(t, h.lines, 1)
	attrs := map[string]string{}
	h.lines[0].Attrs(func(a slog.Attr) bool {
		attrs[a.Key] = a.Value.String()
		return true
	})
	assert.Equal(t, "s1", attrs["shard"])
	assert.Equal(t, "-400ms ±1ms", attrs["largest"])
	assert.Equal(t, "250ms", attrs["bound"])
	assert.Equal(t, "s0 +1ms ±1ms, s1 -400ms ±1ms", attrs["shards"])
}

// TestUnitClockSkewCheckRunsOnceOffTheCallersPath: started by many calls
// at once, the check probes once; start returns while the probe is still
// running (no call waits for it); Close cancels the probe under way, waits
// for it, and nothing is logged after.
func TestUnitClockSkewCheckRunsOnceOffTheCallersPath(t *testing.T) {
	var probes atomic.Int32
	running := make(chan struct{})
	s, h := unitSkew(func(ctx context.Context) (*clockskew.Report, error) {
		probes.Add(1)
		close(running)
		<-ctx.Done() // a probe that would run until its bound
		return nil, ctx.Err()
	})
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.start()
		}()
	}
	wg.Wait() // every start returned, the probe still running
	<-running
	select {
	case <-s.done:
		t.Fatal("the check ended before its probe did")
	default:
	}
	s.close()
	assert.Equal(t, int32(1), probes.Load())
	h.mu.Lock()
	assert.Empty(t, h.lines, "nothing said after Close")
	h.mu.Unlock()
	s.start()
	s.close() // again: returns at once
	assert.Equal(t, int32(1), probes.Load(), "no check after Close")
}

// TestUnitClockSkewCheckClosedBeforeItStarts: a coordinator closed before
// any call found the log behind a router never probes.
func TestUnitClockSkewCheckClosedBeforeItStarts(t *testing.T) {
	var probes atomic.Int32
	s, _ := unitSkew(func(context.Context) (*clockskew.Report, error) {
		probes.Add(1)
		return nil, nil
	})
	s.close()
	s.start()
	ended(t, s)
	assert.Zero(t, probes.Load())
}

// TestUnitClockSkewCheckHasItsBound: the check's probe is bounded by
// skewTimeout, whatever the call that started it.
func TestUnitClockSkewCheckHasItsBound(t *testing.T) {
	deadline := make(chan time.Time, 1)
	s, _ := unitSkew(func(ctx context.Context) (*clockskew.Report, error) {
		d, _ := ctx.Deadline()
		deadline <- d
		return &clockskew.Report{}, nil
	})
	before := time.Now()
	s.start()
	ended(t, s)
	d := <-deadline
	assert.WithinDuration(t, before.Add(skewTimeout), d, 5*time.Second)
}
