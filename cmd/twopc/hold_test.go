package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc"
)

// TestHolds operates holds with the tool: status counts them and names
// the oldest, list finds them by state, capture takes part of one and
// void releases another; repeats succeed, and a capture or void the
// other decision already excluded is refused with exit status 1 and
// changes nothing.
func TestHolds(t *testing.T) {
	f := newFixture(t)
	f.open(map[string]int64{"alice": 1000, "bob": 0})
	first, err := f.c.Hold(f.ctx, "alice", "bob", 300)
	require.NoError(t, err)
	second, err := f.c.Hold(f.ctx, "alice", "bob", 200)
	require.NoError(t, err)

	var st statusReport
	r := f.run("status", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	r.decode(t, &st)
	require.EqualValues(t, 2, st.States["held"])
	require.Zero(t, st.Unfinished, "a hold is not unfinished work")
	require.NotNil(t, st.OldestHeld)
	require.Equal(t, first.ID.Hex(), st.OldestHeld.ID)
	r = f.run("status")
	require.Contains(t, r.stdout, "Oldest hold: "+first.ID.Hex())
	require.Contains(t, r.stdout, "2 transactions held in all")

	var l struct {
		Count int `json:"count"`
	}
	r = f.run("list", "--state", "held", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	r.decode(t, &l)
	require.Equal(t, 2, l.Count)

	r = f.run("capture", first.ID.Hex(), "120")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "is captured for 120; it is done")
	require.EqualValues(t, 1000-120-200, f.balance("alice"), "120 captured, 180 back, 200 still held")
	require.EqualValues(t, 120, f.balance("bob"))
	r = f.run("capture", first.ID.Hex(), "120")
	require.Equal(t, exitOK, r.code, "the same capture again: %s", r.stderr)
	r = f.run("capture", first.ID.Hex(), "121")
	require.Equal(t, exitFailed, r.code, r.stderr)
	require.Contains(t, r.stderr, "hold captured")
	r = f.run("void", first.ID.Hex())
	require.Equal(t, exitFailed, r.code, r.stderr)
	require.Equal(t, "done", f.state(first.ID))

	r = f.run("capture", second.ID.Hex(), "201")
	require.Equal(t, exitFailed, r.code, r.stderr)
	require.Contains(t, r.stderr, "more than the 200 held")
	r = f.run("capture", second.ID.Hex(), "two")
	require.Equal(t, exitUsage, r.code, r.stderr)
	var out outcomeReport
	r = f.run("void", second.ID.Hex(), "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	r.decode(t, &out)
	require.Equal(t, "held", out.Before)
	require.Equal(t, "canceled", out.State)
	r = f.run("void", second.ID.Hex())
	require.Equal(t, exitOK, r.code, "void again: %s", r.stderr)
	r = f.run("capture", second.ID.Hex(), "200")
	require.Equal(t, exitFailed, r.code, r.stderr)
	require.Contains(t, r.stderr, "hold voided")
	require.EqualValues(t, 880, f.balance("alice"))
	require.EqualValues(t, 120, f.balance("bob"))

	r = f.run("audit")
	require.Equal(t, exitOK, r.code, r.stdout+r.stderr)

	// recover voids a hold past its expiry, and says so.
	expiring, err := f.c.Hold(f.ctx, "alice", "bob", 10, twopc.WithExpiry(time.Minute))
	require.NoError(t, err)
	_, err = f.db.Collection(twopc.DefaultTransactions).UpdateOne(f.ctx, bson.D{{Key: "_id", Value: expiring.ID}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "heldAt", Value: time.Now().Add(-time.Hour)}}}})
	require.NoError(t, err)
	var rep recoverReport
	r = f.run("recover", "--json", "--quiet")
	require.Equal(t, exitOK, r.code, r.stderr)
	r.decode(t, &rep)
	require.Equal(t, 1, rep.Expired)
	require.Equal(t, "canceled", f.state(expiring.ID))

	// A transfer is not a hold.
	id := f.done("alice", "bob", 1)
	r = f.run("void", id.Hex())
	require.Equal(t, exitFailed, r.code, r.stderr)
	require.Contains(t, r.stderr, strings.TrimPrefix(twopc.ErrNotHold.Error(), "twopc: "))
}

// TestCaptureMore: capture --more keeps the rest held for another capture;
// the next capture without it is the hold's last, and the rest returns.
func TestCaptureMore(t *testing.T) {
	f := newFixture(t)
	f.open(map[string]int64{"alice": 1000, "bob": 0})
	c := f.coordinator(twopc.WithSyncSettle())
	hold, err := c.Hold(f.ctx, "alice", "bob", 300)
	require.NoError(t, err)
	id := hold.ID.Hex()

	r := f.run("capture", id, "100", "--more")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "is captured for 100; it is held")
	r = f.run("capture", id, "100", "--more")
	require.Equal(t, exitOK, r.code, "the same capture again: %s", r.stderr)
	require.EqualValues(t, 100, f.balance("bob"), "once")
	r = f.run("void", id)
	require.Equal(t, exitOK, r.code, "void the rest: %s", r.stderr)
	require.EqualValues(t, 900, f.balance("alice"), "200 back, 100 captured")
	require.Equal(t, "canceled", f.state(hold.ID))

	hold, err = c.Hold(f.ctx, "alice", "bob", 300)
	require.NoError(t, err)
	id = hold.ID.Hex()
	require.Equal(t, exitOK, f.run("capture", id, "100", "--more").code)
	r = f.run("capture", id, "250")
	require.Equal(t, exitFailed, r.code, "more than is left: %s", r.stdout)
	require.Contains(t, r.stderr, "exceeds what is left")
	r = f.run("capture", id, "50")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "it is done")
	require.EqualValues(t, 750, f.balance("alice"), "150 captured, 150 back")
	require.EqualValues(t, 250, f.balance("bob"))
}
