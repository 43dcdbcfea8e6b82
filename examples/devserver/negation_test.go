package devserver_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc/examples/devserver"
)

// manualNegation is where MongoDB documents that a negation of a field
// reached through an array matches only documents with no element equal:
// $ne on arrays, and $nin ("the field holds an array with no element
// equal to a value in the specified array").
const manualNegation = "https://www.mongodb.com/docs/manual/reference/operator/query/ne/#arrays, https://www.mongodb.com/docs/manual/reference/operator/query/nin/"

// TestNegationThroughArrayOfDocuments: {"a.id": {$ne: x}} (and $nin,
// $not) matches a document only if no element of its array a has id x;
// other operators on the same path still match if some element passes.
// FerretDB v1.24 matched a negation if any one element passed it, so a
// guard "this id is not in the book yet" let a book holding it beside
// another id through (examples/third_party/README.md).
func TestNegationThroughArrayOfDocuments(t *testing.T) {
	s := startServer(t, devserver.Config{})
	coll := collection(t, connect(t, s.URI()),
		bson.D{{Key: "_id", Value: "both"}, {Key: "a", Value: bson.A{bson.D{{Key: "id", Value: "x"}, {Key: "n", Value: int32(1)}}, bson.D{{Key: "id", Value: "y"}, {Key: "n", Value: int32(5)}}}}},
		bson.D{{Key: "_id", Value: "other"}, {Key: "a", Value: bson.A{bson.D{{Key: "id", Value: "y"}, {Key: "n", Value: int32(2)}}, bson.D{{Key: "id", Value: "z"}, {Key: "n", Value: int32(3)}}}}},
		bson.D{{Key: "_id", Value: "one"}, {Key: "a", Value: bson.A{bson.D{{Key: "id", Value: "x"}, {Key: "n", Value: int32(9)}}}}},
		bson.D{{Key: "_id", Value: "none"}, {Key: "a", Value: bson.A{}}})
	ctx := t.Context()
	ids := func(filter bson.D) []string {
		t.Helper()
		cur, err := coll.Find(ctx, filter)
		require.NoError(t, err)
		var docs []struct {
			ID string `bson:"_id"`
		}
		require.NoError(t, cur.All(ctx, &docs))
		out := []string{}
		for _, d := range docs {
			out = append(out, d.ID)
		}
		return out
	}
	for _, c := range []struct {
		filter bson.D
		want   []string
	}{
		{bson.D{{Key: "a.id", Value: bson.D{{Key: "$ne", Value: "x"}}}}, []string{"other", "none"}},
		{bson.D{{Key: "a.id", Value: bson.D{{Key: "$nin", Value: bson.A{"x", "z"}}}}}, []string{"none"}},
		{bson.D{{Key: "a.id", Value: bson.D{{Key: "$not", Value: bson.D{{Key: "$eq", Value: "y"}}}}}}, []string{"one", "none"}},
		// Each operator apart: an element not x and an element n ≥ 5.
		{bson.D{{Key: "a.id", Value: bson.D{{Key: "$ne", Value: "z"}, {Key: "$in", Value: bson.A{"x"}}}}}, []string{"both", "one"}},
		// Not negations: some element passes.
		{bson.D{{Key: "a.n", Value: bson.D{{Key: "$gte", Value: int32(5)}}}}, []string{"both", "one"}},
		{bson.D{{Key: "a.id", Value: bson.D{{Key: "$in", Value: bson.A{"z"}}}}}, []string{"other"}},
	} {
		assert.ElementsMatch(t, c.want, ids(c.filter), "%v (%s)", c.filter, manualNegation)
	}
	// The update a guard makes: refused where the id is already there.
	res, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: "both"}, {Key: "a.id", Value: bson.D{{Key: "$ne", Value: "y"}}}},
		bson.D{{Key: "$push", Value: bson.D{{Key: "a", Value: bson.D{{Key: "id", Value: "y"}}}}}})
	require.NoError(t, err)
	assert.Zero(t, res.MatchedCount, "a guard on an id already in the array (%s)", manualNegation)
}
