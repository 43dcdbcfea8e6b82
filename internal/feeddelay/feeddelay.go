// Package feeddelay measures a change feed from a transfer's commit to
// the handler call handed its event: the writes a sequencer's client
// sends, transfers offered at a rate, and each event's delay. The root
// package's BenchmarkFeed and BenchmarkFeedDelay and examples/cmd/bench
// -feed share it.
package feeddelay

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"

	"github.com/twopc/twopc"
)

// Writes counts the writes a sequencer's client sends: statements of the
// log's updates (its tags) and writes of the feeds' collection (its
// leases and publications), on the default collection names.
type Writes struct{ tags, feeds atomic.Int64 }

// Monitor returns the command monitor that counts them, for the
// sequencer's client.
func (w *Writes) Monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		coll, _ := e.Command.Lookup(e.CommandName).StringValueOK()
		switch {
		case e.CommandName == "update" && coll == "transactions":
			if arr, ok := e.Command.Lookup("updates").ArrayOK(); ok {
				vals, _ := arr.Values()
				w.tags.Add(int64(len(vals)))
			}
		case (e.CommandName == "update" || e.CommandName == "findAndModify") && coll == "transactions_feeds":
			w.feeds.Add(1)
		}
	}}
}

// Tags returns the tag statements counted so far.
func (w *Writes) Tags() int64 { return w.tags.Load() }

// Feeds returns the writes of the feeds' collection counted so far.
func (w *Writes) Feeds() int64 { return w.feeds.Load() }

// Offer runs do(i) for i from 0 to n-1 on workers goroutines: each as
// soon as a goroutine is free (rate 0), or not before i/rate after the
// first. The first error ends it, and is returned.
func Offer(ctx context.Context, workers, n int, rate float64, do func(context.Context, int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if rate > 0 {
					t := time.NewTimer(time.Until(start.Add(time.Duration(float64(i) / rate * float64(time.Second)))))
					select {
					case <-t.C:
					case <-ctx.Done():
						t.Stop()
						return
					}
				}
				if err := do(ctx, i); err != nil {
					cancel(fmt.Errorf("transfer %d: %w", i, err))
					return
				}
			}
		}()
	}
	wg.Wait()
	return context.Cause(ctx)
}

// Probe records when each transfer returned and when a handler was first
// handed its committed event.
type Probe struct {
	want     int
	all      chan struct{}
	mu       sync.Mutex
	returned map[bson.ObjectID]time.Time
	handed   map[bson.ObjectID]time.Time
	closed   bool // all closed
}

// NewProbe returns a probe whose All is closed once want committed events
// were handed.
func NewProbe(want int) *Probe {
	return &Probe{want: want, all: make(chan struct{}),
		returned: make(map[bson.ObjectID]time.Time, want), handed: make(map[bson.ObjectID]time.Time, want)}
}

// Returned records that transfer id returned now.
func (p *Probe) Returned(id bson.ObjectID) {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.returned[id] = now
}

// Handle is a subscriber's handler: it records the first time each
// transaction's committed event is handed.
func (p *Probe) Handle(_ context.Context, evs []twopc.Event) error {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range evs {
		if _, again := p.handed[e.Txn.ID]; !again && e.Kind == twopc.EventCommitted {
			p.handed[e.Txn.ID] = now
		}
	}
	if len(p.handed) == p.want && !p.closed {
		p.closed = true
		close(p.all)
	}
	return nil
}

// All is closed once the probe's want committed events were handed.
func (p *Probe) All() <-chan struct{} { return p.all }

// Delays returns each handed event's delay from its transfer's return
// to its handler call, sorted, and the events handed a second from the
// first handler call to the last (0 for one call); an error for an event
// of a transaction no transfer of the run returned.
func (p *Probe) Delays() ([]time.Duration, float64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delays := make([]time.Duration, 0, len(p.handed))
	var first, last time.Time
	for id, at := range p.handed {
		ret, ok := p.returned[id]
		if !ok {
			return nil, 0, fmt.Errorf("an event of transaction %s, which no transfer of the run returned", id.Hex())
		}
		delays = append(delays, max(0, at.Sub(ret)))
		if at.After(last) {
			last = at
		}
		if first.IsZero() || at.Before(first) {
			first = at
		}
	}
	slices.Sort(delays)
	var perSecond float64
	if last.After(first) {
		perSecond = float64(len(delays)-1) / last.Sub(first).Seconds()
	}
	return delays, perSecond, nil
}
