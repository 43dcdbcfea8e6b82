package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc"
)

// archived makes a transfer recorded for archive (WithHistory) and moves
// it there with recover --archive, as an operator's recoverer would.
func (f *fixture) archived(archive, src, dst string, value int64) bson.ObjectID {
	f.t.Helper()
	c := f.coordinator(twopc.WithApplication("seed"), twopc.WithHistory(time.Millisecond, f.db.Collection(archive)), twopc.WithSyncSettle())
	txn, err := c.Transfer(f.ctx, src, dst, value)
	require.NoError(f.t, err)
	for range 3 {
		f.backdate(txn.ID, 2*time.Hour) // past its fence retention and its time to keep
		r := f.run("recover", "--archive", archive, "--json", "--quiet")
		require.Equal(f.t, exitOK, r.code, r.stderr)
		n, err := f.db.Collection(twopc.DefaultTransactions).CountDocuments(f.ctx, bson.D{{Key: "_id", Value: txn.ID}})
		require.NoError(f.t, err)
		if n == 0 {
			return txn.ID
		}
	}
	f.t.Fatalf("transaction %s was not archived", txn.ID.Hex())
	return txn.ID
}

// foundJSON is how show and list say where they found a transaction.
type foundJSON struct {
	ID        string `json:"_id"`
	State     string `json:"state"`
	FoundIn   string `json:"foundIn"`
	AlsoInLog bool   `json:"alsoInLog"`
}

