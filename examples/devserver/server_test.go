package devserver_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/twopc/twopc/examples/devserver"
)

// startServer starts a Server on a free port with a fresh data directory and
// stops it when the test ends.
func startServer(t *testing.T, cfg devserver.Config) *devserver.Server {
	t.Helper()
	cfg.Addr = "127.0.0.1:0"
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s, err := devserver.Start(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, s.Close()) })
	return s
}

// connect returns a client of uri that never retries, so that the effect of
// every fault is visible.
func connect(t *testing.T, uri string) *mongo.Client {
	t.Helper()
	c, err := mongo.Connect(options.Client().ApplyURI(uri).
		SetRetryWrites(false).
		SetRetryReads(false).
		SetServerSelectionTimeout(30 * time.Second))
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Disconnect(ctx); !errors.Is(err, mongo.ErrClientDisconnected) {
			assert.NoError(t, err)
		}
	})
	return c
}

// collection returns a collection named after the test holding the given
// documents.
func collection(t *testing.T, c *mongo.Client, docs ...any) *mongo.Collection {
	t.Helper()
	coll := c.Database("devserver").Collection(t.Name())
	if len(docs) > 0 {
		_, err := coll.InsertMany(t.Context(), docs)
		require.NoError(t, err)
	}
	return coll
}

// field returns the int32 field name of document _id in coll.
func field(t *testing.T, coll *mongo.Collection, id any, name string) int32 {
	t.Helper()
	raw, err := coll.FindOne(t.Context(), bson.D{{Key: "_id", Value: id}}).Raw()
	require.NoError(t, err)
	v, ok := raw.Lookup(name).Int32OK()
	require.True(t, ok, "%s in %s", name, raw)
	return v
}

var inc = bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}}

func TestIncrementsAreAtomic(t *testing.T) {
	s := startServer(t, devserver.Config{})
	coll := collection(t, connect(t, s.URI()), bson.D{{Key: "_id", Value: 1}, {Key: "n", Value: 0}})

	const goroutines, each = 20, 50
	start := make(chan struct{})
	errs := make(chan error, goroutines*each)
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			<-start
			for range each {
				res, err := coll.UpdateOne(t.Context(), bson.D{{Key: "_id", Value: 1}}, inc)
				if err == nil && res.ModifiedCount != 1 {
					err = errors.New("update modified nothing")
				}
				if err != nil {
					errs <- err
				}
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	assert.Equal(t, int32(goroutines*each), field(t, coll, 1, "n"))
}

func TestExactlyOneClaimWins(t *testing.T) {
	s := startServer(t, devserver.Config{})
	coll := collection(t, connect(t, s.URI()),
		bson.D{{Key: "_id", Value: 1}, {Key: "state", Value: "initial"}})

	const claimants = 20
	start := make(chan struct{})
	results := make(chan error, claimants)
	var wg sync.WaitGroup
	for range claimants {
		wg.Go(func() {
			<-start
			results <- coll.FindOneAndUpdate(t.Context(),
				bson.D{{Key: "_id", Value: 1}, {Key: "state", Value: "initial"}},
				bson.D{{Key: "$set", Value: bson.D{{Key: "state", Value: "pending"}}}},
			).Err()
		})
	}
	close(start)
	wg.Wait()
	close(results)

	winners := 0
	for err := range results {
		if err == nil {
			winners++
			continue
		}
		require.ErrorIs(t, err, mongo.ErrNoDocuments)
	}
	assert.Equal(t, 1, winners)
}

func TestStopAndRestartKeepsData(t *testing.T) {
	dir := t.TempDir()

	first, err := devserver.Start(t.Context(), devserver.Config{Addr: "127.0.0.1:0", Dir: dir, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	assert.Equal(t, dir, first.Dir())
	c := connect(t, first.URI())
	_, err = c.Database("devserver").Collection("persist").InsertOne(t.Context(), bson.D{{Key: "_id", Value: "kept"}, {Key: "n", Value: 42}})
	require.NoError(t, err)
	require.NoError(t, c.Disconnect(t.Context()))
	require.NoError(t, first.Close())
	_, err = os.Stat(dir)
	require.NoError(t, err, "Close must keep a directory it did not create")

	second := startServer(t, devserver.Config{Dir: dir})
	coll := connect(t, second.URI()).Database("devserver").Collection("persist")
	assert.Equal(t, int32(42), field(t, coll, "kept", "n"))
}

func TestCloseRemovesTemporaryDir(t *testing.T) {
	s, err := devserver.Start(t.Context(), devserver.Config{Addr: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	dir := s.Dir()
	_, err = os.Stat(dir)
	require.NoError(t, err)

	require.NoError(t, s.Close())
	require.NoError(t, s.Close(), "second Close")
	_, err = os.Stat(dir)
	assert.ErrorIs(t, err, os.ErrNotExist)
}

// TestConcurrentServers starts servers at the same time, which the race
// detector checks.
func TestConcurrentServers(t *testing.T) {
	const n = 3
	servers := make([]*devserver.Server, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			servers[i], errs[i] = devserver.Start(t.Context(), devserver.Config{Addr: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)})
		})
	}
	wg.Wait()
	for i := range n {
		require.NoError(t, errs[i])
		t.Cleanup(func() { assert.NoError(t, servers[i].Close()) })
	}
	for _, s := range servers {
		assert.NoError(t, connect(t, s.URI()).Ping(t.Context(), nil))
	}
}

// TestUpdateCommandHasNoLimit sends the update command that used to hang
// the dev server: 400 guarded single-document (multi: false) statements,
// unordered, as the library's batches are. FerretDB v1 holds a SQLite
// connection per such statement until its command ends, and its pool holds
// 100; the front now sends FerretDB one command per statement, so it
// answers, and with MongoDB's counts. The statements share 40 documents
// (ten each, each guarded by n < 10): FerretDB scans the collection for
// every statement whose filter is more than an _id.
func TestUpdateCommandHasNoLimit(t *testing.T) {
	s := startServer(t, devserver.Config{})
	const statements, documents = 400, 40
	var docs []any
	for i := range documents {
		docs = append(docs, bson.D{{Key: "_id", Value: fmt.Sprintf("acct-%02d", i)}, {Key: "n", Value: int32(0)}})
	}
	var models []mongo.WriteModel
	for i := range statements {
		models = append(models, mongo.NewUpdateOneModel().
			SetFilter(bson.D{
				{Key: "_id", Value: fmt.Sprintf("acct-%02d", i%documents)},
				{Key: "n", Value: bson.D{{Key: "$lt", Value: int32(statements / documents)}}},
			}).
			SetUpdate(inc))
	}
	coll := collection(t, connect(t, s.URI()), docs...)

	res, err := coll.BulkWrite(t.Context(), models, options.BulkWrite().SetOrdered(false))
	require.NoError(t, err)
	assert.Equal(t, int64(statements), res.MatchedCount)
	assert.Equal(t, int64(statements), res.ModifiedCount)
	assert.Equal(t, int32(statements/documents), field(t, coll, "acct-39", "n"))

	// Again: every guard now fails, nothing matches.
	res, err = coll.BulkWrite(t.Context(), models, options.BulkWrite().SetOrdered(false))
	require.NoError(t, err)
	assert.Zero(t, res.MatchedCount)
	assert.Zero(t, res.ModifiedCount)
}
