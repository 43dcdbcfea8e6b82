package twopc

// Statements: an account's entries (the legs of committed transfers on
// it) in commit order with a running balance, read from the log and the
// archive, and its balance at any time.

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"maps"
	"slices"
	"time"

	"github.com/twopc/twopc/internal/schema"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Entry is one leg of a committed transfer, as an account's statement
// shows it.
type Entry struct {
	Txn     bson.ObjectID
	Ledger  string // "": the coordinator's own accounts
	Account any
	// Amount is signed: negative took money from the account. For a hold
	// captured in part, what it captured.
	Amount int64
	// Balance is the account's balance after this entry: its opening
	// balance plus the amounts of every entry up to and including this
	// one (see Coordinator.Statement).
	Balance int64
	// At is the transfer's commit point (a hold's: its capture), by the
	// log server's clock.
	At       time.Time
	Key      string
	Metadata map[string]string
}

// StatementQuery selects and pages an account's entries.
type StatementQuery struct {
	Since, Until time.Time // At in [Since, Until); zero: unbounded
	Limit        int       // entries a page; 0: DefaultStatementLimit
	After        string    // the page token a previous page returned; "": the first page
	Reverse      bool      // newest first
}

// StatementPage is one page of a statement.
type StatementPage struct {
	Entries []Entry
	Next    string // "": no more
}

// Statement limits: a page holds DefaultStatementLimit entries unless the
// query asks for another number, at most MaxStatementLimit.
const (
	DefaultStatementLimit = 100
	MaxStatementLimit     = 1000
)

// ErrInvalidQuery reports a statement query that cannot be answered: a
// negative Limit or one above MaxStatementLimit, Since after Until, or a
// page token that does not parse, or was made for another account or
// direction. Nothing is read.
var ErrInvalidQuery = errors.New("twopc: invalid statement query")

// statementHorizon is how old an entry must be, by the server's clock, for
// a page to list it: a commit stamped earlier can become visible a little
// later (it is stamped before it is written), and a page token must never
// pass over one.
const statementHorizon = time.Second

// Statement returns a page of account's entries in ledger ("" for the
// default one): one entry per leg of a committed transfer on the account
// (applied or done; a hold once captured, for what it captured; a
// reversal as its own entry), never a canceled transfer, a voided or
// expired hold, or a hold still held (its amount is in Account.Held).
//
// Entries are in commit order: At (the commit write's time, stamped by
// the log server's own clock, one clock for every coordinator), then,
// within one millisecond, credits before debits, then by transaction id
// and leg. A debit that needed a credit's money commits after that credit
// settled, so after it committed: a statement never shows the account
// below a balance it could not have had. Balance counts an entry from its
// commit, while the account document counts a credit from its settle: between
// the two (milliseconds, or until recovery settles it) the statement's
// balance is ahead of Account.Balance by the credits committed and not
// settled (Account.PendingCredit), and once everything has settled and no
// hold is held the last entry's Balance is Account.Balance.
//
// Pages list only entries at least a second old by the server's clock (a
// commit is stamped before it is written, so a newer one may still become
// visible before an older one); a page that stopped there has a Next token
// that a later call continues from, and a page with no entries has none.
// Pages of any size concatenate to the whole; Reverse lists the same
// entries newest first. With WithHistory and an archive, the archive is
// read too: a transaction found in both counts once, as the archive holds
// it (a copy in the log is a late duplicate's, which WithHistory
// describes). Transactions removed without an archive are not counted:
// see BalanceAt.
//
// The opening balance is the one OpenAccount recorded. For an account with
// none (inserted by hand, or opened by an earlier version), it is derived
// from the account document, the transactions in flight on it and the sum
// of its entries, read twice until the two readings agree: the balance
// before the first entry this version's log holds. An account also moved
// by other programs or other logs shows only this log's entries, and its
// running balance does not count those moves.
func (c *Coordinator) Statement(ctx context.Context, ledger string, account any, q StatementQuery) (StatementPage, error) {
	s, err := c.statement(ctx, ledger, account)
	if err != nil {
		return StatementPage{}, err
	}
	return s.page(ctx, q)
}

// Entries returns account's entries selected by q, page after page (q.Limit
// entries a read), as Statement lists them; it ends at the first error.
func (c *Coordinator) Entries(ctx context.Context, ledger string, account any, q StatementQuery) iter.Seq2[Entry, error] {
	return func(yield func(Entry, error) bool) {
		s, err := c.statement(ctx, ledger, account)
		if err != nil {
			yield(Entry{}, err)
			return
		}
		for {
			p, err := s.page(ctx, q)
			if err != nil {
				yield(Entry{}, err)
				return
			}
			for _, e := range p.Entries {
				if !yield(e, nil) {
					return
				}
			}
			if p.Next == "" || len(p.Entries) == 0 {
				return
			}
			q.After = p.Next
		}
	}
}

