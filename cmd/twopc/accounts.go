package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc"
)

var accountsCommand = &command{
	name:    "accounts",
	summary: "the accounts of a ledger, by id, of an asset or all, by pages",
	help: `Accounts lists the accounts of a ledger as the library reads them
(twopc's Coordinator.Accounts), in the order of their ids as the server
sorts them (numbers, then strings, documents, ObjectIDs, ...): each with
its balance (available), held (pendingDebit), pendingCredit, asset,
limits, and how many transactions are in flight on it. Tombstones (fences
a rollback wrote for an account that did not exist) are not accounts and
are not listed; twopc account ID shows one.

--asset CODE lists only the accounts of that asset (twopc.AccountAsset).
--limit N prints at most N accounts (default 100, at most 1000); when
more follow, the last line gives the --after TOKEN that prints the next
ones (the same --ledger and --asset with it).

--ledger NAME lists ledger NAME's accounts (default: the default ledger,
--accounts); give its collection with --ledger NAME=COLLECTION or
NAME=mongodb://HOST:PORT/DB.COLLECTION too, unless it is the default.

Amounts are shown with each account's asset's scale where its code has
one (12.50 USD/2), else as whole numbers, minor units for no asset,
which the output says once; --json prints minor units, with the asset.

An account the library cannot read (a balance that is not an integer,
an asset or limits that are not valid) stops the listing with exit
status 1, naming it: see it with twopc account ID. A database that holds
none of the collections the flags name in it (the accounts, the
transactions, each --ledger NAME=COLLECTION) is refused, exit status 1,
as every read command refuses it, rather than listed as no accounts.

Examples:
  twopc accounts
  twopc accounts --asset USD/2 --limit 20
  twopc accounts --ledger beijing=mongodb://127.0.0.1:27018/bank.accounts --ledger beijing
  twopc accounts --json | jq -r '.accounts[] | "\(.id) \(.balance)"'`,
	run: runAccounts,
}

// accountsReport is what accounts --json prints.
type accountsReport struct {
	Ledger   string         `json:"ledger"` // "default" for the default ledger
	Accounts []accountsItem `json:"accounts"`
	Next     string         `json:"next,omitempty"`
}

// accountsItem is one account as the library reads it.
type accountsItem struct {
	ID            json.RawMessage `json:"id"`
	Balance       int64           `json:"balance"`
	Held          int64           `json:"held"`
	PendingCredit int64           `json:"pendingCredit"`
	Asset         string          `json:"asset,omitempty"`
	// Floor and Ceiling are set for an account with limits.
	Floor   *int64 `json:"floor,omitempty"`
	Ceiling *int64 `json:"ceiling,omitempty"`
	// PendingTransactions are the transactions with a leg in flight on it.
	PendingTransactions []string `json:"pendingTransactions"`
	id                  bson.RawValue
}

func runAccounts(ctx context.Context, cl *cli, cmd *command, args []string) error {
	fs := cl.flagSet(cmd)
	var g globals
	g.register(fs, 0)
	var pick []string
	fs.Var(accountLedgers{&g, &pick}, "ledger", "the ledger `NAME` to list (default: the default one); "+
		"NAME=COLLECTION or NAME=mongodb://HOST:PORT/DB.COLLECTION gives its collection")
	asset := fs.String("asset", "", "only accounts of asset `CODE`")
	limit := fs.Int("limit", twopc.DefaultAccountLimit, "print at most `N` accounts")
	after := fs.String("after", "", "continue after the page that gave `TOKEN`")
	if _, err := cl.parse(cmd, fs, args, 0, 0); err != nil {
		return err
	}
	ledger := ""
	switch len(pick) {
	case 0:
	case 1:
		ledger = pick[0]
		if _, ok := g.ledger(ledger); !ok {
			return cl.usage(cmd, fs, "--ledger %s: ledger %q is not given: give its accounts with --ledger %s=COLLECTION", ledger, ledger, ledger)
		}
	default:
		return cl.usage(cmd, fs, "one --ledger NAME at a time")
	}
	cn, err := g.connectExisting(ctx, cl)
	if err != nil {
		return err
	}
	defer cn.close()
	c, err := cn.coordinator()
	if err != nil {
		return err
	}
	defer func() { _ = closeCoordinator(c) }()
	p, err := c.Accounts(ctx, ledger, twopc.AccountQuery{Asset: *asset, Limit: *limit, After: *after})
	if errors.Is(err, twopc.ErrInvalidQuery) {
		return usageErrorf("%v", err)
	}
	if err != nil {
		return err
	}
	rep := &accountsReport{Ledger: ledgerName(ledger), Accounts: []accountsItem{}, Next: p.Next}
	for _, a := range p.Accounts {
		t, data, err := bson.MarshalValue(a.ID)
		if err != nil {
			return fmt.Errorf("account id %v: %w", a.ID, err)
		}
		item := accountsItem{Balance: a.Balance, Held: a.Held, PendingCredit: a.PendingCredit, Asset: a.Asset,
			PendingTransactions: []string{}, id: bson.RawValue{Type: t, Value: data}}
		item.ID = plainValue(item.id)
		if a.Limited {
			item.Floor, item.Ceiling = &a.Floor, &a.Ceiling
		}
		for _, id := range a.PendingTransactions {
			item.PendingTransactions = append(item.PendingTransactions, id.Hex())
		}
		rep.Accounts = append(rep.Accounts, item)
	}
	if g.json {
		return cl.printJSON(rep)
	}
	rep.print(cl.stdout)
	return nil
}

func (r *accountsReport) print(w io.Writer) {
	fmt.Fprintf(w, "Accounts of ledger %s\n", r.Ledger)
	if len(r.Accounts) == 0 {
		fmt.Fprintln(w, "No accounts.")
		return
	}
	tw := table(w)
	fmt.Fprintln(tw, "ID\tBALANCE\tHELD\tPENDING CREDIT\tLIMITS\tIN FLIGHT")
	var u units
	for _, a := range r.Accounts {
		limits := "-"
		if a.Floor != nil {
			limits = u.of(*a.Floor, a.Asset, false) + " to " + u.of(*a.Ceiling, a.Asset, false)
			if *a.Ceiling == twopc.MaxLimit {
				limits = u.of(*a.Floor, a.Asset, false) + " to none"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\n", human(a.id), u.of(a.Balance, a.Asset, false), u.of(a.Held, a.Asset, false),
			u.of(a.PendingCredit, a.Asset, false), limits, len(a.PendingTransactions))
	}
	_ = tw.Flush()
	u.note(w)
	if r.Next != "" {
		fmt.Fprintf(w, "More follow: --after %s\n", r.Next)
	}
}
