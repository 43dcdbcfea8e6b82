package twopc

// Failing fast and answering truly: a money call's bound (WithCallTimeout),
// a read's (WithReadTimeout), and the read back by which a call whose
// context ended after its write was sent answers by what the log holds,
// not by the record it held.

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/topology"
)

// readBackTimeout bounds the read back, on a context of its own, of what a
// write sent under a context that has ended did (see readAfter), and a
// commit's wait for the group write it is in (see stage).
const readBackTimeout = 2 * time.Second

// batchAllowance is what a TransferBatch's bound grows by for each of its
// transfers, over WithCallTimeout's (see batchBound): a full batch of
// MaxBatch gets 60 s at the default, above the slowest full batch
// measured on a busy dev server (53 s; 10 to 18 s typically; PROTOCOL.md,
// "Errors and bad input").
const batchAllowance = 50 * time.Millisecond

// boundError is the cause of a bounded call's context ending at its bound.
type boundError struct {
	d    time.Duration
	what string // the bound, as its error says it: "the call's bound"
	set  string // what set it: "WithCallTimeout"
}

func (e *boundError) Error() string {
	return fmt.Sprintf("twopc: %s passed", e.String())
}

// String is the bound and what set it: "the read bound of 10s
// (WithReadTimeout)".
func (e *boundError) String() string { return fmt.Sprintf("%s of %v (%s)", e.what, e.d, e.set) }

// Unwrap makes the bound a deadline: errors.Is(err, context.DeadlineExceeded).
func (e *boundError) Unwrap() error { return context.DeadlineExceeded }

// callBound is one call's bound (a money call's, or a read's): its
// context, and whether the bound (not the caller's context) is what may
// end it.
type callBound struct {
	parent context.Context
	ctx    context.Context
	cancel context.CancelFunc
	cause  *boundError // nil: the caller's deadline comes first
	// read names a read call (or a long call, see trips) in its errors
	// (see plain); "" for a money call.
	read string
	// tripped says that the bound of one of the call's round trips ended
	// it (see roundTrip): a read bounded per round trip, not as a whole.
	tripped atomic.Bool
}

// bound returns the context of a money call made under ctx: ctx, ended at
// the coordinator's call bound (WithCallTimeout) unless ctx has an earlier
// deadline, the whole call, retries and waits included, under it. The
// call must end b (b.end) when it returns, and pass each error it returns
// through b.explain.
func (c *config) bound(ctx context.Context) (context.Context, *callBound) {
	return within(ctx, c.callCause(), "")
}

func (c *config) callCause() *boundError {
	return &boundError{d: c.callTimeout, what: "the call's bound", set: "WithCallTimeout"}
}

// batchBound is bound for a TransferBatch of n transfers: WithCallTimeout's
// bound and batchAllowance for each transfer, so that a full batch on a
// busy server is not cut by a bound made for one transfer.
func (c *config) batchBound(ctx context.Context, n int) (context.Context, *callBound) {
	return within(ctx, &boundError{d: c.callTimeout + time.Duration(n)*batchAllowance, what: "the batch's bound",
		set: fmt.Sprintf("WithCallTimeout and %v a transfer", batchAllowance)}, "")
}

// readBound returns the context of read, a read call made under ctx, as
// bound does a money call's: ended at the read bound (WithReadTimeout)
// unless ctx has an earlier deadline. read names the call in its errors.
func (c *config) readBound(ctx context.Context, read string) (context.Context, *callBound) {
	return within(ctx, c.readCause(), read)
}

// readTrips returns the bound of read, a long read made under ctx and
// bounded per round trip (see roundTrip), not as a whole.
func (c *config) readTrips(ctx context.Context, read string) *callBound {
	return &callBound{parent: ctx, ctx: ctx, cancel: func() {}, cause: c.readCause(), read: read}
}

func (c *config) readCause() *boundError {
	return &boundError{d: c.readTimeout, what: "the read bound", set: "WithReadTimeout"}
}

// within returns ctx ended at cause's bound, and its callBound; ctx itself
// if its deadline comes first.
func within(ctx context.Context, cause *boundError, read string) (context.Context, *callBound) {
	b := &callBound{parent: ctx, ctx: ctx, cancel: func() {}, read: read}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= cause.d {
		return ctx, b
	}
	b.cause = cause
	b.ctx, b.cancel = context.WithTimeoutCause(ctx, cause.d, cause)
	return b.ctx, b
}

