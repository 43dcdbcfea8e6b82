package devserver_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/twopc/twopc/examples/devserver"
)

// MongoDB's test fail point, the source of the expected behaviour below.
const manualFailCommand = "https://github.com/mongodb/mongo/wiki/The-%22failCommand%22-fail-point"

// failCommand configures the failCommand fail point through the command a
// mongod started with enableTestCommands answers, and returns the count
// it replies with.
func failCommand(t *testing.T, c *mongo.Client, mode any, data bson.D) int64 {
	t.Helper()
	var reply struct {
		Count int64   `bson:"count"`
		OK    float64 `bson:"ok"`
	}
	require.NoError(t, c.Database("admin").RunCommand(t.Context(), bson.D{
		{Key: "configureFailPoint", Value: "failCommand"},
		{Key: "mode", Value: mode},
		{Key: "data", Value: data},
	}).Decode(&reply))
	require.Equal(t, 1.0, reply.OK)
	return reply.Count
}

// TestFailCommand: a command named in failCommands fails with errorCode and
// errorLabels, without running, the number of times mode says; others, and
// the same command on another namespace, run.
func TestFailCommand(t *testing.T) {
	s := startServer(t, devserver.Config{})
	c := connect(t, s.URI())
	coll := c.Database("fp").Collection("a")
	other := c.Database("fp").Collection("b")
	for _, col := range []*mongo.Collection{coll, other} {
		_, err := col.InsertOne(t.Context(), bson.D{{Key: "_id", Value: 1}, {Key: "n", Value: 0}})
		require.NoError(t, err)
	}
	inc := bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}}

	assert.Equal(t, int64(0), failCommand(t, c, bson.D{{Key: "times", Value: 2}}, bson.D{
		{Key: "failCommands", Value: bson.A{"update"}},
		{Key: "namespace", Value: "fp.a"},
		{Key: "errorCode", Value: 91},
		{Key: "errorLabels", Value: bson.A{"RetryableWriteError"}},
	}), manualFailCommand)

	_, err := other.UpdateOne(t.Context(), bson.D{{Key: "_id", Value: 1}}, inc)
	require.NoError(t, err, "another namespace is not failed")
	_, err = coll.FindOne(t.Context(), bson.D{}).Raw()
	require.NoError(t, err, "another command is not failed")
	for range 2 {
		_, err = coll.UpdateOne(t.Context(), bson.D{{Key: "_id", Value: 1}}, inc)
		var ce mongo.CommandError
		require.True(t, errors.As(err, &ce), "%v (%T), %s", err, err, manualFailCommand)
		assert.Equal(t, int32(91), ce.Code)
		assert.True(t, ce.HasErrorLabel("RetryableWriteError"), "labels %v", ce.Labels)
	}
	_, err = coll.UpdateOne(t.Context(), bson.D{{Key: "_id", Value: 1}}, inc)
	require.NoError(t, err, "{times: 2} is off after two")

	var doc struct{ N int32 }
	require.NoError(t, coll.FindOne(t.Context(), bson.D{}).Decode(&doc))
	assert.Equal(t, int32(1), doc.N, "the failed updates did not run")

	assert.Equal(t, int64(2), failCommand(t, c, "off", nil), "count: the times the fail point was entered")
	_, err = coll.UpdateOne(t.Context(), bson.D{{Key: "_id", Value: 1}}, inc)
	require.NoError(t, err)
}

// TestFailCommandWriteConcernError: with writeConcernError the command
// runs and its reply carries the error.
func TestFailCommandWriteConcernError(t *testing.T) {
	s := startServer(t, devserver.Config{})
	c := connect(t, s.URI())
	coll := c.Database("fp").Collection("a")
	_, err := coll.InsertOne(t.Context(), bson.D{{Key: "_id", Value: 1}, {Key: "n", Value: 0}})
	require.NoError(t, err)
	failCommand(t, c, bson.D{{Key: "times", Value: 1}}, bson.D{
		{Key: "failCommands", Value: bson.A{"update"}},
		{Key: "writeConcernError", Value: bson.D{{Key: "code", Value: 91}, {Key: "errmsg", Value: "Replication is being shut down"}}},
	})
	_, err = coll.UpdateOne(t.Context(), bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}})
	var we mongo.WriteException
	require.True(t, errors.As(err, &we), "%v (%T), %s", err, err, manualFailCommand)
	require.NotNil(t, we.WriteConcernError)
	assert.Equal(t, 91, we.WriteConcernError.Code)
	var doc struct{ N int32 }
	require.NoError(t, coll.FindOne(t.Context(), bson.D{}).Decode(&doc))
	assert.Equal(t, int32(1), doc.N, "the command ran")
}

// TestFailCommandWriteErrorIndexes: the front's extension fails the
// statements at writeErrorIndexes with errorCode, each as a write error at
// its own index, and runs the others; the reply carries errorLabels.
func TestFailCommandWriteErrorIndexes(t *testing.T) {
	s := startServer(t, devserver.Config{})
	c := connect(t, s.URI())
	coll := c.Database("fp").Collection("a")
	ids := []string{"a", "b", "c"}
	for _, id := range ids {
		_, err := coll.InsertOne(t.Context(), bson.D{{Key: "_id", Value: id}, {Key: "n", Value: 0}})
		require.NoError(t, err)
	}
	failCommand(t, c, bson.D{{Key: "times", Value: 1}}, bson.D{
		{Key: "failCommands", Value: bson.A{"update"}},
		{Key: "errorCode", Value: 189},
		{Key: "errorLabels", Value: bson.A{"RetryableWriteError"}},
		{Key: "writeErrorIndexes", Value: bson.A{1}},
	})
	var models []mongo.WriteModel
	for _, id := range ids {
		models = append(models, mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: id}}).SetUpdate(bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}}))
	}
	res, err := coll.BulkWrite(t.Context(), models, options.BulkWrite().SetOrdered(false))
	var bwe mongo.BulkWriteException
	require.True(t, errors.As(err, &bwe), "%v (%T)", err, err)
	require.Len(t, bwe.WriteErrors, 1)
	assert.Equal(t, 1, bwe.WriteErrors[0].Index)
	assert.Equal(t, 189, bwe.WriteErrors[0].Code)
	assert.True(t, bwe.HasErrorLabel("RetryableWriteError"), "labels %v", bwe.Labels)
	require.NotNil(t, res)
	assert.Equal(t, int64(2), res.ModifiedCount)
	for i, id := range ids {
		var doc struct{ N int32 }
		require.NoError(t, coll.FindOne(t.Context(), bson.D{{Key: "_id", Value: id}}).Decode(&doc))
		assert.Equal(t, int32(map[bool]int{true: 0, false: 1}[i == 1]), doc.N, "document %s", id)
	}
}
