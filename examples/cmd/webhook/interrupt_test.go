package main

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/examples/devserver"
	"github.com/twopc/twopc/examples/internal/interrupttest"
)

// TestInterrupt: the command, built, exits 0 when interrupted as Ctrl-C
// does, once it has shut down: as the receiver, and delivering with its
// sequencer running against a dev server.
func TestInterrupt(t *testing.T) {
	bin := t.TempDir()
	command := interrupttest.BuildCommand(t, bin)
	t.Setenv("WEBHOOK_SECRET", "s3cret")
	t.Run("receive", func(t *testing.T) {
		out, state := interrupttest.Interrupt(t, regexp.MustCompile(`^receiving on http://`), command, "-receive", "127.0.0.1:0")
		require.True(t, state.Success(), "exit status 0, not %v:\n%s", state, out)
	})
	t.Run("deliver", func(t *testing.T) {
		uri, _, stop, err := devserver.URIOrStart(t.Context())
		require.NoError(t, err)
		defer stop()
		db := fmt.Sprintf("twopc_webhook_interrupt_%d", time.Now().UnixNano())
		dropAtEnd(t, uri, db)
		client, err := mongo.Connect(options.Client().ApplyURI(uri))
		require.NoError(t, err)
		defer client.Disconnect(context.Background())
		c, err := twopc.NewCoordinator(client.Database(db))
		require.NoError(t, err)
		defer c.Close(context.Background())
		f := c.Feed("webhooks")
		groups := client.Database(db).Collection("transactions_feeds")
		group := bson.D{{Key: "_id", Value: "group:webhooks:webhook"}}
		// Interrupted once its sequencer and its subscriber both run: each
		// holds its lease.
		running := func(string) {
			waitFor(t.Context(), t, "the sequencer and the subscriber running", func() bool {
				st, err := f.Status(t.Context())
				require.NoError(t, err)
				var g struct {
					Holder string `bson:"holder"`
				}
				err = groups.FindOne(t.Context(), group).Decode(&g)
				return st.Holder != "" && err == nil && g.Holder != ""
			})
		}
		out, state := interrupttest.InterruptAfter(t, regexp.MustCompile(`^delivering feed`), running, command,
			"-uri", uri, "-db", db, "-sequencer", "-url", "http://127.0.0.1:1/")
		require.True(t, state.Success(), "exit status 0, not %v:\n%s", state, out)
		assert.NotContains(t, out, "webhook:", "no error reported")
		// Both leases let go: a process started next takes over at once.
		st, err := f.Status(t.Context())
		require.NoError(t, err)
		assert.Empty(t, st.Holder, "the sequencer's lease released")
		var g struct {
			Holder string `bson:"holder"`
		}
		require.NoError(t, groups.FindOne(t.Context(), group).Decode(&g))
		assert.Empty(t, g.Holder, "the group's lease released")
	})
}

// TestTry: -try makes its transactions, twice (the accounts opened the
// first time), and says that a feed that never ran does not have them.
func TestTry(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	uri, _, stop, err := devserver.URIOrStart(ctx)
	require.NoError(t, err)
	defer stop()
	db := fmt.Sprintf("twopc_webhook_try_%d", time.Now().UnixNano())
	dropAtEnd(t, uri, db)
	for range 2 {
		var stdout, stderr bytes.Buffer
		code := command(ctx, []string{"-try", "-uri", uri, "-db", db}, func(string) string { return "" }, &stdout, &stderr)
		require.Equal(t, exitOK, code, "%s%s", stdout.String(), stderr.String())
		s := stdout.String()
		assert.Contains(t, s, `feed "webhooks" has not run yet`)
		assert.Regexp(t, `(?m)^transfer [0-9a-f]{24}: A -> B 100, done`, s)
		assert.Regexp(t, `(?m)^transfer [0-9a-f]{24}: A -> B 5000, canceled \(insufficient_funds\)`, s)
		assert.Regexp(t, `(?m)^hold [0-9a-f]{24}: A -> B 50, held`, s)
		assert.Regexp(t, `(?m)^  go run ./cmd/twopc void [0-9a-f]{24} --db `+db, s)
	}
}

// dropAtEnd drops database db on uri when the test ends (before the dev
// server it may have started stops): on MONGODB_URI, nothing is left.
func dropAtEnd(t *testing.T, uri, db string) {
	t.Helper()
	client, err := mongo.Connect(options.Client().ApplyURI(uri))
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = client.Database(db).Drop(context.Background())
		_ = client.Disconnect(context.Background())
	})
}
