package devserver_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc/examples/devserver"
)

// manualPull is MongoDB's documentation of $pull: "The $pull operator
// removes from an existing array all instances of a value or values that
// match a specified condition", with the condition's forms.
const manualPull = "https://www.mongodb.com/docs/manual/reference/operator/update/pull/"

// TestPullCondition: $pull with a condition removes the elements matching
// it, as MongoDB documents (manualPull): query operators apply to each
// element as to a field's value ({$in: [...]}, {$gte: 6}); a condition of
// fields applies to each element that is a document as a query; any other
// value removes the elements equal to it. Stock FerretDB v1.24 removed
// only elements equal to the condition document itself.
func TestPullCondition(t *testing.T) {
	s := startServer(t, devserver.Config{})
	coll := collection(t, connect(t, s.URI()),
		bson.D{{Key: "_id", Value: "in"}, {Key: "a", Value: bson.A{"x", "y", "z", "y"}}},
		bson.D{{Key: "_id", Value: "gte"}, {Key: "a", Value: bson.A{int32(3), int32(6), int32(9)}}},
		bson.D{{Key: "_id", Value: "docs"}, {Key: "a", Value: bson.A{
			bson.D{{Key: "item", Value: "A"}, {Key: "score", Value: int32(8)}},
			bson.D{{Key: "item", Value: "B"}, {Key: "score", Value: int32(5)}},
		}}},
		bson.D{{Key: "_id", Value: "value"}, {Key: "a", Value: bson.A{"x", "y"}}})
	ctx := t.Context()
	for id, pull := range map[string]any{
		"in":    bson.D{{Key: "$in", Value: bson.A{"x", "y"}}},
		"gte":   bson.D{{Key: "$gte", Value: int32(6)}},
		"docs":  bson.D{{Key: "score", Value: int32(8)}},
		"value": "y",
	} {
		res, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$pull", Value: bson.D{{Key: "a", Value: pull}}}})
		require.NoError(t, err, "%s (%s)", id, manualPull)
		assert.EqualValues(t, 1, res.ModifiedCount, "%s (%s)", id, manualPull)
	}
	want := map[string]bson.A{
		"in":    {"z"},
		"gte":   {int32(3)},
		"docs":  {bson.D{{Key: "item", Value: "B"}, {Key: "score", Value: int32(5)}}},
		"value": {"x"},
	}
	for id, a := range want {
		var doc struct {
			A bson.A `bson:"a"`
		}
		require.NoError(t, coll.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Decode(&doc))
		assert.Equal(t, a, doc.A, "%s (%s)", id, manualPull)
	}
}