// BalanceAt returns account's balance at time at: the Balance of its last
// entry with At at or before at, or its opening balance before the first
// (see Statement; unlike a page, it counts entries however recent). At a
// quiet moment, BalanceAt(now) is Account.Balance plus Account.Held.
//
// It sums the account's entries up to at, from the log and the archive:
// its cost grows with the account's history. Transactions WithHistory
// removed without an archive are not in either: for an account whose
// transfers were removed so, the answer is wrong, so do not use statements
// with removal.
func (c *Coordinator) BalanceAt(ctx context.Context, ledger string, account any, at time.Time) (int64, error) {
	s, err := c.statement(ctx, ledger, account)
	if err != nil {
		return 0, err
	}
	open, err := s.opening(ctx)
	if err != nil {
		return 0, err
	}
	sum, err := s.sum(ctx, func(e *entry) bool { return !e.At.After(at) })
	if err != nil {
		return 0, err
	}
	return open + sum, nil
}

// statement is one account's statement reader.
type statement struct {
	c        *Coordinator
	ledger   *Ledger
	account  any
	key      string
	horizon  time.Duration
	archive  *mongo.Collection
	txns     *mongo.Collection
	openings int // readings of a derived opening before they agree (tests)
}

func (c *Coordinator) statement(ctx context.Context, ledger string, account any) (*statement, error) {
	l, err := c.ledgers.get(ledger)
	if err != nil {
		return nil, err
	}
	if err := validateAccountID("account", account); err != nil {
		return nil, errorf("twopc: statement: %w", err)
	}
	key, err := entryKey(ledger, account)
	if err != nil {
		return nil, errorf("twopc: statement: %w: %v", ErrInvalidAccountID, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return &statement{c: c, ledger: l, account: account, key: key, horizon: c.statementHorizon,
		archive: c.log.history.archive, txns: c.log.txns}, nil
}

// entryKey is what a transaction lists in its accounts field for a leg on
// account id of ledger: the ledger's name and the id encoded so that ids
// the server takes for one document have one key (schema.CanonicalID).
func entryKey(ledger string, id any) (string, error) {
	raw, err := schema.MarshalID(id)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%d:%s:%s", len(ledger), ledger, hex.EncodeToString([]byte(schema.CanonicalID(raw)))), nil
}

// entryKeys are the keys of r's legs, each once.
func entryKeys(r *record) bson.A {
	var keys bson.A
	seen := map[string]bool{}
	for _, l := range r.AllLegs() {
		k, err := entryKey(l.Ledger, l.Account)
		if err != nil || seen[k] {
			continue
		}
		seen[k] = true
		keys = append(keys, k)
	}
	return keys
}

// entry is an Entry with its place in the order.
type entry struct {
	Entry
	leg int
}

// before reports whether a comes before b in a statement's order.
func (a *entry) before(b *entry) bool {
	return a.compare(b) < 0
}

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

// pageToken is a page token: where the previous page ended, for which account
// and direction.
type pageToken struct {
	Key     string `json:"k"`
	Reverse bool   `json:"r,omitempty"`
	At      int64  `json:"t"`
	Debit   bool   `json:"d,omitempty"`
	Txn     string `json:"x"`
	Leg     int    `json:"l"`
}

func (s *statement) encode(e *entry, reverse bool) string {
	b, _ := json.Marshal(pageToken{Key: s.key, Reverse: reverse, At: e.At.UnixMilli(), Debit: e.Amount < 0, Txn: e.Txn.Hex(), Leg: e.leg})
	return base64.RawURLEncoding.EncodeToString(b)
}

func (s *statement) decode(t string, reverse bool) (*entry, error) {
	b, err := base64.RawURLEncoding.DecodeString(t)
	var tk pageToken
	if err == nil {
		err = json.Unmarshal(b, &tk)
	}
	var id bson.ObjectID
	if err == nil {
		id, err = bson.ObjectIDFromHex(tk.Txn)
	}
	switch {
	case err != nil:
		return nil, errorf("%w: page token %q does not parse", ErrInvalidQuery, t)
	case tk.Key != s.key:
		return nil, errorf("%w: page token %q is another account's", ErrInvalidQuery, t)
	case tk.Reverse != reverse:
		return nil, errorf("%w: page token %q is of the other direction (Reverse)", ErrInvalidQuery, t)
	}
	amount := int64(1)
	if tk.Debit {
		amount = -1
	}
	return &entry{Entry: Entry{Txn: id, At: time.UnixMilli(tk.At).UTC(), Amount: amount}, leg: tk.Leg}, nil
}

// page answers q.
func (s *statement) page(ctx context.Context, q StatementQuery) (StatementPage, error) {
	limit := q.Limit
	switch {
	case limit < 0:
		return StatementPage{}, errorf("%w: limit %d is negative", ErrInvalidQuery, limit)
	case limit > MaxStatementLimit:
		return StatementPage{}, errorf("%w: limit %d is more than MaxStatementLimit (%d)", ErrInvalidQuery, limit, MaxStatementLimit)
	case limit == 0:
		limit = DefaultStatementLimit
	}
	if !q.Since.IsZero() && !q.Until.IsZero() && q.Since.After(q.Until) {
		return StatementPage{}, errorf("%w: since %v is after until %v", ErrInvalidQuery, q.Since, q.Until)
	}
	var after *entry
	if q.After != "" {
		var err error
		if after, err = s.decode(q.After, q.Reverse); err != nil {
			return StatementPage{}, err
		}
	}
	now, err := s.c.log.serverNow(ctx)
	if err != nil {
		return StatementPage{}, err
	}
	// The window: [Since, Until), and no newer than the horizon.
	horizon := now.Add(-s.horizon)
	in := func(e *entry) bool {
		return (q.Since.IsZero() || !e.At.Before(q.Since)) &&
			(q.Until.IsZero() || e.At.Before(q.Until)) && !e.At.After(horizon)
	}
	clipped := q.Until.IsZero() || q.Until.After(horizon)
	open, err := s.opening(ctx)
	if err != nil {
		return StatementPage{}, err
	}
	// Running balances over every entry of the account up to the window's
	// end, then the window.
	every, err := s.entries(ctx, func(e *entry) bool { return q.Until.IsZero() || e.At.Before(q.Until) })
	if err != nil {
		return StatementPage{}, err
	}
	all := make([]entry, 0, len(every))
	sum := open
	for _, e := range every {
		sum += e.Amount
		e.Balance = sum
		if in(&e) {
			all = append(all, e)
		}
	}
	if q.Reverse {
		slices.Reverse(all)
	}
	start := 0
	if after != nil {
		start = len(all)
		for i := range all {
			c := all[i].compare(after)
			if (!q.Reverse && c > 0) || (q.Reverse && c < 0) {
				start = i
				break
			}
		}
	}
	rest := all[start:]
	page := StatementPage{Entries: []Entry{}}
	n := min(limit, len(rest))
	for i := range n {
		page.Entries = append(page.Entries, rest[i].Entry)
	}
	if n > 0 && (len(rest) > n || (clipped && !q.Reverse)) {
		page.Next = s.encode(&rest[n-1], q.Reverse)
	}
	return page, nil
}

// entries returns the account's entries that in keeps, in order, from the
// log and the archive: a transaction both hold counts once, as the
// archive has it. The log is read first: a transaction moving to the
// archive meanwhile is inserted there before it leaves the log, so it is
// found in one or the other.
func (s *statement) entries(ctx context.Context, in func(*entry) bool) ([]entry, error) {
	logged, err := s.read(ctx, s.txns)
	if err != nil {
		return nil, err
	}
	byID := map[bson.ObjectID]*record{}
	for _, r := range logged {
		byID[r.ID] = r
	}
	if s.archive != nil {
		archived, err := s.read(ctx, s.archive)
		if err != nil {
			return nil, errorf("twopc: read the archive: %w", err)
		}
		for _, r := range archived {
			byID[r.ID] = r
		}
		// A late copy in the log of a transaction the archive holds
		// outside the window read above is not an entry either.
		var ids bson.A
		for _, r := range logged {
			if byID[r.ID] == r {
				ids = append(ids, r.ID)
			}
		}
		if len(ids) > 0 {
			cur, err := s.archive.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}},
				options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}}))
			if err != nil {
				return nil, errorf("twopc: read the archive: %w", err)
			}
			var found []struct {
				ID bson.ObjectID `bson:"_id"`
			}
			if err := cur.All(ctx, &found); err != nil {
				return nil, errorf("twopc: read the archive: %w", err)
			}
			for _, f := range found {
				if r := byID[f.ID]; r != nil && slices.Contains(logged, r) {
					delete(byID, f.ID)
				}
			}
		}
	}
	var out []entry
	for _, r := range byID {
		if r.CommittedAt.IsZero() || !r.State.Committed() {
			continue
		}
		for i, l := range r.SettledLegs() {
			if l.Ledger != s.ledger.name || !schema.SameID(l.Account, s.account) {
				continue
			}
			e := entry{Entry: Entry{Txn: r.ID, Ledger: l.Ledger, Account: l.Account, Amount: l.Amount,
				At: r.CommittedAt, Key: r.Key, Metadata: r.Metadata}, leg: i}
			if in(&e) {
				out = append(out, e)
			}
		}
	}
	slices.SortFunc(out, func(a, b entry) int { return a.compare(&b) })
	return out, nil
}

