package main

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/internal/schema"
)

func TestAudit(t *testing.T) {
	f := newFixture(t)
	f.open(map[string]int64{"alice": 1000, "bob": 0})
	f.done("alice", "bob", 100)

	r := f.run("audit")
	require.Equal(t, exitOK, r.code, r.stdout+r.stderr)
	require.Contains(t, r.stdout, "OK, no violation")
	require.Contains(t, r.stdout, "done 1")

	r = f.run("audit", "--total", "default=1000", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	var rep struct {
		OK     bool `json:"ok"`
		Totals []struct {
			Ledger   string `json:"ledger"`
			Expected int64  `json:"expected"`
			Actual   int64  `json:"actual"`
			OK       bool   `json:"ok"`
		} `json:"totals"`
		Violations []struct {
			Kind string `json:"kind"`
			Txn  string `json:"txn"`
		} `json:"violations"`
	}
	r.decode(t, &rep)
	require.True(t, rep.OK)
	require.Len(t, rep.Totals, 1)
	require.EqualValues(t, 1000, rep.Totals[0].Actual)

	r = f.run("audit", "--total", "=999")
	require.Equal(t, exitFailed, r.code, r.stdout)
	require.Contains(t, r.stdout, "FAILED, 1 violation")
	require.Contains(t, r.stdout, "total of ledger default: 1000, want 999")

	// A marker of a leg in flight whose transaction does not exist.
	bogus := bson.NewObjectID()
	_, err := f.db.Collection(twopc.DefaultAccounts).UpdateOne(f.ctx, bson.D{{Key: "_id", Value: "alice"}},
		bson.D{{Key: "$push", Value: bson.D{{Key: "pendingTransactions", Value: bogus}}}})
	require.NoError(t, err)
	r = f.run("audit", "--json")
	require.Equal(t, exitFailed, r.code, r.stdout)
	r.decode(t, &rep)
	require.False(t, rep.OK)
	require.Len(t, rep.Violations, 1)
	require.Equal(t, twopc.ViolationOrphanMarker, rep.Violations[0].Kind)
	require.Equal(t, schema.Marker(bogus, 0).Hex(), rep.Violations[0].Txn)
	r = f.run("audit")
	require.Equal(t, exitFailed, r.code, r.stdout)
	require.Contains(t, r.stdout, "orphan-marker")
}

// totalsJSON is what the tests read of audit --json: its totals.
type totalsJSON struct {
	OK     bool `json:"ok"`
	Totals []struct {
		Ledger   string `json:"ledger"`
		Asset    string `json:"asset"`
		ByAsset  bool   `json:"byAsset"`
		Expected int64  `json:"expected"`
		Actual   int64  `json:"actual"`
		OK       bool   `json:"ok"`
	} `json:"totals"`
	Assets map[string][]string `json:"assets"`
}

// totals decodes the run's report, into a fresh value: decoding into a
// used one keeps what its slices' elements held in fields left out.
func (r result) totals(t *testing.T) totalsJSON {
	t.Helper()
	var rep totalsJSON
	r.decode(t, &rep)
	return rep
}

// TestAuditTotalAsset: --total takes an asset, [LEDGER:]ASSET=N, and
// checks the accounts of that asset only; a whole ledger's total is
// refused once the ledger holds accounts of two assets, or of an asset
// and none, rather than adding them together.
func TestAuditTotalAsset(t *testing.T) {
	f := newFixture(t)
	require.NoError(t, f.c.OpenAccount(f.ctx, "alice", 1000, twopc.AccountAsset("USD/2")))
	require.NoError(t, f.c.OpenAccount(f.ctx, "desk", 0, twopc.AccountAsset("USD/2")))
	_, err := f.c.Transfer(f.ctx, "alice", "desk", 100, twopc.WithAsset("USD/2"))
	require.NoError(t, err)

	r := f.run("audit", "--total", "USD/2=10.00", "--json")
	require.Equal(t, exitOK, r.code, r.stdout+r.stderr)
	rep := r.totals(t)
	require.True(t, rep.OK)
	require.Len(t, rep.Totals, 1)
	require.Equal(t, "", rep.Totals[0].Ledger)
	require.Equal(t, "USD/2", rep.Totals[0].Asset)
	require.True(t, rep.Totals[0].ByAsset)
	require.EqualValues(t, 1000, rep.Totals[0].Actual)
	require.Equal(t, map[string][]string{"": {"USD/2"}}, rep.Assets)

	r = f.run("audit", "--total", "default:USD/2=9.99")
	require.Equal(t, exitFailed, r.code, r.stdout+r.stderr)
	require.Contains(t, r.stdout, "total of ledger default, asset USD/2: 10.00 USD/2, want 9.99 USD/2\n")
	require.NotContains(t, r.stdout, minorNote, "no amount of no asset")
	// An asset no account holds sums to 0, and says so.
	r = f.run("audit", "--total", "GBP/2=0.00")
	require.Equal(t, exitOK, r.code, r.stdout+r.stderr)
	require.Contains(t, r.stdout, "total of ledger default, asset GBP/2: 0.00 GBP/2, as stated (no account holds it)\n")
	// A ledger of one asset: its total is that asset's.
	r = f.run("audit", "--total", "default=10.00")
	require.Equal(t, exitOK, r.code, r.stdout+r.stderr)
	require.Contains(t, r.stdout, "total of ledger default: 10.00 USD/2, as stated\n")

	// N as the audit prints it: a whole number for an asset with decimal
	// places is a usage error, never read as minor or whole units; --minor
	// reads minor units.
	for _, total := range []string{"USD/2=1000", "default:USD/2=1000"} {
		r = f.run("audit", "--total", total)
		require.Equal(t, exitUsage, r.code, r.stdout+r.stderr)
		require.Contains(t, r.stderr, "amounts of USD/2 have 2 decimal places: write 1000.00: "+errBareInteger.Error()+", or give --minor for minor units")
	}
	r = f.run("audit", "--total", "USD/2=10.0")
	require.Equal(t, exitUsage, r.code, r.stdout+r.stderr)
	require.Contains(t, r.stderr, "amounts of USD/2 have 2 decimal places, not 1")
	for _, total := range []string{"default=1000", "default=10.0"} {
		r = f.run("audit", "--total", total)
		require.Equal(t, exitUsage, r.code, r.stdout+r.stderr)
		require.Empty(t, r.stdout)
		require.Contains(t, r.stderr, "--total "+total+": ledger default holds accounts of asset USD/2, whose amounts have 2 decimal places: write --total default=")
	}
	for _, total := range []string{"USD/2=1000", "default=1000"} {
		r = f.run("audit", "--minor", "--total", total)
		require.Equal(t, exitOK, r.code, r.stdout+r.stderr)
		require.Contains(t, r.stdout, ": 10.00 USD/2, as stated\n")
	}
	r = f.run("audit", "--minor", "--total", "USD/2=10.00")
	require.Equal(t, exitUsage, r.code, r.stdout+r.stderr)
	require.Contains(t, r.stderr, "with --minor, N is a whole number of minor units")

	// Two assets: the whole ledger's total is refused, each asset's checked.
	require.NoError(t, f.c.OpenAccount(f.ctx, "bob", 500, twopc.AccountAsset("EUR/2")))
	r = f.run("audit", "--total", "default=1500")
	require.Equal(t, exitFailed, r.code, r.stdout+r.stderr)
	require.Empty(t, r.stdout)
	require.Contains(t, r.stderr, "--total default=1500: ledger default holds accounts of asset EUR/2 and asset USD/2, "+
		"which one total would add together: state each asset's (--total default:EUR/2=N, --total default:USD/2=N)")
	r = f.run("audit", "--total", "=1500", "--json")
	require.Equal(t, exitFailed, r.code, r.stdout+r.stderr)
	var e struct {
		Error      string `json:"error"`
		ExitStatus int    `json:"exitStatus"`
	}
	r.decode(t, &e)
	require.Contains(t, e.Error, "--total =1500: ledger default holds accounts of asset EUR/2 and asset USD/2")
	require.Equal(t, exitFailed, e.ExitStatus)
	r = f.run("audit", "--total", "USD/2=10.00", "--total", "EUR/2=5.00", "--json")
	require.Equal(t, exitOK, r.code, r.stdout+r.stderr)
	rep = r.totals(t)
	require.True(t, rep.OK)
	require.Len(t, rep.Totals, 2)
	require.Equal(t, []string{"EUR/2", "USD/2"}, rep.Assets[""])

	// An asset and none: refused too; "none" names the accounts with none.
	f.open(map[string]int64{"carol": 7})
	r = f.run("audit", "--total", "default=1507")
	require.Equal(t, exitFailed, r.code, r.stdout+r.stderr)
	require.Contains(t, r.stderr, "holds accounts of no asset, asset EUR/2 and asset USD/2")
	require.Contains(t, r.stderr, "--total default:none=N")
	r = f.run("audit", "--total", "default:none=7")
	require.Equal(t, exitOK, r.code, r.stdout+r.stderr)
	require.Contains(t, r.stdout, "total of ledger default, no asset: 7, as stated\n"+minorNote+"\n")
	r = f.run("audit", "--total", "default:none=7.00")
	require.Equal(t, exitUsage, r.code, r.stdout+r.stderr)
	require.Contains(t, r.stderr, "an amount of no asset is a whole number of minor units")
	r = f.run("audit", "--total", "none=8")
	require.Equal(t, exitFailed, r.code, r.stdout+r.stderr)
	require.Contains(t, r.stdout, "total of ledger default, no asset: 7, want 8\n")

	// A ledger's name wins over the asset of the same spelling; default:
	// names the asset then.
	require.NoError(t, f.c.OpenAccount(f.ctx, "eve", 1, twopc.AccountAsset("EU")))
	r = f.run("audit", "--ledger", "EU=eu", "--total", "EU=0", "--total", "default:EU=1", "--json")
	require.Equal(t, exitOK, r.code, r.stdout+r.stderr)
	rep = r.totals(t)
	require.Len(t, rep.Totals, 2)
	require.Equal(t, "EU", rep.Totals[0].Ledger)
	require.False(t, rep.Totals[0].ByAsset)
	require.Equal(t, "", rep.Totals[1].Ledger)
	require.Equal(t, "EU", rep.Totals[1].Asset)
	require.EqualValues(t, 1, rep.Totals[1].Actual)
}

// TestAuditHelpListsEveryCheck: audit's help names every kind of
// violation the library's audit reports (the Violation constants of
// auditreport.go).
func TestAuditHelpListsEveryCheck(t *testing.T) {
	file, err := parser.ParseFile(token.NewFileSet(), "../../auditreport.go", nil, 0)
	require.NoError(t, err)
	var kinds []string
	for _, d := range file.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			v := s.(*ast.ValueSpec)
			if len(v.Names) == 1 && strings.HasPrefix(v.Names[0].Name, "Violation") && len(v.Values) == 1 {
				lit, ok := v.Values[0].(*ast.BasicLit)
				require.True(t, ok, v.Names[0].Name)
				kind, err := strconv.Unquote(lit.Value)
				require.NoError(t, err)
				kinds = append(kinds, kind)
			}
		}
	}
	require.Contains(t, kinds, twopc.ViolationHoldNotOnAccount, "the constants were read")
	require.Len(t, kinds, 9)
	r := runTool(context.Background(), "help", "audit")
	require.Equal(t, exitOK, r.code, r.stderr)
	for _, k := range kinds {
		require.Regexp(t, `(?m)^  `+regexp.QuoteMeta(k)+`( |$)`, r.stdout, "help audit lists %s", k)
	}
}
