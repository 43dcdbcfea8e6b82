package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"unicode/utf8"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/internal/schema"
)

// Where show and list found a transaction.
const (
	inLog     = "log"     // the transactions collection
	inArchive = "archive" // the archive given with --archive (twopc.WithHistory)
)

// found is a transaction and where it was found.
type found struct {
	txnDoc
	where      string // inLog or inArchive
	collection string
	// logCopy is, for one found in the archive, the document the log
	// holds under the same id, if it holds one: a copy that the
	// transaction's own late writes brought back after it was archived
	// (see twopc.WithHistory). The archive's record is the first.
	logCopy *txnDoc
}

// afterLookupRead, if set (by a test), is called after each read of a
// lookup, with where it read: a transaction can move between two reads.
var afterLookupRead func(where string)

// readTxn reads transaction id from coll; nil if it holds none.
func readTxn(ctx context.Context, coll *mongo.Collection, where string, id bson.ObjectID) (*txnDoc, error) {
	raw, err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Raw()
	if afterLookupRead != nil {
		afterLookupRead(where)
	}
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read transaction %s from %s %s: %w", id.Hex(), where, coll.Name(), err)
	}
	t := parseTxn(raw)
	return &t, nil
}

// lookupTxn finds transaction id in the archive, if --archive gives one,
// else in the log, else in the archive again; nil if none holds it. The
// library archives a transaction by inserting it into the archive, then
// deleting it from the log: a transaction that moves while it is looked
// up is missed by the first read of the archive only if it was not there
// yet, so it is in the log at the second read, or, if it left the log
// before that, in the archive at the third. When both hold the id, the
// archive's record is the transaction's first record, and the one found;
// the log's is a copy late duplicate writes brought back (see
// twopc.WithHistory), returned beside it.
func (cn *conn) lookupTxn(ctx context.Context, id bson.ObjectID) (*found, error) {
	inArchiveNow := func() (*found, error) {
		t, err := readTxn(ctx, cn.archive, inArchive, id)
		if t == nil || err != nil {
			return nil, err
		}
		return &found{txnDoc: *t, where: inArchive, collection: cn.archive.Name()}, nil
	}
	if cn.archive != nil {
		f, err := inArchiveNow()
		if err != nil {
			return nil, err
		}
		if f != nil {
			if f.logCopy, err = readTxn(ctx, cn.txns, inLog, id); err != nil {
				return nil, err
			}
			return f, nil
		}
	}
	t, err := readTxn(ctx, cn.txns, inLog, id)
	if err != nil {
		return nil, err
	}
	if t != nil {
		return &found{txnDoc: *t, where: inLog, collection: cn.txns.Name()}, nil
	}
	if cn.archive == nil {
		return nil, nil
	}
	return inArchiveNow()
}

// checkKey refuses what cannot be an idempotency key (twopc.WithKey).
func checkKey(key string) error {
	switch {
	case key == "":
		return errors.New("an empty key")
	case len(key) > twopc.MaxKeyLen:
		return fmt.Errorf("a key of %d bytes, more than %d", len(key), twopc.MaxKeyLen)
	case !utf8.ValidString(key):
		return errors.New("not valid UTF-8")
	}
	return nil
}

// keyFilter is the conditions, to add to a filter's top level, that match
// the transaction of idempotency key key: the _id the library derives
// from it (schema.KeyID; at the top level, so that the dev server reads
// it by the _id index too), holding that key, or the canceled placeholder
// a Cancel of that _id wrote before it arrived (as twopc's GetByKey reads
// it).
func keyFilter(key string) bson.D {
	return bson.D{{Key: "_id", Value: schema.KeyID(key)}, {Key: "$and", Value: bson.A{bson.D{{Key: "$or", Value: bson.A{
		bson.D{{Key: schema.Key, Value: key}}, bson.D{{Key: schema.Placeholder, Value: true}},
	}}}}}}
}

// lookupKey finds the transaction of idempotency key key as lookupTxn
// finds one by id (see keyFilter); nil if none holds it.
func (cn *conn) lookupKey(ctx context.Context, key string) (*found, error) {
	f, err := cn.lookupTxn(ctx, schema.KeyID(key))
	if f == nil || err != nil {
		return nil, err
	}
	if k, _ := f.raw.Lookup(schema.Key).StringValueOK(); k != key && !f.placeholder {
		return nil, nil // another document under that _id: not this key's transaction
	}
	return f, nil
}

// notFoundArg is the refusal of show's argument, read as an id, a key or
// both, that named no transaction.
func (cn *conn) notFoundArg(arg string, asID, asKey bool) error {
	what := arg
	switch {
	case asID && asKey:
		what = fmt.Sprintf("%s (as an id, then as a key)", arg)
	case asKey:
		what = fmt.Sprintf("key %q (_id %s)", arg, schema.KeyID(arg).Hex())
	}
	if cn.archive == nil {
		return refused(fmt.Errorf("%w: %s is not in the log (collection %s); a transaction archived by twopc.WithHistory "+
			"is found with --archive COLLECTION", twopc.ErrTxnNotFound, what, cn.txns.Name()))
	}
	return refused(fmt.Errorf("%w: %s is neither in the log (collection %s) nor in the archive (collection %s)",
		twopc.ErrTxnNotFound, what, cn.txns.Name(), cn.archive.Name()))
}

