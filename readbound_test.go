package twopc_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/internal/mongotest"
)

// firstErr is the first error seq yields, nil if none.
func firstErr[T any](seq func(func(T, error) bool)) error {
	var first error
	seq(func(_ T, err error) bool {
		first = err
		return err == nil
	})
	return first
}

// readCalls are the reads a read bound applies to, each made once on c:
// id names a committed transfer made with key "k1".
var readCalls = map[string]func(ctx context.Context, c *twopc.Coordinator, id bson.ObjectID) error{
	"Account": func(ctx context.Context, c *twopc.Coordinator, _ bson.ObjectID) error {
		_, err := c.Account(ctx, "A")
		return err
	},
	"Balance": func(ctx context.Context, c *twopc.Coordinator, _ bson.ObjectID) error {
		_, err := c.Balance(ctx, "A")
		return err
	},
	"Ledger.Account": func(ctx context.Context, c *twopc.Coordinator, _ bson.ObjectID) error {
		l, err := c.Ledger("")
		if err != nil {
			return err
		}
		_, err = l.Account(ctx, "A")
		return err
	},
	"BalanceAt": func(ctx context.Context, c *twopc.Coordinator, _ bson.ObjectID) error {
		_, err := c.BalanceAt(ctx, "", "A", time.Now())
		return err
	},
	"Statement": func(ctx context.Context, c *twopc.Coordinator, _ bson.ObjectID) error {
		_, err := c.Statement(ctx, "", "A", twopc.StatementQuery{})
		return err
	},
	"Entries": func(ctx context.Context, c *twopc.Coordinator, _ bson.ObjectID) error {
		return firstErr(c.Entries(ctx, "", "A", twopc.StatementQuery{}))
	},
	"Transactions": func(ctx context.Context, c *twopc.Coordinator, _ bson.ObjectID) error {
		_, err := c.Transactions(ctx, "", "A", twopc.TransactionQuery{})
		return err
	},
	"Txns": func(ctx context.Context, c *twopc.Coordinator, _ bson.ObjectID) error {
		return firstErr(c.Txns(ctx, "", "A", twopc.TransactionQuery{}))
	},
	"Accounts": func(ctx context.Context, c *twopc.Coordinator, _ bson.ObjectID) error {
		_, err := c.Accounts(ctx, "", twopc.AccountQuery{})
		return err
	},
	"Get": func(ctx context.Context, c *twopc.Coordinator, id bson.ObjectID) error {
		_, err := c.Get(ctx, id)
		return err
	},
	"GetByKey": func(ctx context.Context, c *twopc.Coordinator, _ bson.ObjectID) error {
		_, err := c.GetByKey(ctx, "k1")
		return err
	},
	"Refundable": func(ctx context.Context, c *twopc.Coordinator, id bson.ObjectID) error {
		_, err := c.Refundable(ctx, id)
		return err
	},
	"Audit": func(ctx context.Context, c *twopc.Coordinator, _ bson.ObjectID) error {
		_, err := c.Audit(ctx)
		return err
	},
	"Feed.Read": func(ctx context.Context, c *twopc.Coordinator, _ bson.ObjectID) error {
		_, _, err := c.Feed("orders").Read(ctx, "", 10)
		return err
	},
	"Feed.All": func(ctx context.Context, c *twopc.Coordinator, _ bson.ObjectID) error {
		return firstErr(c.Feed("orders").All(ctx, ""))
	},
	"Feed.Status": func(ctx context.Context, c *twopc.Coordinator, _ bson.ObjectID) error {
		_, err := c.Feed("orders").Status(ctx)
		return err
	},
	"Feeds": func(ctx context.Context, c *twopc.Coordinator, _ bson.ObjectID) error {
		_, err := c.Feeds(ctx)
		return err
	},
}

// internalSteps are words of the steps a read goes through, which its
// error must not name: the server could not be reached, whatever step
// found it so.
var internalSteps = []string{"shard keys", "hello", "server time", "indexes", "read the archive"}

// assertReadBounded asserts that err, the error of read name after
// elapsed, says plainly that the server could not be reached, within
// bound (the read bound ended it: it names WithReadTimeout) or before the
// caller's own deadline.
func assertReadBounded(t *testing.T, err error, elapsed, bound time.Duration, byBound bool) {
	t.Helper()
	require.Error(t, err)
	t.Logf("after %v: %v", elapsed.Round(time.Millisecond), err)
	assert.Less(t, elapsed, bound+boundSlack, "ended within the bound")
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	msg := err.Error()
	assert.True(t, strings.HasPrefix(msg, "twopc: "), msg)
	assert.Equal(t, 1, strings.Count(msg, "twopc:"), msg)
	assert.Contains(t, msg, "the server could not be reached", "said plainly")
	assert.Regexp(t, `: (server selection error|connection\()`, msg, "the driver's error")
	if byBound {
		assert.Contains(t, msg, "within the read bound of "+bound.String()+" (WithReadTimeout)", "the bound that ended it")
	} else {
		assert.NotContains(t, msg, "WithReadTimeout", "the caller's deadline ended it, not the bound")
	}
	for _, step := range internalSteps {
		assert.NotContains(t, msg, step, "names the read, not its steps")
	}
}

