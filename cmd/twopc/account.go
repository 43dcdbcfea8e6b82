package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/internal/schema"
)

var accountCommand = &command{
	name:    "account",
	args:    "ID",
	summary: "one account: balance, held and pending amounts, and its markers",
	help: `Account prints account ID as the library sees it (twopc's
Ledger.Account): its balance (available: the debits in flight are out of
it, the credits in flight not yet in), held (its pendingDebit: debits
applied and not settled, and of that what the holds held on it reserve),
and pendingCredit (credits applied and not settled: money on its way in,
spendable once settled). Then its markers: each leg in flight on it
(pendingTransactions: the leg's marker, its transaction, the leg's
index, and the transaction's state, application and the leg's amount,
read from the log; a marker whose transaction the log does not hold is
said so), and its fences (fencedLegs, the legs settled or undone since
its fence line moved, each with its transaction's time) with its fence
line, fencedBefore. A
tombstone (fences written for an account that did not exist) is shown as
one: the library reads it as no account.

ID is matched as a string, and also as a number if it is an integer and
as an ObjectID if it is 24 hexadecimal digits; a document id is given as
Extended JSON ('{"region": "eu", "n": 7}'). Every document that matches
is shown.

--ledger NAME=COLLECTION (a collection of the log's database) or
NAME=URI (anywhere: mongodb://HOST:PORT/DB.COLLECTION) gives a ledger,
as for show; the account is read in every ledger given, the default one
(--accounts) included, and each found is shown with its ledger. --ledger
NAME alone, as list takes it, reads only that ledger ("default" or "" for
the default one; repeatable); its collection must be given too, unless
it is the default.

Amounts are shown with the account's asset's scale where its code has
one (12.50 USD/2), else as whole numbers, minor units for no asset,
which the output says once; --json prints them as stored, minor units.

Exit status 1 if no ledger read holds the account.

Examples:
  twopc account alice
  twopc account --ledger beijing=mongodb://127.0.0.1:27018/bank.accounts --ledger beijing B
  twopc account '{"region": "eu", "n": 7}'
  twopc account alice --json | jq -c '.accounts[] | {ledger, balance, held, pendingCredit}'`,
	run: runAccount,
}

// accountLedgers is account's --ledger: NAME=COLLECTION or NAME=URI gives
// a ledger (as globals' --ledger does), NAME alone picks one to read.
type accountLedgers struct {
	g    *globals
	pick *[]string
}

func (f accountLedgers) String() string {
	if f.g == nil {
		return ""
	}
	return f.g.ledgers.String()
}

func (f accountLedgers) Set(s string) error {
	if strings.Contains(s, "=") {
		return ledgerFlags{f.g}.Set(s)
	}
	if s == "default" {
		s = ""
	}
	*f.pick = append(*f.pick, s)
	return nil
}

type accountReport struct {
	ServerTime time.Time      `json:"serverTime"`
	Accounts   []accountEntry `json:"accounts"`
}

// accountEntry is one account document, as the library reads it.
type accountEntry struct {
	Ledger     string `json:"ledger"` // "default" for the default ledger
	Collection string `json:"collection"`
	// Database and Deployment are set for a ledger given by connection
	// string: its database, and its hosts with any password hidden.
	Database   string          `json:"database,omitempty"`
	Deployment string          `json:"deployment,omitempty"`
	ID         json.RawMessage `json:"id"`
	// Balance, Held (pendingDebit) and PendingCredit are as stored, 0 when
	// absent (a balance that is not an integer is shown as it is: the
	// library refuses such an account).
	Balance       json.RawMessage `json:"balance"`
	Held          json.RawMessage `json:"held"`
	PendingCredit json.RawMessage `json:"pendingCredit"`
	// HeldByHolds is what the holds held on the account reserve of Held.
	HeldByHolds  int64           `json:"heldByHolds"`
	PendingLegs  []pendingLeg    `json:"pendingLegs"`
	Fences       []string        `json:"fencedLegs"`   // fences, with their transactions' times first (schema.Fence)
	FencedBefore json.RawMessage `json:"fencedBefore"` // the fence line; null if none
	Tombstone    bool            `json:"tombstone"`
	// Asset is the account's asset code; Floor and Ceiling its limits, and
	// FloorRoom and CeilingRoom the headroom its leg writes check, as
	// stored (absent: an account without limits).
	Asset string `json:"asset,omitempty"`
	// Metadata is what twopc.AccountMetadata gave it, as stored.
	Metadata    json.RawMessage `json:"metadata,omitempty"`
	Floor       json.RawMessage `json:"floor,omitempty"`
	Ceiling     json.RawMessage `json:"ceiling,omitempty"`
	FloorRoom   json.RawMessage `json:"floorRoom,omitempty"`
	CeilingRoom json.RawMessage `json:"ceilingRoom,omitempty"`
	id          bson.RawValue
	doc         bson.Raw
}

