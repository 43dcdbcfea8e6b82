package twopc

// The scan: an account's entries in a window of commit times, read from the
// log and then the archive, each once.

import (
	"bytes"
	"context"
	"slices"
	"time"

	"github.com/twopc/twopc/internal/schema"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// entry is an Entry with its place in the order.
type entry struct {
	Entry
	leg int
}

// compare orders a and b as a statement does (see Statement).
func (a *entry) compare(b *entry) int {
	if c := a.At.Compare(b.At); c != 0 {
		return c
	}
	if ad, bd := a.Amount < 0, b.Amount < 0; ad != bd {
		if bd {
			return -1 // credits first
		}
		return 1
	}
	if c := bytes.Compare(a.Txn[:], b.Txn[:]); c != 0 {
		return c
	}
	return a.leg - b.leg
}

// scan returns the account's entries with At in [lo, hi] (a zero bound:
// unbounded), in order (reversed if desc): at least need of them if there
// are as many (need < 0: all), each millisecond whole. cut reports that
// entries past those returned may exist.
//
// It reads the log, then the archive. Archiving inserts a transaction into
// the archive before it deletes it from the log, so one that moves between
// the two reads is in the log at the first or in the archive at the
// second: every entry is found, and one found in both (a move under way)
// counts once. Which one is an entry is read from the document alone: a
// committed transaction (committedAt a date, state applied or done). A
// late copy that a transaction's own writes, delivered again after it
// left the log, brought back is never committed (see commitMove and
// txnLog.readBackMovable), so it is never an entry, wherever it is found.
func (s *statement) scan(ctx context.Context, lo, hi time.Time, desc bool, need int) (out []entry, cut bool, err error) {
	logged, logCut, err := s.read(ctx, s.c.log.txns, lo, hi, desc, need)
	if err != nil {
		return nil, false, err
	}
	// edge is the last millisecond every collection was read through:
	// past a cut collection's last record, its entries are unknown, so
	// merged entries past it are dropped (else an archived entry could
	// pass a log entry not read yet).
	var edge time.Time
	cutAt := func(recs []*record) {
		last := recs[len(recs)-1].CommittedAt
		if edge.IsZero() || (!desc && last.Before(edge)) || (desc && last.After(edge)) {
			edge = last
		}
	}
	if logCut {
		cutAt(logged)
	}
	byID := map[bson.ObjectID]*record{}
	for _, r := range logged {
		byID[r.ID] = r
	}
	cut = logCut
	if s.archive != nil {
		archived, archiveCut, err := s.read(ctx, s.archive, lo, hi, desc, need)
		if err != nil {
			return nil, false, errorf("twopc: read the archive: %w", err)
		}
		cut = cut || archiveCut
		if archiveCut {
			cutAt(archived)
		}
		for _, r := range archived {
			byID[r.ID] = r // the same document as the log's, if both hold it
		}
	}
	for _, r := range byID {
		if r.CommittedAt.IsZero() || !r.State.Committed() {
			continue
		}
		for i, l := range r.SettledLegs() {
			if l.Amount == 0 || l.Ledger != s.ledger.name || !schema.SameID(l.Account, s.account) {
				// A hold's legs move nothing themselves: its captures'
				// entries are theirs.
				continue
			}
			if !edge.IsZero() && ((!desc && r.CommittedAt.After(edge)) || (desc && r.CommittedAt.Before(edge))) {
				continue
			}
			out = append(out, entry{Entry: Entry{Txn: r.ID, Ledger: l.Ledger, Account: l.Account, Amount: l.Amount,
				At: r.CommittedAt, Key: r.Key, Metadata: r.Metadata, Asset: l.Asset, CaptureOf: r.CaptureOf}, leg: i})
		}
	}
	slices.SortFunc(out, func(a, b entry) int {
		if desc {
			return b.compare(&a)
		}
		return a.compare(&b)
	})
	return out, cut, nil
}

// read returns the committed transactions of coll with a leg on the
// account and committedAt in [lo, hi] (a zero bound: unbounded), by the {accounts, committedAt}
// index, in committedAt order (descending if desc): at least need legs'
// worth of transactions if there are as many (need < 0: all), each
// millisecond whole. cut reports that more may follow.
func (s *statement) read(ctx context.Context, coll *mongo.Collection, lo, hi time.Time, desc bool, need int) ([]*record, bool, error) {
	at := bson.D{{Key: "$type", Value: "date"}}
	if !hi.IsZero() {
		at = append(at, bson.E{Key: "$lte", Value: hi})
	}
	if !lo.IsZero() {
		at = append(at, bson.E{Key: "$gte", Value: lo})
	}
	dir := 1
	if desc {
		dir = -1
	}
	var out []*record
	var cut bool
	err := s.c.retry(ctx, func(ctx context.Context) error {
		opts := options.Find().SetSort(bson.D{{Key: fieldCommittedAt, Value: dir}})
		if need > 0 {
			opts.SetBatchSize(int32(min(need+1, 1000)))
		}
		cur, err := coll.Find(ctx, bson.D{{Key: fieldEntryKeys, Value: s.key}, {Key: fieldCommittedAt, Value: at}}, opts)
		if err != nil {
			return err
		}
		defer cur.Close(ctx)
		out, cut = out[:0], false
		for cur.Next(ctx) {
			var r record
			if err := cur.Decode(&r); err != nil {
				return errorf("%w: %v: %v", ErrMalformedTxn, cur.Current.Lookup("_id"), err)
			}
			if need > 0 && len(out) >= need && !r.CommittedAt.Equal(out[len(out)-1].CommittedAt) {
				cut = true // the last millisecond is whole
				break
			}
			out = append(out, &r)
		}
		return cur.Err()
	})
	return out, cut, err
}
