package twopc

// An account's transactions, in any state, by keyset pages in transaction
// time order, from the log and the archive: what `twopc list --account`
// shows, for programs.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"iter"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// TransactionQuery selects and pages an account's transactions. Every
// filter given must match.
type TransactionQuery struct {
	// States keeps the transactions in one of these states; none: any.
	States []State
	// From and To bound Created: [From, To); zero: unbounded.
	From, To time.Time
	// Metadata keeps the transfers whose metadata (WithMetadata) has each
	// of its keys set to its value; none: any.
	Metadata map[string]string
	// Key keeps the transaction of this idempotency key (WithKey); "": any.
	Key     string
	Limit   int    // transactions a page; 0: DefaultTransactionLimit
	After   string // the page token a previous page returned; "": the first page
	Reverse bool   // newest first
}

// TransactionPage is one page of an account's transactions.
type TransactionPage struct {
	Txns []*Txn
	Next string // "": no more
}

// Transaction page limits: a page holds DefaultTransactionLimit
// transactions unless the query asks for another number, at most
// MaxTransactionLimit.
const (
	DefaultTransactionLimit = 100
	MaxTransactionLimit     = 1000
)

// maxTokenSkips bounds the ids a page token carries (see Transactions).
const maxTokenSkips = 1000

// Transactions returns a page of the transactions with a leg on account in
// ledger ("" for the default one), in any state (a hold, a canceled
// transfer, one still pending), selected by q: oldest first by Created
// (the transaction time), then by ID, or newest first with q.Reverse. It
// lists the documents this library inserted (their accounts field names
// the account); not those of other programs, nor Cancel's placeholders.
// The accounts themselves are not read: an account with no transaction,
// or none at all, gives an empty page.
//
// The account and the time range are read by the {accounts, created, _id}
// index the coordinator makes (see EnsureIndexes); States, Metadata and
// Key are matched among those rows, so a selective filter on a busy
// account costs the rows of its time range. Each filter is matched as a
// page reads the transaction: one that enters a state after a page passed
// its place is not listed for it.
//
// With WithHistory and an archive, the archive is read too, after the log:
// a transaction archived between the two reads is found in the archive
// (archiving inserts there before it deletes from the log). One that both
// hold is listed once, as the archive has it (its first record; the log's
// is a late duplicate's copy, see WithHistory), and only if that record
// matches q. Transactions removed without an archive are not listed.
//
// Pages of any size concatenate to the whole, each transaction once, in
// order. A page token resumes after the page's last transaction, with one
// exception that makes ascending pages complete: a transaction is stamped
// with its Created just before its insert, and the low-water mark's margin
// (half a second, see PROTOCOL.md, Clocks) is how late an insert may land
// after its stamp, so one with a Created older than a listed one can still
// appear for that long. So an ascending token never resumes from a point
// less than the margin older than the server's clock at the page's read:
// the page still lists the transactions newer than that point, and the
// token carries their ids (at most 1000; a page stops early rather than
// carry more) so that the next page skips them, listing every other one
// from that point on, late ones included. A page that reached the end of
// an unbounded range, or of one whose To is within the margin, still has
// a Next token, from which a later call lists what arrived since; a page
// with no transactions has none (call again later with the same After).
// What ascending pages cannot list: a transaction whose insert landed
// more than the margin after its Created (the coordinator that wrote it
// logs a warning; see PROTOCOL.md, Clocks) and after a page passed its
// place.
//
// Reverse pages resume strictly before their last transaction and are
// not held back: a transaction whose insert lands after a page passed its
// place (one made in the last half second before that page's read, or
// later) is not listed. With a To at least the margin before the first
// page's read, nothing is missed.
//
// Bad input reads nothing: an unknown ledger gives ErrUnknownLedger; an
// account id the library refuses, ErrInvalidAccountID; a negative Limit or
// one above MaxTransactionLimit, From after To, a state that is not one of
// the seven, a metadata key that is empty, starts with "$" or holds "." or
// NUL, a key or metadata that is not valid UTF-8, a key longer than
// MaxKeyLen, or a page token that does not parse or was made for another
// account, query or direction, ErrInvalidQuery. A document the protocol
// could not have written gives ErrMalformedTxn, naming its id.
func (c *Coordinator) Transactions(ctx context.Context, ledger string, account any, q TransactionQuery) (TransactionPage, error) {
	return readWithin(ctx, &c.config, "transactions", func(ctx context.Context) (TransactionPage, error) {
		r, tok, err := newTxnReader(ctx, c, ledger, account, q)
		if err != nil {
			return TransactionPage{}, err
		}
		return r.page(ctx, tok)
	})
}

