package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/internal/schema"
)

// noAsset is how --total names the accounts with no asset: never an asset
// code, which is upper-case.
const noAsset = "none"

// totalFlag is one --total KEY=N: the money N a ledger holds, or the
// accounts of one asset in it. KEY and N are read once the ledgers are
// known (totalList.resolve), which sets ledger, asset, byAsset and
// total.
type totalFlag struct {
	key     string
	n       string // N as given: an amount as the tool prints it, or minor units (--minor)
	total   int64  // N in minor units
	ledger  string // "" for the default ledger
	asset   string // "" for the accounts with no asset
	byAsset bool   // the accounts of asset only, not the whole ledger
	// places is how many decimal places N was given with, for a whole
	// ledger's total, whose asset the audit finds (totalList.places);
	// -1 for minor units.
	places int
}

// option is the audit option that states t's total.
func (t totalFlag) option() twopc.AuditOption {
	if t.byAsset {
		return twopc.WithExpectedAssetTotal(t.ledger, t.asset, t.total)
	}
	return twopc.WithExpectedTotal(t.ledger, t.total)
}

// totalList is the repeatable --total flag.
type totalList []totalFlag

func (l *totalList) String() string {
	parts := make([]string, len(*l))
	for i, t := range *l {
		parts[i] = t.key + "=" + t.n
	}
	return strings.Join(parts, ",")
}

// Set reads KEY=N; KEY and N wait for resolve.
func (l *totalList) Set(s string) error {
	key, n, ok := strings.Cut(s, "=")
	if !ok {
		return fmt.Errorf("want LEDGER=N or [LEDGER:]ASSET=N, not %q", s)
	}
	if err := amountSyntax(n); err != nil || strings.Contains(n, " ") {
		return fmt.Errorf("%q: the total %q is not an amount (1000.00 for USD/2, a whole number for no asset)", s, n)
	}
	*l = append(*l, totalFlag{key: key, n: n})
	return nil
}

// resolve reads each --total's KEY against the ledgers g gives, then its
// N: in minor units if minor (--minor), else as the tool prints amounts
// of the asset KEY names (parseAmount: 1000.00 for USD/2), and for a
// whole ledger as given, its decimal places checked against the asset
// the audit finds (places). KEY is:
//
//   - LEDGER, a ledger's name ("" or "default" for the default ledger, or
//     one given with --ledger): the whole ledger;
//   - LEDGER:ASSET (split at the last ":"): the accounts of asset ASSET in
//     ledger LEDGER, ASSET an asset code or "none" for the accounts with
//     no asset;
//   - ASSET, when it names no ledger: the same in the default ledger.
//
// A ledger's name wins over an asset code of the same spelling: write
// default:ASSET for the asset then. Two that name the same total are
// refused.
func (l totalList) resolve(g *globals, minor bool) error {
	for i := range l {
		t := &l[i]
		if err := t.resolveKey(g); err != nil {
			return err
		}
		if err := t.resolveN(minor); err != nil {
			return err
		}
	}
	for i, t := range l {
		for _, u := range l[:i] {
			if t.ledger == u.ledger && t.asset == u.asset && t.byAsset == u.byAsset {
				return fmt.Errorf("--total %s=%s and --total %s=%s state the same total", u.key, u.n, t.key, t.n)
			}
		}
	}
	return nil
}

// resolveN reads t's N (see resolve).
func (t *totalFlag) resolveN(minor bool) error {
	var err error
	switch {
	case minor:
		t.places = -1
		if t.total, err = strconv.ParseInt(t.n, 10, 64); err != nil {
			return fmt.Errorf("--total %s=%s: with --minor, N is a whole number of minor units", t.key, t.n)
		}
	case t.byAsset:
		if t.total, err = parseAmount(t.n, t.asset); err != nil {
			if errors.Is(err, errBareInteger) {
				return fmt.Errorf("--total %s=%v, or give --minor for minor units", t.key, err)
			}
			return fmt.Errorf("--total %s=%v", t.key, err)
		}
	default:
		whole, frac, _ := strings.Cut(t.n, ".")
		t.places = len(frac)
		if t.total, err = strconv.ParseInt(whole+frac, 10, 64); err != nil {
			return fmt.Errorf("--total %s=%s: out of range", t.key, t.n)
		}
	}
	return nil
}

