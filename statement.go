package twopc

// Statements: an account's entries (the legs of committed transfers on
// it) in commit order with a running balance, read from the log and the
// archive, and its balance at any time.

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"iter"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/twopc/twopc/internal/clockskew"
	"github.com/twopc/twopc/internal/schema"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// Entry is one leg of a committed transfer, as an account's statement
// shows it.
type Entry struct {
	Txn     bson.ObjectID
	Ledger  string // "": the coordinator's own accounts
	Account any
	// Amount is signed: negative took money from the account. A hold
	// makes no entry: each of its captures makes its own, of its part.
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
	// CaptureOf is, for an entry of a capture, the hold it captured from
	// (Txn.CaptureOf): what a hold charged is its captures' entries,
	// whether it then ended by them or was voided or expired. Zero for
	// any other transfer.
	CaptureOf bson.ObjectID
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
	// Next is the token of the next page (StatementQuery.After); "" when
	// the page reached the last entry that exists when it is read.
	Next string
}

// Statement limits: a page holds DefaultStatementLimit entries unless the
// query asks for another number, at most MaxStatementLimit.
const (
	DefaultStatementLimit = 100
	MaxStatementLimit     = 1000
)

// ErrInvalidQuery reports a query of Statement, Entries, Transactions,
// Txns or Accounts that cannot be answered: a negative Limit or one above
// the call's maximum, a start after the end, a state or asset that is not
// one, or a page token that does not parse, or was made for another
// account, query or direction. Nothing is read or written.
var ErrInvalidQuery = errors.New("twopc: invalid query")

// ErrHistoryRemoved reports a statement or balance asked for a time whose
// entries WithHistory removed without an archive: the Recoverer records
// each account's balance through the entries it removes (a checkpoint)
// before it removes them, and answers only from there on. Nothing is
// written.
var ErrHistoryRemoved = errors.New("twopc: history removed before this time")

// statementHorizon is how long after its commit stamp, by the server's
// clock, a commit may still become visible: it is stamped before it is
// written. A page lists every entry visible when it is read; its token
// resumes no later than this behind the server's clock, so that the next
// page never passes over a commit that became visible late. On a sharded
// cluster, see clockskew.PageHorizon (the skew it allows, why a second).
const statementHorizon = clockskew.PageHorizon

// Statement returns a page of account's entries in ledger ("" for the
// default one): one entry per leg of a committed transfer on the account
// (applied or done; a reversal as its own entry), never a canceled
// transfer. A hold itself is never an entry: each of its captures is,
// for its part, with Entry.CaptureOf naming the hold, whether the hold
// then ended by its captures or was voided or expired after them (what
// its captures charged stays charged); what a hold still holds is in
// Account.Held.
//
// Entries are in commit order: At (the commit write's time, stamped by
// the log server's clock, not a coordinator's; on a sharded cluster each
// shard's: see the package doc, Clocks and bounds), then,
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
// A page lists every entry visible when it is read: a call's own entries
// are there as soon as it returned, in this process or another. Its Next
// token is "" when the page reached the last entry that exists then.
// A commit is stamped before it is written, so one stamped up to a second
// (the horizon) before a newer one can become visible after it: a token
// of a page (oldest first) that ends within the horizon of the server's
// clock resumes from the horizon, and carries the ids of the entries the
// page showed past it (they lie within the horizon, so they are few),
// which the next page skips. So pages of any size, read one after the
// other, list every entry once, a late one included. Reverse lists the
// same entries newest first; its pages go back in time from the first
// page's read, and a commit that becomes visible later with a stamp above
// where they have reached is listed by a new first page, not by them.
//
// With WithHistory and an archive, the archive is read too, after the
// log: a transaction moving there meanwhile is found in one or the other,
// and one found in both counts once. A copy of a transaction that its own
// writes, delivered late, brought back to the log after it left is never
// committed, so never an entry (see WithHistory). Entries that left the
// log where this coordinator does not read them (removed without an
// archive, or moved to another coordinator's archive) give
// ErrHistoryRemoved for a page that would start at or before them; a page
// starting after them counts its balance from the checkpoint the removal
// recorded, or any later one (see BalanceAt).
//
// The opening balance is the one OpenAccount recorded. For an account with
// none (inserted by hand, or by another program), it is derived
// from the account document, the transactions in flight on it and the sum
// of its entries, read twice until the two readings agree: the balance
// before the first entry this version's log holds. An account also moved
// by other programs or other logs shows only this log's entries, and its
// running balance does not count those moves.
func (c *Coordinator) Statement(ctx context.Context, ledger string, account any, q StatementQuery) (StatementPage, error) {
	return readWithin(ctx, &c.config, "statement", func(ctx context.Context) (StatementPage, error) {
		s, err := c.statement(ctx, ledger, account)
		if err != nil {
			return StatementPage{}, err
		}
		return s.page(ctx, q)
	})
}

