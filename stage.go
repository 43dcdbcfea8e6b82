package twopc

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// maxGroup bounds the transfers one grouped write of a step takes from
// the waiting ones (a batch call's transfers are never split between
// writes: see stage.join).
const maxGroup = 256

// groupTimeout bounds a grouped write that no caller's context bounds
// (see stage).
const groupTimeout = time.Minute

// stage batches one step of the protocol (insert, apply, commit) for the
// concurrent transfers of one Coordinator: group commit, for every step.
//
// A call that finds no write of its step in flight is written at once,
// under its caller's context and in its caller's goroutine: a transfer on
// an idle coordinator takes the round trips it would take alone. Calls
// that arrive while a write is in flight wait for it; then all of them
// (up to maxGroup transfers) go in the next write, which a goroutine of
// the stage sends under a context that no caller can end (the values of
// the first one's, with groupTimeout, or the step's own deadline), so a
// caller who gives up does not fail the others.
//
// The guarantee is the write function's: it writes each item under the
// item's own guard, as a write of that item alone would, and leaves each
// item's outcome in it. The stage only decides when, and with whom.
//
// Contexts: a caller whose context ends while it waits returns at once
// with the context's error if its items were not yet taken into a write:
// they are not written, and the error wraps errNotSent. If they were, it
// waits for that write's outcome up to the stage's grace (the commit
// stage's: readBackTimeout), and returns with it as if its context had
// not ended, so that a commit made answers committed; past the grace (or
// with none), it returns the context's error, and its items' outcome is
// as unknown as a lost reply's: the transaction's state tells.
type stage[I any] struct {
	write func(ctx context.Context, items []I) // writes items and leaves each one's outcome in it
	grace time.Duration                        // see Contexts above

	mu    sync.Mutex
	busy  bool          // a write is in flight
	queue []*waiting[I] // calls waiting for the next write, in arrival order

	// joined, if set (tests only), is called, under mu, when a call
	// starts waiting for the next write.
	joined func()
}

// waiting is one call waiting in a stage.
type waiting[I any] struct {
	ctx   context.Context
	items []I
	done  chan struct{} // closed when the write that took the call has ended

	taken   bool // under stage.mu: in a write being prepared or sent
	written bool // set before done is closed: the items were in the write
}

// join writes items (the transfers of one call) in the stage's next write
// and returns when each one's outcome is in it, or with the context's
// error (see stage).
func (s *stage[I]) join(ctx context.Context, items ...I) error {
	if len(items) == 0 {
		return nil
	}
	s.mu.Lock()
	if !s.busy {
		s.busy = true
		s.mu.Unlock()
		s.write(ctx, items)
		s.next()
		return nil
	}
	w := &waiting[I]{ctx: ctx, items: items, done: make(chan struct{})}
	s.queue = append(s.queue, w)
	if s.joined != nil {
		s.joined()
	}
	s.mu.Unlock()

	select {
	case <-w.done:
	case <-ctx.Done():
		s.mu.Lock()
		if !w.taken {
			s.remove(w) // never written
			s.mu.Unlock()
			return errorf("%w: %w", errNotSent, ctx.Err())
		}
		s.mu.Unlock()
		if !s.ended(w) {
			return ctx.Err() // in a write under way: its outcome is unknown to us
		}
	}
	if !w.written {
		// Its context had ended when the write was made: left out of it.
		return errorf("%w: %w", errNotSent, ctx.Err())
	}
	return nil
}

// ended waits, up to the stage's grace, for the write that took w to
// end, and reports whether it did.
func (s *stage[I]) ended(w *waiting[I]) bool {
	select {
	case <-w.done:
		return true
	default:
	}
	if s.grace <= 0 {
		return false
	}
	t := time.NewTimer(s.grace)
	defer t.Stop()
	select {
	case <-w.done:
		return true
	case <-t.C:
		return false
	}
}

// next ends a write: the calls waiting now go in the next one, or the
// stage is idle.
func (s *stage[I]) next() {
	s.mu.Lock()
	if len(s.queue) == 0 {
		s.busy = false
		s.mu.Unlock()
		return
	}
	var group []*waiting[I]
	n := 0
	for len(s.queue) > 0 && (len(group) == 0 || n+len(s.queue[0].items) <= maxGroup) {
		w := s.queue[0]
		s.queue = s.queue[1:]
		w.taken = true
		group = append(group, w)
		n += len(w.items)
	}
	if len(s.queue) == 0 {
		s.queue = nil
	}
	s.mu.Unlock()
	go s.writeGroup(group)
}

// writeGroup writes the items of the calls of group whose callers are
// still waiting, then starts the next write.
func (s *stage[I]) writeGroup(group []*waiting[I]) {
	var items []I
	var first context.Context
	for _, w := range group {
		if w.ctx.Err() != nil {
			continue // its caller has given up: not written
		}
		if first == nil {
			first = w.ctx
		}
		w.written = true
		items = append(items, w.items...)
	}
	if len(items) > 0 {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(first), groupTimeout)
		s.write(ctx, items)
		cancel()
	}
	for _, w := range group {
		close(w.done)
	}
	s.next()
}

func (s *stage[I]) remove(w *waiting[I]) {
	for i, q := range s.queue {
		if q == w {
			s.queue = append(s.queue[:i:i], s.queue[i+1:]...)
			return
		}
	}
}

// ledgerStages is a step's stages, one for each set of ledgers its calls
// are on (legs gives a call's legs), made when first needed: the apply
// step's (applyStages) and the exists step's. A ledger that is down or
// slow holds up only the calls with a leg on it.
type ledgerStages[C any] struct {
	write func(ctx context.Context, calls []C)
	legs  func(C) []leg

	mu    sync.Mutex
	byKey map[string]*stage[C]
}

// applyStages is the apply step's stages (see applyRound).
type applyStages = ledgerStages[*applyCall]

// join writes calls in the next write of their ledgers' stages, the
// stages' at once, and returns when each call's outcome is in it, or with
// the context's error (see stage.join).
func (a *ledgerStages[C]) join(ctx context.Context, calls ...C) error {
	parts := splitByLedgers(calls, a.legs)
	return parallel(len(parts), func(i int) error {
		return a.stage(ledgerSet(a.legs(parts[i][0]))).join(ctx, parts[i]...)
	})
}

// stage returns the stage of the set of ledgers key.
func (a *ledgerStages[C]) stage(key string) *stage[C] {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.byKey[key]
	if s == nil {
		if a.byKey == nil {
			a.byKey = map[string]*stage[C]{}
		}
		s = &stage[C]{write: a.write}
		a.byKey[key] = s
	}
	return s
}

// ledgerSet names the set of ledgers legs are on: their names, sorted and
// quoted, so that two sets have one name only if they are equal.
func ledgerSet(legs []leg) string {
	names := make([]string, 0, 2)
	for _, l := range legs {
		if !slices.Contains(names, l.ledger) {
			names = append(names, l.ledger)
		}
	}
	slices.Sort(names)
	for i, n := range names {
		names[i] = strconv.Quote(n)
	}
	return strings.Join(names, ",")
}