// resolveKey reads t's KEY (see resolve).
func (t *totalFlag) resolveKey(g *globals) error {
	noLedger := func(name string) error {
		return fmt.Errorf("--total %s=%s: no ledger %q (give it with --ledger %s=COLLECTION or %s=URI)", t.key, t.n, name, name, name)
	}
	if _, ok := g.ledger(ledgerKey(t.key)); ok {
		t.ledger = ledgerKey(t.key)
		return nil
	}
	ledger, asset, split := "", t.key, false
	if j := strings.LastIndex(t.key, ":"); j >= 0 {
		ledger, asset, split = ledgerKey(t.key[:j]), t.key[j+1:], true
	}
	if _, ok := g.ledger(ledger); !ok {
		return noLedger(ledger)
	}
	switch err := schema.ValidAsset(asset); {
	case asset == noAsset:
		asset = ""
	case err != nil && !split:
		return noLedger(t.key) // neither a ledger given nor an asset: a ledger was meant
	case err != nil:
		return fmt.Errorf("--total %s=%s: %v (or %s, for the accounts with no asset)", t.key, t.n, err, noAsset)
	}
	t.ledger, t.asset, t.byAsset = ledger, asset, true
	return nil
}

// places refuses the totals of whole ledgers given with other decimal
// places than the asset the audit found their accounts of has (a ledger
// of one asset: mixed refuses the others): 1000 for a ledger of USD/2 is
// neither read as 1000.00 nor as 10.00. A ledger with no account takes
// any.
func (l totalList) places(rep *twopc.AuditReport) error {
	var msgs []string
	for _, t := range l {
		assets := rep.Assets[t.ledger]
		if t.byAsset || t.places < 0 || len(assets) != 1 || t.places == scaleOf(assets[0]) {
			continue
		}
		code, scale := assets[0], scaleOf(assets[0])
		want := "are whole numbers"
		if code == "" {
			want += " of minor units"
		}
		if scale > 0 {
			whole, _, _ := strings.Cut(t.n, ".")
			want = fmt.Sprintf("have %d decimal places: write --total %s=%s.%s", scale, t.key, whole, strings.Repeat("0", scale))
		}
		msgs = append(msgs, fmt.Sprintf("--total %s=%s: ledger %s holds accounts of %s, whose amounts %s, or give --minor for minor units",
			t.key, t.n, ledgerName(t.ledger), assetWords(code), want))
	}
	if len(msgs) == 0 {
		return nil
	}
	return errors.New(strings.Join(msgs, "; "))
}

// ledgerKey is the ledger --total's name names: "default" is the default
// ledger, "".
func ledgerKey(name string) string {
	if name == "default" {
		return ""
	}
	return name
}

// mixed refuses the totals of whole ledgers whose accounts the audit found
// of more than one asset, or of an asset and none (rep.Assets): such a
// sum adds different assets together, and says nothing of any of them.
func (l totalList) mixed(rep *twopc.AuditReport) error {
	var msgs []string
	for _, t := range l {
		assets := rep.Assets[t.ledger]
		if t.byAsset || len(assets) < 2 {
			continue
		}
		held, each := make([]string, len(assets)), make([]string, len(assets))
		for i, a := range assets {
			held[i], each[i] = assetWords(a), fmt.Sprintf("--total %s:%s=N", ledgerName(t.ledger), assetKey(a))
		}
		msgs = append(msgs, fmt.Sprintf("--total %s=%s: ledger %s holds accounts of %s, which one total would add together: "+
			"state each asset's (%s)", t.key, t.n, ledgerName(t.ledger), series(held, "and"), strings.Join(each, ", ")))
	}
	if len(msgs) == 0 {
		return nil
	}
	return errors.New(strings.Join(msgs, "; "))
}

// assetWords is an asset as a sentence names it: "asset USD/2", "no
// asset".
func assetWords(code string) string {
	if code == "" {
		return "no asset"
	}
	return "asset " + code
}

// assetKey is an asset as --total names it: its code, or none.
func assetKey(code string) string {
	if code == "" {
		return noAsset
	}
	return code
}

// totalOf is what a total check is of, as output names it: "ledger
// default", or "ledger default, asset USD/2" (", no asset").
func totalOf(t twopc.TotalCheck) string {
	if !t.ByAsset {
		return "ledger " + ledgerName(t.Ledger)
	}
	return "ledger " + ledgerName(t.Ledger) + ", " + assetWords(t.Asset)
}