// TestShowListArchive: show and list read the archive named with
// --archive as well as the log, and say where they found each
// transaction; when both hold an id, the archive's record is the one.
func TestShowListArchive(t *testing.T) {
	f := newFixture(t)
	f.open(map[string]int64{"alice": 1000, "bob": 0})
	old := f.archived("archive", "alice", "bob", 100)
	recent := f.done("alice", "bob", 10)

	r := f.run("show", old.Hex())
	require.Equal(t, exitFailed, r.code, r.stdout+r.stderr)
	require.Contains(t, r.stderr, "transaction not found")
	require.Contains(t, r.stderr, "--archive COLLECTION", "says how to find an archived one")

	r = f.run("show", old.Hex(), "--archive", "archive")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "Transaction "+old.Hex()+", found in the archive (collection archive)")
	require.Regexp(t, `state\s+done`, r.stdout)
	require.Contains(t, r.stdout, "balance 890")
	var sh struct {
		FoundIn     string    `json:"foundIn"`
		Collection  string    `json:"collection"`
		Transaction foundJSON `json:"transaction"`
		LogCopy     *txnJSON  `json:"logCopy"`
	}
	r = f.run("show", old.Hex(), "--archive", "archive", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	r.decode(t, &sh)
	require.Equal(t, "archive", sh.FoundIn)
	require.Equal(t, "archive", sh.Collection)
	require.Equal(t, old.Hex(), sh.Transaction.ID)
	require.Nil(t, sh.LogCopy)

	r = f.run("show", recent.Hex(), "--archive", "archive", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	r.decode(t, &sh)
	require.Equal(t, "log", sh.FoundIn)
	require.Equal(t, twopc.DefaultTransactions, sh.Collection)

	var l struct {
		Count        int         `json:"count"`
		Transactions []foundJSON `json:"transactions"`
	}
	r = f.run("list", "--account", "alice", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	r.decode(t, &l)
	require.Equal(t, []foundJSON{{ID: recent.Hex(), State: "done", FoundIn: "log"}}, l.Transactions, "the log alone")
	r = f.run("list", "--account", "alice", "--archive", "archive", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	r.decode(t, &l)
	require.Equal(t, []foundJSON{
		{ID: old.Hex(), State: "done", FoundIn: "archive"},
		{ID: recent.Hex(), State: "done", FoundIn: "log"},
	}, l.Transactions)
	r = f.run("list", "--account", "bob", "--archive", "archive")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Regexp(t, old.Hex()+`\s+archive\s+done`, r.stdout)
	require.Regexp(t, recent.Hex()+`\s+log\s+done`, r.stdout)

	// A late duplicate write brings a copy of the archived transaction
	// back into the log (in another state): the archive's record, its
	// first, is the one shown and listed; the copy is named.
	var doc bson.D
	require.NoError(t, f.db.Collection("archive").FindOne(f.ctx, bson.D{{Key: "_id", Value: old}}).Decode(&doc))
	for i := range doc {
		if doc[i].Key == "state" {
			doc[i].Value = "canceled"
		}
	}
	_, err := f.db.Collection(twopc.DefaultTransactions).InsertOne(f.ctx, doc)
	require.NoError(t, err)
	r = f.run("show", old.Hex(), "--archive", "archive", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	r.decode(t, &sh)
	require.Equal(t, "archive", sh.FoundIn)
	require.Equal(t, "done", sh.Transaction.State)
	require.NotNil(t, sh.LogCopy)
	require.Equal(t, "canceled", sh.LogCopy.State)
	r = f.run("show", old.Hex(), "--archive", "archive")
	require.Contains(t, r.stdout, "The log holds a copy too, canceled")
	r = f.run("list", "--account", "alice", "--archive", "archive", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	r.decode(t, &l)
	require.Equal(t, []foundJSON{
		{ID: old.Hex(), State: "done", FoundIn: "archive", AlsoInLog: true},
		{ID: recent.Hex(), State: "done", FoundIn: "log"},
	}, l.Transactions)
	r = f.run("list", "--state", "canceled", "--archive", "archive", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	r.decode(t, &l)
	require.Empty(t, l.Transactions, "the copy's state is not the transaction's")
}

// TestShowArchiveRace: show reads the archive, then the log, then the
// archive again, so a transaction archived between its reads (inserted
// into the archive, then deleted from the log) is found.
func TestShowArchiveRace(t *testing.T) {
	f := newFixture(t)
	f.open(map[string]int64{"alice": 1000, "bob": 0})
	id := f.done("alice", "bob", 100)
	txns, archive := f.db.Collection(twopc.DefaultTransactions), f.db.Collection("archive")
	moved := false
	afterLookupRead = func(where string) {
		if where != "archive" || moved {
			return
		}
		moved = true // the recoverer's move, between show's first two reads
		var doc bson.Raw
		require.NoError(t, txns.FindOne(f.ctx, bson.D{{Key: "_id", Value: id}}).Decode(&doc))
		_, err := archive.InsertOne(f.ctx, doc)
		require.NoError(t, err)
		_, err = txns.DeleteOne(f.ctx, bson.D{{Key: "_id", Value: id}})
		require.NoError(t, err)
	}
	t.Cleanup(func() { afterLookupRead = nil })
	r := f.run("show", id.Hex(), "--archive", "archive", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.True(t, moved)
	var sh struct {
		FoundIn string `json:"foundIn"`
	}
	r.decode(t, &sh)
	require.Equal(t, "archive", sh.FoundIn)

	// list reads the log, then the archive: one archived in between is
	// listed once, from the archive.
	first := id
	id = f.done("alice", "bob", 5)
	moved = false
	afterLookupRead = func(where string) {
		if where != "log" || moved {
			return
		}
		moved = true
		var doc bson.Raw
		require.NoError(t, txns.FindOne(f.ctx, bson.D{{Key: "_id", Value: id}}).Decode(&doc))
		_, err := archive.InsertOne(f.ctx, doc)
		require.NoError(t, err)
		_, err = txns.DeleteOne(f.ctx, bson.D{{Key: "_id", Value: id}})
		require.NoError(t, err)
	}
	var l struct {
		Transactions []foundJSON `json:"transactions"`
	}
	r = f.run("list", "--archive", "archive", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.True(t, moved)
	r.decode(t, &l)
	require.Equal(t, []foundJSON{
		{ID: first.Hex(), State: "done", FoundIn: "archive"}, // moved in show's lookup
		{ID: id.Hex(), State: "done", FoundIn: "archive"},
	}, l.Transactions)
}

// TestCancelArchived: cancel --placeholder of a done transfer moved to the
// archive, with --archive, answers that it is past its commit point and
// writes nothing; reverse with --archive finds it and moves the money back.
// Without --archive the library's Cancel could not see it and would write
// a placeholder (the danger cancel's help states).
func TestCancelArchived(t *testing.T) {
	f := newFixture(t)
	f.open(map[string]int64{"alice": 1000, "bob": 0})
	old := f.archived("archive", "alice", "bob", 100)

	r := f.run("cancel", "--placeholder", "--archive", "archive", old.Hex())
	require.NotEqual(t, exitOK, r.code, r.stdout+r.stderr)
	require.Contains(t, r.stdout+r.stderr, "past its commit point")
	n, err := f.db.Collection(twopc.DefaultTransactions).CountDocuments(f.ctx, bson.D{{Key: "_id", Value: old}})
	require.NoError(t, err)
	require.Zero(t, n, "no placeholder written for an archived transfer")

	r = f.run("reverse", "--archive", "archive", old.Hex())
	require.Equal(t, exitOK, r.code, r.stdout+r.stderr)
	c := f.coordinator()
	bal, err := c.Balance(f.ctx, "alice")
	require.NoError(t, err)
	require.Equal(t, int64(1000), bal, "moved back once")
}
