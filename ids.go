package twopc

import (
	"crypto/rand"
	"encoding/binary"
	"math"
	"reflect"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/twopc/twopc/internal/schema"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// Account ids as the server sees them.
//
// The server matches an _id by BSON comparison, under which numbers of
// different types are equal when their values are (int32(1), int64(1) and
// 1.0 are one _id), at any depth of an embedded document or array, and the
// unique index on _id agrees. So the library compares ids the same way:
// two ids are one account when their canonical forms (schema.CanonicalID) are
// equal. The id forms whose server equality the library cannot decide
// exactly are refused with ErrInvalidAccountID (and, in a transfer,
// ErrInvalidTransfer) wherever they appear:
// Decimal128 (equal to numbers of other types by value, which the library
// does not compute; the development server also drops the connection on
// it), Symbol (equal to a string on some servers and not on others),
// regular expressions, JavaScript, DBPointer, undefined, MinKey and MaxKey,
// and NaN. So are Go maps of more than one key, at any depth: they marshal
// in random field order, and {a, b} and {b, a} are two _ids. Collections
// with a non-simple default collation (which would make "a" and "A" one
// _id) are not supported; per-leg markers keep even that case from moving
// money wrongly (see schema.Marker).

// validateAccountID checks that id can be a document _id whose equality the
// library decides as the server does.
func validateAccountID(which string, id any) error {
	if id == nil {
		return errorf("%w: %s id is nil", ErrInvalidAccountID, which)
	}
	if unordered(reflect.ValueOf(id), 0) {
		// A Go map marshals in random key order, and {a, b} and {b, a}
		// are two documents to the server: one account id would name
		// either, call by call.
		return errorf("%w: %s id holds a map of more than one key (%T), whose field order is random; use bson.D", ErrInvalidAccountID, which, id)
	}
	v, err := schema.MarshalID(id)
	if err != nil {
		return errorf("%w: %s id %v (%T) cannot be an _id: %v", ErrInvalidAccountID, which, id, id, err)
	}
	t, data := v.Type, v.Value
	switch t {
	case bson.TypeArray, bson.TypeNull:
		return errorf("%w: %s id of BSON type %s cannot be an _id", ErrInvalidAccountID, which, t)
	case bson.TypeString:
		if s, ok := v.StringValueOK(); ok && s == "" {
			return errorf("%w: %s id is the empty string", ErrInvalidAccountID, which)
		}
	case bson.TypeEmbeddedDocument:
		// {_id: {$gt: ""}} in a filter is a query, not an id: it would match
		// other accounts. Keys with dots or nothing in them are refused by
		// some servers, so they are refused here, before anything is written.
		if err := checkKeys(bson.Raw(data)); err != nil {
			return errorf("%w: %s id: %v", ErrInvalidAccountID, which, err)
		}
	}
	if err := checkIDValue(v); err != nil {
		return errorf("%w: %s id: %v", ErrInvalidAccountID, which, err)
	}
	return nil
}

// unordered reports whether v holds, at any depth, a Go map of more than
// one key: its BSON form's field order changes from one marshaling to the
// next.
func unordered(v reflect.Value, depth int) bool {
	if depth > 32 || !v.IsValid() {
		return false
	}
	switch v.Kind() {
	case reflect.Interface, reflect.Pointer:
		return !v.IsNil() && unordered(v.Elem(), depth+1)
	case reflect.Map:
		if v.Len() > 1 {
			return true
		}
		for it := v.MapRange(); it.Next(); {
			if unordered(it.Value(), depth+1) {
				return true
			}
		}
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return false
		}
		for i := 0; i < v.Len(); i++ {
			if unordered(v.Index(i), depth+1) {
				return true
			}
		}
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if unordered(v.Field(i), depth+1) {
				return true
			}
		}
	}
	return false
}

// checkIDValue refuses, at any depth, the values whose equality the library
// cannot decide as the server does, and strings that are not valid UTF-8.
func checkIDValue(v bson.RawValue) error {
	switch v.Type {
	case bson.TypeDecimal128, bson.TypeSymbol, bson.TypeRegex, bson.TypeJavaScript, bson.TypeCodeWithScope,
		bson.TypeDBPointer, bson.TypeUndefined, bson.TypeMinKey, bson.TypeMaxKey:
		return errorf("BSON type %s is not supported in an account id", v.Type)
	case bson.TypeDouble:
		if math.IsNaN(v.Double()) {
			return errorf("NaN is not an account id")
		}
	case bson.TypeString:
		if s, ok := v.StringValueOK(); !ok || !utf8.ValidString(s) {
			return errorf("a string that is not valid UTF-8")
		}
	case bson.TypeEmbeddedDocument, bson.TypeArray:
		elems, err := bson.Raw(v.Value).Elements()
		if err != nil {
			return err
		}
		for _, e := range elems {
			if !utf8.ValidString(e.Key()) {
				return errorf("a field name that is not valid UTF-8")
			}
			if err := checkIDValue(e.Value()); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkKeys refuses document keys that are empty, start with $ or hold a
// dot, at any depth.
func checkKeys(doc bson.Raw) error {
	elems, err := doc.Elements()
	if err != nil {
		return err
	}
	for _, e := range elems {
		switch k := e.Key(); {
		case k == "", strings.HasPrefix(k, "$"), strings.Contains(k, "."):
			return errorf("field name %q", k)
		}
		if v := e.Value(); v.Type == bson.TypeEmbeddedDocument {
			if err := checkKeys(v.Document()); err != nil {
				return err
			}
		}
	}
	return nil
}

// keyID is the _id of the transaction with idempotency key key
// (schema.KeyID: 11 bytes of a SHA-256 of it, and the zero marker byte).
// Deriving the _id from the key makes the
// _id's own uniqueness enforce the key's, with no secondary unique index
// (which a collection sharded on a hashed _id could not have) and every
// lookup targeted by _id.
func keyID(key string) bson.ObjectID { return schema.KeyID(key) }

// newTxnID is a fresh transaction id: an ObjectID-shaped value of four
// bytes of seconds (so ids sort roughly by creation, as ObjectIDs do) and
// seven random bytes, and a zero last byte, which leg markers use (see
// schema.Marker). Two ids collide only if made in the same second with the
// same 56 random bits.
func newTxnID() bson.ObjectID {
	var id bson.ObjectID
	binary.BigEndian.PutUint32(id[:4], uint32(time.Now().Unix()))
	_, _ = rand.Read(id[4 : len(id)-1]) // crypto/rand.Read never fails
	return id
}
