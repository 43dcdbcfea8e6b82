package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/twopc/twopc"
)

// TestUnitParseAmount: amounts are read as the tool prints them (scaled):
// the asset's decimal places exactly, a whole number for no asset or no
// scale, a bare integer refused for an asset with decimal places.
func TestUnitParseAmount(t *testing.T) {
	for _, tc := range []struct {
		s, code string
		want    int64
		bare    bool // refused with errBareInteger
		bad     string
	}{
		{s: "22.00", code: "USD/2", want: 2200},
		{s: "22.00 USD/2", code: "USD/2", want: 2200},
		{s: "0.05", code: "USD/2", want: 5},
		{s: "-5.00", code: "USD/2", want: -500},
		{s: "0.00000001", code: "BTC/8", want: 1},
		{s: "22", code: "USD/2", bare: true, bad: "write 22.00"},
		{s: "22.5", code: "USD/2", bad: "2 decimal places, not 1"},
		{s: "22.000", code: "USD/2", bad: "2 decimal places, not 3"},
		{s: "22.00 EUR/2", code: "USD/2", bad: "of asset USD/2, not EUR/2"},
		{s: "22", want: 22},
		{s: "22.00", bad: "no asset is a whole number of minor units"},
		{s: "7", code: "PTS", want: 7},
		{s: "7", code: "PTS/0", want: 7},
		{s: "7.0", code: "PTS", bad: "an amount of PTS is a whole number"},
		{s: "twenty", code: "USD/2", bad: "is not an amount"},
		{s: "1.", code: "USD/2", bad: "is not an amount"},
		{s: "92233720368547758.08", code: "USD/2", bad: "out of range"},
		{s: "92233720368547758.07", code: "USD/2", want: 9223372036854775807},
	} {
		n, err := parseAmount(tc.s, tc.code)
		if tc.bad != "" {
			require.ErrorContains(t, err, tc.bad, "%q of %q", tc.s, tc.code)
			assert.Equal(t, tc.bare, errors.Is(err, errBareInteger), "%q of %q", tc.s, tc.code)
			continue
		}
		require.NoError(t, err, "%q of %q", tc.s, tc.code)
		assert.Equal(t, tc.want, n, "%q of %q", tc.s, tc.code)
	}
}

