package main

import (
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestStatusListShow seeds one settled transfer and one whose coordinator
// died at its commit point, and looks at them with status, list and show.
func TestStatusListShow(t *testing.T) {
	f := newFixture(t)
	f.open(map[string]int64{"alice": 1000, "bob": 0, "carol": 0})
	settled := f.done("alice", "carol", 50)
	pending := f.pendingTransfer("alice", "bob", 100)

	// status
	r := f.run("status")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Regexp(t, regexp.MustCompile(`(?m)^\s+pending\s+1$`), r.stdout)
	require.Contains(t, r.stdout, "Oldest unfinished: "+pending.Hex()+", pending")
	require.Contains(t, r.stdout, "crashing")
	r = f.run("status", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	var st statusReport
	r.decode(t, &st)
	require.Equal(t, map[string]int64{"initial": 0, "pending": 1, "applied": 0, "done": 1, "canceling": 0, "canceled": 0, "held": 0}, st.States)
	require.EqualValues(t, 2, st.Total)
	require.EqualValues(t, 1, st.Unfinished)
	require.NotNil(t, st.Oldest)
	require.Equal(t, pending.Hex(), st.Oldest.ID)
	apps := map[string]int64{}
	for _, a := range st.Applications {
		apps[a.Application] = a.Transactions
		require.False(t, a.LastWrite.IsZero(), a.Application)
	}
	require.Equal(t, map[string]int64{"seed": 1, "crashing": 1}, apps)

	// list
	var l struct {
		Count        int       `json:"count"`
		Truncated    bool      `json:"truncated"`
		Transactions []txnJSON `json:"transactions"`
	}
	r = f.run("list", "--state", "pending", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	r.decode(t, &l)
	require.Equal(t, 1, l.Count)
	require.Equal(t, pending.Hex(), l.Transactions[0].ID)
	require.Equal(t, "pending", l.Transactions[0].State)

	r = f.run("list", "--state", "pending")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, pending.Hex())
	require.Contains(t, r.stdout, "alice → bob 100")
	require.NotContains(t, r.stdout, settled.Hex())

	for _, tc := range []struct {
		args []string
		want []bson.ObjectID
	}{
		{[]string{"--account", "bob"}, []bson.ObjectID{pending}},
		{[]string{"--account", "alice"}, []bson.ObjectID{settled, pending}}, // oldest first
		{[]string{"--account", "nobody"}, nil},
		{[]string{"--state", "final"}, []bson.ObjectID{settled}},
		{[]string{"--state", "done,pending"}, []bson.ObjectID{settled, pending}},
		{[]string{"--application", "crashing"}, []bson.ObjectID{pending}},
		{[]string{"--older-than", "1h"}, nil},
		{[]string{"--ledger", "default", "--account", "carol"}, []bson.ObjectID{settled}},
		{[]string{"--ledger", "elsewhere"}, nil},
	} {
		r := f.run("list", append(tc.args, "--json")...)
		require.Equal(t, exitOK, r.code, "%v: %s", tc.args, r.stderr)
		r.decode(t, &l)
		var got []bson.ObjectID
		for _, x := range l.Transactions {
			id, err := bson.ObjectIDFromHex(x.ID)
			require.NoError(t, err)
			got = append(got, id)
		}
		require.Equal(t, tc.want, got, "%v", tc.args)
	}
	r = f.run("list", "--limit", "1", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	r.decode(t, &l)
	require.Equal(t, 1, l.Count)
	require.True(t, l.Truncated)
	require.Equal(t, settled.Hex(), l.Transactions[0].ID)

	f.backdate(pending, 2*time.Hour)
	r = f.run("list", "--older-than", "1h", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	r.decode(t, &l)
	require.Equal(t, 1, l.Count)
	require.Equal(t, pending.Hex(), l.Transactions[0].ID)

	// show: the pending transfer's legs are applied, not settled.
	r = f.run("show", pending.Hex())
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "Transaction "+pending.Hex())
	require.Regexp(t, `state\s+pending`, r.stdout)
	require.Contains(t, r.stdout, "0. account alice, ledger default (collection accounts), amount -100")
	require.Contains(t, r.stdout, "1. account bob, ledger default (collection accounts), amount +100")
	require.Contains(t, r.stdout, "balance 850, pendingCredit 0, pendingDebit 100")
	require.Contains(t, r.stdout, "balance 0, pendingCredit 100")
	require.Contains(t, r.stdout, "applied, not settled")

	r = f.run("show", pending.Hex(), "--json") // flags after the id
	require.Equal(t, exitOK, r.code, r.stderr)
	var sh struct {
		Transaction txnJSON `json:"transaction"`
		Legs        []struct {
			Ledger  string `json:"ledger"`
			Amount  int64  `json:"amount"`
			Leg     string `json:"leg"`
			Marker  string `json:"marker"`
			Account struct {
				ID            string `json:"_id"`
				Balance       int64  `json:"balance"`
				PendingCredit int64  `json:"pendingCredit"`
				PendingDebit  int64  `json:"pendingDebit"`
			} `json:"account"`
		} `json:"legs"`
	}
	r.decode(t, &sh)
	require.Equal(t, pending.Hex(), sh.Transaction.ID)
	require.Len(t, sh.Legs, 2)
	require.Equal(t, "alice", sh.Legs[0].Account.ID)
	require.EqualValues(t, 850, sh.Legs[0].Account.Balance)
	require.EqualValues(t, 100, sh.Legs[0].Account.PendingDebit)
	require.Equal(t, legApplied, sh.Legs[0].Leg)
	require.Equal(t, pending.Hex(), sh.Legs[0].Marker)
	require.Equal(t, "bob", sh.Legs[1].Account.ID)
	require.EqualValues(t, 100, sh.Legs[1].Account.PendingCredit)
	require.Equal(t, legApplied, sh.Legs[1].Leg)

	// A settled transfer's legs are closed.
	r = f.run("show", settled.Hex(), "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	r.decode(t, &sh)
	require.Equal(t, legClosed, sh.Legs[0].Leg)
	require.Equal(t, legClosed, sh.Legs[1].Leg)

	// An id that names no transaction.
	r = f.run("show", bson.NewObjectID().Hex())
	require.Equal(t, exitFailed, r.code, r.stderr)
	require.Contains(t, r.stderr, "transaction not found")
}

// TestStatusNoTransactions: status on a database with no transactions
// collection says so, and exits 1, rather than counting zeros.
func TestStatusNoTransactions(t *testing.T) {
	f := newFixture(t) // its transactions collection exists (EnsureIndexes)
	empty := "empty_" + f.db.Name()
	r := runTool(f.ctx, "status", "--uri", f.uri, "--db", empty)
	require.Equal(t, exitFailed, r.code, r.stdout+r.stderr)
	require.Contains(t, r.stderr, `database `+empty+` has no collection "transactions"`)
	require.Empty(t, r.stdout)

	// A database with accounts and no transactions collection of that
	// name: the collections it has are named.
	r = f.run("status", "--transactions", "txns", "--json")
	require.Equal(t, exitFailed, r.code, r.stdout+r.stderr)
	var e struct {
		Error string `json:"error"`
	}
	r.decode(t, &e)
	require.Contains(t, e.Error, `has no collection "txns"`)
	require.Contains(t, e.Error, "transactions")

	r = f.run("status")
	require.Equal(t, exitOK, r.code, r.stderr)
}
