package main

import (
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/twopc/twopc/examples/internal/interrupttest"
)

// TestInterrupt: the command, built as make devserver builds it, exits 0
// when interrupted once it has shut down; make devserver, interrupted as
// Ctrl-C does, reports no error; make devserver DIR=path keeps the data
// across a restart.
func TestInterrupt(t *testing.T) {
	bin := t.TempDir()
	command := interrupttest.BuildCommand(t, bin)
	ready := regexp.MustCompile(`^mongodb://`)
	t.Run("command", func(t *testing.T) {
		out, state := interrupttest.Interrupt(t, ready, command, "-addr", "127.0.0.1:0")
		require.True(t, state.Success(), "exit status 0, not %v:\n%s", state, out)
	})
	t.Run("make", func(t *testing.T) {
		out, state := interrupttest.Interrupt(t, ready, interrupttest.MakeCommand(t, bin, "devserver", "ADDR=127.0.0.1:0")...)
		interrupttest.RequireMakeQuiet(t, out, state)
	})
	t.Run("make DIR", func(t *testing.T) { makeKeepsData(t, bin, ready) })
}

// makeKeepsData: make devserver DIR=path, a path relative to the
// repository (where make runs) to a directory that does not exist yet,
// keeps the data there: a document written before Ctrl-C is read after
// the next start with the same DIR, and the directory is left.
func makeKeepsData(t *testing.T, bin string, ready *regexp.Regexp) {
	dir := filepath.Join(t.TempDir(), "data")
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	require.NoError(t, err)
	rel, err := filepath.Rel(root, dir)
	require.NoError(t, err)
	args := interrupttest.MakeCommand(t, bin, "devserver", "ADDR=127.0.0.1:0", "DIR="+rel)
	// with runs use on the kept collection, then disconnects, so that the
	// server's stop does not wait for the client.
	with := func(line string, use func(*mongo.Collection)) {
		client, err := mongo.Connect(options.Client().ApplyURI(strings.TrimSpace(line)))
		require.NoError(t, err)
		defer func() { require.NoError(t, client.Disconnect(context.Background())) }()
		use(client.Database("make").Collection("kept"))
	}

	// How make itself ends is the make subtest's check: here, GNU make 4.3
	// at times reports "wait: No child processes" when the server, its
	// child, ended on the same SIGINT before make's handler reaped it.
	_, _ = interrupttest.InterruptAfter(t, ready, func(line string) {
		with(line, func(kept *mongo.Collection) {
			_, err := kept.InsertOne(t.Context(), bson.D{{Key: "_id", Value: "across a restart"}})
			require.NoError(t, err)
		})
	}, args...)
	require.DirExists(t, dir, "the data stays in DIR")

	var n int64
	_, _ = interrupttest.InterruptAfter(t, ready, func(line string) {
		with(line, func(kept *mongo.Collection) {
			n, err = kept.CountDocuments(t.Context(), bson.D{{Key: "_id", Value: "across a restart"}})
			require.NoError(t, err)
		})
	}, args...)
	assert.Equal(t, int64(1), n, "the next start with the same DIR has the data")
}