// TestCaptureTakesAmountsAsPrinted: a hold of USD/2 is captured for 1.20
// (or --minor 120), never for a bare 120; what it captured is shown by
// capture, list and show, with its value, in the hold's own amounts;
// account shows the held amounts the same way.
func TestCaptureTakesAmountsAsPrinted(t *testing.T) {
	f := newFixture(t)
	require.NoError(t, f.c.OpenAccount(f.ctx, "alice", 1000, twopc.AccountAsset("USD/2")))
	require.NoError(t, f.c.OpenAccount(f.ctx, "shop", 0, twopc.AccountAsset("USD/2")))
	hold, err := f.c.Hold(f.ctx, "alice", "shop", 300, twopc.WithAsset("USD/2"))
	require.NoError(t, err)
	id := hold.ID.Hex()

	r := f.run("account", "alice")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "held 3.00 USD/2 (pendingDebit: debits applied and not settled; 3.00 USD/2 of it by holds held)")
	assert.Contains(t, r.stdout, id+" leg 0: held, application seed, a hold, amount -3.00 USD/2")
	assert.NotContains(t, r.stdout, minorNote)

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"120"}, `AMOUNT "120": amounts of USD/2 have 2 decimal places: write 120.00: ` + errBareInteger.Error() + ", or --minor 120 for 120 minor units"},
		{[]string{"1.2"}, "amounts of USD/2 have 2 decimal places, not 1"},
		{[]string{"1.20 EUR/2"}, "the amount is of asset USD/2, not EUR/2"},
		{[]string{"one"}, "is not an amount"},
		{nil, "no AMOUNT"},
		{[]string{"1.20", "--minor", "120"}, "not both"},
		{[]string{"--minor", "1.20"}, "not a whole number of minor units"},
	} {
		r = f.run("capture", append([]string{id}, tc.args...)...)
		require.Equal(t, exitUsage, r.code, "%v: %s", tc.args, r.stdout+r.stderr)
		assert.Contains(t, r.stderr, tc.want, tc.args)
	}
	require.Equal(t, "held", f.state(hold.ID), "nothing captured")

	r = f.run("capture", id, "1.20")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "Hold "+id+" (alice → shop 3.00 USD/2) is captured for 1.20 USD/2; it is done")
	assert.NotContains(t, r.stdout, minorNote)
	require.EqualValues(t, 1000-120, f.balance("alice"))
	for _, again := range [][]string{{"--minor", "120"}, {"1.20 USD/2"}} {
		r = f.run("capture", append([]string{id}, again...)...)
		require.Equal(t, exitOK, r.code, "the same capture, %v: %s", again, r.stderr)
	}
	r = f.run("capture", id, "1.21")
	require.Equal(t, exitFailed, r.code, r.stderr)
	assert.Contains(t, r.stderr, "twopc: hold "+id+" is done, value 3.00 USD/2, captured 1.20 USD/2\n")

	r = f.run("list", "--state", "done")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "alice → shop 3.00 USD/2, captured 1.20 USD/2")
	assert.NotContains(t, r.stdout, minorNote)
	r = f.run("show", id)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `\n  value +3\.00 USD/2\n`, r.stdout)
	assert.Regexp(t, `\n  captured +1\.20 USD/2 \(of its value 3\.00 USD/2; the rest returned to the source\)\n`, r.stdout)
	assert.Contains(t, r.stdout, "balance 8.80 USD/2, pendingCredit 0.00 USD/2, pendingDebit 0.00 USD/2")
	assert.NotContains(t, r.stdout, minorNote)
}

// TestMinorUnitsSaidOnce: amounts of no asset are minor units, and each
// output that shows one says so once; a hold of no asset is captured for
// a whole number, and list and show show what it captured.
func TestMinorUnitsSaidOnce(t *testing.T) {
	f := newFixture(t)
	f.open(map[string]int64{"alice": 1000, "bob": 0})
	hold, err := f.c.Hold(f.ctx, "alice", "bob", 300)
	require.NoError(t, err)
	held, err := f.c.Hold(f.ctx, "alice", "bob", 50)
	require.NoError(t, err)
	f.done("alice", "bob", 10)

	r := f.run("capture", hold.ID.Hex(), "1.20")
	require.Equal(t, exitUsage, r.code, r.stdout+r.stderr)
	assert.Contains(t, r.stderr, "an amount of no asset is a whole number of minor units")
	r = f.run("capture", hold.ID.Hex(), "120")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "is captured for 120; it is done")

	once := func(cmd string, args ...string) string {
		t.Helper()
		r := f.run(cmd, args...)
		require.Equal(t, exitOK, r.code, "%s: %s", cmd, r.stderr)
		assert.Equal(t, 1, strings.Count(r.stdout, minorNote), "%s says it once:\n%s", cmd, r.stdout)
		return r.stdout
	}
	out := once("list")
	assert.Contains(t, out, "alice → bob 300, captured 120")
	assert.Contains(t, out, "alice → bob 50 ")
	out = once("show", hold.ID.Hex())
	assert.Regexp(t, `\n  captured +120 \(of its value 300; the rest returned to the source\)\n`, out)
	out = once("show", held.ID.Hex())
	assert.Regexp(t, `\n  captured +nothing yet: it is held, for more captures or a void\n`, out)
	out = once("account", "alice")
	assert.Contains(t, out, "held 50 (pendingDebit")
	once("accounts")
	once("statement", "alice")
	once("balance", "alice")
	out = once("audit", "--total", "default=1000")
	assert.Contains(t, out, "holds held: 1, holding 50 in all")
	once("void", held.ID.Hex())
}