// TestReadsFailWithinTheReadBound: a coordinator made WithReadTimeout
// (300 ms) reads from a dev server of the test's own; the server stops.
// Every read then fails within the bound, though the caller's context has
// a later deadline and the driver waits 30 s for a server by default,
// with an error that names the read, says the server could not be reached
// within the read bound, wraps the driver's error and
// context.DeadlineExceeded, and names none of the read's steps: through
// the coordinator that read before (its indexes and shard keys checked),
// and through one made after the server stopped, that never reached it
// (whose first read checks the shard keys: "twopc: statement: shard keys:
// hello: server selection error" before). Before, each read waited the
// driver's server selection timeout on each of the library's three
// attempts.
func TestReadsFailWithinTheReadBound(t *testing.T) {
	ownServers(t)
	const bound = 300 * time.Millisecond
	ctx := testCtx(t)
	server, err := mongotest.StartDevServer(ctx, "", "")
	require.NoError(t, err)
	t.Cleanup(func() { _ = server.Stop() })
	db := mongotest.ConnectURI(t, server.URI).Database("readbound")
	c, err := twopc.NewCoordinator(db, twopc.WithReadTimeout(bound), twopc.WithSyncSettle())
	require.NoError(t, err)
	require.NoError(t, c.OpenAccount(ctx, "A", 100))
	require.NoError(t, c.OpenAccount(ctx, "B", 0))
	txn, err := c.Transfer(ctx, "A", "B", 10, twopc.WithKey("k1"))
	require.NoError(t, err)
	for name, read := range readCalls {
		if name != "Feed.All" { // which follows the feed until its context ends
			require.NoError(t, read(ctx, c, txn.ID), "%s with the server up", name)
		}
	}
	require.NoError(t, server.Stop())

	never, err := twopc.NewCoordinator(mongotest.ConnectURI(t, server.URI).Database("readbound"), twopc.WithReadTimeout(bound))
	require.NoError(t, err)
	for coordinator, c := range map[string]*twopc.Coordinator{"after the server went away": c, "never reached": never} {
		t.Run(coordinator, func(t *testing.T) {
			for name, read := range readCalls {
				t.Run(name, func(t *testing.T) {
					start := time.Now()
					err := read(testCtx(t), c, txn.ID) // a deadline minutes away
					assertReadBounded(t, err, time.Since(start), bound, true)
				})
			}
		})
	}
	t.Run("the caller's earlier deadline", func(t *testing.T) {
		for name, read := range readCalls {
			t.Run(name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), bound/3)
				defer cancel()
				start := time.Now()
				err := read(ctx, never, txn.ID)
				assertReadBounded(t, err, time.Since(start), bound/3, false)
			})
		}
	})
}

// TestReadDefaultBound: without WithReadTimeout, a Statement with no
// server answering fails within DefaultReadTimeout (a caller's deadline
// minutes away does not lift it), its error naming the bound.
func TestReadDefaultBound(t *testing.T) {
	ownServers(t)
	c, err := twopc.NewCoordinator(unreachable(t))
	require.NoError(t, err)
	start := time.Now()
	_, err = c.Statement(testCtx(t), "", "A", twopc.StatementQuery{})
	assertReadBounded(t, err, time.Since(start), twopc.DefaultReadTimeout, true)
}

// TestIteratorsBoundedPerPage: Entries and Txns bound each page they read,
// not the iteration: a caller whose work between two entries outlasts
// the read bound still gets every page after it.
func TestIteratorsBoundedPerPage(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	b.open(map[string]int64{"A": 1000, "B": 0})
	transfers(t, b, b.c, 4)
	time.Sleep(1100 * time.Millisecond) // past the statements' horizon
	const bound = time.Second
	c := b.coordinator(twopc.WithReadTimeout(bound))
	entries, txns := 0, 0
	for _, err := range c.Entries(ctx, "", "A", twopc.StatementQuery{Limit: 1}) {
		require.NoError(t, err)
		if entries++; entries == 1 {
			time.Sleep(bound + 100*time.Millisecond) // the caller's own work
		}
	}
	for _, err := range c.Txns(ctx, "", "A", twopc.TransactionQuery{Limit: 1}) {
		require.NoError(t, err)
		if txns++; txns == 1 {
			time.Sleep(bound + 100*time.Millisecond)
		}
	}
	assert.Equal(t, 4, entries)
	assert.Equal(t, 4, txns)
}
