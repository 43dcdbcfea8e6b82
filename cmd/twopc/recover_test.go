package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc"
)

// TestRecover finishes a transfer whose coordinator died at its commit
// point, once it is stale by its recorded lease.
func TestRecover(t *testing.T) {
	f := newFixture(t)
	f.open(map[string]int64{"alice": 1000, "bob": 0})
	id := f.pendingTransfer("alice", "bob", 100)

	// Fresh: its owner's lease (a minute) has not passed.
	r := f.run("recover", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	var rep recoverReport
	r.decode(t, &rep)
	require.Zero(t, rep.Finished)
	require.Equal(t, "pending", f.state(id))

	f.backdate(id, 2*time.Hour)
	r = f.run("recover", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	r.decode(t, &rep)
	require.Equal(t, 1, rep.RolledForward, r.stdout)
	require.Equal(t, 1, rep.Finished)
	require.Zero(t, rep.Failed)
	require.Equal(t, "done", f.state(id))
	require.EqualValues(t, 900, f.balance("alice"))
	require.EqualValues(t, 100, f.balance("bob"))

	r = f.run("recover")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "finished 0 (rolled forward 0")

	// The tool took it over under its application name: status shows it.
	r = f.run("status", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	var st statusReport
	r.decode(t, &st)
	require.EqualValues(t, 0, st.States["pending"])
	require.EqualValues(t, 1, st.States["done"])
	require.Len(t, st.Applications, 1)
	require.Equal(t, defaultApplication, st.Applications[0].Application)
}

// TestRecoverWatch runs passes until the context ends, as SIGINT ends it.
func TestRecoverWatch(t *testing.T) {
	f := newFixture(t)
	f.open(map[string]int64{"alice": 1000, "bob": 0})
	id := f.pendingTransfer("alice", "bob", 100)
	f.backdate(id, 2*time.Hour)

	ctx, stop := context.WithCancel(f.ctx)
	defer stop()
	stdout, stderr := newLineWriter(), newLineWriter()
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"recover", "--uri", f.uri, "--db", f.db.Name(), "--watch", "--interval", "10ms", "--json"}, stdout, stderr)
	}()
	var passes []recoverReport
	for len(passes) < 3 {
		select {
		case line := <-stdout.lines:
			var rep recoverReport
			require.NoError(t, json.Unmarshal([]byte(line), &rep), line)
			passes = append(passes, rep)
		case c := <-code:
			t.Fatalf("recover --watch exited with %d: %s", c, stderr.String())
		}
	}
	stop()
	require.Equal(t, exitOK, <-code, stderr.String())
	require.Equal(t, 1, passes[0].RolledForward)
	require.Zero(t, passes[1].Finished)
	require.Zero(t, passes[2].Finished)
	require.Equal(t, "done", f.state(id))
}

// TestRecoverArchive moves a finished transaction recorded for an archive
// (WithHistory) once its fences are gone and its time to keep has passed,
// only when given that archive.
func TestRecoverArchive(t *testing.T) {
	f := newFixture(t)
	f.open(map[string]int64{"alice": 1000, "bob": 0})
	c := f.coordinator(twopc.WithHistory(time.Millisecond, f.db.Collection("archive")), twopc.WithSyncSettle())
	txn, err := c.Transfer(f.ctx, "alice", "bob", 100)
	require.NoError(t, err)
	var rep recoverReport
	for _, args := range [][]string{{"--json"}, {"--json"}, {"--archive", "archive", "--json"}} {
		f.backdate(txn.ID, 2*time.Hour) // past its fence retention and its time to keep
		r := f.run("recover", args...)
		require.Equal(t, exitOK, r.code, r.stderr)
		r.decode(t, &rep)
		if len(args) == 1 {
			require.Zero(t, rep.Removed, "not without its archive")
			require.Equal(t, "done", f.state(txn.ID))
		}
	}
	require.Equal(t, 1, rep.Removed, "moved by the pass with the archive")
	n, err := f.db.Collection("archive").CountDocuments(f.ctx, bson.D{{Key: "_id", Value: txn.ID}})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	r := f.run("show", txn.ID.Hex())
	require.Equal(t, exitFailed, r.code, "archived: not in the log any more")
	r = f.run("show", txn.ID.Hex(), "--archive", "archive")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "found in the archive")
}

// TestRecoverMinLease: a transaction whose recorded lease is shorter than
// --min-lease, stale by its lease and not by the floor, is left by the
// pass, and the pass says so: which transaction, and why.
func TestRecoverMinLease(t *testing.T) {
	f := newFixture(t)
	f.open(map[string]int64{"alice": 1000, "bob": 0})
	short := f.crashAtCommit(twopc.WithApplication("fast"), twopc.WithStaleAfter(time.Second))
	txn, err := short.Transfer(f.ctx, "alice", "bob", 100)
	require.ErrorIs(t, err, errCrash)
	f.backdate(txn.ID, 4*time.Second) // past its lease (1s), not past --min-lease (10s)

	var rep struct {
		Finished        int `json:"finished"`
		MinLeaseSkipped []struct {
			ID          string  `json:"id"`
			State       string  `json:"state"`
			Application string  `json:"application"`
			Untouched   float64 `json:"untouchedSeconds"`
			Lease       float64 `json:"leaseSeconds"`
			MinLease    float64 `json:"minLeaseSeconds"`
		} `json:"minLeaseSkipped"`
	}
	r := f.run("recover", "--json", "--quiet")
	require.Equal(t, exitOK, r.code, r.stderr)
	r.decode(t, &rep)
	require.Zero(t, rep.Finished)
	require.Equal(t, "pending", f.state(txn.ID))
	require.Len(t, rep.MinLeaseSkipped, 1, r.stdout)
	s := rep.MinLeaseSkipped[0]
	require.Equal(t, txn.ID.Hex(), s.ID)
	require.Equal(t, "pending", s.State)
	require.Equal(t, "fast", s.Application)
	require.EqualValues(t, 1, s.Lease)
	require.EqualValues(t, 10, s.MinLease)
	require.GreaterOrEqual(t, s.Untouched, 4.0)
	require.Less(t, s.Untouched, 10.0)

	r = f.run("recover", "--quiet")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "left by --min-lease 10s: "+txn.ID.Hex()+" (pending, application fast): untouched for ")
	last, _ := f.touched(txn.ID)
	require.Contains(t, r.stdout, "past its recorded lease (1s) but not --min-lease; a pass takes it over from "+
		timestamp(last.Add(10*time.Second))+" (in ")
	require.NotContains(t, r.stdout, "left for its lease", "said once, as left by --min-lease")

	// A lower floor: the pass takes it, and reports no such skip.
	r = f.run("recover", "--json", "--quiet", "--min-lease", "2s")
	require.Equal(t, exitOK, r.code, r.stderr)
	r.decode(t, &rep)
	require.Equal(t, 1, rep.Finished)
	require.Empty(t, rep.MinLeaseSkipped)
	require.Equal(t, "done", f.state(txn.ID))
}
