package twopc

import (
	"context"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

const (
	// settleTimeout bounds one background settle batch.
	settleTimeout = time.Minute
	// maxSettleBatch bounds the transactions settled by one pair of writes.
	maxSettleBatch = MaxBatch
)

// settler settles a coordinator's committed transactions in the
// background, in batches: whatever was committed while the previous batch
// was being written goes in the next one, so under load a batch of n
// transfers costs two writes in all rather than two each. A transaction it
// fails to settle stays applied for a Recoverer.
type settler struct {
	c *Coordinator

	mu      sync.Mutex
	queue   []*record
	busy    bool            // a batch is being written
	waiters []chan struct{} // closed when the queue is empty and no batch is being written
	closed  bool

	wake chan struct{}
	stop chan struct{}
	done chan struct{}
}

func newSettler(c *Coordinator) *settler {
	s := &settler{c: c, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go s.loop()
	return s
}

// enqueue hands recs to the background, together; false if the settler
// is closed.
func (s *settler) enqueue(recs ...*record) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.queue = append(s.queue, recs...)
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return true
}

func (s *settler) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

func (s *settler) loop() {
	defer close(s.done)
	for {
		select {
		case <-s.wake:
		case <-s.stop:
			s.drain()
			return
		}
		s.drain()
	}
}

// drain settles batches until the queue is empty, then releases waiters.
func (s *settler) drain() {
	for {
		s.mu.Lock()
		batch := s.queue
		if len(batch) > maxSettleBatch {
			batch = batch[:maxSettleBatch:maxSettleBatch]
			s.queue = s.queue[maxSettleBatch:]
		} else {
			s.queue = nil
		}
		if len(batch) == 0 {
			s.busy = false
			for _, w := range s.waiters {
				close(w)
			}
			s.waiters = nil
			s.mu.Unlock()
			return
		}
		s.busy = true
		s.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
		_, left, _ := s.c.settle(ctx, batch)
		for _, u := range left {
			s.c.logger.WarnContext(ctx, "twopc: settling a committed transaction failed; nothing is lost: its money moved, and it stays applied until a Recoverer pass settles it",
				append(s.c.logAttrs(u.rec.ID, u.step), "batch", len(batch), "err", u.err)...)
		}
		cancel()
	}
}

// flush waits until everything queued before the call is settled.
func (s *settler) flush(ctx context.Context) error {
	s.mu.Lock()
	if len(s.queue) == 0 && !s.busy {
		s.mu.Unlock()
		return nil
	}
	w := make(chan struct{})
	s.waiters = append(s.waiters, w)
	s.mu.Unlock()
	select {
	case <-w:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// close settles what is queued and stops the background goroutine.
func (s *settler) close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	close(s.stop)
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// settlers is a coordinator's background settling: one settler for each
// set of ledgers that committed transactions are on, made when first
// needed, so that a ledger that is down or slow holds up the settling of
// only the transactions with a leg on it. Their number is bounded as the
// apply stages' is (see applyStages).
type settlers struct {
	c *Coordinator

	mu     sync.Mutex
	bySet  map[string]*settler
	closed bool
}

// enqueue hands recs to the background, each to the settler of its set of
// ledgers, those of one set together; false if settling is closed.
func (ss *settlers) enqueue(recs ...*record) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.closed {
		return false
	}
	for _, part := range byLedgerSet(recs) {
		key := ledgerSet(part[0].legs())
		s := ss.bySet[key]
		if s == nil {
			if ss.bySet == nil {
				ss.bySet = map[string]*settler{}
			}
			s = newSettler(ss.c)
			ss.bySet[key] = s
		}
		s.enqueue(part...)
	}
	return true
}

func (ss *settlers) isClosed() bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.closed
}

// all returns the settlers made so far.
func (ss *settlers) all() []*settler {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	out := make([]*settler, 0, len(ss.bySet))
	for _, s := range ss.bySet {
		out = append(out, s)
	}
	return out
}

// flush waits until everything queued before the call is settled.
func (ss *settlers) flush(ctx context.Context) error {
	for _, s := range ss.all() {
		if err := s.flush(ctx); err != nil {
			return err
		}
	}
	return nil
}

// close settles what is queued and stops every settler, at once.
func (ss *settlers) close(ctx context.Context) error {
	ss.mu.Lock()
	ss.closed = true
	ss.mu.Unlock()
	all := ss.all()
	return parallel(len(all), func(i int) error { return all[i].close(ctx) })
}

// settle closes the legs of committed transactions on their accounts (pull
// the id from pendingTransactions and fence it, and move a credit from
// pendingCredit to the balance; bulk writes of up to writeBatch legs) and
// then moves those whose legs all closed to done (one write for the
// batch). Both writes are guarded and idempotent, so anyone may settle an
// applied transaction, any number of times. It returns the transactions it
// moved to done, and those it left applied with the step it stopped at and
// why.
//
// The transactions on one set of ledgers are settled apart from those on
// another, at once (see byLedgerSet): a ledger that is down or slow holds
// up, and fails, only the transactions with a leg on it.
func (c *Coordinator) settle(ctx context.Context, recs []*record) ([]*record, []unsettled, error) {
	var batch []*record
	var left []unsettled
	var firstErr error
	for _, r := range recs {
		if err := c.at(ctx, StepSettle, r); err != nil {
			firstErr = cmpErr(firstErr, err)
			left = append(left, unsettled{r, StepSettle, err})
			continue
		}
		batch = append(batch, r)
	}
	var mu sync.Mutex
	var done []*record
	parts := byLedgerSet(batch)
	_ = parallel(len(parts), func(i int) error {
		d, l, err := c.settleOn(ctx, parts[i])
		mu.Lock()
		defer mu.Unlock()
		done, left = append(done, d...), append(left, l...)
		firstErr = cmpErr(firstErr, err)
		return nil
	})
	return done, left, firstErr
}

// settleOn settles recs, whose step hooks were called (see settle).
func (c *Coordinator) settleOn(ctx context.Context, recs []*record) ([]*record, []unsettled, error) {
	var left []unsettled
	failed, firstErr := c.ledgers.closeLegs(ctx, recs)
	var ready []*record
	for i, r := range recs {
		if why := failed[i]; why != nil {
			left = append(left, unsettled{r, StepSettle, why})
			continue
		}
		if err := c.at(ctx, StepDone, r); err != nil {
			firstErr = cmpErr(firstErr, err)
			left = append(left, unsettled{r, StepDone, err})
			continue
		}
		ready = append(ready, r)
	}
	done, err := c.log.finish(ctx, ready, move{step: StepDone, from: StateApplied, to: StateDone, anyClaim: true})
	if err != nil {
		// Left applied: the transactions whose statement failed.
		moved := map[bson.ObjectID]bool{}
		for _, d := range done {
			moved[d.ID] = true
		}
		for _, r := range ready {
			if !moved[r.ID] {
				left = append(left, unsettled{r, StepDone, err})
			}
		}
	}
	return done, left, cmpErr(firstErr, err)
}

// byLedgerSet splits recs by the set of ledgers their legs are on, in the
// order each set first appears.
func byLedgerSet(recs []*record) [][]*record {
	return splitByLedgers(recs, func(r *record) []leg { return r.legs() })
}

// unsettled is a committed transaction settle left applied: the step it
// stopped at, and why.
type unsettled struct {
	rec  *record
	step Step
	err  error
}

// closeLegs closes the legs of committed transactions recs on every
// ledger, and returns, by index in recs, why a leg of a transaction may
// not have closed.
func (ls ledgers) closeLegs(ctx context.Context, recs []*record) (map[int]error, error) {
	return ls.eachFailed(ctx, recs, (*Ledger).closeLegs)
}
