package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/twopc/twopc"
)

var statementCommand = &command{
	name:    "statement",
	args:    "ACCOUNT",
	summary: "an account's entries with their running balance",
	help: `Statement prints the entries of account ACCOUNT (twopc's
Coordinator.Statement): one per leg of a committed transfer on it, in
commit order, each with its time, transaction, signed amount, the
account's balance after it, and the transfer's key and metadata. Canceled
transfers are not entries, nor are holds themselves: each capture of a
hold is an entry, for its part, whose CAPTURE OF column (--json:
captureOf) names the hold, whether the hold was then captured whole,
voided or expired. A transfer's entry is
listed as soon as the call that made it returned.

--since and --until (RFC 3339 times) bound the entries' times, --since
included, --until not. --limit N prints at most N entries (default 100,
at most 1000); when more follow, the last line gives the --after TOKEN
that prints the next ones. --reverse lists newest first.

--ledger NAME reads the account in ledger NAME (give its collection with
--ledger NAME=COLLECTION or NAME=mongodb://HOST:PORT/DB.COLLECTION too,
unless it is the default). With --archive COLLECTION, the archive
twopc.WithHistory moves final transactions to is read too.

Amounts are shown with the asset's scale where its code has one (12.50
USD/2), else as whole numbers, minor units for no asset, which the
output says once; --json prints minor units, with the asset.

ACCOUNT is a string, or a document id as Extended JSON ('{"region": "eu",
"n": 7}'); if no account has it as a string, it is tried as a number
(an integer) and as an ObjectID (24 hexadecimal digits).

Examples:
  twopc statement alice --since 2026-11-01T00:00:00Z --until 2026-12-01T00:00:00Z
  twopc statement alice --limit 20 --reverse
  twopc statement --ledger beijing=mongodb://127.0.0.1:27018/bank.accounts --ledger beijing B --json`,
	run: runStatement,
}

var balanceCommand = &command{
	name:    "balance",
	args:    "ACCOUNT",
	summary: "an account's balance at a time, from its entries",
	help: `Balance prints the balance of account ACCOUNT at time --at (RFC 3339;
default: now), as its statement counts it (twopc's Coordinator.BalanceAt):
its opening balance plus the entries committed at or before then. At a
quiet moment the balance now is the account's balance plus what it holds.
ACCOUNT, --ledger, --archive and the amounts are as for statement.

A time before OpenAccount opened the account (the opening time it
recorded in it), with no entry at or before it, is refused, exit status
1, naming when it was opened (twopc.ErrBeforeOpening). An account the
library did not open (inserted by hand) records no opening time: before
its first entry, its balance is its opening balance, whatever the time.

Examples:
  twopc balance alice --at 2026-11-30T23:59:59Z
  twopc balance alice --json`,
	run: runBalance,
}

// statementReport is what statement --json prints.
type statementReport struct {
	Ledger  string      `json:"ledger"` // "default" for the default ledger
	Account string      `json:"account"`
	Entries []entryJSON `json:"entries"`
	Next    string      `json:"next,omitempty"`
	entries []twopc.Entry
}

