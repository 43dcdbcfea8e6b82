package twopc

// The low-water mark: a transaction time before which every transaction in
// the log is finished, read four times a second, and the clock corrected
// to the server's that stamps each transaction's time. The writes that
// touch an account anyway (a leg's apply, a rollback's undo) move its fence
// line up to the mark and drop the fences below it, so an account keeps
// the fences of about the last three quarters of a second of its traffic,
// with no Recoverer running.

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/twopc/twopc/internal/schema"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

const (
	// markEvery is how often the mark is read again, while the
	// coordinator is used.
	markEvery = 250 * time.Millisecond
	// markMargin is how far behind the server's clock the mark stays,
	// whatever the log holds: it covers a transaction stamped (by a clock
	// corrected to the server's) and not yet in the log when the mark is
	// read. The stamp is taken right before the insert write that carries
	// the transaction is sent (see stampInsert), so the margin bounds
	// that write's way to the log (its retries included), not a wait in
	// the coordinator's insert stage before it. A transaction whose
	// insert lands later than that after its stamp may find a line past
	// its time: it is refused there and rolls back (ErrTooLate), moving
	// nothing.
	markMargin = 500 * time.Millisecond
	// markTimeout bounds one reading of the mark.
	markTimeout = 5 * time.Second
	// markComment is the comment on the mark's read of the log, which
	// tells it apart from a transfer's commands.
	markComment = "twopc: low-water mark"
)

// lowWater is a coordinator's mark and clock.
//
// The mark is min(the oldest unfinished transaction's time − 1 ms, the
// server's clock − markMargin), the server's clock read (hello) before the
// log is. Unfinished is initial, pending or canceling: an applied, done or
// canceled transaction applies no leg again, and neither does a held hold
// (its legs are applied; capture and void are guarded by their markers).
// So a line at the mark refuses no leg that may still legitimately apply,
// and a fence below it is refused by the line, which is what lets a write
// drop it. Neither depends on the mark being right: a line only ever
// refuses (a leg it refuses rolls its transfer back, moving nothing), and
// a fence goes only in the write that moves the line past it.
type lowWater struct {
	mu       sync.Mutex
	mark     time.Time          // zero until first read
	readAt   time.Time          // host time of the last reading, or failed attempt (monotonic)
	offset   time.Duration      // the server's clock minus the host's
	synced   bool               // offset was measured
	syncing  chan struct{}      // closed when the first reading of the clock under way ends
	reading  bool               // a reading is under way
	frozen   bool               // no reading in the background (tests)
	closed   bool               // the coordinator is closed: no more readings
	cancel   context.CancelFunc // cancels the reading under way
	failing  bool               // the last reading failed (warned once)
	failedAt time.Time          // when the readings started failing
	warnedAt time.Time          // when a held-back mark was last warned about

	margin time.Duration                                 // markMargin; tests shorten it
	hold   time.Duration                                 // an unfinished transaction older than this is warned about
	host   func() time.Time                              // the host's clock; tests replace it
	server func(context.Context) (time.Time, error)      // the server's clock (hello)
	oldest func(context.Context) (time.Time, any, error) // the oldest unfinished transaction's time and id, zero if none
	logger *slog.Logger                                  // reading errors, a held-back mark
}

// newLowWater returns the mark and clock of coordinator c.
func newLowWater(c *Coordinator) *lowWater {
	return &lowWater{
		margin: c.markMargin,
		hold:   2 * c.staleAfter,
		frozen: c.markFrozen,
		host:   c.markClock,
		server: func(ctx context.Context) (time.Time, error) { return schema.ServerNow(ctx, c.db) },
		oldest: func(ctx context.Context) (time.Time, any, error) {
			// By the {state, created} index: made (or checked) first.
			if err := c.indexes.need(ctx); err != nil {
				return time.Time{}, nil, err
			}
			return c.log.oldestOpen(ctx)
		},
		logger: c.logger,
	}
}

// stamp returns the time for a new transaction, taken right before its
// insert is sent (see stampInsert): the host's clock corrected to the
// server's, in milliseconds. A coordinator's first stamp waits for the
// server's clock (one hello, bounded by ctx), unless sync has read it;
// if that fails, it is the host's clock until the next reading.
func (m *lowWater) stamp(ctx context.Context) time.Time {
	m.sync(ctx)
	m.line()
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.host().Add(m.offset).UTC().Truncate(time.Millisecond)
}

