package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/twopc/twopc"
)

// TestReviewCaptureToolKeyBurnedByCanceledCapture: `twopc capture H 120`
// keys its capture "twopc capture H 120" so that running it again after a
// lost reply returns the capture it made. If the tool's process dies after
// the capture's insert and before its legs, recovery rolls the capture back
// (presumed abort) and gives its reservation back, but the key stays
// canceled: running the same command again answers the canceled capture,
// for good. The operator can never capture 120 of this hold with the tool,
// although the hold is held with all of it left.
func TestReviewCaptureToolKeyBurnedByCanceledCapture(t *testing.T) {
	f := newFixture(t)
	f.open(map[string]int64{"alice": 1000, "bob": 0})
	hold, err := f.c.Hold(f.ctx, "alice", "bob", 300)
	require.NoError(t, err)
	// What the tool's coordinator sends, dying after the insert.
	crashing := f.coordinator(twopc.WithApplication("crashing"), twopc.WithStepHook(func(_ context.Context, step twopc.Step, _ *twopc.Txn) error {
		if step == twopc.StepApply {
			return errCrash
		}
		return nil
	}))
	c, err := crashing.Capture(f.ctx, hold.ID, 120, twopc.WithKey(fmt.Sprintf("twopc capture %s %d %t", hold.ID.Hex(), 120, false)))
	require.ErrorIs(t, err, errCrash)
	require.NotNil(t, c)
	f.backdate(c.ID, time.Hour)
	r := f.run("recover", "--json", "--quiet")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, "canceled", f.state(c.ID))
	require.Equal(t, "held", f.state(hold.ID), "nothing captured, all of it left")

	r = f.run("capture", hold.ID.Hex(), "120")
	assert.Equal(t, exitOK, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
	assert.Equal(t, "done", f.state(hold.ID))
}

// TestReviewVoidAfterCapturesSaysNothingMoved: a hold captured for 120 in
// part (WithFinalCapture(false)) and then voided with the tool: the tool
// says what its captures moved, not "nothing moved", and so does show
// (review).
func TestReviewVoidAfterCapturesSaysNothingMoved(t *testing.T) {
	f := newFixture(t)
	f.open(map[string]int64{"alice": 1000, "bob": 0})
	hold, err := f.c.Hold(f.ctx, "alice", "bob", 300)
	require.NoError(t, err)
	_, err = f.c.Capture(f.ctx, hold.ID, 120, twopc.WithFinalCapture(false))
	require.NoError(t, err)
	r := f.run("void", hold.ID.Hex())
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.NotContains(t, r.stdout, "nothing moved", "its capture moved 120 to bob")
	assert.Contains(t, r.stdout, "captured 120 in all, 180 released")
	r = f.run("show", hold.ID.Hex())
	assert.Contains(t, r.stdout, "120 by its captures")
	assert.EqualValues(t, 120, f.balance("bob"))
}
