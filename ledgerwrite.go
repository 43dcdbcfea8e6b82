package twopc

// A ledger's reads of its accounts, its fences and undos, and how it sends
// a command of leg writes and learns what each statement did.

import (
	"context"
	"errors"

	"github.com/twopc/twopc/internal/schema"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// findIDs reads the accounts of ids (by _id, with projection), as T,
// retried as every read of the ledger is.
func findIDs[T any](ctx context.Context, l *Ledger, ids bson.A, projection bson.D) ([]T, error) {
	return findAll[T](ctx, l.config, l.accounts, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}},
		options.Find().SetProjection(projection))
}

// inspect reads the accounts of legs, in order; nil for a missing one.
func (l *Ledger) inspect(ctx context.Context, legs []leg) ([]*account, error) {
	ids := make(bson.A, len(legs))
	for i, lg := range legs {
		ids[i] = lg.account
	}
	found, err := findIDs[account](ctx, l, ids, accountProjection)
	if err != nil {
		return nil, err
	}
	byKey := make(map[string]*account, len(found))
	for j := range found {
		byKey[schema.CanonicalID(found[j].ID)] = &found[j]
		l.kinds.saw(&found[j])
	}
	out := make([]*account, len(legs))
	for i, lg := range legs {
		key, _ := schema.IDKey(lg.account)
		out[i] = byKey[key]
		if out[i] == nil {
			l.kinds.gone(key)
		}
	}
	return out, nil
}

// fenceAndUndo closes legs, the legs on l of canceling transaction r: first
// it fences their accounts, so no leg of it can apply there from now on, whoever sends
// it; then it undoes the legs that were applied (guarded by the id still
// being in pendingTransactions, so an undo happens once). Fencing first is
// what makes the undo final: an apply that raced ahead of the fence is seen
// and undone, one that comes after it matches nothing.
func (l *Ledger) fenceAndUndo(ctx context.Context, r *record, legs []leg) error {
	fences := make([]mongo.WriteModel, len(legs))
	for i, lg := range legs {
		fences[i] = fenceModel(r, lg)
	}
	if err := l.fence(ctx, r, fences); err != nil {
		return err
	}
	// Each undo for the kind of account its leg's account was last seen
	// with (see leg.limited); one that may not have matched (a leg never
	// applied, or an account of the other kind) is undone by marker and
	// kind read (byKind). Then the accounts' lines, which drop their
	// fences below the mark: an account that only ever sees rollbacks
	// stays bounded too.
	return l.try(ctx, StepUndo, r, func(ctx context.Context) error {
		undos := make([]mongo.WriteModel, len(legs))
		confirm := map[int]bool{}
		for i, lg := range legs {
			undos[i], confirm[i] = undoModel(l.kinds.of(lg)), true
		}
		failed, unconfirmed, err := l.writeConfirmed(ctx, undos, confirm)
		if err != nil {
			return err
		}
		var again []leg
		for i := range legs {
			if failed[i] || unconfirmed[i] {
				again = append(again, legs[i])
			}
		}
		if len(again) > 0 {
			// Any leg still pending comes with an error.
			if _, err := l.byKind(ctx, again, undoModel); err != nil {
				return err
			}
		}
		var lines []mongo.WriteModel
		line := lineFor(l.mark.line(), r)
		for _, lg := range legs {
			if m := lineModel(lg, line); m != nil {
				lines = append(lines, m)
			}
		}
		if len(lines) == 0 {
			return nil
		}
		_, err = l.accounts.BulkWrite(ctx, lines, unorderedWrite)
		return err
	})
}