// findTxns finds the transactions matching filter in the log and, if
// --archive gives one, in the archive, sorted by lastModified then _id,
// least recently touched first, each once, with where it was found. The
// log is read first: a transaction archived after that read (inserted
// into the archive, then deleted from the log) is in the archive when
// the archive is read. An id both hold is the archive's record, the
// transaction's first (the log's is a copy; see found): listed if the
// archive's record matches, whatever the copy's does. limit (0: none)
// bounds what each collection returns; more says one had more.
func (cn *conn) findTxns(ctx context.Context, filter bson.D, limit int64) (txns []*found, more bool, err error) {
	opts := options.Find().SetSort(bson.D{{Key: schema.LastModified, Value: 1}, {Key: "_id", Value: 1}})
	if limit > 0 {
		opts.SetLimit(limit + 1)
	}
	read := func(coll *mongo.Collection, where string, filter bson.D, opts *options.FindOptionsBuilder) ([]*found, error) {
		cur, err := coll.Find(ctx, filter, opts)
		if err != nil {
			return nil, fmt.Errorf("list transactions in %s %s: %w", where, coll.Name(), err)
		}
		defer cur.Close(ctx)
		var out []*found
		for cur.Next(ctx) {
			out = append(out, &found{txnDoc: parseTxn(append(bson.Raw(nil), cur.Current...)), where: where, collection: coll.Name()})
		}
		if err := cur.Err(); err != nil {
			return nil, fmt.Errorf("list transactions in %s %s: %w", where, coll.Name(), err)
		}
		if afterLookupRead != nil {
			afterLookupRead(where)
		}
		return out, nil
	}
	ids := func(fs []*found) bson.A {
		a := make(bson.A, len(fs))
		for i, f := range fs {
			a[i] = f.id
		}
		return a
	}
	logged, err := read(cn.txns, inLog, filter, opts)
	if err != nil {
		return nil, false, err
	}
	more = limit > 0 && int64(len(logged)) > limit
	if cn.archive == nil {
		return logged, more, nil
	}
	archived, err := read(cn.archive, inArchive, filter, opts)
	if err != nil {
		return nil, false, err
	}
	more = more || (limit > 0 && int64(len(archived)) > limit)
	byID := map[string]*found{}
	for _, f := range archived {
		byID[schema.CanonicalID(f.id)] = f
	}
	var rest []*found // found in the log only
	for _, f := range logged {
		if byID[schema.CanonicalID(f.id)] == nil {
			rest = append(rest, f)
		}
	}
	// Of those, the ids the archive holds with a record the filter does
	// not match are not listed: the log's is a copy. Read what the
	// archive holds of them first, then which of those match, so that one
	// archived in between is found by the second read.
	if len(rest) > 0 {
		held, err := read(cn.archive, inArchive, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids(rest)}}}},
			options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}}))
		if err != nil {
			return nil, false, err
		}
		if len(held) > 0 {
			drop := map[string]bool{}
			for _, f := range held {
				drop[schema.CanonicalID(f.id)] = true
			}
			matching, err := read(cn.archive, inArchive, bson.D{{Key: "$and", Value: bson.A{
				filter, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids(held)}}}},
			}}}, nil)
			if err != nil {
				return nil, false, err
			}
			for _, f := range matching {
				byID[schema.CanonicalID(f.id)] = f
				archived = append(archived, f)
			}
			kept := rest[:0]
			for _, f := range rest {
				if !drop[schema.CanonicalID(f.id)] {
					kept = append(kept, f)
				}
			}
			rest = kept
		}
	}
	// Which archived ones the log holds a copy of, whatever its state.
	if len(archived) > 0 {
		copies, err := read(cn.txns, inLog, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids(archived)}}}}, nil)
		if err != nil {
			return nil, false, err
		}
		for _, c := range copies {
			if f := byID[schema.CanonicalID(c.id)]; f != nil {
				f.logCopy = &c.txnDoc
			}
		}
	}
	txns = append(rest, archived...)
	sort.SliceStable(txns, func(i, j int) bool {
		a, b := txns[i], txns[j]
		if !a.lastModified.Equal(b.lastModified) {
			return a.lastModified.Before(b.lastModified)
		}
		return bytes.Compare(a.id.Value, b.id.Value) < 0
	})
	return txns, more, nil
}

// withFoundIn is a transaction document as plain JSON with where it was
// found added first: "foundIn" ("log" or "archive"), and "alsoInLog":
// true for one found in the archive of which the log holds a copy.
func withFoundIn(f *found) json.RawMessage {
	doc := plainJSON(f.raw)
	head := `{"foundIn":` + quote(f.where)
	if f.logCopy != nil {
		head += `,"alsoInLog":true`
	}
	if len(doc) < 2 || doc[0] != '{' {
		return doc
	}
	if string(doc) == "{}" {
		return json.RawMessage(head + "}")
	}
	return json.RawMessage(head + "," + string(doc[1:]))
}