// read returns the committed transactions of coll with a leg on the
// account, by the {accounts, committedAt} index.
func (s *statement) read(ctx context.Context, coll *mongo.Collection) ([]*record, error) {
	var out []*record
	err := s.c.retry(ctx, func(ctx context.Context) error {
		cur, err := coll.Find(ctx, bson.D{
			{Key: fieldEntryKeys, Value: s.key},
			{Key: fieldCommittedAt, Value: bson.D{{Key: "$type", Value: "date"}}},
		}, options.Find().SetSort(bson.D{{Key: fieldCommittedAt, Value: 1}}))
		if err != nil {
			return err
		}
		defer cur.Close(ctx)
		out = out[:0]
		for cur.Next(ctx) {
			var r record
			if err := cur.Decode(&r); err != nil {
				return errorf("%w: %v: %v", ErrMalformedTxn, cur.Current.Lookup("_id"), err)
			}
			out = append(out, &r)
		}
		return cur.Err()
	})
	return out, err
}

// sum is the sum of the amounts of the account's entries that in keeps.
func (s *statement) sum(ctx context.Context, in func(*entry) bool) (int64, error) {
	all, err := s.entries(ctx, in)
	if err != nil {
		return 0, err
	}
	var sum int64
	for _, e := range all {
		sum += e.Amount
	}
	return sum, nil
}

