package twopc

import (
	"fmt"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twopc/twopc/internal/schema"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestUnitEncodedIsTheDriversEncoding: encoded gives the bytes the
// driver's bson.Marshal gives, value by value and for the library's own
// statements; a value it does not know leaves the document for the driver.
func TestUnitEncodedIsTheDriversEncoding(t *testing.T) {
	id := newTxnID()
	created := time.Date(2026, 11, 24, 1, 2, 3, 456789012, time.UTC)
	raw, err := bson.Marshal(bson.D{{Key: "n", Value: int64(7)}})
	require.NoError(t, err)
	idValue := bson.Raw(raw).Lookup("n")
	values := []any{
		nil, "", "acct-1", "é\u0000x", StatePending, true, false,
		int32(0), int32(math.MinInt32), int64(-1), int64(math.MaxInt64), int64(math.MinInt64),
		0, 1, -1, math.MaxInt32, math.MinInt32, math.MaxInt32 + 1, math.MinInt32 - 1, math.MaxInt64,
		id, bson.ObjectID{}, created, time.Time{}, created.In(time.FixedZone("x", 3600)), bson.DateTime(-5),
		idValue,
		bson.D{}, bson.D{{Key: "a", Value: int64(1)}, {Key: "b", Value: bson.D{{Key: "$ne", Value: id}}}},
		bson.A{}, bson.A{"int", "long", bson.A{int64(1), bson.D{{Key: "x", Value: nil}}}},
	}
	for _, v := range values {
		d := bson.D{{Key: "v", Value: v}, {Key: "after", Value: int32(1)}}
		want, err := bson.Marshal(d)
		require.NoError(t, err, "%#v", v)
		got := encoded(d)
		require.IsType(t, bson.Raw{}, got, "%#v was left to the driver", v)
		assert.Equal(t, bson.Raw(want), got, "%#v", v)
	}

	type custom struct{ X int64 }
	for _, d := range []bson.D{
		{{Key: "_id", Value: custom{X: 1}}},
		{{Key: "_id", Value: bson.A{uint8(1)}}},
		{{Key: "_id", Value: 1.5}},
		{{Key: "a\x00b", Value: int64(1)}},
		{{Key: "_id", Value: bson.RawValue{}}},
		// A nil document or array, which the driver sends as null.
		{{Key: "$set", Value: bson.D(nil)}},
		{{Key: "$in", Value: bson.A(nil)}},
		nil,
	} {
		assert.Equal(t, d, encoded(d), "%v is left to the driver", d)
	}
}

// TestUnitMarshalIDIsTheDriversEncoding: schema.MarshalID, which encodes a
// string id directly, gives what bson.MarshalValue gives.
func TestUnitMarshalIDIsTheDriversEncoding(t *testing.T) {
	for _, id := range []any{"", "acct-1", "é\u0000x", int64(7), bson.NewObjectID(), bson.D{{Key: "a", Value: "b"}}} {
		typ, data, err := bson.MarshalValue(id)
		require.NoError(t, err)
		got, err := schema.MarshalID(id)
		require.NoError(t, err)
		assert.Equal(t, bson.RawValue{Type: typ, Value: data}, got, "%#v", id)
	}
}

// TestUnitDecodeRecordIsTheDriversDecoding: decodeRecord gives what the
// driver's bson.Unmarshal gives for every document it takes, and takes
// the documents the library writes on every transfer; it refuses, leaving
// the record as it was, any document with a field of another type.
func TestUnitDecodeRecordIsTheDriversDecoding(t *testing.T) {
	at := time.Date(2026, 11, 24, 1, 2, 3, 4_000_000, time.UTC)
	full := record{
		Txn: Txn{
			ID: newTxnID(), Source: "acct-1", Destination: "acct-2", Value: 250, State: StateHeld,
			LastModified: at, Application: "app", Key: "k", Reason: "r", Created: at.Add(-time.Second),
			Hold: true, ExpiryMs: 60_000, HeldAt: at.Add(time.Second), Captured: 100, Released: 150, Metadata: map[string]string{"order": "o-1", "memo": ""}, Asset: "USD/2",
			RefundOf: bson.NewObjectID(), CaptureOf: bson.NewObjectID(), VoidMetadata: map[string]string{"why": "out of stock"}, VoidKey: "void-1",
		},
		Claim: bson.NewObjectID(), CommittedAt: at.Add(2 * time.Second), EventAt: at.Add(3 * time.Second), LeaseMs: 30_000, TakeoverMs: 5_000, KeepMs: 1,
		Archive: "old", AllowNegative: true, Placeholder: true, CapturesSeq: 3, FinalCapture: bson.NewObjectID(),
	}
	// Every field is set but the legs, which decodeRecord leaves to the
	// driver: a field added to record fails here until it is decoded.
	v := reflect.ValueOf(full)
	for _, f := range reflect.VisibleFields(v.Type()) {
		// guessed is not stored; arrays are left to the driver.
		if f.Anonymous || f.Name == "Legs" || f.Name == "guessed" || f.Name == "unnamed" || f.Name == "CapturedLegs" || f.Name == "Captures" || f.Name == "HoldLegs" {
			continue
		}
		assert.False(t, v.FieldByIndex(f.Index).IsZero(), "the test's record leaves %s zero", f.Name)
	}

	same := func(name string, doc any, into record) {
		t.Helper()
		raw, err := bson.Marshal(doc)
		require.NoError(t, err)
		want, got := into, into
		require.NoError(t, bson.Unmarshal(raw, &want))
		require.True(t, decodeRecord(raw, &got), "%s: refused", name)
		assert.Equal(t, want, got, name)
	}
	same("every field", full, record{})
	same("into a record already holding values", bson.D{{Key: "state", Value: "done"}}, full)
	same("with fields it does not know", bson.D{{Key: "_id", Value: full.ID}, {Key: "other", Value: bson.A{1.5}}}, record{})
	for _, id := range []any{"x", bson.NewObjectID(), int32(-3), int64(1) << 40} {
		same(fmt.Sprintf("source %T", id), bson.D{{Key: "source", Value: id}, {Key: "destination", Value: id}}, record{})
	}

	for _, doc := range []bson.D{
		{{Key: "_id", Value: "not an ObjectID"}},
		{{Key: "source", Value: bson.D{{Key: "a", Value: 1}}}},
		{{Key: "source", Value: nil}},
		{{Key: "value", Value: int32(5)}},
		{{Key: "lastModified", Value: "yesterday"}},
		{{Key: "leaseMs", Value: "long"}},
		{{Key: "legs", Value: bson.A{bson.D{{Key: "account", Value: "a"}, {Key: "amount", Value: int64(1)}}}}},
		{{Key: "state", Value: "done"}, {Key: "created", Value: int64(7)}},
		// Keys the driver matches by their lower case.
		{{Key: "State", Value: "done"}},
		{{Key: "VALUE", Value: int64(9)}},
		{{Key: "Legs", Value: bson.A{}}},
	} {
		raw, err := bson.Marshal(doc)
		require.NoError(t, err)
		r := full
		assert.False(t, decodeRecord(raw, &r), "%v", doc)
		assert.Equal(t, full, r, "%v left the record as it was", doc)
	}
	// Not valid BSON (a string without its terminating NUL): left to the
	// driver, which refuses it.
	raw, err := bson.Marshal(bson.D{{Key: "state", Value: "done"}})
	require.NoError(t, err)
	raw[len(raw)-2] = 'x'
	r := full
	assert.False(t, decodeRecord(raw, &r))
	assert.Equal(t, full, r)
}
