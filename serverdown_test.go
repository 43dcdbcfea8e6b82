package twopc_test

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/internal/mongotest"
)

// TestServerGoesAway stops the server in the middle of a load and starts
// it again on the same data: transfers fail with clear errors while it is
// gone, nothing is lost, and recovery finishes everything once it is back.
// Every line the coordinator and the recoverer log at warn level or above
// says so: that nothing is lost.
func TestServerGoesAway(t *testing.T) {
	ownServers(t)
	ctx := testCtx(t)
	dir := t.TempDir()
	server, err := mongotest.StartDevServer(ctx, "", dir)
	require.NoError(t, err)
	t.Cleanup(func() { _ = server.Stop() })
	addr := server.Addr()

	b := newBankOn(t, server.Server())
	opening := map[string]int64{"A": 1000, "B": 1000, "C": 1000, "D": 1000}
	b.open(opening)
	db := mongotest.ConnectURI(t, server.URI, options.Client().SetRetryWrites(false).
		SetServerSelectionTimeout(time.Second).SetHeartbeatInterval(500*time.Millisecond)).Database(b.db.Name())
	logs := &kept{}
	logger := slog.New(logs)
	c, err := twopc.NewCoordinator(db, twopc.WithApplication("load"), twopc.WithStaleAfter(time.Second), twopc.WithLogger(logger))
	require.NoError(t, err)

	results := make(chan error, 100_000)
	stop := make(chan struct{})
	var workers sync.WaitGroup
	ids := []string{"A", "B", "C", "D"}
	for w := 0; w < 4; w++ {
		workers.Add(1)
		go func(w int) {
			defer workers.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				src, dst := ids[(w+n)%4], ids[(w+n+1)%4]
				_, err := c.Transfer(ctx, src, dst, int64(1+n%7), twopc.WithKey(fmt.Sprintf("w%d-%d", w, n)))
				results <- err
			}
		}(w)
	}
	// await reads results until want of them satisfy ok, and returns the
	// errors it saw.
	await := func(want int, ok func(error) bool) []error {
		var errs []error
		for n := 0; n < want; {
			err := <-results
			if err != nil {
				errs = append(errs, err)
			}
			if ok(err) {
				n++
			}
		}
		return errs
	}
	succeeded := func(err error) bool { return err == nil }
	failed := func(err error) bool { return err != nil }

	await(20, succeeded)
	require.NoError(t, server.Stop())
	down := await(8, failed)
	server, err = mongotest.StartDevServer(ctx, addr, dir)
	require.NoError(t, err)
	await(20, succeeded)
	close(stop)
	workers.Wait()
	require.NoError(t, c.Close(ctx))
	close(results)
	for err := range results {
		if err != nil {
			down = append(down, err)
		}
	}

	for _, err := range down {
		assert.True(t, strings.HasPrefix(err.Error(), "twopc: "), "a clear error: %v", err)
	}
	t.Logf("%d errors while the server was away, e.g. %v", len(down), down[0])

	// The bank's own client pooled connections to the server that went
	// away; read through a new one.
	b.db = mongotest.ConnectURI(t, server.URI).Database(b.db.Name())
	b.recoverAll(twopc.WithLogger(logger))
	b.checkSettled(opening)
	warned := 0
	for _, rec := range logs.all() {
		if rec.Level >= slog.LevelWarn {
			warned++
			assert.Contains(t, rec.Message, "nothing is lost", "%s: %s", rec.Level, rec.Message)
		}
	}
	t.Logf("%d of %d log lines at warn level or above", warned, len(logs.all()))
}
