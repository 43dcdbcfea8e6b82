package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/twopc/twopc"
)

// accountJSON is an account as account --json prints it.
type accountJSON struct {
	Ledger        string `json:"ledger"`
	Collection    string `json:"collection"`
	ID            string `json:"id"`
	Balance       int64  `json:"balance"`
	Held          int64  `json:"held"`
	HeldByHolds   int64  `json:"heldByHolds"`
	PendingCredit int64  `json:"pendingCredit"`
	PendingLegs   []struct {
		Marker      string `json:"marker"`
		Transaction string `json:"transaction"`
		Leg         int    `json:"leg"`
		State       string `json:"state"`
		Application string `json:"application"`
		Hold        bool   `json:"hold"`
		Amount      int64  `json:"amount"`
	} `json:"pendingLegs"`
	Fences       []string  `json:"fencedLegs"`
	FencedBefore time.Time `json:"fencedBefore"`
	Tombstone    bool      `json:"tombstone"`
}

// TestAccount: account ID shows what the library's Account says of an
// account (balance, held, pending credit, the transactions in flight on
// it), with its markers: each pending leg and its transaction, and the
// fences.
func TestAccount(t *testing.T) {
	f := newFixture(t)
	f.open(map[string]int64{"alice": 1000, "bob": 0})
	settled := f.done("alice", "bob", 50)
	hold, err := f.c.Hold(f.ctx, "alice", "bob", 300)
	require.NoError(t, err)
	pending := f.pendingTransfer("alice", "bob", 100)

	var rep struct {
		Accounts []accountJSON `json:"accounts"`
	}
	r := f.run("account", "alice", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	r.decode(t, &rep)
	require.Len(t, rep.Accounts, 1)
	a := rep.Accounts[0]
	require.Equal(t, "default", a.Ledger)
	require.Equal(t, twopc.DefaultAccounts, a.Collection)
	require.Equal(t, "alice", a.ID)
	lib, err := f.c.Account(f.ctx, "alice") // what the library says
	require.NoError(t, err)
	require.EqualValues(t, 550, lib.Balance)
	require.Equal(t, lib.Balance, a.Balance)
	require.Equal(t, lib.Held, a.Held)
	require.EqualValues(t, 400, a.Held)
	require.EqualValues(t, 300, a.HeldByHolds)
	require.Equal(t, lib.PendingCredit, a.PendingCredit)
	require.Len(t, a.PendingLegs, 2)
	var inFlight []string
	for _, l := range a.PendingLegs {
		inFlight = append(inFlight, l.Transaction)
		require.Equal(t, 0, l.Leg)
		require.Equal(t, l.Transaction, l.Marker, "leg 0's marker is the transaction's id")
	}
	var libInFlight []string
	for _, id := range lib.PendingTransactions {
		libInFlight = append(libInFlight, id.Hex())
	}
	require.ElementsMatch(t, libInFlight, inFlight)
	byTxn := map[string]int{}
	for i, l := range a.PendingLegs {
		byTxn[l.Transaction] = i
	}
	h := a.PendingLegs[byTxn[hold.ID.Hex()]]
	require.Equal(t, "held", h.State)
	require.Equal(t, "seed", h.Application)
	require.True(t, h.Hold)
	require.EqualValues(t, -300, h.Amount)
	p := a.PendingLegs[byTxn[pending.Hex()]]
	require.Equal(t, "pending", p.State)
	require.Equal(t, "crashing", p.Application)
	require.EqualValues(t, -100, p.Amount)
	require.Contains(t, a.Fences, f.fence(settled, 0))

	r = f.run("account", "bob", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	r.decode(t, &rep)
	require.EqualValues(t, 50, rep.Accounts[0].Balance)
	require.EqualValues(t, 400, rep.Accounts[0].PendingCredit)
	require.Len(t, rep.Accounts[0].PendingLegs, 2)
	for _, l := range rep.Accounts[0].PendingLegs {
		require.Equal(t, 1, l.Leg, "bob's legs are the credits")
		require.Positive(t, l.Amount)
	}

	r = f.run("account", "alice")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "Account alice, ledger default (collection accounts)")
	require.Contains(t, r.stdout, "balance 550 (available)")
	require.Contains(t, r.stdout, "held 400 (pendingDebit")
	require.Contains(t, r.stdout, "300 of it by holds held")
	require.Contains(t, r.stdout, hold.ID.Hex()+" leg 0: held, application seed, a hold, amount -300")
	require.Contains(t, r.stdout, pending.Hex()+" leg 0: pending, application crashing, amount -100")
	require.Contains(t, r.stdout, "fencedLegs: 1, of transactions made from ")

	// No such account.
	r = f.run("account", "nobody")
	require.Equal(t, exitFailed, r.code, r.stdout+r.stderr)
	require.Contains(t, r.stderr, "account not found")
	require.Empty(t, r.stdout)
}

// TestAccountLedgers: --ledger NAME=COLLECTION (or NAME=URI) gives a
// ledger as for show; the account is read in every ledger given, the
// default's included, unless --ledger NAME picks some.
func TestAccountLedgers(t *testing.T) {
	f := newFixture(t)
	const sh = "accounts_sh"
	c := f.coordinator(twopc.WithApplication("seed"), twopc.WithLedger("sh", f.db.Collection(sh)), twopc.WithSyncSettle())
	require.NoError(t, c.OpenAccount(f.ctx, "bob", 10))
	shanghai, err := c.Ledger("sh")
	require.NoError(t, err)
	require.NoError(t, shanghai.OpenAccount(f.ctx, "bob", 700))

	var rep struct {
		Accounts []accountJSON `json:"accounts"`
	}
	balances := func(args ...string) map[string]int64 {
		t.Helper()
		r := f.run("account", append(args, "--json")...)
		require.Equal(t, exitOK, r.code, "%v: %s", args, r.stderr)
		r.decode(t, &rep)
		got := map[string]int64{}
		for _, a := range rep.Accounts {
			got[a.Ledger] = a.Balance
		}
		return got
	}
	require.Equal(t, map[string]int64{"default": 10}, balances("bob"))
	require.Equal(t, map[string]int64{"default": 10, "sh": 700}, balances("bob", "--ledger", "sh="+sh))
	require.Equal(t, map[string]int64{"sh": 700}, balances("bob", "--ledger", "sh="+sh, "--ledger", "sh"))
	require.Equal(t, map[string]int64{"default": 10}, balances("bob", "--ledger", "sh="+sh, "--ledger", "default"))

	r := f.run("account", "bob", "--ledger", "sh")
	require.Equal(t, exitUsage, r.code, r.stderr)
	require.Contains(t, r.stderr, "--ledger sh=COLLECTION")
	r = f.run("account", "--ledger", "sh="+sh, "--ledger", "sh")
	require.Equal(t, exitUsage, r.code, r.stderr)
	require.Contains(t, r.stderr, "missing ID")
}

// TestAccountShowsMetadata: twopc account shows what AccountMetadata gave
// the account, in its text and in --json.
func TestAccountShowsMetadata(t *testing.T) {
	f := newFixture(t)
	require.NoError(t, f.c.OpenAccount(f.ctx, "shop", 0, twopc.AccountMetadata(map[string]string{"owner": "shop-17"})))
	r := f.run("account", "shop")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, `metadata {"owner":"shop-17"}`)
	var rep struct {
		Accounts []struct {
			Metadata map[string]string `json:"metadata"`
		} `json:"accounts"`
	}
	r = f.run("account", "shop", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	r.decode(t, &rep)
	require.Len(t, rep.Accounts, 1)
	require.Equal(t, map[string]string{"owner": "shop-17"}, rep.Accounts[0].Metadata)
}
