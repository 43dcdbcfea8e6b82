package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/twopc/twopc"
)

// TestMadeBy: capture, void, cancel and recover claim the transaction
// under the tool's application name, which the library writes into the
// document's application field in place of the maker's; what they print
// names both: the application that made the transfer, and the one that
// finished it.
func TestMadeBy(t *testing.T) {
	f := newFixture(t)
	f.open(map[string]int64{"alice": 1000, "bob": 0})
	app := func(id string) string {
		t.Helper()
		r := f.run("show", id, "--json")
		require.Equal(t, exitOK, r.code, r.stderr)
		var sh struct {
			Transaction txnJSON `json:"transaction"`
		}
		r.decode(t, &sh)
		return sh.Transaction.Application
	}
	var out struct {
		MadeBy      string  `json:"madeBy"`
		FinishedBy  string  `json:"finishedBy"`
		Transaction txnJSON `json:"transaction"`
	}

	captured, err := f.c.Hold(f.ctx, "alice", "bob", 300)
	require.NoError(t, err)
	r := f.run("capture", captured.ID.Hex(), "100", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	r.decode(t, &out)
	require.Equal(t, "seed", out.MadeBy)
	require.Equal(t, defaultApplication, out.FinishedBy)
	require.Equal(t, defaultApplication, out.Transaction.Application, "the document names the tool")
	require.Equal(t, defaultApplication, app(captured.ID.Hex()))

	voided, err := f.c.Hold(f.ctx, "alice", "bob", 200)
	require.NoError(t, err)
	r = f.run("void", voided.ID.Hex())
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "made by seed, voided by "+defaultApplication)

	held, err := f.c.Hold(f.ctx, "alice", "bob", 10)
	require.NoError(t, err)
	r = f.run("capture", held.ID.Hex(), "10", "--application", "ops-desk")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "made by seed, captured by ops-desk")

	canceled := f.pendingTransfer("alice", "bob", 5)
	f.backdate(canceled, 2*time.Hour)
	r = f.run("cancel", canceled.Hex(), "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	r.decode(t, &out)
	require.Equal(t, "crashing", out.MadeBy)
	require.Equal(t, defaultApplication, out.FinishedBy)

	// recover: each transaction it took over, with its maker.
	forward := f.pendingTransfer("alice", "bob", 7)
	f.backdate(forward, 2*time.Hour)
	r = f.run("recover", "--json", "--quiet")
	require.Equal(t, exitOK, r.code, r.stderr)
	var rep struct {
		RolledForward int `json:"rolledForward"`
		Transactions  []struct {
			ID         string `json:"id"`
			State      string `json:"state"`
			MadeBy     string `json:"madeBy"`
			FinishedBy string `json:"finishedBy"`
			Action     string `json:"action"`
			Outcome    string `json:"outcome"`
		} `json:"transactions"`
	}
	r.decode(t, &rep)
	require.Equal(t, 1, rep.RolledForward)
	require.Len(t, rep.Transactions, 1, r.stdout)
	tx := rep.Transactions[0]
	require.Equal(t, forward.Hex(), tx.ID)
	require.Equal(t, "pending", tx.State)
	require.Equal(t, "crashing", tx.MadeBy)
	require.Equal(t, defaultApplication, tx.FinishedBy)
	require.Equal(t, string(twopc.RecoveryRollForward), tx.Action)
	require.Equal(t, string(twopc.OutcomeMoved), tx.Outcome)
	require.Equal(t, defaultApplication, app(forward.Hex()))

	back := f.pendingTransfer("alice", "bob", 9)
	f.backdate(back, 2*time.Hour)
	r = f.run("recover", "--quiet")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, back.Hex()+" (pending, made by crashing): taken over by "+defaultApplication+", rolled forward")
}