// sync reads the server's clock once, if it never was: the first of
// concurrent callers reads it, the others wait for that reading (or for
// their ctx) and go on with what it found.
func (m *lowWater) sync(ctx context.Context) {
	m.mu.Lock()
	if m.synced {
		m.mu.Unlock()
		return
	}
	if wait := m.syncing; wait != nil {
		m.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
		}
		return
	}
	done := make(chan struct{})
	m.syncing = done
	m.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, markTimeout)
	_, _ = m.readClock(ctx)
	cancel()
	m.mu.Lock()
	m.syncing = nil
	m.mu.Unlock()
	close(done)
}

// readClock reads the server's clock and updates the offset (against the
// middle of the round trip); it returns the server's time.
func (m *lowWater) readClock(ctx context.Context) (time.Time, error) {
	before := m.host()
	start := time.Now()
	server, err := m.server(ctx)
	if err != nil {
		return time.Time{}, err
	}
	mid := before.Add(time.Since(start) / 2)
	m.mu.Lock()
	m.offset, m.synced = server.Sub(mid), true
	m.mu.Unlock()
	return server, nil
}

// written is told the time a transaction was stamped with and the time
// the server wrote it (its lastModified): a gap wider than half the margin
// means the offset is off (or the insert was slow), and the clock and the
// mark are read again.
//
// A gap wider than the margin means that a transaction reached the log
// later than the mark allows for (a slow insert, retries across a
// failover or until the server came back, a host clock that jumped): it
// is logged at info level, since nothing is at risk: a leg of such a
// transaction applies, or is refused by a line already past its time
// (ErrTooLate, which its caller is told: rolled back, nothing moved).
func (m *lowWater) written(created, lastModified time.Time) {
	gap := lastModified.Sub(created)
	if gap <= m.margin/2 && gap >= -m.margin/2 {
		return
	}
	if gap > m.margin {
		m.logger.Info("twopc: a transaction reached the log later after its time than the low-water mark's margin (a slow or retried insert); "+
			"nothing is lost: its legs apply, or are refused as too late (ErrTooLate) and it is rolled back with nothing moved",
			"created", created, "lastModified", lastModified, "margin", m.margin)
	}
	m.mu.Lock()
	m.readAt = time.Time{}
	m.mu.Unlock()
	m.line()
}

// line returns the mark as last read (zero if never), and starts a new
// reading in the background if the last is older than markEvery.
func (m *lowWater) line() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.reading && !m.frozen && !m.closed && (m.readAt.IsZero() || time.Since(m.readAt) >= markEvery) {
		m.reading = true
		ctx, cancel := context.WithTimeout(context.Background(), markTimeout)
		m.cancel = cancel
		go m.read(ctx)
	}
	return m.mark
}

// close stops the readings: the one under way is canceled, and no other
// starts. The last mark read stays in use.
func (m *lowWater) close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	if m.cancel != nil {
		m.cancel()
	}
}

// read reads the mark (see lowWater): the server's clock, then the oldest
// unfinished transaction in the log.
//
// A reading that fails counts as one for when the next starts (markEvery
// later), and is logged at warn level the first time after one that
// succeeded, at debug level after that; the mark read last stays in use.
// The first reading that succeeds after failed ones is logged at info
// level: nothing was lost, fences were only kept longer.
func (m *lowWater) read(ctx context.Context) {
	mark, err := m.readOnce(ctx)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cancel()
	m.reading, m.cancel, m.readAt = false, nil, time.Now()
	switch {
	case err != nil && m.closed:
	case err != nil && !m.failing:
		m.failing, m.failedAt = true, time.Now()
		m.logger.Warn("twopc: reading the low-water mark failed; nothing is lost: accounts keep their fences until a reading succeeds (tried again every "+markEvery.String()+")", "error", err)
	case err != nil:
		m.logger.Debug("twopc: reading the low-water mark failed again", "error", err)
	default:
		if m.failing {
			m.logger.Info("twopc: the low-water mark is read again; nothing was lost: accounts drop their fences as before",
				"failing_for", time.Since(m.failedAt).Round(time.Millisecond))
		}
		m.failing = false
		m.mark = mark
	}
}

