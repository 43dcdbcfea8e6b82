package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

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
	for got = scrape(t, url); !done(); got = scrape(t, url) {
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

// scrape gets the metrics at url and returns each sample's value by its
// name and labels, as the text format writes them.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	samples := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		require.Positive(t, i, line)
		v, err := strconv.ParseFloat(line[i+1:], 64)
		require.NoError(t, err, line)
		samples[line[:i]] = v
	}
	require.NoError(t, sc.Err())
	return samples
}
