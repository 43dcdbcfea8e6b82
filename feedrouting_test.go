package twopc_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/internal/mongotest"
)

// feedLife sends every command of a feed's life but its deletion through
// c, whose accounts A and B hold money: its sequencer numbers a transfer
// and a hold held and captured, a reader reads them, a subscriber group
// handles them, and Status and the list of feeds read it. It returns the
// feed, its sequencer stopped; history passes and Delete are the
// caller's.
func feedLife(t *testing.T, ctx context.Context, c *twopc.Coordinator) *twopc.Feed {
	t.Helper()
	f := c.Feed("routed", twopc.WithFeedPoll(5*time.Millisecond))
	running, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- f.Run(running) }()
	_, err := c.Transfer(ctx, "A", "B", 1)
	require.NoError(t, err)
	hold, err := c.Hold(ctx, "A", "B", 5)
	require.NoError(t, err)
	_, err = c.Capture(ctx, hold.ID, 5)
	require.NoError(t, err)
	// The feed's since is its first Run's: read until the last event
	// made is there (earlier ones may be before it).
	var last twopc.Position
	for e, err := range f.All(ctx, "") {
		require.NoError(t, err)
		last = e.Pos
		if e.Kind == twopc.EventCaptured {
			break
		}
	}
	handled := errors.New("handled")
	err = f.Subscribe(ctx, "routed_group", func(context.Context, []twopc.Event) error { return handled })
	require.ErrorIs(t, err, handled)
	_, _, err = f.Read(ctx, last, 10)
	require.NoError(t, err)
	_, err = f.Status(ctx)
	require.NoError(t, err)
	names, err := c.Feeds(ctx)
	require.NoError(t, err)
	assert.Contains(t, names, "routed")
	stop()
	require.ErrorIs(t, <-done, context.Canceled)
	return f
}

// TestFeedCommandsRouted: every statement of a feed's life (its
// sequencer's lease, search, tags and publications, its change stream or
// the attempt at one, a reader, a subscriber group, Status, the list of
// feeds, history waiting for it, and its deletion) is, on collections
// sharded on {_id: "hashed"}, sent to the shard of one _id or of a list of
// ids, or is one of the broadcasts PROTOCOL.md's Scale-out lists, read
// from the filters alone; the sharded job's TestShardedExplainEachCommand
// asks the router the same of each.
func TestFeedCommandsRouted(t *testing.T) {
	b := newBank(t, twopc.WithSyncSettle())
	ctx := testCtx(t)
	b.open(map[string]int64{"A": 1000, "B": 0})
	rec := &commandRecorder{}
	db := mongotest.ConnectURI(t, b.server.URI, options.Client().SetMonitor(rec.monitor())).Database(b.db.Name())
	c, err := twopc.NewCoordinator(db, twopc.WithSyncSettle(), twopc.WithHistory(time.Millisecond, db.Collection("archive")))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	f := feedLife(t, ctx, c)
	r := twopc.NewRecoverer(c)
	removed := 0
	for removed == 0 {
		rep, err := r.RecoverOnce(ctx) // history to the archive, once the feed published them
		require.NoError(t, err)
		removed += rep.Removed
	}
	require.NoError(t, f.Delete(ctx))

	classes := map[string]bool{}
	for _, cmd := range rec.recorded() {
		if !explainedKinds[cmd.name] || cmd.db != db.Name() {
			continue
		}
		for _, st := range statementsOf(t, cmd) {
			class := routeClass(st)
			assert.NotEmpty(t, class, "%s on %s neither by _id nor a documented broadcast: %v", st.name, st.coll, st.cmd)
			if strings.HasPrefix(class, "in(") {
				class = "in" // by a list of ids, of any length
			}
			classes[class] = true
		}
	}
	for _, want := range []string{"eq", "in", "broadcast: feed tags", "broadcast: feeds", "broadcast: change stream",
		"broadcast write: feeds"} {
		assert.True(t, classes[want], "no %q statement was recorded (%v)", want, classes)
	}
}