// readNow reads the mark at once and keeps it (tests).
func (m *lowWater) readNow(ctx context.Context) (time.Time, error) {
	mark, err := m.readOnce(ctx)
	if err != nil {
		return time.Time{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.mark, m.readAt = mark, time.Now()
	return mark, nil
}

// readOnce computes the mark.
func (m *lowWater) readOnce(ctx context.Context) (time.Time, error) {
	server, err := m.readClock(ctx)
	if err != nil {
		return time.Time{}, err
	}
	mark := server.Add(-m.margin)
	oldest, id, err := m.oldest(ctx)
	if err != nil {
		return time.Time{}, err
	}
	if !oldest.IsZero() && oldest.Add(-time.Millisecond).Before(mark) {
		mark = oldest.Add(-time.Millisecond)
		m.heldBack(server, oldest, id)
	}
	return mark.UTC().Truncate(time.Millisecond), nil
}

// heldBack warns, at most once per hold (twice StaleAfter), when the
// oldest unfinished transaction is older than hold by the server's clock:
// its caller has most likely died, and until a Recoverer (or `twopc
// recover`) finishes it, every account keeps the fences closed on it
// since that transaction's time.
func (m *lowWater) heldBack(server, oldest time.Time, id any) {
	age := server.Sub(oldest)
	if m.hold <= 0 || age < m.hold {
		return
	}
	m.mu.Lock()
	warn := m.warnedAt.IsZero() || time.Since(m.warnedAt) >= m.hold
	if warn {
		m.warnedAt = time.Now()
	}
	m.mu.Unlock()
	if warn {
		m.logger.Warn("twopc: an unfinished transaction holds the low-water mark back; nothing is lost: accounts keep their fences until it is finished (run a Recoverer, or twopc recover)",
			"txn", id, "created", oldest, "age", age.Round(time.Millisecond))
	}
}

// oldestOpen returns the time and id of the oldest unfinished transaction
// in the log (zero if none): one read by the {state, created} index. Only
// transactions whose legs this library applies count: an ObjectID _id and
// a date created, as recovery's scan requires (a document another program
// wrote, which no recovery would ever finish, holds nothing back).
//
// One find is not a snapshot: a transaction that moves between two of the
// states it reads while it runs (pending to canceling) may be missed. Only
// a move into pending could matter (its legs still apply), and the library
// inserts transactions pending; initial is the tutorial's state, written
// by hand.
func (g *txnLog) oldestOpen(ctx context.Context) (time.Time, any, error) {
	var first []struct {
		ID      bson.ObjectID `bson:"_id"`
		Created time.Time     `bson:"created"`
	}
	err := g.retry(ctx, func(ctx context.Context) error {
		cur, err := g.txns.Find(ctx, bson.D{
			{Key: fieldState, Value: bson.D{{Key: "$in", Value: bson.A{StateInitial, StatePending, StateCanceling}}}},
			// A transaction written by hand with no time sorts first and
			// would hide the others.
			{Key: fieldCreated, Value: bson.D{{Key: "$type", Value: "date"}}},
			{Key: "_id", Value: bson.D{{Key: "$type", Value: "objectId"}}},
		}, options.Find().
			SetProjection(bson.D{{Key: "_id", Value: 1}, {Key: fieldCreated, Value: 1}}).
			SetSort(bson.D{{Key: fieldCreated, Value: 1}}).
			SetLimit(1).
			SetComment(markComment))
		if err != nil {
			return err
		}
		first = first[:0]
		return cur.All(ctx, &first)
	})
	if err != nil || len(first) == 0 {
		return time.Time{}, nil, err
	}
	return first[0].Created, first[0].ID, nil
}

// lineFor is the line a write for transaction r moves its account's line
// up to: the mark, but never to r's own time (r's other legs on the same
// document must still apply). Zero: move nothing.
func lineFor(mark time.Time, r *record) time.Time {
	if mark.IsZero() {
		return time.Time{}
	}
	if own := r.Created.Add(-time.Millisecond); own.Before(mark) {
		mark = own
	}
	if mark.UnixMilli() <= 0 {
		return time.Time{}
	}
	return mark
}
