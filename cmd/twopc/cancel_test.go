package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc"
)

func TestCancel(t *testing.T) {
	f := newFixture(t)
	f.open(map[string]int64{"alice": 1000, "bob": 0})
	settled := f.done("alice", "bob", 10)
	id := f.pendingTransfer("alice", "bob", 100)

	// Another application owns it and touched it within its lease.
	r := f.run("cancel", id.Hex())
	require.Equal(t, exitFailed, r.code, r.stderr)
	require.Contains(t, r.stderr, "in progress")
	require.Contains(t, r.stderr, `pending, owned by "crashing"`)
	require.Contains(t, r.stderr, "eligible from ")
	require.Equal(t, "pending", f.state(id))

	f.backdate(id, 2*time.Hour)
	r = f.run("cancel", id.Hex(), "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	var out struct {
		ID          string  `json:"id"`
		Before      string  `json:"before"`
		State       string  `json:"state"`
		Transaction txnJSON `json:"transaction"`
	}
	r.decode(t, &out)
	require.Equal(t, "pending", out.Before)
	require.Equal(t, "canceled", out.State)
	require.Equal(t, defaultApplication, out.Transaction.Application)
	require.Equal(t, "canceled", f.state(id))
	require.EqualValues(t, 990, f.balance("alice"))
	require.EqualValues(t, 10, f.balance("bob"))
	require.Zero(t, f.account(twopc.DefaultAccounts, "bob").Credit)

	r = f.run("cancel", id.Hex())
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "already canceled")

	// Past its commit point.
	r = f.run("cancel", settled.Hex())
	require.Equal(t, exitFailed, r.code, r.stderr)
	require.Contains(t, r.stderr, "past its commit point")
	require.Equal(t, "done", f.state(settled))

	// No such transaction: refused, nothing written, unless --placeholder.
	unknown := bson.NewObjectID()
	r = f.run("cancel", unknown.Hex())
	require.Equal(t, exitFailed, r.code, r.stderr)
	require.Contains(t, r.stderr, "--placeholder")
	n, err := f.db.Collection(twopc.DefaultTransactions).CountDocuments(f.ctx, bson.D{{Key: "_id", Value: unknown}})
	require.NoError(t, err)
	require.Zero(t, n)
	r = f.run("cancel", "--placeholder", unknown.Hex(), "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	r.decode(t, &out)
	require.Equal(t, "", out.Before)
	require.Equal(t, "canceled", out.State)
	require.True(t, out.Transaction.Placeholder)

	r = f.run("cancel", "6740c1a2e4b0a1b2c3d4e5")
	require.Equal(t, exitUsage, r.code, r.stderr)
}

func TestReverse(t *testing.T) {
	f := newFixture(t)
	f.open(map[string]int64{"alice": 1000, "bob": 0})
	id := f.done("alice", "bob", 100)
	require.EqualValues(t, 100, f.balance("bob"))

	r := f.run("reverse", id.Hex(), "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	var out struct {
		Transaction txnJSON `json:"transaction"`
		Reversal    struct {
			txnJSON
			Source      string `json:"source"`
			Destination string `json:"destination"`
			Value       int64  `json:"value"`
		} `json:"reversal"`
	}
	r.decode(t, &out)
	require.Equal(t, id.Hex(), out.Transaction.ID)
	require.Equal(t, "done", out.Reversal.State)
	require.Equal(t, "bob", out.Reversal.Source)
	require.Equal(t, "alice", out.Reversal.Destination)
	require.EqualValues(t, 100, out.Reversal.Value)
	require.EqualValues(t, 1000, f.balance("alice"))
	require.EqualValues(t, 0, f.balance("bob"))
	reversal := out.Reversal.ID

	// Reversing again moves nothing: the same reversal.
	r = f.run("reverse", id.Hex())
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "is reversed by "+reversal+", done: bob → alice 100")
	require.EqualValues(t, 1000, f.balance("alice"))

	// Not committed, unknown, malformed.
	pending := f.pendingTransfer("alice", "bob", 5)
	r = f.run("reverse", pending.Hex())
	require.Equal(t, exitFailed, r.code, r.stderr)
	require.Contains(t, r.stderr, "cancel it instead")
	r = f.run("reverse", bson.NewObjectID().Hex())
	require.Equal(t, exitFailed, r.code, r.stderr)
	require.Contains(t, r.stderr, "not found")
	r = f.run("reverse", "nope")
	require.Equal(t, exitUsage, r.code, r.stderr)

	// A reversal that cannot apply: bob spent the money.
	id = f.done("alice", "bob", 50)
	f.done("bob", "alice", 50)
	r = f.run("reverse", id.Hex())
	require.Equal(t, exitFailed, r.code, r.stderr)
	require.Contains(t, r.stderr, "insufficient funds")
}