// Txns returns account's transactions selected by q, page after page
// (q.Limit transactions a read), as Transactions lists them; it ends at
// the first error, or at the first page with no transactions. Each page
// is a read of its own, under the read bound (WithReadTimeout): the
// iteration as a whole is not bounded.
func (c *Coordinator) Txns(ctx context.Context, ledger string, account any, q TransactionQuery) iter.Seq2[*Txn, error] {
	return func(yield func(*Txn, error) bool) {
		var r *txnReader
		var tok *txnResume
		for {
			p, err := readWithin(ctx, &c.config, "transactions", func(ctx context.Context) (TransactionPage, error) {
				if r == nil {
					var err error
					if r, tok, err = newTxnReader(ctx, c, ledger, account, q); err != nil {
						return TransactionPage{}, err
					}
				}
				return r.page(ctx, tok)
			})
			if err != nil {
				yield(nil, err)
				return
			}
			for _, t := range p.Txns {
				if !yield(t, nil) {
					return
				}
			}
			if p.Next == "" || len(p.Txns) == 0 {
				return
			}
			if tok, err = r.decode(p.Next); err != nil {
				yield(nil, err)
				return
			}
		}
	}
}

// txnReader reads one account's transactions for one query.
type txnReader struct {
	c       *Coordinator
	key     string // the account's key in the accounts field (entryKey)
	query   string // what tokens are bound to besides key and direction
	reverse bool
	limit   int
	lo, hi  time.Time // Created in [lo, hi), whole milliseconds; zero: unbounded
	among   bson.A    // the conditions matched among the index's rows
	states  []string  // the states among keeps; none: any
	archive *mongo.Collection
}

// txnPos is a place in the order: after (ascending) or before (Reverse)
// the transaction (at, id), or, whole, before every transaction of
// millisecond at (ascending only).
type txnPos struct {
	at    time.Time
	id    bson.ObjectID
	whole bool
}

// txnToken is a page token, for one account, query and direction.
type txnToken struct {
	Key     string    `json:"k"`
	Query   string    `json:"q"`
	Reverse bool      `json:"r,omitempty"`
	At      int64     `json:"t"`
	Txn     string    `json:"x,omitempty"` // "": whole
	Skip    []txnMark `json:"s,omitempty"`
}

// txnMark is a transaction a token skips: listed already, past its place.
type txnMark struct {
	At  int64  `json:"t"`
	Txn string `json:"x"`
}

// txnResume is a decoded token: where the next page starts, and what it
// skips.
type txnResume struct {
	pos  *txnPos // nil: the start
	skip map[bson.ObjectID]time.Time
}

