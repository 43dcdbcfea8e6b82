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
	// Asset is the asset the leg moved (Leg.Asset); "" for none.
	Asset string
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
// direction. Nothing is written.
var ErrInvalidQuery = errors.New("twopc: invalid statement query")

// ErrHistoryRemoved reports a statement or balance asked for a time whose
// entries WithHistory removed without an archive: the Recoverer records
// each account's balance through the entries it removes (a checkpoint)
// before it removes them, and answers only from there on. Nothing is
// written.
var ErrHistoryRemoved = errors.New("twopc: history removed before this time")

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
// see BalanceAt. A copy that late writes rebuilt after a removal without
// an archive is canceled, never an entry (but see WithHistory for a read
// that fails after a grouped insert).
//
// The opening balance is the one OpenAccount recorded. For an account with
// none (inserted by hand, or by another program), it is derived
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
// It sums the account's entries from the log and the archive, from the
// account's last checkpoint at or before at (its balance through a time,
// recorded by a read that summed a thousand entries or more past the
// previous one, through entries at least a minute old), or from its
// opening: its cost grows with the entries since that checkpoint, not
// with the account's whole history. Transactions WithHistory removed
// without an archive are in neither: an account whose transfers were
// removed so after its last checkpoint gets a wrong answer, so do not
// use statements with removal.
func (c *Coordinator) BalanceAt(ctx context.Context, ledger string, account any, at time.Time) (int64, error) {
	s, err := c.statement(ctx, ledger, account)
	if err != nil {
		return 0, err
	}
	return s.balanceAt(ctx, at)
}

