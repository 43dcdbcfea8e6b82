package twopc

// A ledger's leg writes: the applies and the closes of the legs on its
// accounts, each written for the account's kind.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twopc/twopc/internal/schema"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// own returns the legs of legs that are on l, and their indexes in legs.
func (l *Ledger) own(legs []leg) ([]leg, []int) {
	var mine []leg
	var idx []int
	for i, lg := range legs {
		if lg.ledger == l.name {
			mine = append(mine, lg)
			idx = append(idx, i)
		}
	}
	return mine, idx
}

// apply sends the guarded writes that apply legs, each of transaction
// recs[i], in unordered commands of at most writeBatch statements: the
// legs that name one account in one statement where they can share one
// (see coalesce, applyAllModel), each other leg in its own (applyModel).
// It returns how many legs are known applied; the server's reasons for
// the legs it refused, by index in legs; the write errors whose outcome is
// unknown (a transient code or a RetryableWriteError label: see
// transientWrite; never a refusal), by index in legs; and the indexes of
// the legs it did not send: a command is not started with less than an
// eighth of the shortest takeover lease among recs left before ctx's
// deadline (the claims' deadline, half that lease after the oldest claim;
// see applyRound), and its legs and those after it are left unsent, to be
// sent again under renewed claims. Any other failure (whose outcome is
// unknown for the legs of that command) or a write-concern error is
// returned as err.
//
// A command whose count says every statement matched applied every leg
// in it. One that says fewer, or that reports a write error, applied an
// unknown part of its merged statements: their legs are sent again one
// statement each (each guarded by its own marker, so a leg the merged
// statement applied matches nothing), the command counts no leg as known
// applied, and the caller reads the accounts to judge each leg.
func (l *Ledger) apply(ctx context.Context, recs []*record, legs []leg) (int64, map[int]string, map[int]error, []int, error) {
	var modified int64
	refused := map[int]string{}
	unknown := map[int]error{}
	kinded := make([]leg, len(legs))
	for i, lg := range legs {
		kinded[i] = l.kinds.of(lg)
	}
	// statementErrs files the write errors of a command, statement at
	// index k applying legs of[k]: a refusal is its leg's, a transient
	// error leaves its leg's outcome unknown, and an error of a merged
	// statement is no one leg's (its legs go again alone).
	statementErrs := func(bwe mongo.BulkWriteException, of func(k int) []int) {
		for _, we := range bwe.WriteErrors {
			idx := of(we.Index)
			if len(idx) != 1 {
				continue
			}
			if transientWrite(bwe, we) {
				unknown[idx[0]] = writeError(bwe, we)
				continue
			}
			refused[idx[0]] = we.Message
		}
	}
	plan := coalesce(recs, kinded)
	for start := 0; start < len(plan); start += l.writeBatch {
		if d, ok := ctx.Deadline(); ok && start > 0 && time.Until(d) < shortestLease(recs, l.staleAfter)/8 {
			var unsent []int
			for _, s := range plan[start:] {
				unsent = append(unsent, s...)
			}
			return modified, refused, unknown, unsent, nil
		}
		stmts := plan[start:min(start+l.writeBatch, len(plan))]
		models := make([]mongo.WriteModel, len(stmts))
		mark := l.mark.line()
		legCount := 0
		for j, s := range stmts {
			models[j] = s.model(recs, kinded, mark)
			legCount += len(s)
		}
		res, err := l.accounts.BulkWrite(ctx, models, unorderedWrite)
		var bwe mongo.BulkWriteException
		if err != nil && !(errors.As(err, &bwe) && bwe.WriteConcernError == nil) {
			return modified, refused, unknown, nil, err
		}
		if err == nil && res != nil && res.ModifiedCount == int64(len(models)) {
			modified += int64(legCount)
			continue
		}
		// Refused by the server, each for its own reason, at the index
		// of its statement, as MongoDB reports write errors (the dev
		// server's front makes FerretDB's replies so). The accounts are
		// read whatever it says: a wrong index could only call a leg
		// refused that the read finds nothing wrong with, which then
		// fails its transfer with ErrInvalidAccount rather than apply
		// twice. A transient one (a primary stepping down, a shard's
		// failover) is no refusal: its outcome is unknown, and the leg is
		// sent again (it applies at most once). The legs of a merged
		// statement that failed or may not have matched go again alone.
		statementErrs(bwe, func(k int) []int {
			if k < 0 || k >= len(stmts) {
				return nil
			}
			return stmts[k]
		})
		var again []int
		for _, s := range stmts {
			if len(s) > 1 {
				again = append(again, s...)
			}
		}
		if len(again) == 0 {
			continue
		}
		alone := make([]mongo.WriteModel, len(again))
		for j, i := range again {
			alone[j] = applyModel(recs[i], kinded[i], mark)
		}
		_, err = l.accounts.BulkWrite(ctx, alone, unorderedWrite)
		var abwe mongo.BulkWriteException
		if err != nil && !(errors.As(err, &abwe) && abwe.WriteConcernError == nil) {
			return modified, refused, unknown, nil, err
		}
		statementErrs(abwe, func(k int) []int {
			if k < 0 || k >= len(again) {
				return nil
			}
			return []int{again[k]}
		})
	}
	return modified, refused, unknown, nil, nil
}

