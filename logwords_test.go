package twopc_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/twopc/twopc"
)

// kept is a slog.Handler that keeps every record, and sends each on
// ch, if not nil, without blocking.
type kept struct {
	mu    sync.Mutex
	lines []slog.Record
	ch    chan slog.Record
}

func (h *kept) Enabled(context.Context, slog.Level) bool { return true }
func (h *kept) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.lines = append(h.lines, r)
	h.mu.Unlock()
	if h.ch != nil {
		select {
		case h.ch <- r:
		default:
		}
	}
	return nil
}
func (h *kept) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *kept) WithGroup(string) slog.Handler      { return h }

func (h *kept) all() []slog.Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]slog.Record(nil), h.lines...)
}

// TestWarningsSayNothingIsLost: a background settle that fails, a
// recovery pass that fails on a transaction and then, at Run's next pass,
// succeeds: every line at warn level or above says what happened and that
// nothing is lost (true here: the money moved once, the balances are
// exact), and the pass that succeeded after the failed one says so at
// info level. Before, the settler's line said only that it "left the
// transaction applied for recovery", the recoverer's that it "left the
// transaction for the next pass", and nothing was said when a pass
// succeeded again.
func TestWarningsSayNothingIsLost(t *testing.T) {
	ctx := testCtx(t)
	h := &kept{ch: make(chan slog.Record, 100)}
	logger := slog.New(h)
	b := newBank(t, twopc.WithApplication("payments"), twopc.WithLogger(logger), twopc.WithStepHook(failAt(twopc.StepDone)))
	b.open(map[string]int64{"A": 100, "B": 0})
	_, err := b.c.Transfer(ctx, "A", "B", 10)
	require.NoError(t, err)
	require.NoError(t, b.c.Settle(ctx)) // fails at done, in the background

	r := twopc.NewRecoverer(b.coordinator(twopc.WithApplication("recoverer"), twopc.WithLogger(logger),
		twopc.WithStepHook(crashAt(twopc.StepDone))), twopc.WithInterval(10*time.Millisecond))
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- r.Run(runCtx) }()
	againSaid := false
	for !againSaid {
		select {
		case rec := <-h.ch:
			againSaid = rec.Level == slog.LevelInfo && strings.Contains(rec.Message, "succeeded after")
		case <-time.After(time.Minute):
			t.Error("no line said that a pass succeeded after the failed one")
			againSaid = true
		}
	}
	stop()
	require.ErrorIs(t, <-ran, context.Canceled)
	b.checkSettled(map[string]int64{"A": 100, "B": 0})
	assert.Equal(t, int64(10), b.balance("B"))

	var warned int
	for _, rec := range h.all() {
		if rec.Level < slog.LevelWarn {
			continue
		}
		warned++
		assert.Contains(t, rec.Message, "nothing is lost", "%s: %s", rec.Level, rec.Message)
	}
	assert.GreaterOrEqual(t, warned, 3, "the settle, the transaction recovery left, the failed pass")
}
