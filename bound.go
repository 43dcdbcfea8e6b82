package twopc

// Failing fast and answering truly: a money call's bound (WithCallTimeout),
// and the read back by which a call whose context ended after its write was
// sent answers by what the log holds, not by the record it held.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// readBackTimeout bounds the read back, on a context of its own, of what a
// write sent under a context that has ended did (see readAfter), and a
// commit's wait for the group write it is in (see stage).
const readBackTimeout = 2 * time.Second

// boundError is the cause of a money call's context ending at its bound.
type boundError struct{ d time.Duration }

func (e *boundError) Error() string {
	return fmt.Sprintf("twopc: the call's bound of %v (WithCallTimeout) passed", e.d)
}

// Unwrap makes the bound a deadline: errors.Is(err, context.DeadlineExceeded).
func (e *boundError) Unwrap() error { return context.DeadlineExceeded }

// callBound is one money call's bound: its context, and whether the bound
// (not the caller's context) is what may end it.
type callBound struct {
	parent context.Context
	ctx    context.Context
	cancel context.CancelFunc
	cause  *boundError // nil: the caller's deadline comes first
}

// bound returns the context of a money call made under ctx: ctx, ended at
// the coordinator's call bound (WithCallTimeout) unless ctx has an earlier
// deadline, the whole call, retries and waits included, under it. The
// call must end b (b.end) when it returns, and pass each error it returns
// through b.explain.
func (c *config) bound(ctx context.Context) (context.Context, *callBound) {
	b := &callBound{parent: ctx, ctx: ctx, cancel: func() {}}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= c.callTimeout {
		return ctx, b
	}
	b.cause = &boundError{d: c.callTimeout}
	b.ctx, b.cancel = context.WithTimeoutCause(ctx, c.callTimeout, b.cause)
	return b.ctx, b
}

// explain returns err, the error of a call under b, saying that the
// call's bound ended it, when it did: the bound passed (the caller's
// context had not ended) and err is a deadline's.
func (b *callBound) explain(err error) error {
	if err == nil || b.cause == nil || b.parent.Err() != nil || context.Cause(b.ctx) != b.cause ||
		!errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if strings.HasPrefix(err.Error(), prefix) {
		return errorf("%w; %w", err, b.cause)
	}
	return errorf("twopc: %w; %w", err, b.cause)
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
