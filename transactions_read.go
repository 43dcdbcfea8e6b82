package twopc

// The reads behind Coordinator.Transactions: an account's transactions
// from the log, then from the archive, merged in order, each once.

import (
	"context"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// scan returns the account's transactions that match the reader's query
// and come after pos (before it, Reverse; nil: from the start), in order:
// at least need of them if there are as many. cut reports that more may
// follow those returned.
//
// The log is read first, then the archive: archiving inserts a
// transaction into the archive before it deletes it from the log, so one
// that moves meanwhile is in the log at the first read or in the archive
// at the second (and in both if it moved between them). A transaction the
// archive holds is its record: the log's copy of one (a late duplicate's,
// see WithHistory: the same created, accounts, key and metadata, another
// state) is not listed, wherever the archive's record falls and whether
// or not it matches. The log's transactions are looked up in the archive
// by _id, after its read; one found there (a copy, or a transaction
// archived after the archive's read) is listed as the archive holds it,
// if that record's state is among those asked for: so a transaction
// archived between the reads is still listed, once.
func (r *txnReader) scan(ctx context.Context, pos *txnPos, need int) ([]*record, bool, error) {
	logged, logCut, err := r.read(ctx, r.c.log.txns, pos, need)
	if err != nil {
		return nil, false, errorf("twopc: transactions: read the log: %w", err)
	}
	if r.archive == nil {
		return logged, logCut, nil
	}
	archived, archiveCut, err := r.read(ctx, r.archive, pos, need)
	if err != nil {
		return nil, false, errorf("twopc: transactions: read the archive: %w", err)
	}
	// edge is the last transaction every collection was read through:
	// past a cut collection's last one, its transactions are unknown, so
	// merged ones past it wait for a later read.
	var edge *record
	for _, c := range []struct {
		recs []*record
		cut  bool
	}{{logged, logCut}, {archived, archiveCut}} {
		if last := len(c.recs) - 1; c.cut && last >= 0 && (edge == nil || r.before(c.recs[last], edge)) {
			edge = c.recs[last]
		}
	}
	inArchive := map[bson.ObjectID]bool{}
	for _, t := range archived {
		inArchive[t.ID] = true
	}
	var rest bson.A
	for _, t := range logged {
		if !inArchive[t.ID] {
			rest = append(rest, t.ID)
		}
	}
	late, err := r.held(ctx, rest)
	if err != nil {
		return nil, false, errorf("twopc: transactions: read the archive: %w", err)
	}
	out := slices.Clone(archived)
	for _, t := range late {
		inArchive[t.ID] = true
		if len(r.states) == 0 || slices.Contains(r.states, string(t.State)) {
			out = append(out, t)
		}
	}
	for _, t := range logged {
		if !inArchive[t.ID] {
			out = append(out, t)
		}
	}
	slices.SortFunc(out, func(a, b *record) int {
		if r.reverse {
			return keyCompare(b, a)
		}
		return keyCompare(a, b)
	})
	if edge != nil {
		for i, t := range out {
			if r.before(edge, t) {
				out = out[:i]
				break
			}
		}
	}
	return out, logCut || archiveCut, nil
}

// before reports whether a comes before b in the reader's order.
func (r *txnReader) before(a, b *record) bool {
	if r.reverse {
		return keyCompare(a, b) > 0
	}
	return keyCompare(a, b) < 0
}

// held returns the archive's records of the transactions ids names that
// it holds, whatever they say, a thousand ids a read.
func (r *txnReader) held(ctx context.Context, ids bson.A) ([]*record, error) {
	var out []*record
	for chunk := range slices.Chunk(ids, 1000) {
		found, err := findAll[*record](ctx, &r.c.config, r.archive, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: chunk}}}})
		if err != nil {
			return nil, err
		}
		out = append(out, found...)
	}
	return out, nil
}

// read returns, from coll, the first need transactions of the account
// that match the reader's query after pos (before it, Reverse), in order,
// by the {accounts, created, _id} index (hinted by its keys: the equality
// on the account and the range on created bound the scan, and the index
// gives the order); cut reports that it returned need.
//
// The query's other conditions go in an $and, matched among the rows the
// index gives: the dev server's FerretDB reads a filter by the first index
// whose first key the filter names at its top level, and would read one
// naming state there by the {state, created} index.
func (r *txnReader) read(ctx context.Context, coll *mongo.Collection, pos *txnPos, need int) ([]*record, bool, error) {
	lo, hi := r.lo, r.hi
	if pos != nil {
		if !r.reverse && (lo.IsZero() || pos.at.After(lo)) {
			lo = pos.at
		}
		if u := pos.at.Add(time.Millisecond); r.reverse && (hi.IsZero() || u.Before(hi)) {
			hi = u
		}
	}
	created := bson.D{{Key: "$type", Value: "date"}}
	if !lo.IsZero() {
		created = append(created, bson.E{Key: "$gte", Value: lo})
	}
	if !hi.IsZero() {
		created = append(created, bson.E{Key: "$lt", Value: hi})
	}
	filter := bson.D{{Key: fieldEntryKeys, Value: r.key}, {Key: fieldCreated, Value: created}}
	op, dir := "$gt", 1
	if r.reverse {
		op, dir = "$lt", -1
	}
	if pos != nil && !pos.whole {
		// With the range above, (created, _id) strictly past pos.
		filter = append(filter, bson.E{Key: "$or", Value: bson.A{
			bson.D{{Key: fieldCreated, Value: bson.D{{Key: op, Value: pos.at}}}},
			bson.D{{Key: "_id", Value: bson.D{{Key: op, Value: pos.id}}}},
		}})
	}
	if len(r.among) > 0 {
		filter = append(filter, bson.E{Key: "$and", Value: r.among})
	}
	opts := options.Find().SetSort(bson.D{{Key: fieldCreated, Value: dir}, {Key: "_id", Value: dir}}).
		SetLimit(int64(need)).SetHint(transactionsIndexKeys)
	var out []*record
	err := r.c.retry(ctx, func(ctx context.Context) error {
		cur, err := coll.Find(ctx, filter, opts)
		if err != nil {
			return err
		}
		defer cur.Close(ctx)
		out = out[:0]
		for cur.Next(ctx) {
			var t record
			if err := cur.Decode(&t); err != nil {
				return errorf("%w: %v: %v", ErrMalformedTxn, cur.Current.Lookup("_id"), err)
			}
			out = append(out, &t)
		}
		return cur.Err()
	})
	return out, len(out) >= need, err
}