// closeLegs closes the legs of committed transactions recs: it pulls each
// leg's marker from pendingTransactions while fencing it and moving a
// credit from pendingCredit to the balance (a debit's hold from
// pendingDebit), guarded by the marker, so it happens once. It returns the
// indexes in recs of the transactions a leg of which may not have closed.
//
// The legs of one account close in one statement (closeAllModel), which
// matches only while every one of their markers is pending: one that finds
// a marker gone (closed by another settler) matches nothing, and its legs
// are then closed one statement each, each guarded by its own marker.
//
// Each statement is written for the kind of account (with limits or
// without) the ledger last saw (see leg.limited), and requires it. The
// legs of one that may not have matched (a leg closed by someone else, or
// an account of the other kind: one given limits since, or one this
// process has not read yet) are closed one by one by marker and kind
// read (see byKind): a leg whose marker is still pending is closed for
// the kind its account has, once.
func (l *Ledger) closeLegs(ctx context.Context, recs []*record) (map[int]bool, error) {
	type group struct {
		legs    []leg
		owners  []int                   // every index in recs with a leg here
		markers map[bson.ObjectID][]int // each leg's marker: every index in recs that carries it
	}
	var order []string
	groups := map[string]*group{}
	for i, r := range recs {
		mine, _ := l.own(r.legs())
		for _, lg := range mine {
			lg = l.kinds.of(lg)
			key, err := schema.IDKey(lg.account)
			if err != nil {
				key = fmt.Sprintf("\x00leg %d %s", i, lg.marker.Hex()) // alone
			}
			g := groups[key]
			if g == nil {
				g = &group{markers: map[bson.ObjectID][]int{}}
				groups[key] = g
				order = append(order, key)
			}
			g.owners = append(g.owners, i)
			seen := len(g.markers[lg.marker]) > 0
			g.markers[lg.marker] = append(g.markers[lg.marker], i)
			if seen {
				// The same leg again (a batch naming one transaction
				// twice): one statement must not count it twice.
				continue
			}
			g.legs = append(g.legs, lg)
		}
	}
	var models []mongo.WriteModel
	var owners [][]int // owners[i]: the indexes in recs of models[i]'s legs
	var merged []*group
	var single []leg // single[i]: models[i]'s leg, if it closes one
	confirm := map[int]bool{}
	for _, key := range order {
		g := groups[key]
		if len(g.legs) > 1 {
			if m, ok := closeAllModel(g.legs); ok {
				confirm[len(models)] = true
				models = append(models, m)
				owners = append(owners, g.owners)
				merged = append(merged, g)
				single = append(single, leg{})
				continue
			}
		}
		for _, lg := range g.legs {
			confirm[len(models)] = true
			models = append(models, closeModel(lg))
			owners = append(owners, g.markers[lg.marker])
			merged = append(merged, nil)
			single = append(single, lg)
		}
	}
	failedModels, unconfirmed, err := l.writeConfirmed(ctx, models, confirm)
	for i := range failedModels {
		delete(unconfirmed, i) // failed: reported, and recovery tries again
	}
	failed := map[int]bool{}
	for i := range failedModels {
		for _, o := range owners[i] {
			failed[o] = true
		}
	}
	// A statement that may not have matched, or that the server refused
	// (a write error: it did not apply), has its legs closed one by one,
	// each guarded by its own marker, for the kind its account is read
	// with; a leg that fails then fails every transaction of the batch
	// that carries it.
	var alone []leg
	var aloneOwners [][]int
	for i := range unconfirmed {
		if merged[i] == nil {
			alone, aloneOwners = append(alone, single[i]), append(aloneOwners, owners[i])
			continue
		}
		for _, lg := range merged[i].legs {
			alone, aloneOwners = append(alone, lg), append(aloneOwners, merged[i].markers[lg.marker])
		}
	}
	if len(alone) > 0 {
		more, aerr := l.byKind(ctx, alone, closeModel)
		for k := range more {
			for _, o := range aloneOwners[k] {
				failed[o] = true
			}
		}
		err = cmpErr(err, aerr)
	}
	return failed, err
}