// fence sends r's fence upserts. An upsert that finds the account past its
// fence line (or unable to take a fence) fails on the _id's uniqueness: the
// account is closed to r already, which is what the fence is for. Since a write error may hide
// the statements after it (FerretDB v1 stops a command at its first), a
// command with write errors is sent again a statement at a time, and a
// duplicate key is tried once more (two rollbacks may race to insert one
// tombstone) before it is taken as the fence line's answer.
func (l *Ledger) fence(ctx context.Context, r *record, models []mongo.WriteModel) error {
	send := func(models []mongo.WriteModel) error {
		return l.try(ctx, StepFence, r, func(ctx context.Context) error {
			_, err := l.accounts.BulkWrite(ctx, models, unorderedWrite)
			return err
		})
	}
	err := send(models)
	var bwe mongo.BulkWriteException
	if err == nil || !errors.As(err, &bwe) || bwe.WriteConcernError != nil || len(bwe.WriteErrors) == 0 {
		return err
	}
	for _, m := range models {
		err := send([]mongo.WriteModel{m})
		if mongo.IsDuplicateKeyError(err) {
			err = send([]mongo.WriteModel{m})
		}
		if err != nil && !mongo.IsDuplicateKeyError(err) {
			return err
		}
	}
	return nil
}

// write sends models, idempotent updates of accounts, as unordered
// bulk writes of at most writeBatch statements each, every one retried on
// its own. It returns the indexes of the models that may not have been
// applied and the first error.
//
// A command that fails with write errors is sent again one statement at a
// time, and only the statements that fail then are returned: sending an
// applied statement again changes nothing, and what each statement's own
// answer says is then beyond doubt. Any other failure returns that
// command's statements and all after it, unsent, for the next pass.
func (l *Ledger) write(ctx context.Context, models []mongo.WriteModel) (map[int]bool, error) {
	failed, _, err := l.writeConfirmed(ctx, models, nil)
	return failed, err
}

// writeConfirmed is write, and also returns, of the models confirm names,
// those that may not have matched a document: every one of them in a
// command whose matched count fell short of its statements (each names
// one document by _id, so a command in which all matched matched as many
// as it has), or that was sent again alone and matched nothing; and, in
// place of failing them, those the server refused alone with a write
// error (a single-document statement that did not apply), for the caller
// to send otherwise. A transient error (see transient: a retryable code or
// the RetryableWriteError label, the command's or a statement's) is
// retried with its command; one that persists leaves its statements not
// done or unconfirmed, never refused for good.
func (l *Ledger) writeConfirmed(ctx context.Context, models []mongo.WriteModel, confirm map[int]bool) (map[int]bool, map[int]bool, error) {
	failed := map[int]bool{}
	unconfirmed := map[int]bool{}
	var firstErr error
	send := func(start, end int) error {
		return l.retry(ctx, func(ctx context.Context) error {
			res, err := l.accounts.BulkWrite(ctx, models[start:end], unorderedWrite)
			if err == nil && (res == nil || res.MatchedCount < int64(end-start)) {
				for i := start; i < end; i++ {
					if confirm[i] {
						unconfirmed[i] = true
					}
				}
			}
			return err
		})
	}
	for start := 0; start < len(models); start += l.writeBatch {
		end := min(start+l.writeBatch, len(models))
		err := send(start, end)
		var bwe mongo.BulkWriteException
		switch {
		case err == nil:
			continue
		case errors.As(err, &bwe) && len(bwe.WriteErrors) > 0 && bwe.WriteConcernError == nil:
			// refused is a statement the server refused alone: failed, or,
			// if confirm names it, left for the caller to send otherwise
			// (a refused single-document statement did not apply).
			refused := func(i int, err error) {
				if confirm[i] {
					unconfirmed[i] = true
					return
				}
				failed[i] = true
				firstErr = cmpErr(firstErr, err)
			}
			if end-start == 1 {
				refused(start, err)
				continue
			}
			for i := start; i < end; i++ {
				err := send(i, i+1)
				if err == nil {
					continue
				}
				if errors.As(err, &bwe) && len(bwe.WriteErrors) > 0 && bwe.WriteConcernError == nil {
					refused(i, err)
					continue
				}
				failed[i] = true
				firstErr = cmpErr(firstErr, err)
			}
			continue
		}
		// The server did not answer, or refused the command: this
		// chunk and the rest wait for the next pass.
		for i := start; i < len(models); i++ {
			failed[i] = true
		}
		return failed, unconfirmed, err
	}
	return failed, unconfirmed, firstErr
}
