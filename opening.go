package twopc

// Openings: an account's balance before its first entry, recorded by
// OpenAccount or derived for an account the library did not open.

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"time"

	"github.com/twopc/twopc/internal/schema"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// opening is the account's opening balance: the one OpenAccount recorded,
// or, for an account with none, the one derived from its document, the
// transactions in flight on it and its entries (see derivedOpening).
func (s *statement) opening(ctx context.Context) (int64, error) {
	a := s.doc
	if b, ok := integerOK(a.Lookup(fieldOpening, "balance")); ok {
		return b, nil
	}
	return s.derivedOpening(ctx, a)
}

// opened refuses a balance at a time before the account's opening time
// (OpenAccount's opening.at) with ErrBeforeOpening, unless an entry of the
// account is at or before that time: the opening is stamped by a clock
// corrected to the server's, a reading that may put it a moment after the
// commit stamps of the first transfers, and an entry shows the account
// existed. An account with no opening time (not opened by OpenAccount)
// is never refused.
func (s *statement) opened(ctx context.Context, at time.Time) error {
	open, ok := s.doc.Lookup(fieldOpening, "at").TimeOK()
	if !ok || !at.Before(open) {
		return nil
	}
	first, _, err := s.scan(ctx, time.Time{}, at, false, 1)
	if err != nil || len(first) > 0 {
		return err
	}
	return errorf("twopc: balance of account %v at %s: %w at %s", s.account,
		at.UTC().Format(time.RFC3339Nano), ErrBeforeOpening, open.UTC().Format(time.RFC3339Nano))
}

func (s *statement) readAccount(ctx context.Context) (bson.Raw, error) {
	var a bson.Raw
	err := s.c.retry(ctx, func(ctx context.Context) error {
		var err error
		a, err = s.ledger.accounts.FindOne(ctx, bson.D{{Key: "_id", Value: s.account}}).Raw()
		return err
	})
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, errorf("twopc: statement: %w: %v", ErrAccountNotFound, s.account)
	}
	if err != nil {
		return nil, errorf("twopc: statement: read account %v: %w", s.account, err)
	}
	if tomb, _ := a.Lookup(fieldTombstone).BooleanOK(); tomb {
		return nil, errorf("twopc: statement: %w: %v", ErrAccountNotFound, s.account)
	}
	return a, nil
}

// integerOK is v as an int64 if it is an int32 or an int64, as the
// protocol takes a balance; a double is not.
func integerOK(v bson.RawValue) (int64, bool) {
	switch v.Type {
	case bson.TypeInt64:
		return v.Int64(), true
	case bson.TypeInt32:
		return int64(v.Int32()), true
	}
	return 0, false
}

// saveOpening records a derived opening in the account, where no opening
// is: later reads take it as OpenAccount's, with no derivation. The
// opening of an account this library alone moves does not change (see
// inFlight), so any two readings that agree give the same. A failure
// only costs the next read a derivation.
func (s *statement) saveOpening(ctx context.Context, open int64) {
	_, err := s.ledger.accounts.UpdateOne(ctx, bson.D{{Key: "_id", Value: s.account}, {Key: fieldOpening, Value: bson.D{{Key: "$exists", Value: false}}}},
		bson.D{{Key: "$set", Value: bson.D{{Key: fieldOpening, Value: bson.D{{Key: "balance", Value: open}, {Key: "derived", Value: true}}}}}})
	if err != nil {
		s.c.logger.Debug("twopc: recording a derived opening", "account", s.account, "error", err)
	}
}

// maxOpeningReads bounds the readings of a derived opening.
const maxOpeningReads = 10

