package twopc

import (
	"context"
	"errors"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/topology"
)

// transient reports whether err may pass if the operation is tried again:
// a network error or a server that did not answer in time, while the
// caller's context is still live. Such a failure is ambiguous for a write:
// it may or may not have happened.
func transient(ctx context.Context, err error) bool {
	var stepErr *StepError
	if err == nil || ctx.Err() != nil || errors.As(err, &stepErr) {
		return false // a step hook's error stops the caller, whatever it wraps
	}
	return mongo.IsNetworkError(err) || mongo.IsTimeout(err) || errors.Is(err, context.DeadlineExceeded) || poolCleared(err) || transientServer(err)
}

// transientCodes are the server's error codes a write is retried after:
// the driver's own list for retryable writes (x/mongo/driver's
// retryableCodes, as the retryable writes specification lists them), which
// say that a primary stepped down, shut down or could not be reached (a
// shard's failover on a sharded cluster), not that the write was wrong.
var transientCodes = map[int]bool{
	6:     true, // HostUnreachable
	7:     true, // HostNotFound
	89:    true, // NetworkTimeout
	91:    true, // ShutdownInProgress
	189:   true, // PrimarySteppedDown
	262:   true, // ExceededTimeLimit
	9001:  true, // SocketException
	10107: true, // NotWritablePrimary
	11600: true, // InterruptedAtShutdown
	11602: true, // InterruptedDueToReplStateChange
	13435: true, // NotPrimaryNoSecondaryOk
	13436: true, // NotPrimaryOrSecondary
}

// retryableWriteLabel is the label a server (or the driver) puts on an
// error a write may be retried after.
const retryableWriteLabel = "RetryableWriteError"

// transientServer reports whether err is a server's answer that says the
// write may pass if sent again, and not that it is refused: it carries the
// RetryableWriteError label, or one of transientCodes, as the command's
// error, a write-concern error, or a statement's write error inside a bulk
// (each of which the driver's HasErrorCode looks at). Its outcome is
// unknown: a guarded write sent again applies at most once.
func transientServer(err error) bool {
	var se mongo.ServerError
	if !errors.As(err, &se) {
		return false
	}
	if se.HasErrorLabel(retryableWriteLabel) {
		return true
	}
	for _, code := range se.ErrorCodes() {
		if transientCodes[code] {
			return true
		}
	}
	return false
}

// transientWrite reports whether we, a statement's write error inside a
// bulk whose error is bwe, says the statement's outcome is unknown rather
// than refused: its code is transient, or the command's reply carries the
// RetryableWriteError label.
func transientWrite(bwe mongo.BulkWriteException, we mongo.BulkWriteError) bool {
	return transientCodes[we.Code] || bwe.HasErrorLabel(retryableWriteLabel)
}

// writeError is we, a statement's write error inside a bulk whose error is
// bwe, as an error that transient judges as transientWrite does: the
// statement's own, or bwe when only the command's label makes it
// transient (a statement's write error carries no labels).
func writeError(bwe mongo.BulkWriteException, we mongo.BulkWriteError) error {
	if !transientCodes[we.Code] && bwe.HasErrorLabel(retryableWriteLabel) {
		return bwe
	}
	return we.WriteError
}

// poolCleared reports whether err is the driver's "connection pool was
// cleared because another operation failed": a network error of another
// operation paused the pool, and this one gave up at a connection's
// checkout. It passes once the driver sees the server again, so it is
// tried again. It does not say that nothing was sent: the driver retries
// a checkout that failed so, and on a retryable write (a replica set) it
// may return it after an earlier attempt of its own that was sent (see
// unsent).
func poolCleared(err error) bool {
	var pool driver.RetryablePoolError
	return errors.As(err, &pool) && pool.Retryable()
}

// try runs one database operation of step for r: it calls the step hook,
// then op, and repeats both while op fails transiently, up to the
// coordinator's retries. op must be safe to repeat; callers that need to
// know whether an ambiguous write happened re-read afterwards.
func (c *config) try(ctx context.Context, step Step, r *record, op func(context.Context) error) error {
	return c.retry(ctx, func(ctx context.Context) error {
		if err := c.at(ctx, step, r); err != nil {
			return err
		}
		return op(ctx)
	})
}

// retry runs op, and again while it fails transiently, up to the
// coordinator's retries, backing off between attempts.
func (c *config) retry(ctx context.Context, op func(context.Context) error) error {
	backoff := 10 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := op(ctx)
		if !transient(ctx, err) || attempt >= c.retries {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(backoff):
		}
		backoff *= 2
	}
}

// findAll reads every document of coll that filter matches, as T, retried
// as every read is (see retry).
func findAll[T any](ctx context.Context, c *config, coll *mongo.Collection, filter bson.D, opts ...options.Lister[options.FindOptions]) ([]T, error) {
	var found []T
	err := c.retry(ctx, func(ctx context.Context) error {
		cur, err := coll.Find(ctx, filter, opts...)
		if err != nil {
			return err
		}
		found = found[:0]
		return cur.All(ctx, &found)
	})
	return found, err
}

// errNotSent marks the error of a call none of whose writes was sent: it
// left before its write (a context that ended, a call of the same key it
// waited for), or the driver gave up on every attempt before sending it.
var errNotSent = errors.New("nothing was sent to the server")

// unsent reports whether err, an attempt's error, says the driver gave up
// before a connection carried the command: it found no server, or waited
// in vain for a connection. On a retry of its own the driver reports those
// with the earlier attempt's error, so they mean that no attempt of this
// operation was sent. Any other error may have come after the server
// received the command: a context's that ended mid-round-trip; the
// driver's "operation not sent to server, as Timeout would be exceeded",
// which a retry of the driver's own (retryable writes) returns even after
// an earlier attempt was sent; and a cleared pool (poolCleared), which
// the driver retries and may return in place of an earlier attempt's
// error.
func unsent(err error) bool {
	var selection topology.ServerSelectionError
	var pool topology.WaitQueueTimeoutError
	return errors.As(err, &selection) || errors.As(err, &pool)
}

// retrySent is retry for a write whose caller must know whether it may
// have reached the server: it sets *sent once an attempt may have been
// sent (see unsent). An attempt is not made once ctx has ended.
func (c *config) retrySent(ctx context.Context, sent *bool, op func(context.Context) error) error {
	return c.retry(ctx, func(ctx context.Context) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		err := op(ctx)
		if err == nil || !unsent(err) {
			*sent = true
		}
		return err
	})
}