// pendingLeg is a marker in an account's pendingTransactions: a leg
// applied and not settled, and its transaction as the log holds it.
type pendingLeg struct {
	Marker      string `json:"marker"`
	Transaction string `json:"transaction"`
	Leg         int    `json:"leg"`
	InLog       bool   `json:"inLog"` // false: the log holds no such transaction
	State       string `json:"state,omitempty"`
	Application string `json:"application,omitempty"`
	Hold        bool   `json:"hold,omitempty"`
	Amount      int64  `json:"amount,omitempty"` // the leg's, negative for a debit
}

func runAccount(ctx context.Context, cl *cli, cmd *command, args []string) error {
	fs := cl.flagSet(cmd)
	var g globals
	g.register(fs, withApplication)
	var pick []string
	fs.Var(accountLedgers{&g, &pick}, "ledger", "a ledger `NAME=COLLECTION` of the same database, or NAME=mongodb://HOST:PORT/DB.COLLECTION anywhere, "+
		"to read the account in too; or NAME alone (default for the default ledger), to read it only there (repeatable)")
	pos, err := cl.parse(cmd, fs, args, 1, 1)
	if err != nil {
		return err
	}
	ids, err := accountValues(pos[0])
	if err != nil {
		return cl.usage(cmd, fs, "account %s: %v", pos[0], err)
	}
	if err := g.check(); err != nil {
		return err
	}
	names := []string{""}
	for _, l := range g.ledgers {
		names = append(names, l.name)
	}
	if len(pick) > 0 {
		names = names[:0]
		for _, p := range pick {
			if _, ok := g.ledger(p); !ok {
				return cl.usage(cmd, fs, "--ledger %s: ledger %q is not given: give its accounts with --ledger %s=COLLECTION "+
					"or --ledger %s=mongodb://HOST:PORT/DB.COLLECTION", p, p, p, p)
			}
			if !contains(names, p) {
				names = append(names, p)
			}
		}
	}
	cn, err := g.connectExisting(ctx, cl)
	if err != nil {
		return err
	}
	defer cn.close()
	rep, err := account(ctx, cn, ids, names)
	if err != nil {
		return err
	}
	if len(rep.Accounts) == 0 {
		read := make([]string, len(names))
		for i, n := range names {
			read[i] = ledgerName(n)
		}
		return refused(fmt.Errorf("%w: %s in ledger %s", twopc.ErrAccountNotFound, pos[0], strings.Join(read, ", ")))
	}
	if g.json {
		return cl.printJSON(rep)
	}
	rep.print(cl.stdout)
	return nil
}