// derivedOpening derives the opening balance of an account OpenAccount did
// not open: its balance B, less the sum S of its entries, plus, for each
// leg in flight on it (its marker in pendingTransactions), what its entry
// counts and the balance does not yet: a committed credit (counted, not
// yet in the balance), a debit not committed (in no entry, already out of
// the balance), and for a hold, the amount out of the balance since it
// applied less what its committed captures' entries count (a capture's
// debit counts through its hold's marker, or not at all once the hold
// ended).
//
// Those are reads of several documents, which are not one snapshot: the
// account and the states of its transactions in flight are read before
// and after the entries, and the answer is taken only when both readings
// agree (nothing applied, settled or committed on the account in between;
// a state only moves forward). Otherwise it reads again, up to
// maxOpeningReads times, then gives ErrInProgress. The entries are every
// entry only while no history has left the log (a removal, a move to an
// archive the reader does not read): it is called only when none had,
// and if some has by the end of the reading, it records nothing and
// returns errHistoryMoving.
func (s *statement) derivedOpening(ctx context.Context, first bson.Raw) (int64, error) {
	a := first
	for range maxOpeningReads {
		states, inflight, err := s.inFlight(ctx, a)
		if err != nil {
			return 0, err
		}
		all, _, err := s.scan(ctx, time.Time{}, time.Time{}, false, -1)
		if err != nil {
			return 0, err
		}
		var sum int64
		for _, e := range all {
			sum += e.Amount
		}
		again, err := s.readAccount(ctx)
		if err != nil {
			return 0, err
		}
		statesAgain, _, err := s.inFlight(ctx, again)
		if err != nil {
			return 0, err
		}
		if !bytes.Equal(a, again) || !maps.Equal(states, statesAgain) {
			a = again
			continue
		}
		// The sum is of every entry only if no history left the log
		// before this reading (see statement.sum): the caller found none
		// before the scan.
		if g, err := s.gone(ctx); err != nil {
			return 0, err
		} else if g != (gone{}) {
			return 0, errHistoryMoving
		}
		b, ok := integerOK(a.Lookup(fieldBalance))
		if !ok {
			return 0, errorf("%w: account %v has balance of BSON type %s", ErrInvalidAccount, s.account, a.Lookup(fieldBalance).Type)
		}
		open := b - sum + inflight
		s.saveOpening(ctx, open)
		return open, nil
	}
	return 0, errorf("%w: account %v kept changing while its opening balance was derived; try again when it is quieter", ErrInProgress, s.account)
}

// inFlight reads the transactions of the legs in flight on account
// document a: their states, and the sum over those legs of what each
// entry counts less what the balance already counts.
func (s *statement) inFlight(ctx context.Context, a bson.Raw) (map[bson.ObjectID]State, int64, error) {
	markers := objectIDs(a.Lookup(fieldPending))
	states := map[bson.ObjectID]State{}
	if len(markers) == 0 {
		return states, 0, nil
	}
	ids := bson.A{}
	seen := map[bson.ObjectID]bool{}
	for _, m := range markers {
		id := m
		id[len(id)-1] = 0
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	var recs []*record
	err := s.c.retry(ctx, func(ctx context.Context) error {
		cur, err := s.c.log.txns.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}})
		if err != nil {
			return err
		}
		recs = recs[:0]
		return cur.All(ctx, &recs)
	})
	if err != nil {
		return nil, 0, err
	}
	byID := map[bson.ObjectID]*record{}
	var captures bson.A
	for _, r := range recs {
		byID[r.ID] = r
		states[r.ID] = r.State
		for _, e := range r.Captures {
			captures = append(captures, e.ID)
		}
	}
	if len(captures) > 0 {
		// A hold's captures: what the committed ones took of it is in
		// their entries, and out of the balance since the hold applied.
		var capRecs []*record
		err := s.c.retry(ctx, func(ctx context.Context) error {
			cur, err := s.c.log.txns.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: captures}}}},
				options.Find().SetProjection(bson.D{{Key: fieldState, Value: 1}}))
			if err != nil {
				return err
			}
			capRecs = capRecs[:0]
			return cur.All(ctx, &capRecs)
		})
		if err != nil {
			return nil, 0, err
		}
		for _, r := range capRecs {
			states[r.ID] = r.State
		}
	}
	var diff int64
	for _, m := range markers {
		id := m
		i := int(id[len(id)-1])
		id[len(id)-1] = 0
		r := byID[id]
		if r == nil || r.foreign() {
			continue // another program's marker: its moves are not counted
		}
		all, settled := r.AllLegs(), r.SettledLegs()
		if i >= len(all) || all[i].Ledger != s.ledger.name || !schema.SameID(all[i].Account, s.account) {
			continue
		}
		switch {
		case r.Hold && all[i].Amount < 0:
			// Out of the balance since the hold applied, less what its
			// committed captures' entries count.
			diff -= all[i].Amount
			for _, e := range r.Captures {
				if i < len(e.Amounts) && states[e.ID].Committed() {
					diff += e.Amounts[i]
				}
			}
			continue
		case r.Hold:
			continue // a credit waits in pendingCredit: no entry, not in the balance
		case !r.CaptureOf.IsZero() && all[i].Amount < 0:
			continue // counted by its hold's marker, or by the hold's end
		case all[i].Amount < 0:
			diff -= all[i].Amount // a debit is out of the balance since it applied
		}
		if r.State.Committed() {
			// What settling will do to the balance: an entry.
			diff += settled[i].Amount
		}
	}
	return states, diff, nil
}
