package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc"
)

// TestLedgers looks at, and recovers, a transfer between two ledgers of
// one database.
func TestLedgers(t *testing.T) {
	f := newFixture(t)
	const sh = "accounts_sh"
	opt := twopc.WithLedger("sh", f.db.Collection(sh))
	seed := f.coordinator(twopc.WithApplication("seed"), opt)
	require.NoError(t, seed.OpenAccount(f.ctx, "alice", 1000))
	shanghai, err := seed.Ledger("sh")
	require.NoError(t, err)
	require.NoError(t, shanghai.OpenAccount(f.ctx, "bob", 0))
	txn, err := f.crashAtCommit(opt).TransferLegs(f.ctx, []twopc.Leg{
		{Account: "alice", Amount: -100},
		{Ledger: "sh", Account: "bob", Amount: 100},
	})
	require.ErrorIs(t, err, errCrash)
	id := txn.ID

	r := f.run("show", id.Hex())
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "1. account bob, ledger sh, amount +100")
	require.Contains(t, r.stdout, "ledger not given")
	r = f.run("show", "--ledger", "sh="+sh, id.Hex())
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "1. account bob, ledger sh (collection accounts_sh), amount +100")
	require.Contains(t, r.stdout, "balance 0, pendingCredit 100")

	var l struct {
		Count int `json:"count"`
	}
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"--ledger", "sh"}, 1},
		{[]string{"--ledger", "sh", "--account", "bob"}, 1},
		{[]string{"--ledger", "sh", "--account", "alice"}, 0},
		{[]string{"--ledger", "default", "--account", "alice"}, 1},
		{[]string{"--ledger", "", "--account", "bob"}, 0},
		{[]string{"--account", "bob"}, 1},
	} {
		r := f.run("list", append(tc.args, "--json")...)
		require.Equal(t, exitOK, r.code, "%v: %s", tc.args, r.stderr)
		r.decode(t, &l)
		require.Equal(t, tc.want, l.Count, "%v", tc.args)
	}

	// Without the ledger, the pass leaves the transfer to a recoverer
	// that has it, untouched, and says which ledger to give.
	f.backdate(id, 2*time.Hour)
	r = f.run("recover")
	require.Equal(t, exitFailed, r.code, r.stdout+r.stderr)
	require.Contains(t, r.stderr, `"sh"`)
	require.Contains(t, r.stderr, "--ledger NAME=COLLECTION")
	require.Equal(t, "pending", f.state(id))
	got, err := f.c.Get(f.ctx, id)
	require.NoError(t, err)
	require.Equal(t, "crashing", got.Application, "not taken over")

	r = f.run("cancel", id.Hex())
	require.Equal(t, exitUsage, r.code, r.stderr)
	require.Contains(t, r.stderr, "--ledger sh=COLLECTION")

	r = f.run("recover", "--ledger", "sh="+sh, "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	var rep recoverReport
	r.decode(t, &rep)
	require.Equal(t, 1, rep.RolledForward)
	require.Equal(t, "done", f.state(id))
	require.EqualValues(t, 100, f.account(sh, "bob").Balance)

	r = f.run("audit", "--ledger", "sh="+sh, "--total", "default=900", "--total", "sh=100")
	require.Equal(t, exitOK, r.code, r.stdout+r.stderr)
	require.Contains(t, r.stdout, "accounts by ledger: default 1, sh 1")
}

// TestListAccountIDsAsTheLibrary: list --account takes ids as the library
// and the server do (schema.SameID): {n: 1} given on the command line (an
// int32) is the account {n: int64(1)} a transfer named.
func TestListAccountIDsAsTheLibrary(t *testing.T) {
	f := newFixture(t)
	const sh = "accounts_sh"
	opt := twopc.WithLedger("sh", f.db.Collection(sh))
	c := f.coordinator(twopc.WithApplication("seed"), opt, twopc.WithSyncSettle())
	require.NoError(t, c.OpenAccount(f.ctx, "alice", 1000))
	shanghai, err := c.Ledger("sh")
	require.NoError(t, err)
	acct := bson.D{{Key: "n", Value: int64(1)}}
	require.NoError(t, shanghai.OpenAccount(f.ctx, acct, 0))
	_, err = c.TransferLegs(f.ctx, []twopc.Leg{{Account: "alice", Amount: -5}, {Ledger: "sh", Account: acct, Amount: 5}})
	require.NoError(t, err)

	var l struct {
		Count int `json:"count"`
	}
	for _, given := range []string{`{"n": 1}`, `{"n": {"$numberLong": "1"}}`, `{"n": 1.0}`} {
		r := f.run("list", "--ledger", "sh", "--account", given, "--json")
		require.Equal(t, exitOK, r.code, "%s: %s", given, r.stderr)
		r.decode(t, &l)
		require.Equal(t, 1, l.Count, "--account %s", given)
	}
	r := f.run("list", "--ledger", "sh", "--account", `{"n": 2}`, "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	r.decode(t, &l)
	require.Equal(t, 0, l.Count)
}
