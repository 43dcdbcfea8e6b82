package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/twopc/twopc/examples/internal/observetest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMetrics runs the command for a few transfers, some of which die and
// are recovered, and scrapes its /metrics while it serves them.
func TestMetrics(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pr, pw := io.Pipe()
	ran := make(chan error, 1)
	go func() {
		ran <- run(ctx, pw, "127.0.0.1:0", 12, 0, 4, time.Second)
		pw.Close()
	}()
	var url string
	lines := bufio.NewScanner(pr)
	for lines.Scan() {
		line := lines.Text()
		if u, ok := strings.CutPrefix(line, "metrics: "); ok {
			url = u
		}
		if strings.HasSuffix(line, "serving /metrics until interrupted") {
			break
		}
	}
	require.NotEmpty(t, url, "the command printed where it serves")
	go func() { _, _ = io.Copy(io.Discard, pr) }()

	// Each transfer ends committed or rolled back, the dead ones once a
	// recoverer's pass finds them stale (a second) and rolls them forward:
	// poll /metrics, as Prometheus would, until all twelve have and every
	// takeover's roll forward is recorded.
	const (
		takeover    = `twopc_recovery_actions_total{action="takeover",outcome="moved"}`
		rollForward = `twopc_recovery_actions_total{action="roll_forward",outcome="moved"}`
		timed       = `twopc_recovery_seconds_count{action="roll_forward"}`
	)
	var got map[string]float64
	ended := func() float64 {
		return got[`twopc_transitions_total{from="pending",outcome="moved",to="applied"}`] +
			got[`twopc_transitions_total{from="pending",outcome="moved",to="canceling"}`]
	}
	done := func() bool {
		return ended() == 12 && got[takeover] == got[rollForward] && got[rollForward] == got[timed]
	}
	for got = observetest.Scrape(t, url); !done(); got = observetest.Scrape(t, url) {
		select {
		case <-ctx.Done():
			t.Fatalf("%v transfers ended: %v", ended(), ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	assert.Equal(t, 12.0, ended(), "each committed or rolled back once")
	assert.Equal(t, 12.0, got[`twopc_transitions_total{from="none",outcome="moved",to="pending"}`])
	assert.GreaterOrEqual(t, got[rollForward], 1.0, "every 4th commit died")
	assert.Positive(t, got[`twopc_transition_seconds_count{from="none",to="pending"}`])
	assert.Contains(t, got, "go_goroutines")

	cancel()
	require.True(t, errors.Is(<-ran, context.Canceled))
}
