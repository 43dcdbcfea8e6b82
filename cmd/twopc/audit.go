package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/internal/schema"
)

var auditCommand = &command{
	name:    "audit",
	summary: "check the protocol's invariants on the live system; exit 1 on a violation",
	help: `Audit checks, without stopping anything and writing nothing (twopc's
Coordinator.Audit), the invariants the protocol keeps, over the
transactions and the accounts of the default ledger and of every ledger
given with --ledger (a ledger not given is not audited):

  orphan-marker  an account holds the marker of a leg in flight whose
                 transaction is final or does not exist
  stale          an unfinished transaction untouched for longer than its
                 recorded lease (never less than --min-lease) plus
                 --grace: no recoverer is finishing it
  held-without-marker
                 an account holds a pending credit or a held debit with
                 no leg in flight on it
  marker-bound   an account holds more markers than --max-pending or
                 fences than --max-fences
  malformed      an account or transaction of a shape the protocol does
                 not write (a balance or limit that is not an integer, a
                 marker array that is not an array, an asset that is not
                 a string), or a ledger whose sum is outside int64
  hold-not-on-account
                 a hold in state held whose leg's marker is not on its
                 account, or whose account holds less pending debit or
                 credit than the holds held on it
  rooms          an account with limits whose floorRoom or ceilingRoom is
                 not what its balance, its sums in flight and its limits
                 make them (a hand edit)
  outside-limits an account with limits whose balance is below its floor,
                 or, with everything in flight, above its ceiling
  total          a ledger, or an asset in it, does not hold the total
                 --total states (checked only when no transaction is in
                 flight; a hold held is not in flight: it moves no
                 ledger's total)

It prints the counts it read and every violation, with progress on
stderr, and exits 1 if it found any.

--total states the money a ledger holds: the sum of its accounts'
balances and held debits. Repeatable.
  --total LEDGER=N        the whole ledger; "" or "default" is the
                          default ledger (--total =100000, --total
                          default=100000). Refused (exit 1) when the
                          audit finds the ledger's accounts of more than
                          one asset, or of an asset and none: a sum of
                          different assets means nothing.
  --total LEDGER:ASSET=N  the accounts of asset ASSET (a code such as
                          USD/2) in the ledger; none for those with no
                          asset (--total shanghai:USD/2=50.00, --total
                          default:none=0)
  --total ASSET=N         the same in the default ledger, when ASSET names
                          no ledger given (--total USD/2=0.00)

N is written as the audit prints totals: for an asset whose code has a
scale, with that many decimal places (1000.00 for USD/2: 100000 minor
units), else a whole number (minor units for no asset). A whole number
for an asset with decimal places is a usage error (exit status 2),
never read as minor units or as whole units unasked; for a whole
ledger, whose asset the audit finds, after the audit. --minor reads
every N as minor units instead, whatever the asset.

Examples:
  twopc audit
  twopc audit --total default=100000 --grace 5m
  twopc audit --total USD/2=1000.00 --total EUR/2=500.00
  twopc audit --minor --total USD/2=100000
  twopc audit --ledger shanghai=accounts_sh --total shanghai:USD/2=50.00 --json | jq .violations`,
	run: runAudit,
}

// auditReport is the audit's report, and whether it found nothing. Its
// violations are the library's, with account ids as plain JSON.
type auditReport struct {
	OK       bool   `json:"ok"`
	Database string `json:"database"`
	*twopc.AuditReport
	Violations []violation `json:"violations"`
}

// violation is a twopc.Violation whose account id is plain JSON (the
// library may give it as a bson.RawValue, which encoding/json would
// print as its bytes).
type violation struct {
	twopc.Violation
	Account json.RawMessage `json:"account,omitempty"`
}

func violations(vs []twopc.Violation) []violation {
	out := make([]violation, len(vs))
	for i, v := range vs {
		out[i].Violation = v
		switch id := v.Account.(type) {
		case nil:
		case bson.RawValue:
			out[i].Account = plainValue(id)
		default:
			if rv, err := schema.MarshalID(id); err == nil {
				out[i].Account = plainValue(rv)
			} else {
				out[i].Account, _ = json.Marshal(fmt.Sprint(id))
			}
		}
	}
	return out
}

