package twopc

// Unknown ids write nothing: before its insert, a transfer naming an id
// that has no account is refused, so that no bad id a client sends writes
// a document, in the accounts or the log.

import (
	"context"
	"errors"

	"github.com/twopc/twopc/internal/schema"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// existsCall is one transfer's read of its accounts in the exists stage,
// and what the read found.
type existsCall struct {
	t   *transfer
	why error // an account it names is missing: ErrAccountNotFound
	err error // its accounts could not be read
}

// refuseMissing answers, before any insert, each transfer of ts that names
// an account that does not exist (no document, or a tombstone) with
// ErrAccountNotFound, writing nothing. It reads only the accounts the
// coordinator has not seen exist (see accountKinds), and the reads of
// concurrent calls go together in the exists stage (see stage): one find
// per ledger, the ledgers at once. A transfer between accounts already
// seen costs no round trip. Transfers on different sets of ledgers read
// apart, at once (see ledgerStages), so a ledger that is down or slow
// holds up only the transfers with a leg on it. A keyed transfer so refused is answered with
// the transaction its key already names, if one does (a repeat after the
// account was deleted), as the insert would have answered it. A transfer
// whose accounts cannot be read is answered as one whose insert was not
// sent: nothing was written. Legs on a ledger the coordinator lacks are
// left to the apply step, which names it.
func (e *engine) refuseMissing(ctx context.Context, ts []*transfer) {
	c := e.c
	var calls []*existsCall
	for _, t := range ts {
		if !t.over && unseen(c.ledgers, t) {
			if err := c.at(ctx, StepExists, t.rec); err != nil {
				insertFailed(t, false, err) // nothing written
				continue
			}
			calls = append(calls, &existsCall{t: t})
		}
	}
	if len(calls) == 0 {
		return
	}
	if err := c.exists.join(ctx, calls...); err != nil {
		// A read, taken or not: nothing of these transfers was written.
		for _, q := range calls {
			insertFailed(q.t, false, err)
		}
		return
	}
	for _, q := range calls {
		switch {
		case q.err != nil:
			insertFailed(q.t, false, q.err)
		case q.why != nil:
			e.refuse(ctx, q.t, q.why)
		}
	}
}

// unseen reports whether transfer t names an account of a ledger of ls
// that the ledger has not seen exist.
func unseen(ls ledgers, t *transfer) bool {
	for _, lg := range t.rec.legs() {
		if l, key, ok := ls.kindsOf(lg.ledger, lg.account); ok && !l.kinds.known(key) {
			return true
		}
	}
	return false
}

// readExistence is the exists stage's write: it reads, in one find per
// ledger (the ledgers at once), the accounts of calls' transfers that the
// ledger has not seen exist, and leaves in each call why its transfer
// cannot be made (an account missing), or the read's error.
func readExistence(ctx context.Context, ls ledgers, calls []*existsCall) {
	type ask struct {
		l       *Ledger
		ids     bson.A
		asked   map[string]bool
		missing map[string]bool
		err     error
	}
	asks := map[string]*ask{}
	var order []*ask
	for _, q := range calls {
		for _, lg := range q.t.rec.legs() {
			l, key, ok := ls.kindsOf(lg.ledger, lg.account)
			if !ok || l.kinds.known(key) {
				continue
			}
			a := asks[lg.ledger]
			if a == nil {
				a = &ask{l: l, asked: map[string]bool{}}
				asks[lg.ledger] = a
				order = append(order, a)
			}
			if !a.asked[key] {
				a.asked[key] = true
				a.ids = append(a.ids, lg.account)
			}
		}
	}
	if len(order) == 0 {
		return
	}
	_ = parallel(len(order), func(i int) error {
		a := order[i]
		a.missing, a.err = a.l.missing(ctx, a.ids)
		return nil
	})
	for _, q := range calls {
		for _, lg := range q.t.rec.legs() {
			a := asks[lg.ledger]
			if a == nil {
				continue
			}
			key, err := schema.IDKey(lg.account)
			if err != nil || !a.asked[key] {
				continue
			}
			switch {
			case a.err != nil:
				q.err = cmpErr(q.err, a.err)
			case a.missing[key] && q.why == nil:
				q.why = errorf("%w: %v%s", ErrAccountNotFound, lg.account, ledgerLabel(lg.ledger))
			}
		}
	}
}

// refuse answers transfer t, refused before its insert (why): nothing is
// written, so a keyed transfer records nothing and its key may succeed
// once the account exists. If the key already names a transaction (an
// earlier call's, made while the account existed), that one is the
// answer, as a repeat with the key promises; if that one is pending, t is
// left unanswered, to go on to its insert and finish it.
func (e *engine) refuse(ctx context.Context, t *transfer, why error) {
	c := e.c
	if t.rec.Key != "" {
		prior, err := c.log.read(ctx, t.rec.ID)
		switch {
		case err == nil && prior.State == StatePending && !prior.Placeholder && sameCall(prior, t.rec) == nil:
			// A repeat of a call whose first attempt is still pending: not
			// refused, for its insert finds that attempt, and the repeat
			// finishes it (see repeats), with the server's refusal if its
			// legs cannot apply.
			return
		case err == nil:
			t.answer(c.replay(prior, t.rec))
			return
		case !errors.Is(err, ErrTxnNotFound):
			insertFailed(t, false, err)
			return
		}
		t.answer(nil, errorf("twopc: transfer with key %q not made, nothing recorded under the key: %w", t.rec.Key, why))
		return
	}
	t.answer(nil, errorf("twopc: transfer not made: %w", why))
}

// ledgerLabel names ledger name in an error: nothing for the default one.
func ledgerLabel(name string) string {
	if name == "" {
		return ""
	}
	return " in ledger " + name
}

// existsProjection is what the existence read returns of an account.
var existsProjection = bson.D{{Key: "_id", Value: 1}, {Key: fieldTombstone, Value: 1}, {Key: fieldAsset, Value: 1}}

// missing reads accounts ids of l (one find, _id $in) and returns, by
// canonical id, those that do not exist: no document, or a tombstone. It
// records what it found in l.kinds, with each account's asset. The server's equality of _ids decides
// which document answers which id: an int32 1, an int64 1 and a double 1.0
// are one account.
func (l *Ledger) missing(ctx context.Context, ids bson.A) (map[string]bool, error) {
	found, err := findIDs[struct {
		ID        bson.RawValue `bson:"_id"`
		Tombstone bool          `bson:"tombstone"`
		Asset     bson.RawValue `bson:"asset"`
	}](ctx, l, ids, existsProjection)
	if err != nil {
		return nil, err
	}
	exists := make(map[string]bool, len(found))
	for _, f := range found {
		key := schema.CanonicalID(f.ID)
		if f.Tombstone {
			l.kinds.gone(key)
			continue
		}
		exists[key] = true
		asset, ok := (&account{Asset: f.Asset}).assetOf()
		l.kinds.exists(key, asset, ok)
	}
	missing := map[string]bool{}
	for _, id := range ids {
		key, err := schema.IDKey(id)
		if err == nil && !exists[key] {
			missing[key] = true
			l.kinds.gone(key)
		}
	}
	return missing, nil
}
