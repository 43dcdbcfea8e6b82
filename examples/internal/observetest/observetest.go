// Package observetest holds what the tests of the observers and of the
// metrics command share: a fresh database, a scrape of a Prometheus text
// endpoint, and a hold of each fate.
package observetest

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/examples/devserver"
)

// Database returns a fresh database, named from prefix, on MONGODB_URI or
// on an in-process dev server started for the test; it is dropped, and
// the server stopped, when the test ends.
func Database(ctx context.Context, t *testing.T, prefix string) *mongo.Database {
	t.Helper()
	uri, _, stop, err := devserver.URIOrStart(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = stop() })
	client, err := mongo.Connect(options.Client().ApplyURI(uri))
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	db := client.Database(fmt.Sprintf("%s_%d", prefix, time.Now().UnixNano()))
	t.Cleanup(func() { _ = db.Drop(context.Background()) })
	return db
}

// Scrape gets the metrics at url and returns each sample's value by its
// name and labels, as the text format writes them.
func Scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	samples := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		require.Positive(t, i, line)
		v, err := strconv.ParseFloat(line[i+1:], 64)
		require.NoError(t, err, line)
		samples[line[:i]] = v
	}
	require.NoError(t, sc.Err())
	return samples
}

// HoldEvents makes three holds of 10 from account A to B on c (accounts
// A and B open), captures the first, voids the second and lets the third
// expire (its heldAt moved an hour back, then a recovery pass): one
// event of each kind besides the three holds.
func HoldEvents(ctx context.Context, t *testing.T, db *mongo.Database, c *twopc.Coordinator) {
	t.Helper()
	var ids []bson.ObjectID
	for range 3 {
		txn, err := c.Hold(ctx, "A", "B", 10, twopc.WithExpiry(time.Minute))
		require.NoError(t, err)
		ids = append(ids, txn.ID)
	}
	_, err := c.Capture(ctx, ids[0], 10)
	require.NoError(t, err)
	_, err = c.Void(ctx, ids[1])
	require.NoError(t, err)
	_, err = db.Collection(twopc.DefaultTransactions).UpdateOne(ctx, bson.D{{Key: "_id", Value: ids[2]}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "lastModified", Value: time.Now().Add(-time.Hour)}, {Key: "heldAt", Value: time.Now().Add(-time.Hour)}}}})
	require.NoError(t, err)
	rep, err := twopc.NewRecoverer(c).RecoverOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, rep.Expired)
}