// readWithin runs read, a read call named name (or one page of an
// iterator's), under the read bound, and returns what it read and its
// error as explain says it.
func readWithin[T any](ctx context.Context, c *config, name string, read func(context.Context) (T, error)) (T, error) {
	ctx, b := c.readBound(ctx, name)
	defer b.end()
	v, err := read(ctx)
	return v, b.explain(err)
}

// roundTrip runs read, one round trip (or one batch) of the long read b
// bounds, under a read bound of its own, unless ctx's deadline comes
// first, and returns what it read.
func roundTrip[T any](ctx context.Context, b *callBound, read func(context.Context) (T, error)) (T, error) {
	tctx, t := within(ctx, b.cause, b.read)
	defer t.end()
	v, err := read(tctx)
	if t.ended(err) {
		b.tripped.Store(true)
	}
	return v, err
}

// trip is roundTrip for op, which returns only an error; with b nil, op
// runs under ctx alone.
func (b *callBound) trip(ctx context.Context, op func(context.Context) error) error {
	if b == nil {
		return op(ctx)
	}
	_, err := roundTrip(ctx, b, func(ctx context.Context) (struct{}, error) { return struct{}{}, op(ctx) })
	return err
}

// trips are the bounds of a long call (a feed's sequencer or subscriber,
// a recovery pass, EnsureIndexes, a feed's deletion), which is bounded
// per round trip, not as a whole: each read (with its retries) by the
// read bound (WithReadTimeout), each write, or each transaction a
// recovery pass takes on, by the call bound (WithCallTimeout). The zero
// trips bound nothing: the caller's context alone does.
type trips struct{ r, w *callBound }

// trips returns the bounds of call, a long call made under ctx; call
// names it in its errors.
func (c *config) trips(ctx context.Context, call string) trips {
	return trips{
		r: c.readTrips(ctx, call),
		w: &callBound{parent: ctx, ctx: ctx, cancel: func() {}, cause: c.callCause(), read: call},
	}
}

// read runs op, a read of the long call, under the read bound.
func (t trips) read(ctx context.Context, op func(context.Context) error) error {
	return t.r.trip(ctx, op)
}

// write runs op, a write of the long call, under the call bound.
func (t trips) write(ctx context.Context, op func(context.Context) error) error {
	return t.w.trip(ctx, op)
}

// serverNow reads g's server clock (txnLog.serverNow), a read of the
// long call.
func (t trips) serverNow(ctx context.Context, g *txnLog) (now time.Time, err error) {
	err = t.read(ctx, func(ctx context.Context) (err error) {
		now, err = g.serverNow(ctx)
		return err
	})
	return now, err
}

// tripped reports whether a bound ended one of the call's round trips:
// the server did not answer within it.
func (t trips) tripped() bool {
	return t.r != nil && (t.r.tripped.Load() || t.w.tripped.Load())
}

// explain returns err, the long call's error, said plainly (see plain)
// when a bound ended one of its round trips; an error a round trip's own
// bound already said so (a scan's, a Read's) is returned as that said it,
// without the steps that wrapped it. Any other error is returned as it
// is: one the driver's own timeout or a connection ended names the
// collection (and so the deployment) it could not reach.
func (t trips) explain(err error) error {
	if err == nil || t.r == nil {
		return err
	}
	var p *plainError
	switch {
	case errors.As(err, &p):
		return p
	case t.w.tripped.Load():
		return t.w.explain(err)
	case t.r.tripped.Load():
		return t.r.explain(err)
	}
	return err
}

// next is cur.Next for a cursor of the long read b bounds: a Next that
// must fetch the next batch (a getMore) is a round trip.
func (b *callBound) next(ctx context.Context, cur *mongo.Cursor) bool {
	if cur.RemainingBatchLength() > 0 {
		return cur.Next(ctx)
	}
	more := false
	_ = b.trip(ctx, func(ctx context.Context) error {
		more = cur.Next(ctx)
		return cur.Err()
	})
	return more
}

// close closes cur, a cursor of the long read b bounds, as a round trip
// (a killCursors, when it was not read to its end).
func (b *callBound) close(ctx context.Context, cur *mongo.Cursor) { _ = b.trip(ctx, cur.Close) }