// maxKindRounds bounds byKind's read-and-write rounds. An account only
// ever gains limits, so two rounds see every change of kind; a third
// covers a write that failed in between.
const maxKindRounds = 3

// byKind writes model(lg) for each leg of legs whose marker is still
// pending on its account, a statement each, for the kind of account it is
// read with (the read records the kinds: see Ledger.inspect), and reads
// again those that may not have matched, up to maxKindRounds. A leg whose
// marker is not pending (closed or undone by someone else, or never
// applied) needs nothing. Each statement is guarded by the leg's marker,
// so a leg is closed (undone) once however the rounds interleave with
// other writers. It returns the indexes of the legs that may still be
// pending, and, if there are any, an error: the server's, for a statement
// it refused (sent once more, unconfirmed, to learn it), or one saying
// they kept not matching.
func (l *Ledger) byKind(ctx context.Context, legs []leg, model func(leg) mongo.WriteModel) (map[int]bool, error) {
	left := make([]int, len(legs))
	for i := range left {
		left[i] = i
	}
	var last []mongo.WriteModel // the statements of the last round still unconfirmed
	for round := 0; round < maxKindRounds && len(left) > 0; round++ {
		read := make([]leg, len(left))
		for j, i := range left {
			read[j] = legs[i]
		}
		accts, err := l.inspect(ctx, read)
		if err != nil {
			return indexSet(left), err
		}
		var models []mongo.WriteModel
		var of []int
		confirm := map[int]bool{}
		for j, i := range left {
			a := accts[j]
			if a == nil || !has(a.pending(), legs[i].marker) {
				continue // nothing to do here
			}
			lg := legs[i]
			lg.limited = a.limited()
			confirm[len(models)] = true
			models, of = append(models, model(lg)), append(of, i)
		}
		failed, unconfirmed, err := l.writeConfirmed(ctx, models, confirm)
		if err != nil {
			return indexSet(of), err
		}
		left, last = left[:0], last[:0]
		for k, i := range of {
			if failed[k] || unconfirmed[k] {
				left, last = append(left, i), append(last, models[k])
			}
		}
	}
	if len(left) == 0 {
		return nil, nil
	}
	if _, err := l.write(ctx, last); err != nil {
		return indexSet(left), err
	}
	return indexSet(left), errorf("twopc: ledger %q: %d legs' markers still pending after %d reads and writes", l.name, len(left), maxKindRounds)
}

// indexSet is the set of the indexes in is.
func indexSet(is []int) map[int]bool {
	out := make(map[int]bool, len(is))
	for _, i := range is {
		out[i] = true
	}
	return out
}
