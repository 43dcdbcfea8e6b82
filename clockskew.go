package twopc

// The shards' clock skew: on a sharded cluster a coordinator measures,
// once, in the background, how far the clock of each shard that holds the
// log is from the router's, and says through its logger whether it is
// within the bound the statements' horizons rest on (internal/clockskew;
// PROTOCOL.md, Clocks). No money call waits for it, and nothing runs
// where the log's server is not a router.

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/twopc/twopc/internal/clockskew"
	"github.com/twopc/twopc/internal/schema"
)

// skewTimeout bounds the check: its config reads and Rounds round trips
// per shard.
const skewTimeout = 30 * time.Second

// skewCheck is a coordinator's one check of the shards' clock skew. The
// log's shard-key check starts it (start), the first time that check
// succeeds and finds the log's server a router: on a goroutine of its
// own, so that the call that started it does not wait for it.
type skewCheck struct {
	probe  func(context.Context) (*clockskew.Report, error) // the probe; tests replace it
	page   time.Duration                                    // the page tokens' horizon (statementHorizon)
	ckpt   time.Duration                                    // the checkpoints' (checkpointHorizon)
	logger *slog.Logger

	mu      sync.Mutex
	started bool
	closed  bool
	cancel  context.CancelFunc
	done    chan struct{} // closed when the check ended, or was never to run (closed)
}

// newSkewCheck returns c's check: the probe through the log's client,
// with the probe collection named after the log.
func newSkewCheck(c *Coordinator) *skewCheck {
	log := c.log.txns
	probe := log.Database().Collection(log.Name() + schema.ClockProbeSuffix)
	return &skewCheck{
		probe:  func(ctx context.Context) (*clockskew.Report, error) { return clockskew.Probe(ctx, log, probe) },
		page:   c.statementHorizon,
		ckpt:   c.checkpointHorizon,
		logger: c.logger,
		done:   make(chan struct{}),
	}
}

// start starts the check, the first time it is called before close, and
// returns at once.
func (s *skewCheck) start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started || s.closed {
		return
	}
	s.started = true
	ctx, cancel := context.WithTimeout(context.Background(), skewTimeout)
	s.cancel = cancel
	go func() {
		defer close(s.done)
		defer cancel()
		rep, err := s.probe(ctx)
		s.mu.Lock()
		closed := s.closed
		s.mu.Unlock()
		if !closed {
			s.say(rep, err)
		}
	}()
}

// close cancels the check under way and waits for it to end (its probe's
// command answers its context at once); no check starts after it.
func (s *skewCheck) close() {
	s.mu.Lock()
	wasStarted := s.started
	if !s.closed {
		s.closed = true
		if s.cancel != nil {
			s.cancel()
		}
		if !wasStarted {
			close(s.done)
		}
	}
	s.mu.Unlock()
	<-s.done
}

// say logs what the probe found: a warning if a shard's clock is, or may
// be, past the bound; otherwise one line at info level.
func (s *skewCheck) say(rep *clockskew.Report, err error) {
	l := s.logger
	switch {
	case err != nil:
		l.Info("twopc: the shards' clock skew could not be measured; nothing is lost, and statements rely on every shard's clock being within a quarter of a second of the router's (PROTOCOL.md, Clocks): run twopc doctor",
			"error", err)
		return
	case rep == nil || !rep.Router:
		return
	case !rep.Prepared:
		l.Info("twopc: the shards' clock skew is not measured: the probe collection is not sharded on {_id: \"hashed\"}; twopc doctor shards it, after which each coordinator measures the skew once; statements rely on every shard's clock being within a quarter of a second of the router's (PROTOCOL.md, Clocks)",
			"probe", rep.Probe)
		return
	}
	j := clockskew.Judge(rep.Readings, s.page, s.ckpt)
	attrs := []any{"bound", j.Bound, "shards", skewFigures(rep.Readings)}
	if len(rep.Unreached) > 0 {
		attrs = append(attrs, "unmeasured", strings.Join(rep.Unreached, ","),
			"why", "no chunk of "+rep.Probe+" there: drop it, and twopc doctor shards it anew over every shard")
	}
	switch j.Verdict {
	case clockskew.Beyond, clockskew.Unsure:
		l.Warn("twopc: the shards' clock skew is, or may be, past the bound (a quarter of the page tokens' horizon) on a shard that holds the log: no money moves by it, but once a shard's clock is behind the router's by about the page horizon a statement's next page may pass over an entry committed there, and by about the checkpoint horizon a checkpoint may save a wrong sum; keep every member's clock synchronized (NTP)",
			append([]any{"verdict", j.Verdict.String(), "largest", j.Largest.String(), "shard", j.Largest.Shard}, attrs...)...)
	case clockskew.Unmeasured:
		l.Info("twopc: the shards' clock skew is not measured: no shard that holds the log holds a chunk of the probe collection", attrs...)
	default:
		l.Info("twopc: the shards' clock skew is within the bound: the clock of each shard that holds the log is within a quarter of the page tokens' horizon of the router's",
			append([]any{"largest", j.Largest.String(), "shard", j.Largest.Shard}, attrs...)...)
	}
}

// skewFigures writes each reading as "shard +1ms ±2ms", comma-separated.
func skewFigures(readings []clockskew.Reading) string {
	parts := make([]string, len(readings))
	for i, r := range readings {
		parts[i] = r.Shard + " " + r.String()
	}
	return strings.Join(parts, ", ")
}
