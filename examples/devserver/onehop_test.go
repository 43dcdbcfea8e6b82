package devserver_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"

	"github.com/twopc/twopc/examples/devserver"
)

// TestServerOneHop checks that a Server's FerretDB listens nowhere (the
// front hands it each request in process, issue 49's "one hop") and that
// what a connection carries from one request to the next still works
// through the front: a cursor read in batches (getMore on the connection
// that opened it), an unacknowledged write, a multi-document update run a
// document at a time.
func TestServerOneHop(t *testing.T) {
	s := startServer(t, devserver.Config{})
	assert.Empty(t, devserver.BackendURI(s), "FerretDB listens on no socket of its own")

	// One connection, so that the unacknowledged write and the next
	// request go in that order on it.
	c, err := mongo.Connect(options.Client().ApplyURI(s.URI()).SetMaxPoolSize(1).SetRetryWrites(false))
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, c.Disconnect(context.Background())) })
	coll := collection(t, c, bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "_id", Value: 2}}, bson.D{{Key: "_id", Value: 3}},
		bson.D{{Key: "_id", Value: 4}}, bson.D{{Key: "_id", Value: 5}})

	cur, err := coll.Find(t.Context(), bson.D{}, options.Find().SetBatchSize(2).SetSort(bson.D{{Key: "_id", Value: 1}}))
	require.NoError(t, err)
	var docs []bson.D
	require.NoError(t, cur.All(t.Context(), &docs))
	require.Len(t, docs, 5, "the cursor read across getMores")

	unack := c.Database("devserver").Collection(t.Name(), options.Collection().SetWriteConcern(writeconcern.Unacknowledged()))
	_, err = unack.InsertOne(t.Context(), bson.D{{Key: "_id", Value: 6}})
	require.NoError(t, err)

	res, err := coll.UpdateMany(t.Context(), bson.D{}, inc)
	require.NoError(t, err)
	assert.EqualValues(t, 6, res.ModifiedCount, "the unacknowledged insert landed, and the next request got its own reply")
	assert.Equal(t, int32(1), field(t, coll, 6, "n"))
}