// account reads the accounts whose _id is one of ids in each ledger
// named, and the transactions of the legs in flight on them.
func account(ctx context.Context, cn *conn, ids []any, ledgers []string) (*accountReport, error) {
	now, err := cn.serverNow(ctx)
	if err != nil {
		return nil, err
	}
	rep := &accountReport{ServerTime: now, Accounts: []accountEntry{}}
	for _, name := range ledgers {
		coll, _ := cn.ledger(name)
		cur, err := coll.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}},
			options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}))
		if err != nil {
			return nil, fmt.Errorf("read account of ledger %s: %w", ledgerName(name), err)
		}
		var docs []bson.Raw
		if err := cur.All(ctx, &docs); err != nil {
			return nil, fmt.Errorf("read account of ledger %s: %w", ledgerName(name), err)
		}
		for _, d := range docs {
			e := accountEntry{Ledger: ledgerName(name), Collection: coll.Name(), id: d.Lookup("_id"),
				Balance: plainValue(d.Lookup(schema.Balance)), Held: orZeroJSON(d.Lookup(schema.PendingDebit)),
				PendingCredit: orZeroJSON(d.Lookup(schema.PendingCredit)), PendingLegs: []pendingLeg{}, Fences: []string{},
				FencedBefore: plainValue(d.Lookup(schema.FencedBefore))}
			e.ID, e.doc = plainValue(e.id), d
			e.Asset, _ = d.Lookup(schema.Asset).StringValueOK()
			if v := d.Lookup("metadata"); v.Type != 0 {
				e.Metadata = plainValue(v)
			}
			for _, f := range []struct {
				into *json.RawMessage
				name string
			}{{&e.Floor, schema.Floor}, {&e.Ceiling, schema.Ceiling}, {&e.FloorRoom, schema.FloorRoom}, {&e.CeilingRoom, schema.CeilingRoom}} {
				if v := d.Lookup(f.name); v.Type != 0 {
					*f.into = plainValue(v)
				}
			}
			if f, _ := cn.g.ledger(name); f.uri != "" {
				e.Database, e.Deployment = f.db, redact(hostsOf(f.uri))
			}
			e.Tombstone, _ = d.Lookup(schema.Tombstone).BooleanOK()
			for _, m := range markers(d, schema.Pending) {
				e.PendingLegs = append(e.PendingLegs, pendingLeg{Marker: m.Hex(),
					Transaction: schema.TxnOfMarker(m).Hex(), Leg: int(m[len(m)-1])})
			}
			for _, f := range markers(d, schema.FencedLegs) {
				e.Fences = append(e.Fences, f.Hex())
			}
			if err := legsInFlight(ctx, cn, &e); err != nil {
				return nil, err
			}
			rep.Accounts = append(rep.Accounts, e)
		}
	}
	return rep, nil
}

// legsInFlight reads from the log the transactions of e's pending legs:
// their state, application, and the leg's amount.
func legsInFlight(ctx context.Context, cn *conn, e *accountEntry) error {
	if len(e.PendingLegs) == 0 {
		return nil
	}
	var ids bson.A
	for _, l := range e.PendingLegs {
		id, _ := bson.ObjectIDFromHex(l.Transaction)
		ids = append(ids, id)
	}
	cur, err := cn.txns.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}})
	if err != nil {
		return fmt.Errorf("read the transactions in flight on account %s: %w", human(e.id), err)
	}
	defer cur.Close(ctx)
	txns := map[string]txnDoc{}
	for cur.Next(ctx) {
		t := parseTxn(append(bson.Raw(nil), cur.Current...))
		txns[t.idString()] = t
	}
	if err := cur.Err(); err != nil {
		return fmt.Errorf("read the transactions in flight on account %s: %w", human(e.id), err)
	}
	for i := range e.PendingLegs {
		l := &e.PendingLegs[i]
		t, ok := txns[l.Transaction]
		if !ok {
			continue
		}
		l.InLog, l.State, l.Application = true, t.state, t.application
		l.Hold, _ = t.raw.Lookup(schema.Hold).BooleanOK()
		if l.Leg < len(t.legs) {
			l.Amount = t.legs[l.Leg].amount
		}
		if l.Hold && l.State == string(twopc.StateHeld) && l.Amount < 0 {
			e.HeldByHolds -= l.Amount
		}
	}
	return nil
}

// orZeroJSON is a sum the library keeps on an account, 0 when absent.
func orZeroJSON(v bson.RawValue) json.RawMessage {
	if v.Type == 0 {
		return json.RawMessage("0")
	}
	return plainValue(v)
}