// newTxnReader checks q (reading nothing) and returns its reader and its
// decoded token.
func newTxnReader(ctx context.Context, c *Coordinator, ledger string, account any, q TransactionQuery) (*txnReader, *txnResume, error) {
	if _, err := c.ledgers.get(ledger); err != nil {
		return nil, nil, errorf("twopc: transactions: %w", err)
	}
	if err := validateAccountID("account", account); err != nil {
		return nil, nil, errorf("twopc: transactions: %w", err)
	}
	key, err := entryKey(ledger, account)
	if err != nil {
		return nil, nil, errorf("twopc: transactions: %w: %v", ErrInvalidAccountID, err)
	}
	r := &txnReader{c: c, key: key, reverse: q.Reverse, limit: q.Limit, lo: msCeil(q.From), hi: msCeil(q.To), archive: c.log.history.archive}
	if err := r.check(q); err != nil {
		return nil, nil, errorf("twopc: transactions: %w", err)
	}
	tok, err := r.decode(q.After)
	if err != nil {
		return nil, nil, errorf("twopc: transactions: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	// The log and the archive are read by their indexes: made (or
	// checked) first.
	if err := c.indexes.need(ctx); err != nil {
		return nil, nil, errorf("twopc: transactions: %w", err)
	}
	return r, tok, nil
}

// check validates q, and sets the reader's limit, the conditions matched
// among the rows, and the query its tokens are bound to.
func (r *txnReader) check(q TransactionQuery) error {
	switch {
	case r.limit < 0:
		return errorf("%w: limit %d is negative", ErrInvalidQuery, r.limit)
	case r.limit > MaxTransactionLimit:
		return errorf("%w: limit %d is more than MaxTransactionLimit (%d)", ErrInvalidQuery, r.limit, MaxTransactionLimit)
	case r.limit == 0:
		r.limit = DefaultTransactionLimit
	}
	if !q.From.IsZero() && !q.To.IsZero() && q.From.After(q.To) {
		return errorf("%w: from %v is after to %v", ErrInvalidQuery, q.From, q.To)
	}
	states := make([]string, 0, len(q.States))
	for _, s := range q.States {
		if !s.Valid() {
			return errorf("%w: %q is not a state", ErrInvalidQuery, string(s))
		}
		if !slices.Contains(states, string(s)) {
			states = append(states, string(s))
		}
	}
	slices.Sort(states)
	r.states = states
	if len(states) > 0 {
		in := bson.A{}
		for _, s := range states {
			in = append(in, s)
		}
		r.among = append(r.among, bson.D{{Key: fieldState, Value: bson.D{{Key: "$in", Value: in}}}})
	}
	for _, k := range slices.Sorted(maps.Keys(q.Metadata)) {
		v := q.Metadata[k]
		switch {
		case k == "" || strings.HasPrefix(k, "$") || strings.ContainsAny(k, ".\x00"):
			return errorf("%w: metadata key %q: not empty, not starting with $, no . or NUL", ErrInvalidQuery, k)
		case !utf8.ValidString(k) || !utf8.ValidString(v):
			return errorf("%w: metadata %q=%q is not valid UTF-8", ErrInvalidQuery, k, v)
		}
		r.among = append(r.among, bson.D{{Key: fieldMetadata + "." + k, Value: v}})
	}
	switch {
	case len(q.Key) > MaxKeyLen:
		return errorf("%w: a key of %d bytes, more than MaxKeyLen (%d)", ErrInvalidQuery, len(q.Key), MaxKeyLen)
	case !utf8.ValidString(q.Key):
		return errorf("%w: key %q is not valid UTF-8", ErrInvalidQuery, q.Key)
	case q.Key != "":
		r.among = append(r.among, bson.D{{Key: fieldKey, Value: q.Key}})
	}
	b, _ := json.Marshal(struct {
		States   []string          `json:"s"`
		From     int64             `json:"f"`
		To       int64             `json:"t"`
		Metadata map[string]string `json:"m"`
		Key      string            `json:"k"`
	}{states, r.lo.UnixMilli(), r.hi.UnixMilli(), q.Metadata, q.Key})
	sum := sha256.Sum256(b)
	r.query = hex.EncodeToString(sum[:8])
	return nil
}

// page reads the page that starts at tok.
func (r *txnReader) page(ctx context.Context, tok *txnResume) (TransactionPage, error) {
	now, err := r.c.log.serverNow(ctx)
	if err != nil {
		return TransactionPage{}, err
	}
	page := TransactionPage{Txns: []*Txn{}}
	if !r.lo.IsZero() && !r.hi.IsZero() && !r.lo.Before(r.hi) {
		return page, nil // an empty range
	}
	var rest []*record
	for need := r.limit + 1 + len(tok.skip); ; need *= 2 {
		got, cut, err := r.scan(ctx, tok.pos, need)
		if err != nil {
			return TransactionPage{}, err
		}
		rest = got[:0:0]
		for _, t := range got {
			if _, skip := tok.skip[t.ID]; !skip {
				rest = append(rest, t)
			}
		}
		if len(rest) > r.limit || !cut {
			break
		}
	}
	shown := rest[:min(r.limit, len(rest))]
	more := len(rest) > len(shown)
	// The hold-back (see Transactions): an ascending token resumes no
	// later than the margin before the server's clock, skipping what was
	// listed past that.
	held := now.Add(-r.c.markMargin).Truncate(time.Millisecond)
	var next *txnToken
	for len(shown) > 0 {
		next = r.next(tok, shown, held)
		if len(next.Skip) <= maxTokenSkips {
			break
		}
		shown, more, next = shown[:len(shown)-1], true, nil
	}
	for _, t := range shown {
		page.Txns = append(page.Txns, t.txn())
	}
	open := !r.reverse && (r.hi.IsZero() || r.hi.After(held))
	if next != nil && (more || open) {
		b, _ := json.Marshal(next)
		page.Next = base64.RawURLEncoding.EncodeToString(b)
	}
	return page, nil
}

// next is the token after shown, the page read at a time whose margin
// before is held.
func (r *txnReader) next(tok *txnResume, shown []*record, held time.Time) *txnToken {
	last := shown[len(shown)-1]
	pos := txnPos{at: last.Created, id: last.ID}
	if !r.reverse && !last.Created.Before(held) {
		pos = txnPos{at: held, whole: true}
		if tok.pos != nil && posCompare(&pos, tok.pos) < 0 {
			pos = *tok.pos // never back (a server clock that went back)
		}
	}
	t := &txnToken{Key: r.key, Query: r.query, Reverse: r.reverse, At: pos.at.UnixMilli()}
	if !pos.whole {
		t.Txn = pos.id.Hex()
	}
	if r.reverse {
		return t
	}
	marks := map[bson.ObjectID]time.Time{}
	for id, at := range tok.skip {
		marks[id] = at
	}
	for _, s := range shown {
		marks[s.ID] = s.Created
	}
	for _, id := range slices.SortedFunc(maps.Keys(marks), func(a, b bson.ObjectID) int { return bytes.Compare(a[:], b[:]) }) {
		if keyAfter(marks[id], id, &pos) {
			t.Skip = append(t.Skip, txnMark{At: marks[id].UnixMilli(), Txn: id.Hex()})
		}
	}
	return t
}

// decode reads page token s ("": the start).
func (r *txnReader) decode(s string) (*txnResume, error) {
	res := &txnResume{skip: map[bson.ObjectID]time.Time{}}
	if s == "" {
		return res, nil
	}
	var tk txnToken
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err == nil {
		err = json.Unmarshal(b, &tk)
	}
	pos := &txnPos{at: time.UnixMilli(tk.At).UTC(), whole: tk.Txn == ""}
	if err == nil && !pos.whole {
		pos.id, err = bson.ObjectIDFromHex(tk.Txn)
	}
	for _, m := range tk.Skip {
		id, serr := bson.ObjectIDFromHex(m.Txn)
		if err == nil {
			err = serr
		}
		res.skip[id] = time.UnixMilli(m.At).UTC()
	}
	switch {
	case err != nil || len(tk.Skip) > maxTokenSkips || (pos.whole && tk.Reverse):
		return nil, errorf("%w: page token %q does not parse", ErrInvalidQuery, s)
	case tk.Key != r.key:
		return nil, errorf("%w: page token %q is another account's", ErrInvalidQuery, s)
	case tk.Query != r.query:
		return nil, errorf("%w: page token %q is of another query (States, From, To, Metadata or Key)", ErrInvalidQuery, s)
	case tk.Reverse != r.reverse:
		return nil, errorf("%w: page token %q is of the other direction (Reverse)", ErrInvalidQuery, s)
	}
	res.pos = pos
	return res, nil
}

// posCompare orders two places (see txnPos).
func posCompare(a, b *txnPos) int {
	if c := a.at.Compare(b.at); c != 0 {
		return c
	}
	switch {
	case a.whole && b.whole:
		return 0
	case a.whole:
		return -1
	case b.whole:
		return 1
	}
	return bytes.Compare(a.id[:], b.id[:])
}

// keyAfter reports whether transaction (at, id) comes after place p in
// ascending order.
func keyAfter(at time.Time, id bson.ObjectID, p *txnPos) bool {
	return posCompare(&txnPos{at: at, id: id}, p) > 0
}

// keyCompare orders two transactions as pages list them ascending.
func keyCompare(a, b *record) int {
	return posCompare(&txnPos{at: a.Created, id: a.ID}, &txnPos{at: b.Created, id: b.ID})
}
