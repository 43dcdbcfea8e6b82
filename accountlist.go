package twopc

// The accounts of a ledger, by keyset pages in _id order: what `twopc
// accounts` lists.

import (
	"context"
	"encoding/base64"
	"encoding/json"

	"github.com/twopc/twopc/internal/schema"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// AccountQuery selects and pages the accounts of a ledger.
type AccountQuery struct {
	Asset string // only accounts of this asset (AccountAsset); "": any
	Limit int    // accounts a page; 0: DefaultAccountLimit
	After string // the page token a previous page returned; "": the first page
}

// AccountPage is one page of a ledger's accounts.
type AccountPage struct {
	Accounts []Account
	Next     string // "": no more
}

// Account page limits: a page holds DefaultAccountLimit accounts unless
// the query asks for another number, at most MaxAccountLimit.
const (
	DefaultAccountLimit = 100
	MaxAccountLimit     = 1000
)

// idBrackets are the type names of $type in the order the server sorts
// values of those types (numbers of every type together, then strings,
// documents, arrays, binary data, ObjectIDs, booleans, dates, timestamps,
// regular expressions): a comparison such as $gt matches only values of
// its operand's bracket.
var idBrackets = []string{"number", "string", "object", "array", "binData", "objectId", "bool", "date", "timestamp", "regex"}

// bracketOf is the index in idBrackets of the values of type t: -1 for
// those sorted before them all (null, undefined, MinKey), len(idBrackets)
// for those sorted after (MaxKey) or not listed.
func bracketOf(t bson.Type) int {
	switch t {
	case bson.TypeDouble, bson.TypeInt32, bson.TypeInt64, bson.TypeDecimal128:
		return 0
	case bson.TypeString, bson.TypeSymbol:
		return 1
	case bson.TypeEmbeddedDocument:
		return 2
	case bson.TypeArray:
		return 3
	case bson.TypeBinary:
		return 4
	case bson.TypeObjectID:
		return 5
	case bson.TypeBoolean:
		return 6
	case bson.TypeDateTime:
		return 7
	case bson.TypeTimestamp:
		return 8
	case bson.TypeRegex:
		return 9
	case bson.TypeNull, bson.TypeUndefined, bson.TypeMinKey:
		return -1
	}
	return len(idBrackets)
}

// accountToken is an accounts page token: the last account listed, for
// one ledger and asset.
type accountToken struct {
	Ledger string `json:"l"`
	Asset  string `json:"a,omitempty"`
	Last   []byte `json:"i"` // the BSON document {_id: the last id}
}

// Accounts returns a page of the accounts of ledger ("" for the default
// one), in the order of their ids as the server sorts them (numbers by
// value, then strings, documents, ObjectIDs, and the other types after),
// each as Ledger.Account reads it (CommittedCredit zero: the log is not
// read), q.Asset's only if it names one. Tombstones (fences of an account
// that did not exist, see PROTOCOL.md) are not accounts and are not
// listed.
//
// The accounts are read by the _id index, q.Asset matched among its rows:
// a page of one asset in a ledger of many costs the accounts of the other
// assets between its first and its last. Pages of any size concatenate to
// the accounts as they stood when each page was read: a page token
// resumes after the page's last id, so an account opened after a page
// passed its id, or deleted before the page that would list it, is not
// listed; none is listed twice.
//
// Bad input reads nothing: an unknown ledger gives ErrUnknownLedger; a
// negative Limit or one above MaxAccountLimit, an Asset that AccountAsset
// would refuse, or a page token that does not parse or was made for
// another ledger or asset, ErrInvalidQuery. A document whose balance is
// not an integer, or whose asset or limits are not valid, fails the page
// with ErrInvalidAccount naming it (Ledger.Account refuses it too).
func (c *Coordinator) Accounts(ctx context.Context, ledger string, q AccountQuery) (_ AccountPage, err error) {
	ctx, b := c.readBound(ctx, "accounts")
	defer func() { err = b.explain(err); b.end() }()
	l, err := c.ledgers.get(ledger)
	if err != nil {
		return AccountPage{}, errorf("twopc: accounts: %w", err)
	}
	limit := q.Limit
	switch {
	case limit < 0:
		return AccountPage{}, errorf("twopc: accounts: %w: limit %d is negative", ErrInvalidQuery, limit)
	case limit > MaxAccountLimit:
		return AccountPage{}, errorf("twopc: accounts: %w: limit %d is more than MaxAccountLimit (%d)", ErrInvalidQuery, limit, MaxAccountLimit)
	case limit == 0:
		limit = DefaultAccountLimit
	}
	if q.Asset != "" {
		if err := schema.ValidAsset(q.Asset); err != nil {
			return AccountPage{}, errorf("twopc: accounts: %w: %w", ErrInvalidQuery, err)
		}
	}
	filter := bson.D{{Key: fieldTombstone, Value: bson.D{{Key: "$ne", Value: true}}}}
	if q.Asset != "" {
		filter = append(filter, bson.E{Key: fieldAsset, Value: q.Asset})
	}
	if q.After != "" {
		last, err := decodeAccountToken(q.After, ledger, q.Asset)
		if err != nil {
			return AccountPage{}, errorf("twopc: accounts: %w", err)
		}
		// Past the last id: greater in its bracket, or of a later one.
		past := bson.A{bson.D{{Key: "_id", Value: bson.D{{Key: "$gt", Value: last}}}}}
		if b := bracketOf(last.Type); b+1 < len(idBrackets) {
			later := bson.A{}
			for _, name := range idBrackets[b+1:] {
				later = append(later, name)
			}
			past = append(past, bson.D{{Key: "_id", Value: bson.D{{Key: "$type", Value: later}}}})
		}
		filter = append(filter, bson.E{Key: "$or", Value: past})
	}
	if err := ctx.Err(); err != nil {
		return AccountPage{}, err
	}
	var docs []account
	err = c.retry(ctx, func(ctx context.Context) error {
		cur, err := l.accounts.Find(ctx, filter, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}).
			SetLimit(int64(limit+1)).SetProjection(publicAccountProjection))
		if err != nil {
			return err
		}
		defer cur.Close(ctx)
		docs = docs[:0]
		for cur.Next(ctx) {
			var a account
			if err := cur.Decode(&a); err != nil {
				return errorf("%w: %v: %v", ErrInvalidAccount, cur.Current.Lookup("_id"), err)
			}
			docs = append(docs, a)
		}
		return cur.Err()
	})
	if err != nil {
		return AccountPage{}, errorf("twopc: accounts of ledger %q: %w", ledger, err)
	}
	page := AccountPage{Accounts: []Account{}}
	for i := range docs[:min(limit, len(docs))] {
		var id any
		if err := docs[i].ID.Unmarshal(&id); err != nil {
			return AccountPage{}, errorf("twopc: accounts: %w: %v: %v", ErrInvalidAccount, docs[i].ID, err)
		}
		a, err := docs[i].public(id)
		if err != nil {
			return AccountPage{}, errorf("twopc: accounts: %w", err)
		}
		page.Accounts = append(page.Accounts, *a)
	}
	if len(docs) > limit {
		last, _ := bson.Marshal(bson.D{{Key: "_id", Value: docs[limit-1].ID}})
		b, _ := json.Marshal(accountToken{Ledger: ledger, Asset: q.Asset, Last: last})
		page.Next = base64.RawURLEncoding.EncodeToString(b)
	}
	return page, nil
}

// decodeAccountToken returns the last id of accounts page token s, made
// for ledger and asset.
func decodeAccountToken(s, ledger, asset string) (bson.RawValue, error) {
	var tk accountToken
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err == nil {
		err = json.Unmarshal(b, &tk)
	}
	var last bson.RawValue
	if err == nil {
		err = bson.Raw(tk.Last).Validate()
	}
	if err == nil {
		last, err = bson.Raw(tk.Last).LookupErr("_id")
	}
	switch {
	case err != nil:
		return last, errorf("%w: page token %q does not parse", ErrInvalidQuery, s)
	case tk.Ledger != ledger:
		return last, errorf("%w: page token %q is of ledger %q", ErrInvalidQuery, s, tk.Ledger)
	case tk.Asset != asset:
		return last, errorf("%w: page token %q is of another asset", ErrInvalidQuery, s)
	}
	return last, nil
}