// ended reports whether b's bound ended the call whose error is err: the
// bound passed (the caller's context had not ended), and err is a
// deadline's or one the call would have tried again had the bound not
// passed (see transient; a retry's wait that the bound cut returns the
// attempt's error).
func (b *callBound) ended(err error) bool {
	return err != nil && b.cause != nil && b.parent.Err() == nil && (b.tripped.Load() || context.Cause(b.ctx) == b.cause) &&
		(errors.Is(err, context.DeadlineExceeded) || transient(b.parent, err))
}

// explain returns err, the error of a call under b, saying that the
// call's bound ended it, when it did; a read's is said plainly (see
// plain).
func (b *callBound) explain(err error) error {
	ended := b.ended(err)
	if b.read != "" {
		return b.plain(err, ended)
	}
	if !ended {
		return err
	}
	if strings.HasPrefix(err.Error(), prefix) {
		return errorf("%w; %w", err, b.cause)
	}
	return errorf("twopc: %w; %w", err, b.cause)
}

// plain returns err, the error of read b.read, said plainly when no
// server could be reached (no server selected, or the connection failed)
// or the read bound ended it: the read, what happened and the driver's
// error, not the steps on the way that wrapped it (a shard key's check, a
// hello). It wraps err, and the bound when it ended the read, so
// errors.Is and errors.As find the driver's errors and the context's.
func (b *callBound) plain(err error, ended bool) error {
	var sse topology.ServerSelectionError
	selected := !errors.As(err, &sse)
	unreached := !selected || mongo.IsNetworkError(err)
	if !unreached && !ended {
		return err
	}
	why, what := "the server could not be reached", driverError(err)
	if !selected {
		what = sse
	}
	if ended {
		if !unreached {
			why = "the server did not answer"
		}
		why += " within " + b.cause.String()
	}
	p := &plainError{msg: fmt.Sprintf("%s%s: %s: %v", prefix, b.read, why, what), errs: []error{err}}
	switch ctxErr := b.parent.Err(); {
	case ended:
		p.errs = append(p.errs, b.cause)
	case ctxErr != nil && !errors.Is(err, ctxErr):
		p.errs = append(p.errs, ctxErr) // the caller's context ended it, in a retry's wait
	}
	return p
}

// plainError is a read's error said plainly (see plain).
type plainError struct {
	msg  string
	errs []error // the read's error, and the bound or the context that ended the read
}

func (e *plainError) Error() string   { return e.msg }
func (e *plainError) Unwrap() []error { return e.errs }

// driverError returns the driver's error that err wraps (the first error
// of the driver's packages on the way down), else the last error it
// wraps.
func driverError(err error) error {
	last, _ := fromDriver(err)
	return last
}

// fromDriver returns the first error of the driver's packages in err's
// tree and true, or the last error on its first branch and false.
func fromDriver(err error) (error, bool) {
	t := reflect.TypeOf(err)
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if strings.HasPrefix(t.PkgPath(), "go.mongodb.org/mongo-driver/") {
		return err, true
	}
	var below []error
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		below = []error{u.Unwrap()}
	case interface{ Unwrap() []error }:
		below = u.Unwrap()
	}
	last := err
	for i, e := range below {
		if e == nil {
			continue
		}
		d, ok := fromDriver(e)
		if ok {
			return d, true
		}
		if i == 0 {
			last = d
		}
	}
	return last, false
}

// end releases b's timer.
func (b *callBound) end() { b.cancel() }

// afterEnd returns a context for reading back what a write sent under ctx
// did, once ctx has ended: ctx's values, none of its end, and
// readBackTimeout.
func afterEnd(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), readBackTimeout)
}

// readAfter runs read, a read of what writes sent under ctx did: under
// ctx while it lasts, and, if ctx has ended (before the read or during
// it), once more under a context of its own (afterEnd). So a call whose
// context ended after its write was sent answers by what the log holds,
// not by what it held before the write.
func readAfter(ctx context.Context, read func(context.Context) error) error {
	if ctx.Err() == nil {
		err := read(ctx)
		if err == nil || ctx.Err() == nil {
			return err
		}
	}
	rctx, cancel := afterEnd(ctx)
	defer cancel()
	return read(rctx)
}

// readBack reads transaction id (see txnLog.read) as readAfter does.
func (g *txnLog) readBack(ctx context.Context, id bson.ObjectID) (*record, error) {
	var cur *record
	err := readAfter(ctx, func(ctx context.Context) error {
		var err error
		cur, err = g.read(ctx, id)
		return err
	})
	return cur, err
}
