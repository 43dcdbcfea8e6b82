package mongotest_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/twopc/twopc/internal/mongotest"
)

func TestMain(m *testing.M) { mongotest.Main(m) }

// TestSingleDocumentAtomicity checks what two-phase commit rests on: on the
// server the harness picked, concurrent updates of one document neither lose
// increments nor let two conditional claims win.
func TestSingleDocumentAtomicity(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	t.Logf("backend: %s", mongotest.Shared(t).Backend)
	db := mongotest.NewDatabase(t, options.Client().SetMaxPoolSize(25))

	t.Run("inc", func(t *testing.T) {
		coll := db.Collection("counter")
		_, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: 1}, {Key: "n", Value: int64(0)}})
		require.NoError(t, err)
		var wg sync.WaitGroup
		errs := make(chan error, 20*50)
		for g := 0; g < 20; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 50; i++ {
					_, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: int64(1)}}}})
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		var doc struct{ N int64 }
		require.NoError(t, coll.FindOne(ctx, bson.D{{Key: "_id", Value: 1}}).Decode(&doc))
		require.Equal(t, int64(1000), doc.N)
	})

	t.Run("claim", func(t *testing.T) {
		coll := db.Collection("claims")
		_, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: 1}, {Key: "state", Value: "initial"}})
		require.NoError(t, err)
		var wins atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make(chan error, 20)
		for g := 0; g < 20; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				<-start
				res := coll.FindOneAndUpdate(ctx,
					bson.D{{Key: "_id", Value: 1}, {Key: "state", Value: "initial"}},
					bson.D{{Key: "$set", Value: bson.D{{Key: "state", Value: "pending"}, {Key: "application", Value: g}}}})
				switch err := res.Err(); {
				case err == nil:
					wins.Add(1)
				case !errors.Is(err, mongo.ErrNoDocuments):
					errs <- err
				}
			}(g)
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.Equal(t, int64(1), wins.Load())
	})
}
