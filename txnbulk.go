package twopc

// Transaction-state writes of several transactions (the group commit, the
// move to done of a batch) go as unordered bulks of single-document
// statements by _id, never as one update of many: a command of them is a
// retryable write, each statement is routed to one shard on a sharded log,
// and the count is exact (an update of many on a sharded collection may
// apply to a document zero, one or several times during a chunk
// migration). Each statement carries its own transaction's guard, and its
// own error.

import (
	"context"
	"errors"

	"go.mongodb.org/mongo-driver/v2/mongo"
)

// bulkByID sends models, single-document statements by _id on the log, as
// unordered commands of at most writeBatch statements each, every command
// retried while it fails transiently (see retry), and returns how many
// documents the last attempts modified and, by index in models, each
// failed statement's error (see statementErrors). A statement not in the
// map modified its document or matched none.
func (g *txnLog) bulkByID(ctx context.Context, models []mongo.WriteModel) (int64, map[int]error) {
	var modified int64
	failed := map[int]error{}
	for start := 0; start < len(models); start += g.writeBatch {
		end := min(start+g.writeBatch, len(models))
		var n int64
		err := g.retry(ctx, func(ctx context.Context) error {
			res, err := g.txns.BulkWrite(ctx, models[start:end], unorderedWrite)
			n = 0
			if res != nil {
				n = res.ModifiedCount
			}
			return err
		})
		modified += n
		for i, e := range statementErrors(err, end-start) {
			failed[start+i] = e
		}
	}
	return modified, failed
}

// statementErrors is, by statement index, the error each of n statements
// of an unordered bulk write got from err, the bulk's error: its own write
// error when the server refused statements one by one (the others applied
// or matched nothing); err itself for every statement when the command
// failed as a whole, was not answered, or got a write-concern error (each
// statement's outcome unknown). Empty when err is nil.
func statementErrors(err error, n int) map[int]error {
	out := map[int]error{}
	if err == nil {
		return out
	}
	var bwe mongo.BulkWriteException
	if errors.As(err, &bwe) && bwe.WriteConcernError == nil && len(bwe.WriteErrors) > 0 {
		for _, we := range bwe.WriteErrors {
			if we.Index >= 0 && we.Index < n {
				out[we.Index] = writeError(bwe, we)
			}
		}
		return out
	}
	for i := range n {
		out[i] = err
	}
	return out
}