// opening is the account's opening balance: the one OpenAccount recorded,
// or, for an account with none, the one derived from its document, the
// transactions in flight on it and its entries (see derivedOpening).
func (s *statement) opening(ctx context.Context) (int64, error) {
	a, err := s.readAccount(ctx)
	if err != nil {
		return 0, err
	}
	if b, ok := a.Lookup(fieldOpening, "balance").AsInt64OK(); ok {
		return b, nil
	}
	return s.derivedOpening(ctx, a)
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

// maxOpeningReads bounds the readings of a derived opening.
const maxOpeningReads = 10

// derivedOpening derives the opening balance of an account OpenAccount did
// not open: its balance B, less the sum S of its entries, plus, for each
// leg in flight on it (its marker in pendingTransactions), what its entry
// counts and the balance does not yet: a committed credit (counted, not
// yet in the balance), a debit not committed (in no entry, already out of
// the balance), and for a hold captured in part the part returned.
//
// Those are reads of several documents, which are not one snapshot: the
// account and the states of its transactions in flight are read before
// and after the entries, and the answer is taken only when both readings
// agree (nothing applied, settled or committed on the account in between;
// a state only moves forward). Otherwise it reads again, up to
// maxOpeningReads times, then gives ErrInProgress.
func (s *statement) derivedOpening(ctx context.Context, first bson.Raw) (int64, error) {
	a := first
	for range maxOpeningReads {
		s.openings++
		states, inflight, err := s.inFlight(ctx, a)
		if err != nil {
			return 0, err
		}
		sum, err := s.sum(ctx, func(*entry) bool { return true })
		if err != nil {
			return 0, err
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
		b, ok := a.Lookup(fieldBalance).AsInt64OK()
		if !ok {
			return 0, errorf("%w: account %v has balance of BSON type %s", ErrInvalidAccount, s.account, a.Lookup(fieldBalance).Type)
		}
		return b - sum + inflight, nil
	}
	return 0, errorf("%w: account %v kept changing while its opening balance was derived", ErrInProgress, s.account)
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
		cur, err := s.txns.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}})
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
	for _, r := range recs {
		byID[r.ID] = r
		states[r.ID] = r.State
	}
	var diff int64
	for _, m := range markers {
		id := m
		i := int(id[len(id)-1])
		id[len(id)-1] = 0
		r := byID[id]
		if r == nil {
			return nil, 0, errorf("%w: account %v has a leg in flight of transaction %s, which the log does not hold", ErrInProgress, s.account, id.Hex())
		}
		all, settled := r.AllLegs(), r.SettledLegs()
		if i >= len(all) {
			continue
		}
		if all[i].Amount < 0 {
			diff -= all[i].Amount // a debit is out of the balance since it applied
		}
		if r.State.Committed() && !r.CommittedAt.IsZero() {
			diff += settled[i].Amount // and in an entry once committed
		}
	}
	return states, diff, nil
}
