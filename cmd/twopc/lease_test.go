package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc"
)

// touched is transaction id's lastModified and its recorded lease.
func (f *fixture) touched(id bson.ObjectID) (time.Time, time.Duration) {
	f.t.Helper()
	var d struct {
		LastModified time.Time `bson:"lastModified"`
		LeaseMs      int64     `bson:"leaseMs"`
	}
	require.NoError(f.t, f.db.Collection(twopc.DefaultTransactions).FindOne(f.ctx, bson.D{{Key: "_id", Value: id}}).Decode(&d))
	return d.LastModified, time.Duration(d.LeaseMs) * time.Millisecond
}

// waitingJSON is recover --json's report of what a pass left for a lease.
type waitingJSON struct {
	Finished int `json:"finished"`
	Waiting  []struct {
		ID          string    `json:"id"`
		State       string    `json:"state"`
		Application string    `json:"application"`
		Lease       float64   `json:"leaseSeconds"`
		MinLease    float64   `json:"minLeaseSeconds"`
		EligibleAt  time.Time `json:"eligibleAt"`
		EligibleIn  float64   `json:"eligibleInSeconds"`
	} `json:"waiting"`
}

// TestRecoverSaysWhenEligible: a pass that leaves a transaction because
// its lease has not run out says when it becomes eligible: its
// lastModified plus the longer of its recorded lease and --min-lease, by
// the server's clock; once it is past that, a pass takes it over.
func TestRecoverSaysWhenEligible(t *testing.T) {
	f := newFixture(t)
	f.open(map[string]int64{"alice": 1000, "bob": 0})
	id := f.pendingTransfer("alice", "bob", 100)
	last, lease := f.touched(id)
	require.Equal(t, time.Minute, lease, "the library's default StaleAfter, recorded")

	for _, tc := range []struct {
		minLease string
		after    time.Duration
		words    string
	}{
		{"10s", time.Minute, "of its lease 1m0s (recorded in it); eligible from "},
		{"2m", 2 * time.Minute, "of --min-lease 2m0s (its recorded lease is 1m0s); eligible from "},
	} {
		var rep waitingJSON
		r := f.run("recover", "--json", "--quiet", "--min-lease", tc.minLease)
		require.Equal(t, exitOK, r.code, r.stderr)
		r.decode(t, &rep)
		require.Zero(t, rep.Finished)
		require.Len(t, rep.Waiting, 1, r.stdout)
		w := rep.Waiting[0]
		assert.Equal(t, id.Hex(), w.ID)
		assert.Equal(t, "pending", w.State)
		assert.Equal(t, "crashing", w.Application)
		assert.EqualValues(t, 60, w.Lease)
		assert.True(t, last.Add(tc.after).Equal(w.EligibleAt), "eligible at %v, want lastModified %v + %v", w.EligibleAt, last, tc.after)
		assert.Positive(t, w.EligibleIn)
		assert.LessOrEqual(t, w.EligibleIn, tc.after.Seconds())

		r = f.run("recover", "--quiet", "--min-lease", tc.minLease)
		require.Equal(t, exitOK, r.code, r.stderr)
		assert.Contains(t, r.stdout, "left for its lease: "+id.Hex()+" (pending, application crashing): untouched for ")
		assert.Contains(t, r.stdout, tc.words+timestamp(last.Add(tc.after))+" (in ")
	}
	require.Equal(t, "pending", f.state(id))

	f.backdate(id, 2*time.Hour)
	var rep waitingJSON
	r := f.run("recover", "--json", "--quiet")
	require.Equal(t, exitOK, r.code, r.stderr)
	r.decode(t, &rep)
	require.Equal(t, 1, rep.Finished)
	require.Empty(t, rep.Waiting)
}

// TestCancelSaysWhenEligible: cancel refuses a transaction a process owns
// within its lease, saying when it becomes cancelable (its lastModified
// plus the longer of its recorded lease and --min-lease, by the server's
// clock); --json gives the same in fields; the owner's application name
// does not make the tool its owner.
func TestCancelSaysWhenEligible(t *testing.T) {
	f := newFixture(t)
	f.open(map[string]int64{"alice": 1000, "bob": 0})
	id := f.pendingTransfer("alice", "bob", 100)
	last, _ := f.touched(id)

	r := f.run("cancel", id.Hex())
	require.Equal(t, exitFailed, r.code, r.stdout+r.stderr)
	assert.Contains(t, r.stderr, "in progress")
	assert.Contains(t, r.stderr, "of its lease 1m0s (recorded in it); eligible from "+timestamp(last.Add(time.Minute))+" (in ")

	r = f.run("cancel", id.Hex(), "--min-lease", "5m")
	require.Equal(t, exitFailed, r.code, r.stdout+r.stderr)
	assert.Contains(t, r.stderr, "of --min-lease 5m0s (its recorded lease is 1m0s); eligible from "+timestamp(last.Add(5*time.Minute)))

	var out struct {
		Error       string    `json:"error"`
		ExitStatus  int       `json:"exitStatus"`
		ID          string    `json:"id"`
		State       string    `json:"state"`
		Application string    `json:"application"`
		Lease       float64   `json:"leaseSeconds"`
		MinLease    float64   `json:"minLeaseSeconds"`
		EligibleAt  time.Time `json:"eligibleAt"`
		EligibleIn  float64   `json:"eligibleInSeconds"`
	}
	r = f.run("cancel", id.Hex(), "--json")
	require.Equal(t, exitFailed, r.code, r.stderr)
	r.decode(t, &out)
	assert.Contains(t, out.Error, "eligible from ")
	assert.Equal(t, exitFailed, out.ExitStatus)
	assert.Equal(t, id.Hex(), out.ID)
	assert.Equal(t, "pending", out.State)
	assert.Equal(t, "crashing", out.Application)
	assert.EqualValues(t, 60, out.Lease)
	assert.EqualValues(t, 10, out.MinLease)
	assert.True(t, last.Add(time.Minute).Equal(out.EligibleAt), "eligible at %v", out.EligibleAt)
	assert.Positive(t, out.EligibleIn)
	require.Equal(t, "pending", f.state(id))

	// Ownership is per process, never per name: the owner's application
	// name does not make the tool its owner.
	r = f.run("cancel", id.Hex(), "--application", "crashing")
	require.Equal(t, exitFailed, r.code, r.stdout+r.stderr)
	require.Equal(t, "pending", f.state(id))
}
