package twopc

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// TestTransientClassification: a server error carrying the
// RetryableWriteError label or one of the driver's retryable codes (a
// primary stepping down, a shard's failover), as the command's error, a
// write-concern error or a statement's write error inside a bulk, is
// transient (retried, its outcome unknown); a refusal (a type mismatch, a
// duplicate key, a validator) is not.
func TestTransientClassification(t *testing.T) {
	ctx := context.Background()
	stmt := func(index, code int) mongo.BulkWriteError {
		return mongo.BulkWriteError{WriteError: mongo.WriteError{Index: index, Code: code, Message: fmt.Sprint("code ", code)}}
	}
	for _, code := range []int{6, 7, 89, 91, 189, 262, 9001, 10107, 11600, 11602, 13435, 13436} {
		assert.True(t, transient(ctx, mongo.CommandError{Code: int32(code)}), "command error %d", code)
		assert.True(t, transient(ctx, mongo.WriteException{WriteErrors: []mongo.WriteError{{Code: code}}}), "write error %d", code)
		assert.True(t, transient(ctx, mongo.WriteException{WriteConcernError: &mongo.WriteConcernError{Code: code}}), "write-concern error %d", code)
		bwe := mongo.BulkWriteException{WriteErrors: []mongo.BulkWriteError{stmt(0, 14), stmt(1, code)}}
		assert.True(t, transient(ctx, bwe), "a bulk with a statement's error %d", code)
		assert.True(t, transientWrite(bwe, bwe.WriteErrors[1]), "statement error %d", code)
		assert.False(t, transientWrite(bwe, bwe.WriteErrors[0]), "the other statement's refusal, beside %d", code)
		assert.True(t, transient(ctx, fmt.Errorf("wrapped: %w", bwe.WriteErrors[1].WriteError)), "a statement's error %d, wrapped", code)
	}
	labelled := mongo.CommandError{Code: 2, Labels: []string{"RetryableWriteError"}}
	assert.True(t, transient(ctx, labelled), "labelled RetryableWriteError")
	labelledBulk := mongo.BulkWriteException{WriteErrors: []mongo.BulkWriteError{stmt(0, 2)}, Labels: []string{"RetryableWriteError"}}
	assert.True(t, transientWrite(labelledBulk, labelledBulk.WriteErrors[0]), "a statement of a command labelled RetryableWriteError")
	assert.True(t, transient(ctx, labelledBulk))

	for _, code := range []int{2, 14, 11000, 121, 10334} {
		assert.False(t, transient(ctx, mongo.CommandError{Code: int32(code)}), "command error %d is a refusal", code)
		bwe := mongo.BulkWriteException{WriteErrors: []mongo.BulkWriteError{stmt(0, code)}}
		assert.False(t, transient(ctx, bwe), "bulk with write error %d is a refusal", code)
		assert.False(t, transientWrite(bwe, bwe.WriteErrors[0]), "statement error %d is a refusal", code)
	}
	assert.False(t, transient(ctx, errors.New("other")), "an error that is not the server's")
	assert.False(t, transient(ctx, nil))
	ended, cancel := context.WithCancel(ctx)
	cancel()
	assert.False(t, transient(ended, mongo.CommandError{Code: 91}), "not once the caller's context ended")
	assert.False(t, transient(ctx, &StepError{Step: StepApply, Err: mongo.CommandError{Code: 91}}), "a step hook's error stops its caller")
}

// TestStatementErrors: each statement of an unordered bulk gets its own
// write error, or none; a failure of the whole command (or a write-concern
// error) leaves every statement's outcome unknown.
func TestStatementErrors(t *testing.T) {
	assert.Empty(t, statementErrors(nil, 3))
	bwe := mongo.BulkWriteException{WriteErrors: []mongo.BulkWriteError{
		{WriteError: mongo.WriteError{Index: 1, Code: 91}},
		{WriteError: mongo.WriteError{Index: 7, Code: 14}}, // out of range: ignored
	}}
	got := statementErrors(bwe, 3)
	assert.Len(t, got, 1)
	assert.True(t, transient(context.Background(), got[1]), "the statement's transient error, retried")
	whole := mongo.CommandError{Code: 189}
	got = statementErrors(whole, 2)
	assert.Equal(t, map[int]error{0: whole, 1: whole}, got)
	wce := mongo.BulkWriteException{WriteConcernError: &mongo.WriteConcernError{Code: 64}, WriteErrors: []mongo.BulkWriteError{{WriteError: mongo.WriteError{Index: 0, Code: 14}}}}
	assert.Len(t, statementErrors(wce, 2), 2, "a write-concern error: every statement unknown")
	labelled := mongo.BulkWriteException{Labels: []string{"RetryableWriteError"}, WriteErrors: []mongo.BulkWriteError{{WriteError: mongo.WriteError{Index: 0, Code: 2}}}}
	assert.True(t, transient(context.Background(), statementErrors(labelled, 1)[0]), "transient by the command's label")
}