func runAudit(ctx context.Context, cl *cli, cmd *command, args []string) error {
	fs := cl.flagSet(cmd)
	var g globals
	g.register(fs, withApplication|withLedgers)
	var totals totalList
	fs.Var(&totals, "total", "the total `LEDGER=N` a ledger holds, or [LEDGER:]ASSET=N an asset's in it (repeatable)")
	minor := fs.Bool("minor", false, "read every --total N as minor units, whatever the asset")
	grace := fs.Duration("grace", twopc.DefaultInterval, "how long past its lease an unfinished transaction may stay untouched")
	batch := fs.Int("batch", twopc.DefaultAuditBatch, "how many documents to read at a time")
	maxPending := fs.Int("max-pending", twopc.DefaultPendingBound, "the most markers of legs in flight an account may hold")
	maxFences := fs.Int("max-fences", twopc.DefaultFencedBound, "the most fences an account may hold")
	minLease := fs.Duration("min-lease", defaultMinLease, "the shortest lease a transaction is judged by, whatever its recorded one")
	quiet := fs.Bool("quiet", false, "no progress on stderr")
	if _, err := cl.parse(cmd, fs, args, 0, 0); err != nil {
		return err
	}
	switch {
	case *grace < 0:
		return cl.usage(cmd, fs, "--grace must not be negative")
	case *batch <= 0 || *maxPending <= 0 || *maxFences <= 0:
		return cl.usage(cmd, fs, "--batch, --max-pending and --max-fences must be positive")
	case *minLease <= 0:
		return cl.usage(cmd, fs, "--min-lease must be positive")
	}
	opts := []twopc.AuditOption{twopc.WithStaleGrace(*grace), twopc.WithAuditBatch(*batch), twopc.WithMarkerBounds(*maxPending, *maxFences)}
	if err := g.check(); err != nil {
		return err
	}
	if err := totals.resolve(&g, *minor); err != nil {
		return cl.usage(cmd, fs, "%v", err)
	}
	for _, t := range totals {
		opts = append(opts, t.option())
	}
	cn, err := g.connectExisting(ctx, cl)
	if err != nil {
		return err
	}
	defer cn.close()
	c, err := cn.coordinator(twopc.WithStaleAfter(*minLease))
	if err != nil {
		return err
	}
	defer func() { _ = closeCoordinator(c) }()
	sent := cn.commands.Load()
	p := startProgress(cl.stderr, *quiet, "audit", func() string {
		return plural(cn.commands.Load()-sent, "command") + " sent"
	})
	rep, err := c.Audit(ctx, opts...)
	p.end()
	if err != nil {
		return err
	}
	if err := totals.mixed(rep); err != nil {
		return refused(err)
	}
	if err := totals.places(rep); err != nil {
		return usageErrorf("%v", err)
	}
	out := auditReport{OK: rep.OK(), Database: cn.db.Name(), AuditReport: rep, Violations: violations(rep.Violations)}
	if g.json {
		if err := cl.printJSON(out); err != nil {
			return err
		}
	} else {
		out.print(cl.stdout)
	}
	if !rep.OK() {
		return errCheckFailed
	}
	return nil
}

func (r *auditReport) print(w io.Writer) {
	n := int64(len(r.Violations) + r.Dropped)
	verdict := "OK, no violation"
	if !r.OK {
		verdict = "FAILED, " + plural(n, "violation")
	}
	fmt.Fprintf(w, "Audit of database %s: %s (%v)\n", r.Database, verdict, r.Finished.Sub(r.Started).Round(time.Millisecond))
	var parts []string
	for _, s := range states {
		parts = append(parts, fmt.Sprintf("%s %d", s, r.Transactions[twopc.State(s)]))
	}
	fmt.Fprintf(w, "  transactions: %s\n", strings.Join(parts, ", "))
	if r.Unfinished > 0 {
		fmt.Fprintf(w, "  unfinished: %d, the oldest untouched for %v\n", r.Unfinished, r.OldestUnfinished.Round(time.Millisecond))
	}
	var u units
	if r.Held > 0 {
		fmt.Fprintf(w, "  holds held: %d, holding %s in all, each found on its accounts unless a violation says otherwise\n", r.Held, r.heldValue(&u))
	}
	parts = parts[:0]
	names := make([]string, 0, len(r.Accounts))
	for name := range r.Accounts {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		parts = append(parts, fmt.Sprintf("%s %d", ledgerName(name), r.Accounts[name]))
	}
	if len(parts) == 0 {
		parts = append(parts, "none")
	}
	tombstones := 0
	for _, n := range r.Tombstones {
		tombstones += n
	}
	if tombstones > 0 {
		parts = append(parts, plural(int64(tombstones), "tombstone")+" (ids a rolled-back transfer named with no account there)")
	}
	fmt.Fprintf(w, "  accounts by ledger: %s; %s of legs in flight, %s\n",
		strings.Join(parts, ", "), plural(int64(r.Markers), "marker"), plural(int64(r.Fences), "fence"))
	for _, t := range r.Totals {
		none := ""
		if t.ByAsset && !contains(r.Assets[t.Ledger], t.Asset) {
			none = " (no account holds it)"
		}
		code := t.Asset
		if assets := r.Assets[t.Ledger]; !t.ByAsset && len(assets) == 1 {
			code = assets[0]
		}
		actual, expected := u.of(t.Actual, code, false), u.of(t.Expected, code, false)
		switch {
		case !t.Decided:
			fmt.Fprintf(w, "  total of %s: %s, want %s: not decided, transactions were in flight%s\n", totalOf(t), actual, expected, none)
		case t.OK:
			fmt.Fprintf(w, "  total of %s: %s, as stated%s\n", totalOf(t), actual, none)
		default:
			fmt.Fprintf(w, "  total of %s: %s, want %s%s\n", totalOf(t), actual, expected, none)
		}
	}
	u.note(w)
	if r.OK {
		return
	}
	fmt.Fprintln(w, "Violations:")
	for _, v := range r.Violations {
		fmt.Fprintf(w, "  %s\n", v)
	}
	if r.Dropped > 0 {
		fmt.Fprintf(w, "  and %d more not listed\n", r.Dropped)
	}
}

// heldValue is the value of the holds held, through u: with the scale
// of the one asset of every account audited, if they have one; else the
// integer summed, said to be minor units of every asset together.
func (r *auditReport) heldValue(u *units) string {
	var codes []string
	for _, assets := range r.Assets {
		for _, a := range assets {
			if !contains(codes, a) {
				codes = append(codes, a)
			}
		}
	}
	if len(codes) > 1 {
		sort.Strings(codes)
		for i, c := range codes {
			codes[i] = assetWords(c)
		}
		return fmt.Sprintf("%d (minor units, summed over %s)", r.HeldValue, series(codes, "and"))
	}
	code := ""
	if len(codes) == 1 {
		code = codes[0]
	}
	return u.of(r.HeldValue, code, false)
}