// Entries returns account's entries selected by q, page after page (q.Limit
// entries a read), as Statement lists them; it ends at the first error.
// Each page is a read of its own, under the read bound (WithReadTimeout),
// the first with the account's read before it: the iteration as a whole
// is not bounded.
func (c *Coordinator) Entries(ctx context.Context, ledger string, account any, q StatementQuery) iter.Seq2[Entry, error] {
	return func(yield func(Entry, error) bool) {
		var s *statement
		for {
			p, err := readWithin(ctx, &c.config, "statement", func(ctx context.Context) (StatementPage, error) {
				if s == nil {
					var err error
					if s, err = c.statement(ctx, ledger, account); err != nil {
						return StatementPage{}, err
					}
				}
				return s.page(ctx, q)
			})
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
// A time before the account was opened (the time OpenAccount recorded in
// it), with no entry at or before it, gives ErrBeforeOpening; an account
// OpenAccount did not open (inserted by hand) records no such time, and
// before its first entry is answered its opening balance, whatever the
// time.
//
// For at within the horizon of the server's clock (see Statement), it
// counts every entry visible now, and a commit still in flight may add to
// it later; such an answer is never recorded.
//
// It sums the account's entries from the log and the archive, from the
// account's last checkpoint at or before at (its balance through a time,
// recorded by a read that saw every entry through it and summed a
// thousand entries or more past the previous one, through entries at
// least a minute old; every coordinator on the log reads the same ones,
// whatever its WithHistory), or from its opening: its cost grows with the
// entries since that checkpoint, not with the account's whole history.
// Before a Recoverer removes transactions without an archive it records a
// removal checkpoint of each account they touch: at or after it BalanceAt
// answers from it, before it ErrHistoryRemoved. Entries moved to an
// archive this coordinator does not read are answered for only from a
// checkpoint after them, else ErrHistoryRemoved. A removal or move that
// runs during the read makes it read again: an answer never misses an
// entry it counts.
func (c *Coordinator) BalanceAt(ctx context.Context, ledger string, account any, at time.Time) (int64, error) {
	return readWithin(ctx, &c.config, "balance at", func(ctx context.Context) (int64, error) {
		s, err := c.statement(ctx, ledger, account)
		if err != nil {
			return 0, err
		}
		return s.balanceAt(ctx, at)
	})
}

// statement is one account's statement reader.
type statement struct {
	c       *Coordinator
	ledger  *Ledger
	account any
	key     string
	archive *mongo.Collection
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
	if s.doc, err = s.readAccount(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// entryKey is what a transaction lists in its accounts field for a leg on
// account id of ledger: the ledger's name, length first, then the id
// encoded so that ids the server takes for one document have one key, and
// no two others share one. A string is written as it is ("s"), an
// integral number (of any BSON type) in decimal ("i"), an ObjectID in hex
// ("o"), any other id as the hex of its canonical form ("x",
// schema.CanonicalID): so a transaction between two accounts named by
// short strings lists two keys of about twenty bytes.
func entryKey(ledger string, id any) (string, error) {
	raw, err := schema.MarshalID(id)
	if err != nil {
		return "", err
	}
	prefix := strconv.Itoa(len(ledger)) + ":" + ledger + ":"
	canon := schema.CanonicalID(raw)
	switch {
	case raw.Type == bson.TypeString && utf8.ValidString(raw.StringValue()):
		return prefix + "s" + raw.StringValue(), nil
	case raw.Type == bson.TypeObjectID:
		return prefix + "o" + raw.ObjectID().Hex(), nil
	case schema.CanonicalInt(canon):
		return prefix + "i" + strconv.FormatInt(int64(binary.BigEndian.Uint64([]byte(canon[1:]))), 10), nil
	}
	return prefix + "x" + hex.EncodeToString([]byte(canon)), nil
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

// page answers q, read again (up to maxHistoryReads times) while passes
// moving history out of the log invalidate the reading (see sum).
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
	var after *position
	if q.After != "" {
		var err error
		if after, err = s.decode(q.After, q.Reverse); err != nil {
			return StatementPage{}, err
		}
	}
	for range maxHistoryReads {
		p, err := s.pageOnce(ctx, q, limit, after)
		if !errors.Is(err, errHistoryMoving) {
			return p, err
		}
	}
	return StatementPage{}, errorf("%w: account %v: history kept moving out of the log while a page was read; try again", ErrInProgress, s.account)
}

// pageOnce is one reading of a page of at most limit entries, from after
// on (nil: the first page); errHistoryMoving if a pass moving history out
// of the log may have taken entries from it.
func (s *statement) pageOnce(ctx context.Context, q StatementQuery, limit int, after *position) (StatementPage, error) {
	now, err := s.c.log.serverNow(ctx)
	if err != nil {
		return StatementPage{}, err
	}
	// The window, in whole milliseconds: [Since, Until), from the token on.
	var lo, hi time.Time
	lo = msCeil(q.Since)
	if !q.Until.IsZero() {
		hi = msCeil(q.Until).Add(-time.Millisecond)
	}
	if after != nil {
		if q.Reverse && (hi.IsZero() || after.at.Before(hi)) {
			hi = after.at
		} else if !q.Reverse && after.at.After(lo) {
			lo = after.at
		}
	}
	g, err := s.gone(ctx)
	if err != nil {
		return StatementPage{}, err
	}
	if err := g.past(lo, true); err != nil && !q.Reverse {
		if !lo.IsZero() {
			err = errorf("%w; ask from after it (Since)", err)
		}
		return StatementPage{}, err
	}
	page := StatementPage{Entries: []Entry{}}
	if !lo.IsZero() && !hi.IsZero() && lo.After(hi) {
		return page, nil
	}
	var got, rest []entry
	for need := limit + 1; ; need *= 2 {
		var cut bool
		got, cut, err = s.scan(ctx, lo, hi, q.Reverse, need)
		if err != nil {
			return StatementPage{}, err
		}
		rest = got[:0:0]
		for _, e := range got {
			if after == nil || !after.passed(&e, q.Reverse) {
				rest = append(rest, e)
			}
		}
		if len(rest) > limit || !cut {
			break
		}
	}
	n := min(limit, len(rest))
	shown := rest[:n]
	more := len(rest) > n
	if q.Reverse {
		// A page newest first needs the entries down to its last if it is
		// full, else down to its window's start. A full page above
		// entries that left the log hands a token, whose page says so.
		bottom := lo
		if n == limit {
			bottom = shown[n-1].At
			more = more || g.past(lo, true) != nil
		}
		if err := g.past(bottom, true); err != nil {
			return StatementPage{}, err
		}
	}
	if n > 0 {
		if err := s.balances(ctx, got, shown, q.Reverse, now); err != nil {
			return StatementPage{}, err
		}
		for _, e := range shown {
			page.Entries = append(page.Entries, e.Entry)
		}
	}
	// A second reading of what left the log: unchanged, no pass took an
	// entry from the reads above (see sum).
	if again, err := s.gone(ctx); err != nil {
		return StatementPage{}, err
	} else if again != g {
		return StatementPage{}, errHistoryMoving
	}
	if more {
		page.Next = s.encode(s.resume(after, shown, q.Reverse, now))
	}
	return page, nil
}

// balances sets the Balance of each shown entry: through the first, from
// the last checkpoint before it; then, in the page's direction, over every
// entry of got (the scan, in order), the ones the page's token skips
// included.
func (s *statement) balances(ctx context.Context, got, shown []entry, reverse bool, now time.Time) error {
	first := shown[0]
	through, err := s.sum(ctx, first.At, now, true, func(x *entry) bool { return x.compare(&first) <= 0 })
	if err != nil {
		return err
	}
	i := slices.IndexFunc(got, func(e entry) bool { return e.compare(&first) == 0 })
	k := 0
	for j := i; j < len(got) && k < len(shown); j++ {
		if j > i {
			if reverse {
				through -= got[j-1].Amount
			} else {
				through += got[j].Amount
			}
		}
		if got[j].compare(&shown[k]) == 0 {
			shown[k].Balance = through
			k++
		}
	}
	return nil
}

// resume is where the page after shown resumes: after its last entry; for
// a page oldest first whose last entry is within the horizon of now, after
// the horizon, skipping the entries shown past it (a commit stamped
// before the horizon is visible by now; one stamped after it may not be,
// and is listed by the next page).
func (s *statement) resume(prev *position, shown []entry, reverse bool, now time.Time) *position {
	last := shown[len(shown)-1]
	p := &position{at: last.At, last: last, reverse: reverse}
	horizon := now.Add(-s.c.statementHorizon).Truncate(time.Millisecond)
	if reverse || !last.At.After(horizon) {
		if prev != nil {
			// Entries an earlier page showed past the horizon, and this
			// one has not passed yet: still skipped.
			for id, at := range prev.skip {
				if !at.Before(last.At) {
					if p.skip == nil {
						p.skip = map[entryID]time.Time{}
					}
					p.skip[id] = at
				}
			}
		}
		return p
	}
	if prev != nil && prev.whole && prev.at.After(horizon) {
		horizon = prev.at // a position never moves back
	}
	p.at, p.whole, p.skip = horizon, true, map[entryID]time.Time{}
	if prev != nil {
		for id, at := range prev.skip {
			if at.After(horizon) {
				p.skip[id] = at
			}
		}
	}
	for _, e := range shown {
		if e.At.After(horizon) {
			p.skip[entryID{e.Txn, e.leg}] = e.At
		}
	}
	return p
}

// msCeil rounds t up to a whole millisecond, as commit times are.
func msCeil(t time.Time) time.Time {
	if c := t.Truncate(time.Millisecond); !c.Equal(t) {
		return c.Add(time.Millisecond)
	}
	return t
}

// balanceAt is BalanceAt's answer: the balance through every entry with
// At at or before at.
func (s *statement) balanceAt(ctx context.Context, at time.Time) (int64, error) {
	at = at.Truncate(time.Millisecond)
	if at.IsZero() {
		at = at.Add(time.Millisecond) // a time before every entry: a zero bound is none to sum and scan
	}
	if err := s.opened(ctx, at); err != nil {
		return 0, err
	}
	now, err := s.c.log.serverNow(ctx)
	if err != nil {
		return 0, err
	}
	return s.sum(ctx, at, now, false, func(*entry) bool { return true })
}
