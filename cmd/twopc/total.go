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
// accounts of one asset in it. KEY is read once the ledgers are known
// (totalList.resolve), which sets ledger, asset and byAsset.
type totalFlag struct {
	key     string
	total   int64
	ledger  string // "" for the default ledger
	asset   string // "" for the accounts with no asset
	byAsset bool   // the accounts of asset only, not the whole ledger
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
		parts[i] = fmt.Sprintf("%s=%d", t.key, t.total)
	}
	return strings.Join(parts, ",")
}

// Set reads KEY=N; KEY waits for resolve.
func (l *totalList) Set(s string) error {
	key, n, ok := strings.Cut(s, "=")
	if !ok {
		return fmt.Errorf("want LEDGER=N or [LEDGER:]ASSET=N, not %q", s)
	}
	total, err := strconv.ParseInt(n, 10, 64)
	if err != nil {
		return fmt.Errorf("%q: the total is not an integer", s)
	}
	*l = append(*l, totalFlag{key: key, total: total})
	return nil
}

// resolve reads each --total's KEY against the ledgers g gives:
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
func (l totalList) resolve(g *globals) error {
	for i := range l {
		t := &l[i]
		noLedger := func(name string) error {
			return fmt.Errorf("--total %s=%d: no ledger %q (give it with --ledger %s=COLLECTION or %s=URI)", t.key, t.total, name, name, name)
		}
		if _, ok := g.ledger(ledgerKey(t.key)); ok {
			t.ledger = ledgerKey(t.key)
			continue
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
			return fmt.Errorf("--total %s=%d: %v (or %s, for the accounts with no asset)", t.key, t.total, err, noAsset)
		}
		t.ledger, t.asset, t.byAsset = ledger, asset, true
	}
	for i, t := range l {
		for _, u := range l[:i] {
			if t.ledger == u.ledger && t.asset == u.asset && t.byAsset == u.byAsset {
				return fmt.Errorf("--total %s=%d and --total %s=%d state the same total", u.key, u.total, t.key, t.total)
			}
		}
	}
	return nil
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
		msgs = append(msgs, fmt.Sprintf("--total %s=%d: ledger %s holds accounts of %s, which one total would add together: "+
			"state each asset's (%s)", t.key, t.total, ledgerName(t.ledger), series(held, "and"), strings.Join(each, ", ")))
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
