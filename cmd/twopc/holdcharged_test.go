package main

import (
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/twopc/twopc"
)

// TestHoldChargedShown: what a hold charged is always shown (issue 48,
// item 6). capture 2.00 after 6.00 of a hold of 10.00 says 8.00 captured
// in all and 2.00 released (6.00 so far and 4.00 held before); a hold of
// 100.00 captured 60.00 and voided says so in void, list --state
// canceled, show and the statement (its capture's entry names it); one
// voided with none says "captured nothing".
func TestHoldChargedShown(t *testing.T) {
	f := newFixture(t)
	for _, id := range []string{"alice", "shop"} {
		require.NoError(t, f.c.OpenAccount(f.ctx, id, map[string]int64{"alice": 1000_00}[id], twopc.AccountAsset("USD/2")))
	}
	order, err := f.c.Hold(f.ctx, "alice", "shop", 10_00)
	require.NoError(t, err)
	r := f.run("capture", order.ID.Hex(), "6.00", "--more")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "Captured 6.00 USD/2 so far, 4.00 USD/2 still held.")
	r = f.run("capture", order.ID.Hex(), "2.00")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "is captured for 2.00 USD/2; it is done")
	assert.Contains(t, r.stdout, "Captured 8.00 USD/2 in all, 2.00 USD/2 released.")

	charged, err := f.c.Hold(f.ctx, "alice", "shop", 100_00)
	require.NoError(t, err)
	capture, err := f.c.Capture(f.ctx, charged.ID, 60_00, twopc.WithFinalCapture(false))
	require.NoError(t, err)
	r = f.run("void", charged.ID.Hex())
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "is voided; it is canceled: captured 60.00 USD/2 in all, 40.00 USD/2 released")
	none, err := f.c.Hold(f.ctx, "alice", "shop", 100_00)
	require.NoError(t, err)
	r = f.run("void", none.ID.Hex())
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "is voided; it is canceled: captured nothing, 100.00 USD/2 released")

	r = f.run("list", "--state", "canceled")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, regexp.MustCompile(charged.ID.Hex()+`.*alice → shop 100\.00 USD/2, captured 60\.00 USD/2 in all, 40\.00 USD/2 released\s+voided`), r.stdout)
	assert.Regexp(t, regexp.MustCompile(none.ID.Hex()+`.*alice → shop 100\.00 USD/2, captured nothing, 100\.00 USD/2 released\s+voided`), r.stdout)
	r = f.run("list", "--state", "done")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, regexp.MustCompile(order.ID.Hex()+`.*alice → shop 10\.00 USD/2, captured 8\.00 USD/2 in all, 2\.00 USD/2 released`), r.stdout)

	r = f.run("show", charged.ID.Hex())
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `\n  captured +60\.00 USD/2 by its captures \(their captureOf names it\), before it was voided \(of its value 100\.00 USD/2; the rest returned to the source\)\n`, r.stdout)
	assert.Regexp(t, `\n  released +40\.00 USD/2 \(returned to the debited accounts when the hold ended\)\n`, r.stdout)

	var st statementReport
	r = f.run("statement", "shop", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	r.decode(t, &st)
	byHold := map[string]int64{}
	for _, e := range st.Entries {
		byHold[e.CaptureOf] += e.Amount
	}
	assert.Equal(t, map[string]int64{order.ID.Hex(): 8_00, charged.ID.Hex(): 60_00}, byHold)
	r = f.run("statement", "shop")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, regexp.MustCompile(capture.ID.Hex()+`\s+\+60\.00 USD/2.*`+charged.ID.Hex()), r.stdout)
}
