package twopc

import (
	"strconv"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
)

// The options of the library's commands, built once: the driver only reads
// an options builder, so one is shared by every command and goroutine.
var (
	// unorderedWrite: a bulk write whose statements are independent, each with
	// its own guard (one refused does not stop the others).
	unorderedWrite = options.BulkWrite().SetOrdered(false)
	// returnAfter: a find-and-modify that returns the document as written.
	returnAfter = options.FindOneAndUpdate().SetReturnDocument(options.After)
	// upsertReturnAfter: returnAfter, inserting when nothing matches.
	upsertReturnAfter = options.FindOneAndUpdate().SetUpsert(true).SetReturnDocument(options.After)
)

// encoded returns d as the BSON bytes the driver's default encoding would
// give it, when every value in it is of a type whose encoding that is fixed
// (see appendValue): the library's statements, written on every transfer,
// are then handed to the driver already encoded, which spares the driver's
// reflection over every nested document (most of a statement's
// allocations). A document holding any other value (an account id of a
// type of the caller's, whose encoding the client's registry decides) is
// returned as it is, for the driver to encode. Either way the server
// receives the same statement.
func encoded(d bson.D) any {
	buf, ok := appendDocument(make([]byte, 0, 256), d)
	if !ok {
		return d
	}
	return bson.Raw(buf)
}

// appendDocument appends d to dst as a BSON document; ok is false if a
// value in it is not one appendValue encodes.
func appendDocument(dst []byte, d bson.D) (_ []byte, ok bool) {
	start, dst := bsoncore.AppendDocumentStart(dst)
	for _, e := range d {
		if dst, ok = appendValue(dst, e.Key, e.Value); !ok {
			return dst, false
		}
	}
	dst, err := bsoncore.AppendDocumentEnd(dst, start)
	return dst, err == nil
}

// appendValue appends the element key: v to dst as the driver's default
// registry encodes it; ok is false for a key the driver refuses (one
// holding a NUL byte) and for a value of any type not listed here.
func appendValue(dst []byte, key string, v any) (_ []byte, ok bool) {
	if strings.IndexByte(key, 0) >= 0 {
		return dst, false
	}
	switch v := v.(type) {
	case nil:
		return bsoncore.AppendNullElement(dst, key), true
	case string:
		return bsoncore.AppendStringElement(dst, key, v), true
	case State:
		return bsoncore.AppendStringElement(dst, key, string(v)), true
	case bool:
		return bsoncore.AppendBooleanElement(dst, key, v), true
	case int32:
		return bsoncore.AppendInt32Element(dst, key, v), true
	case int64:
		return bsoncore.AppendInt64Element(dst, key, v), true
	case int:
		if int64(v) >= -1<<31 && int64(v) < 1<<31 {
			return bsoncore.AppendInt32Element(dst, key, int32(v)), true
		}
		return bsoncore.AppendInt64Element(dst, key, int64(v)), true
	case bson.ObjectID:
		return bsoncore.AppendObjectIDElement(dst, key, v), true
	case time.Time:
		return bsoncore.AppendDateTimeElement(dst, key, int64(bson.NewDateTimeFromTime(v))), true
	case bson.DateTime:
		return bsoncore.AppendDateTimeElement(dst, key, int64(v)), true
	case bson.RawValue:
		if v.Type == 0 || (bsoncore.Value{Type: bsoncore.Type(v.Type), Data: v.Value}).Validate() != nil {
			return dst, false
		}
		dst = bsoncore.AppendHeader(dst, bsoncore.Type(v.Type), key)
		return append(dst, v.Value...), true
	case bson.D:
		dst = bsoncore.AppendHeader(dst, bsoncore.TypeEmbeddedDocument, key)
		return appendDocument(dst, v)
	case bson.A:
		start, out := bsoncore.AppendArrayElementStart(dst, key)
		for i, x := range v {
			if out, ok = appendValue(out, strconv.Itoa(i), x); !ok {
				return out, false
			}
		}
		out, err := bsoncore.AppendArrayEnd(out, start)
		return out, err == nil
	}
	return dst, false
}