type entryJSON struct {
	Txn      string            `json:"txn"`
	At       time.Time         `json:"at"`
	Amount   int64             `json:"amount"`
	Balance  int64             `json:"balance"`
	Key      string            `json:"key,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
	Asset    string            `json:"asset,omitempty"`
	// CaptureOf is, for an entry of a capture, the hold it charged
	// (twopc's Entry.CaptureOf), voided or expired since or not.
	CaptureOf string `json:"captureOf,omitempty"`
}

// accountArgs registers statement's and balance's flags.
type accountArgs struct {
	g       globals
	pick    []string
	account []any
	ledger  string
}

func (a *accountArgs) parse(ctx context.Context, cl *cli, cmd *command, args []string, more func(*flag.FlagSet)) (*conn, error) {
	fs := cl.flagSet(cmd)
	a.g.register(fs, withArchive)
	fs.Var(accountLedgers{&a.g, &a.pick}, "ledger", "the ledger `NAME` to read the account in (default: the default one); "+
		"NAME=COLLECTION or NAME=mongodb://HOST:PORT/DB.COLLECTION gives its collection")
	if more != nil {
		more(fs)
	}
	pos, err := cl.parse(cmd, fs, args, 1, 1)
	if err != nil {
		return nil, err
	}
	if a.account, err = accountValues(pos[0]); err != nil {
		return nil, cl.usage(cmd, fs, "account %s: %v", pos[0], err)
	}
	switch len(a.pick) {
	case 0:
	case 1:
		a.ledger = a.pick[0]
		if _, ok := a.g.ledger(a.ledger); !ok {
			return nil, cl.usage(cmd, fs, "--ledger %s: ledger %q is not given: give its accounts with --ledger %s=COLLECTION", a.ledger, a.ledger, a.ledger)
		}
	default:
		return nil, cl.usage(cmd, fs, "one --ledger NAME at a time")
	}
	if err := a.g.check(); err != nil {
		return nil, err
	}
	return a.g.connectExisting(ctx, cl)
}

// first calls fn with each of the account's candidate ids until one is an
// account (fn's error is not ErrAccountNotFound).
func (a *accountArgs) first(fn func(id any) error) error {
	var err error
	for _, id := range a.account {
		if err = fn(id); !errors.Is(err, twopc.ErrAccountNotFound) {
			return err
		}
	}
	return refused(err)
}

// parseTime reads an RFC 3339 flag value; "" is the zero time.
func parseTime(flag, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("--%s %q is not an RFC 3339 time (2026-11-25T10:00:00Z)", flag, s)
	}
	return t, nil
}

func runStatement(ctx context.Context, cl *cli, cmd *command, args []string) error {
	var a accountArgs
	var since, until, after *string
	var limit *int
	var reverse *bool
	cn, err := a.parse(ctx, cl, cmd, args, func(fs *flag.FlagSet) {
		since = fs.String("since", "", "only entries at or after `TIME` (RFC 3339)")
		until = fs.String("until", "", "only entries before `TIME` (RFC 3339)")
		limit = fs.Int("limit", twopc.DefaultStatementLimit, "print at most `N` entries")
		after = fs.String("after", "", "continue after the page that gave `TOKEN`")
		reverse = fs.Bool("reverse", false, "newest first")
	})
	if err != nil {
		return err
	}
	defer cn.close()
	q := twopc.StatementQuery{Limit: *limit, After: *after, Reverse: *reverse}
	if q.Since, err = parseTime("since", *since); err == nil {
		q.Until, err = parseTime("until", *until)
	}
	if err != nil {
		return usageErrorf("%v", err)
	}
	c, err := cn.coordinator()
	if err != nil {
		return err
	}
	defer func() { _ = closeCoordinator(c) }()
	rep := &statementReport{Ledger: ledgerName(a.ledger), Entries: []entryJSON{}}
	err = a.first(func(id any) error {
		p, err := c.Statement(ctx, a.ledger, id, q)
		if err != nil {
			return err
		}
		rep.Account = fmt.Sprint(id)
		rep.Next, rep.entries = p.Next, p.Entries
		return nil
	})
	if errors.Is(err, twopc.ErrInvalidQuery) {
		return usageErrorf("%v", err)
	}
	if err != nil {
		return err
	}
	for _, e := range rep.entries {
		j := entryJSON{Txn: e.Txn.Hex(), At: e.At, Amount: e.Amount, Balance: e.Balance, Key: e.Key, Metadata: e.Metadata, Asset: e.Asset}
		if !e.CaptureOf.IsZero() {
			j.CaptureOf = e.CaptureOf.Hex()
		}
		rep.Entries = append(rep.Entries, j)
	}
	if a.g.json {
		return cl.printJSON(rep)
	}
	rep.print(cl.stdout)
	return nil
}

func (r *statementReport) print(w io.Writer) {
	fmt.Fprintf(w, "Account %s, ledger %s\n", r.Account, r.Ledger)
	if len(r.Entries) == 0 {
		fmt.Fprintln(w, "No entries.")
		return
	}
	tw := table(w)
	fmt.Fprintln(tw, "AT\tTRANSACTION\tAMOUNT\tBALANCE\tKEY\tMETADATA\tCAPTURE OF")
	var u units
	for _, e := range r.Entries {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", timestamp(e.At), e.Txn, u.of(e.Amount, e.Asset, true), u.of(e.Balance, e.Asset, false),
			e.Key, metaString(e.Metadata), e.CaptureOf)
	}
	_ = tw.Flush()
	u.note(w)
	if r.Next != "" {
		fmt.Fprintf(w, "More follow: --after %s\n", r.Next)
	}
}

// metaString is metadata as key=value pairs, sorted by key.
func metaString(m map[string]string) string {
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, " ")
}

// balanceReport is what balance --json prints.
type balanceReport struct {
	Ledger  string    `json:"ledger"`
	Account string    `json:"account"`
	At      time.Time `json:"at"`
	Balance int64     `json:"balance"`
	Asset   string    `json:"asset,omitempty"`
}

func runBalance(ctx context.Context, cl *cli, cmd *command, args []string) error {
	var a accountArgs
	var at *string
	cn, err := a.parse(ctx, cl, cmd, args, func(fs *flag.FlagSet) {
		at = fs.String("at", "", "the balance at `TIME` (RFC 3339; default: now)")
	})
	if err != nil {
		return err
	}
	defer cn.close()
	when, err := parseTime("at", *at)
	if err != nil {
		return usageErrorf("%v", err)
	}
	if when.IsZero() {
		if when, err = cn.serverNow(ctx); err != nil {
			return err
		}
	}
	c, err := cn.coordinator()
	if err != nil {
		return err
	}
	defer func() { _ = closeCoordinator(c) }()
	rep := balanceReport{Ledger: ledgerName(a.ledger), At: when.UTC()}
	err = a.first(func(id any) error {
		b, err := c.BalanceAt(ctx, a.ledger, id, when)
		rep.Account, rep.Balance = fmt.Sprint(id), b
		if err != nil {
			return err
		}
		// The account's asset, for its scale: an account deleted since
		// has none to show.
		if l, lerr := c.Ledger(a.ledger); lerr == nil {
			if acct, aerr := l.Account(ctx, id); aerr == nil {
				rep.Asset = acct.Asset
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if a.g.json {
		return cl.printJSON(rep)
	}
	var u units
	fmt.Fprintf(cl.stdout, "Account %s, ledger %s, at %s: %s\n", rep.Account, rep.Ledger, timestamp(rep.At), u.of(rep.Balance, rep.Asset, false))
	u.note(cl.stdout)
	return nil
}
