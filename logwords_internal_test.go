package twopc

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// said is a slog.Handler that keeps every record's level and message.
type said struct {
	mu    sync.Mutex
	lines []slog.Record
}

func (h *said) Enabled(context.Context, slog.Level) bool { return true }
func (h *said) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lines = append(h.lines, r)
	return nil
}
func (h *said) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *said) WithGroup(string) slog.Handler      { return h }

// at returns the messages logged at level.
func (h *said) at(level slog.Level) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, r := range h.lines {
		if r.Level == level {
			out = append(out, r.Message)
		}
	}
	return out
}

// TestUnitMarkLateInsertIsInfo: a transaction that reached the log later
// after its time than the mark's margin (an insert retried until the
// server came back) is told at info level, saying that nothing is lost:
// its legs apply, or are refused as too late and nothing moves. Before,
// a warning said its legs "may be refused", as if money were at risk.
func TestUnitMarkLateInsertIsInfo(t *testing.T) {
	m, _ := unitMark(nil, nil)
	h := &said{}
	m.logger, m.frozen = slog.New(h), true
	created := time.Now()
	m.written(created, created.Add(3*m.margin))
	assert.Empty(t, h.at(slog.LevelWarn))
	infos := h.at(slog.LevelInfo)
	require.Len(t, infos, 1)
	assert.Contains(t, infos[0], "nothing is lost")
	assert.Contains(t, infos[0], "ErrTooLate")
}

// TestUnitMarkReadAgainIsInfo: a failed reading of the mark is a warning
// that says nothing is lost, and the first reading that succeeds after
// it says, at info level, that the mark is read again and nothing was
// lost. Before, nothing was said when readings came back.
func TestUnitMarkReadAgainIsInfo(t *testing.T) {
	failing := true
	m, _ := unitMark(func(context.Context) (time.Time, error) {
		if failing {
			return time.Time{}, errors.New("server down")
		}
		return time.Now(), nil
	}, func(context.Context) (time.Time, any, error) { return time.Time{}, nil, nil })
	h := &said{}
	m.logger = slog.New(h)
	read := func() {
		ctx, cancel := context.WithCancel(context.Background())
		m.mu.Lock()
		m.reading, m.cancel = true, cancel
		m.mu.Unlock()
		m.read(ctx)
	}
	read()
	read()
	warns := h.at(slog.LevelWarn)
	require.Len(t, warns, 1)
	assert.Contains(t, warns[0], "nothing is lost")
	failing = false
	read()
	read()
	infos := h.at(slog.LevelInfo)
	require.Len(t, infos, 1, "said once, when it came back")
	assert.Contains(t, infos[0], "read again")
	assert.Contains(t, infos[0], "nothing was lost")
	for _, l := range h.lines {
		assert.False(t, l.Level > slog.LevelInfo && !strings.Contains(l.Message, "nothing is lost"), "%s: %s", l.Level, l.Message)
	}
}