func (r *accountReport) print(w io.Writer) {
	var u units
	for i, a := range r.Accounts {
		if i > 0 {
			fmt.Fprintln(w)
		}
		where := fmt.Sprintf("collection %s", a.Collection)
		if a.Deployment != "" {
			where = fmt.Sprintf("collection %s.%s at %s", a.Database, a.Collection, a.Deployment)
		}
		fmt.Fprintf(w, "Account %s, ledger %s (%s)\n", human(a.id), a.Ledger, where)
		if a.Tombstone {
			fmt.Fprintln(w, "  a tombstone: no account, only the fences a rollback wrote for an account that did not exist (the library reads it as no account)")
		} else {
			heldBy := ""
			if a.HeldByHolds > 0 {
				heldBy = fmt.Sprintf("; %s of it by holds held", u.of(a.HeldByHolds, a.Asset, false))
			}
			fmt.Fprintf(w, "  balance %s (available), held %s (pendingDebit: debits applied and not settled%s), pendingCredit %s (credits applied and not settled)\n",
				a.amount(&u, schema.Balance), a.amount(&u, schema.PendingDebit), heldBy, a.amount(&u, schema.PendingCredit))
			if a.Asset != "" {
				fmt.Fprintf(w, "  asset %s\n", a.Asset)
			}
			if a.Metadata != nil {
				fmt.Fprintf(w, "  metadata %s\n", a.Metadata)
			}
			if a.FloorRoom != nil {
				ceiling := "none (MaxLimit)"
				if a.Ceiling != nil {
					ceiling = a.amount(&u, schema.Ceiling)
				}
				fmt.Fprintf(w, "  limits: floor %s, ceiling %s; room above the floor %s, below the ceiling %s (counting what is in flight)\n",
					a.amount(&u, schema.Floor), ceiling, a.amount(&u, schema.FloorRoom), a.amount(&u, schema.CeilingRoom))
			}
		}
		fmt.Fprintf(w, "  legs in flight (pendingTransactions, %d):", len(a.PendingLegs))
		if len(a.PendingLegs) == 0 {
			fmt.Fprint(w, " none")
		}
		fmt.Fprintln(w)
		for _, l := range a.PendingLegs {
			if !l.InLog {
				fmt.Fprintf(w, "    %s leg %d: its transaction %s is not in the log\n", l.Transaction, l.Leg, l.Transaction)
				continue
			}
			hold := ""
			if l.Hold {
				hold = ", a hold"
			}
			fmt.Fprintf(w, "    %s leg %d: %s, application %s%s, amount %s\n", l.Transaction, l.Leg, l.State, appName(l.Application), hold, u.of(l.Amount, a.Asset, true))
		}
		line := "none"
		var t time.Time
		if err := json.Unmarshal(a.FencedBefore, &t); err == nil && !t.IsZero() {
			line = timestamp(t)
		}
		fences := make([]bson.ObjectID, 0, len(a.Fences))
		for _, h := range a.Fences {
			id, _ := bson.ObjectIDFromHex(h)
			fences = append(fences, id)
		}
		fmt.Fprintf(w, "  fencedLegs: %s; fence line (fencedBefore) %s\n", fenceSpan(fences), line)
	}
	u.note(w)
}

// amount is the account's integer field name with its asset's scale,
// through u; 0 when absent, and any other value as stored.
func (a *accountEntry) amount(u *units, name string) string {
	return fieldAmount(u, a.doc, name, a.Asset)
}

// fieldAmount is integer field name of document doc, an amount of asset
// code, through u; 0 when absent, and any other value as stored (a
// balance that is not an integer: the library refuses such an account).
func fieldAmount(u *units, doc bson.Raw, name, code string) string {
	v := doc.Lookup(name)
	if v.Type == 0 {
		return u.of(0, code, false)
	}
	if n, ok := v.AsInt64OK(); ok && (v.Type == bson.TypeInt64 || v.Type == bson.TypeInt32) {
		return u.of(n, code, false)
	}
	return string(plainValue(v))
}
