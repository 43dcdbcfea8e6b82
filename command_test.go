package twopc

import (
	"math"
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
