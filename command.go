package twopc

import (
	"reflect"
	"strconv"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
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
// receives the same statement, unless the client sets BSONOptions that
// change the default encoding (IntMinSize): the library's statements keep
// the default (see "Data model" in PROTOCOL.md, and NewCoordinator).
func encoded(d bson.D) any {
	if d == nil { // the driver refuses a nil document
		return d
	}
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
		if v == nil { // the driver sends a nil document as null
			return dst, false
		}
		dst = bsoncore.AppendHeader(dst, bsoncore.TypeEmbeddedDocument, key)
		return appendDocument(dst, v)
	case bson.A:
		if v == nil {
			return dst, false
		}
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

// decodeReply decodes the document of a find-and-modify's reply into r:
// by decodeRecord when it can, else by the driver. Its errors are the
// driver's (mongo.ErrNoDocuments when nothing matched).
func decodeReply(sr *mongo.SingleResult, r *record) error {
	raw, err := sr.Raw()
	if err != nil {
		return err
	}
	if decodeRecord(raw, r) {
		return nil
	}
	return sr.Decode(r)
}

// decodeRecord decodes a transaction document the library wrote into r as
// the driver's default decoding would (into a record whose fields of type
// any hold no pointer, as every caller's does), when the document is valid
// BSON and every field in it has the BSON type the library writes (see
// recordField): the transactions read on
// every transfer (the replies of its insert, commit and done writes) are
// then decoded without the driver's reflection. It reports false, and
// leaves r as it was, for any other document (a transfer with legs, an id
// of another type, a field of another type): the caller then decodes it
// with the driver, under the client's own options.
func decodeRecord(raw bson.Raw, r *record) bool {
	if raw.Validate() != nil {
		return false
	}
	elems, err := raw.Elements()
	if err != nil {
		return false
	}
	t := *r
	for _, e := range elems {
		if !recordField(&t, e.Key(), e.Value()) {
			return false
		}
	}
	*r = t
	return true
}

// recordField sets the field of r named key to v, if v has the type the
// library writes there; false for any other type, and for a field it does
// not decode (legs). Unknown keys are ignored, as the driver ignores them.
func recordField(r *record, key string, v bson.RawValue) bool {
	var ok bool
	switch key {
	case "_id":
		r.ID, ok = v.ObjectIDOK()
	case "source":
		r.Source, ok = anyID(v)
	case "destination":
		r.Destination, ok = anyID(v)
	case "value":
		r.Value, ok = v.Int64OK()
	case fieldState:
		var s string
		s, ok = stringOK(v)
		r.State = State(s)
	case fieldLastModified:
		r.LastModified, ok = timeOK(v)
	case fieldApplication:
		r.Application, ok = stringOK(v)
	case fieldKey:
		r.Key, ok = stringOK(v)
	case fieldReason:
		r.Reason, ok = stringOK(v)
	case fieldMetadata:
		r.Metadata, ok = decodeMetadata(v)
	case fieldVoidMetadata:
		r.VoidMetadata, ok = decodeMetadata(v)
	case fieldVoidKey:
		r.VoidKey, ok = stringOK(v)
	case fieldAsset:
		r.Asset, ok = stringOK(v)
	case fieldCommittedAt:
		r.CommittedAt, ok = timeOK(v)
	case fieldCreated:
		r.Created, ok = timeOK(v)
	case fieldEventAt:
		r.EventAt, ok = timeOK(v)
	case fieldHold:
		r.Hold, ok = v.BooleanOK()
	case fieldExpiryMs:
		r.ExpiryMs, ok = v.Int64OK()
	case fieldHeldAt:
		r.HeldAt, ok = timeOK(v)
	case fieldCaptured:
		r.Captured, ok = v.Int64OK()
	case fieldReleased:
		r.Released, ok = v.Int64OK()
	case fieldClaim:
		r.Claim, ok = v.ObjectIDOK()
	case fieldLease:
		r.LeaseMs, ok = v.Int64OK()
	case fieldTakeover:
		r.TakeoverMs, ok = v.Int64OK()
	case fieldKeep:
		r.KeepMs, ok = v.Int64OK()
	case fieldArchive:
		r.Archive, ok = stringOK(v)
	case fieldAllowNegative:
		r.AllowNegative, ok = v.BooleanOK()
	case fieldPlaceholder:
		r.Placeholder, ok = v.BooleanOK()
	case fieldRefundOf:
		r.RefundOf, ok = v.ObjectIDOK()
	case fieldCaptureOf:
		r.CaptureOf, ok = v.ObjectIDOK()
	case fieldFinalCapture:
		r.FinalCapture, ok = v.ObjectIDOK()
	case fieldCapturesSeq:
		r.CapturesSeq, ok = v.Int64OK()
	case fieldLegs, fieldCapturedLegs, fieldCaptures, fieldHoldLegs:
		return false // arrays: left to the driver
	default:
		// The driver matches a key that is not a field's name exactly by
		// its lower case too ("State" sets state): such a key is left to it.
		return !recordKeys[strings.ToLower(key)]
	}
	return ok
}

// recordKeys holds, in lower case, the names of the fields of a
// transaction document.
var recordKeys = func() map[string]bool {
	keys := map[string]bool{}
	for _, f := range reflect.VisibleFields(reflect.TypeOf(record{})) {
		if name, _, _ := strings.Cut(f.Tag.Get("bson"), ","); name != "" {
			keys[strings.ToLower(name)] = true
		}
	}
	return keys
}()

// anyID decodes an account id held in a field of type any, as the driver
// does, for the types whose decoding does not depend on the client's
// options: a string, an ObjectID, an int32 or an int64.
func anyID(v bson.RawValue) (any, bool) {
	switch v.Type {
	case bson.TypeString:
		return stringOK(v)
	case bson.TypeObjectID:
		return v.ObjectIDOK()
	case bson.TypeInt32:
		return v.Int32OK()
	case bson.TypeInt64:
		return v.Int64OK()
	}
	return nil, false
}

// stringOK decodes a BSON string, refusing one that does not end in its
// NUL byte, as the driver does (bsoncore does not check it).
func stringOK(v bson.RawValue) (string, bool) {
	s, ok := v.StringValueOK()
	return s, ok && len(v.Value) > 4 && v.Value[len(v.Value)-1] == 0
}

// timeOK decodes a BSON date as the driver does by default: in UTC.
func timeOK(v bson.RawValue) (time.Time, bool) {
	ms, ok := v.DateTimeOK()
	return time.Unix(ms/1000, ms%1000*int64(time.Millisecond)).UTC(), ok
}