// statement is one account's statement reader.
type statement struct {
	c       *Coordinator
	ledger  *Ledger
	account any
	key     string
	archive *mongo.Collection
	cpKey   string   // the key of its checkpoints: key and the archive read
	doc     bson.Raw // the account, as first read
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
	// The log and the checkpoints are read by their indexes: made (or
	// checked) first.
	if err := c.indexes.need(ctx); err != nil {
		return nil, errorf("twopc: statement: %w", err)
	}
	s := &statement{c: c, ledger: l, account: account, key: key, archive: c.log.history.archive}
	// A checkpoint sums what its reader reads: one with the archive and
	// one without are different sums.
	s.cpKey = key + "|-"
	if a := s.archive; a != nil {
		s.cpKey = key + "|" + a.Database().Name() + "." + a.Name()
	}
	if s.doc, err = s.readAccount(ctx); err != nil {
		return nil, err
	}
	return s, nil
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

// checkpointsSuffix names the checkpoints collection after the
// transactions collection: "transactions_checkpoints" by default.
const checkpointsSuffix = "_checkpoints"

// Checkpoints: once a read has summed checkpointEvery entries or more
// past an account's last checkpoint, it records the account's balance
// through the last whole millisecond of them at least checkpointHorizon
// old (a commit is visible well within it), so that later reads sum only
// the entries after it.
const (
	checkpointEvery   = 1000
	checkpointHorizon = time.Minute
)

// checkpoint is an account's balance through a time: its opening plus
// every entry with At at or before it.
type checkpoint struct {
	ID      string    `bson:"_id"` // key|at in ms, zero-padded
	Key     string    `bson:"key"`
	At      time.Time `bson:"at"`
	Balance int64     `bson:"balance"`
	// Removal marks a checkpoint written before entries through At were
	// removed (WithHistory, no archive): no answer before it.
	Removal bool `bson:"removal,omitempty"`
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
	// The window, in whole milliseconds: [Since, Until), and no newer
	// than the horizon; from the token on.
	lo, hi := msCeil(q.Since), now.Add(-s.c.statementHorizon).Truncate(time.Millisecond)
	clipped := true
	if !q.Until.IsZero() {
		if u := msCeil(q.Until).Add(-time.Millisecond); !u.After(hi) {
			hi, clipped = u, false
		}
	}
	if after != nil {
		if q.Reverse && after.At.Before(hi) {
			hi = after.At
		} else if !q.Reverse && after.At.After(lo) {
			lo = after.At
		}
	}
	page := StatementPage{Entries: []Entry{}}
	if err := s.kept(ctx, lo, true); err != nil {
		return StatementPage{}, err
	}
	if !lo.IsZero() && lo.After(hi) {
		return page, nil
	}
	var rest []entry
	for need := limit + 1; ; need *= 2 {
		got, cut, err := s.scan(ctx, lo, hi, q.Reverse, need)
		if err != nil {
			return StatementPage{}, err
		}
		rest = got[:0:0]
		for _, e := range got {
			if after != nil && ((!q.Reverse && e.compare(after) <= 0) || (q.Reverse && e.compare(after) >= 0)) {
				continue
			}
			rest = append(rest, e)
		}
		if len(rest) > limit || !cut {
			break
		}
	}
	if len(rest) == 0 {
		return page, nil
	}
	n := min(limit, len(rest))
	shown := rest[:n]
	// Balances: through the first shown entry, from the last checkpoint
	// before it, then onward in the page's direction.
	through, err := s.through(ctx, &shown[0], now)
	if err != nil {
		return StatementPage{}, err
	}
	for i := range shown {
		if q.Reverse {
			shown[i].Balance = through
			through -= shown[i].Amount
		} else {
			if i > 0 {
				through += shown[i].Amount
			}
			shown[i].Balance = through
		}
		page.Entries = append(page.Entries, shown[i].Entry)
	}
	if len(rest) > n || (clipped && !q.Reverse) {
		page.Next = s.encode(&shown[n-1], q.Reverse)
	}
	// A second look: a removal that began after the first one (its
	// checkpoint is written before it deletes) may have taken entries
	// from the reads above.
	if err := s.kept(ctx, lo, true); err != nil {
		return StatementPage{}, err
	}
	return page, nil
}

// msCeil rounds t up to a whole millisecond, as commit times are.
func msCeil(t time.Time) time.Time {
	if c := t.Truncate(time.Millisecond); !c.Equal(t) {
		return c.Add(time.Millisecond)
	}
	return t
}

// scan returns the account's entries with At in [lo, hi] (a zero bound:
// unbounded), from the log and then the archive (a transaction moving to
// the archive meanwhile is inserted there before it leaves the log, so it
// is found in one or the other), a transaction both hold counted once, as
// the archive has it, in order (reversed if desc): at least need of them if there are as
// many (need < 0: all), each millisecond whole. cut reports that entries
// past those returned may exist.
func (s *statement) scan(ctx context.Context, lo, hi time.Time, desc bool, need int) (out []entry, cut bool, err error) {
	logged, logCut, err := s.read(ctx, s.c.log.txns, lo, hi, desc, need)
	if err != nil {
		return nil, false, err
	}
	// edge is the last millisecond every collection was read through:
	// past a cut collection's last record, its entries are unknown, so
	// merged entries past it are dropped (else a late copy dropped below
	// could let an archived entry past a log entry not read yet).
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
			byID[r.ID] = r
		}
		// A copy in the log of a transaction the archive holds (a late
		// duplicate's, see WithHistory) is not an entry, wherever the
		// archive's record falls.
		var ids bson.A
		for _, r := range logged {
			if byID[r.ID] == r {
				ids = append(ids, r.ID)
			}
		}
		if len(ids) > 0 {
			var found []struct {
				ID bson.ObjectID `bson:"_id"`
			}
			err := s.c.retry(ctx, func(ctx context.Context) error {
				cur, err := s.archive.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}},
					options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}}))
				if err != nil {
					return err
				}
				found = found[:0]
				return cur.All(ctx, &found)
			})
			if err != nil {
				return nil, false, errorf("twopc: read the archive: %w", err)
			}
			for _, f := range found {
				if r := byID[f.ID]; r != nil && slices.Contains(logged, r) {
					delete(byID, f.ID)
				}
			}
		}
	}
	for _, r := range byID {
		if r.CommittedAt.IsZero() || !r.State.Committed() {
			continue
		}
		for i, l := range r.SettledLegs() {
			if l.Ledger != s.ledger.name || !schema.SameID(l.Account, s.account) {
				continue
			}
			if !edge.IsZero() && ((!desc && r.CommittedAt.After(edge)) || (desc && r.CommittedAt.Before(edge))) {
				continue
			}
			out = append(out, entry{Entry: Entry{Txn: r.ID, Ledger: l.Ledger, Account: l.Account, Amount: l.Amount,
				At: r.CommittedAt, Key: r.Key, Metadata: r.Metadata, Asset: l.Asset}, leg: i})
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

// through returns the account's balance through entry e: its opening (or
// the last checkpoint before e's millisecond) plus every entry up to and
// including e. It may write a checkpoint (see checkpointEvery).
func (s *statement) through(ctx context.Context, e *entry, now time.Time) (int64, error) {
	cp, err := s.latestCheckpoint(ctx, bson.E{Key: "at", Value: bson.D{{Key: "$lt", Value: e.At}}})
	if err != nil {
		return 0, err
	}
	return s.sumFrom(ctx, cp, e.At, now, func(x *entry) bool { return x.compare(e) <= 0 })
}

// balanceAt is BalanceAt's answer: the balance through every entry with
// At at or before at.
func (s *statement) balanceAt(ctx context.Context, at time.Time) (int64, error) {
	now, err := s.c.log.serverNow(ctx)
	if err != nil {
		return 0, err
	}
	at = at.Truncate(time.Millisecond)
	if err := s.kept(ctx, at, false); err != nil {
		return 0, err
	}
	sum, err := s.sumThrough(ctx, at, now)
	if err != nil {
		return 0, err
	}
	// A second look, as for a page.
	if err := s.kept(ctx, at, false); err != nil {
		return 0, err
	}
	return sum, nil
}

// sumThrough is the balance through every entry with At at or before
// the millisecond at: from the last checkpoint at or before it, or from
// the opening.
func (s *statement) sumThrough(ctx context.Context, at, now time.Time) (int64, error) {
	cp, err := s.latestCheckpoint(ctx, bson.E{Key: "at", Value: bson.D{{Key: "$lte", Value: at}}})
	if err != nil {
		return 0, err
	}
	return s.sumFrom(ctx, cp, at, now, func(*entry) bool { return true })
}

// sumFrom is cp's balance (the opening if cp is nil) plus the entries
// after cp's time through the millisecond hi that in keeps; if that summed
// checkpointEvery entries or more, it records a checkpoint through the
// last whole millisecond of them at least checkpointHorizon old.
func (s *statement) sumFrom(ctx context.Context, cp *checkpoint, hi, now time.Time, in func(*entry) bool) (int64, error) {
	var base int64
	var lo time.Time
	if cp != nil {
		base, lo = cp.Balance, cp.At.Add(time.Millisecond)
	} else {
		open, err := s.opening(ctx)
		if err != nil {
			return 0, err
		}
		base = open
	}
	if !lo.IsZero() && lo.After(hi) {
		return base, nil
	}
	all, _, err := s.scan(ctx, lo, hi, false, -1)
	if err != nil {
		return 0, err
	}
	sum := base
	var mark *checkpoint
	limit := now.Add(-s.c.checkpointHorizon)
	running := base
	for i := range all {
		e := &all[i]
		running += e.Amount
		if in(e) {
			sum += e.Amount
		}
		// A checkpoint through e's millisecond, if it is whole here and old enough.
		if i >= s.c.checkpointEvery-1 && !e.At.After(limit) && (i == len(all)-1 || !all[i+1].At.Equal(e.At)) && e.At.Before(hi) {
			mark = &checkpoint{Key: s.cpKey, At: e.At, Balance: running}
		}
	}
	if mark != nil {
		if err := s.saveCheckpoint(ctx, mark); err != nil {
			// Only the next read pays: it sums from the checkpoint before.
			s.c.logger.Debug("twopc: writing a statement checkpoint", "error", err)
		}
	}
	return sum, nil
}

// latestCheckpoint returns the account's latest checkpoint that also
// matches cond (a condition on at, or the removal flag); nil if none.
func (s *statement) latestCheckpoint(ctx context.Context, cond bson.E) (*checkpoint, error) {
	var cps []checkpoint
	err := s.c.retry(ctx, func(ctx context.Context) error {
		cur, err := s.c.checkpoints.Find(ctx, bson.D{{Key: "key", Value: s.cpKey}, cond},
			options.Find().SetSort(bson.D{{Key: "at", Value: -1}}).SetLimit(1))
		if err != nil {
			return err
		}
		cps = cps[:0]
		return cur.All(ctx, &cps)
	})
	if err != nil {
		return nil, errorf("twopc: read checkpoints: %w", err)
	}
	if len(cps) == 0 {
		return nil, nil
	}
	return &cps[0], nil
}

// checkpointThrough records a removal checkpoint of account in ledger at
// time at (see Recoverer.checkpointRemoval). An account that is gone (or
// a tombstone) needs none.
func (c *Coordinator) checkpointThrough(ctx context.Context, ledger string, account any, at time.Time) error {
	s, err := c.statement(ctx, ledger, account)
	if errors.Is(err, ErrAccountNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	now, err := c.log.serverNow(ctx)
	if err != nil {
		return err
	}
	bal, err := s.sumThrough(ctx, at, now)
	if err != nil {
		return err
	}
	return s.saveCheckpoint(ctx, &checkpoint{Key: s.cpKey, At: at, Balance: bal, Removal: true})
}

// kept returns ErrHistoryRemoved if entries the answer needs may have been
// removed: a removal checkpoint (see ErrHistoryRemoved) later than at, or
// for a page (from, at the window's start, zero: unbounded) one at or
// after it.
func (s *statement) kept(ctx context.Context, at time.Time, from bool) error {
	cp, err := s.latestCheckpoint(ctx, bson.E{Key: "removal", Value: true})
	if err != nil || cp == nil {
		return err
	}
	if at.Before(cp.At) || (from && at.Equal(cp.At)) {
		hint := ""
		if from {
			hint = "; ask from after it (Since)"
		}
		return errorf("%w: entries through %v were removed%s", ErrHistoryRemoved, cp.At.UTC().Format(time.RFC3339Nano), hint)
	}
	return nil
}

// saveCheckpoint records cp, once: a checkpoint that exists already (the
// same key, time and kind) is the same.
func (s *statement) saveCheckpoint(ctx context.Context, cp *checkpoint) error {
	cp.ID = fmt.Sprintf("%s|%020d", cp.Key, cp.At.UnixMilli())
	if cp.Removal {
		cp.ID += "|removal"
	}
	if _, err := s.c.checkpoints.InsertOne(ctx, cp); err != nil && !mongo.IsDuplicateKeyError(err) {
		return err
	}
	return nil
}

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
		if r == nil || r.foreign() {
			continue // another program's marker: its moves are not counted
		}
		all, settled := r.AllLegs(), r.SettledLegs()
		if i >= len(all) || all[i].Ledger != s.ledger.name || !schema.SameID(all[i].Account, s.account) {
			continue
		}
		if all[i].Amount < 0 {
			diff -= all[i].Amount // a debit is out of the balance since it applied
		}
		if r.State.Committed() {
			// What settling will do to the balance: an entry.
			diff += settled[i].Amount
		}
	}
	return states, diff, nil
}
