package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/twopc/twopc/internal/schema"
)

var showCommand = &command{
	name:    "show",
	args:    "ID|KEY",
	summary: "one transaction (by id or idempotency key), every field, and the account of each of its legs",
	help: `Show prints a transaction with every field of its document, where it
found it, and, for each leg, the account document in the
leg's ledger: its balance, pendingCredit and pendingDebit (credits and
debits applied and not yet settled), its markers, and what they say of
the leg: applied and not settled (the leg's marker is in
pendingTransactions), closed (settled or undone: the leg's fence is in
fencedLegs, or the account's fence line fencedBefore is at or past the transaction's
time), or not applied. A leg's marker is the
transaction's id with its last byte set to the leg's index. A leg on a
ledger not given with --ledger is listed without its account.

Amounts (the value, what a hold captured, each leg's amount, the
accounts' balance, pendingCredit and pendingDebit) are shown with their
asset's scale where its code has one (3.00 USD/2), else as whole
numbers, minor units for no asset, which the output says once. A hold
shows what it captured beside its value: "captured 1.20 USD/2 (of its
value 3.00 USD/2; the rest returned to the source)", or "nothing yet"
while it is held, and once it ended what it released ("released 1.80
USD/2 (returned to the debited accounts when the hold ended)"); a hold
voided or expired after captures says what they took before ("captured
60.00 USD/2 by its captures (their captureOf names it), before it was
voided"). --json prints the documents as stored: minor units.

The argument is the transaction's _id (24 hexadecimal digits) or its
idempotency key (twopc.WithKey; a reversal's is "reverse:ID"): an
argument of 24 hexadecimal digits is read as an id first, and as a key
if no transaction has that id; any other as a key. A key names the
transaction whose _id the library derives from it, as GetByKey reads it
(or the canceled placeholder a Cancel of that _id wrote before it
arrived); show says which it found it by.

Transactions that twopc.WithHistory moved to an archive collection are
found with --archive COLLECTION: show reads the archive, then the log,
then the archive again (the library copies a transaction into the
archive before it deletes it from the log, so one archived meanwhile is
not missed). When both hold the id, the archive's record, the first, is
shown, and the log's copy (brought back by the transaction's late
duplicate writes) is named beside it.

Examples:
  twopc show 6740c1a2e4b0a1b2c3d4e500
  twopc show order/o-17
  twopc show --ledger shanghai=accounts_sh --ledger beijing=accounts_bj 6740c1a2e4b0a1b2c3d4e500
  twopc show --archive transactions_archive 6740c1a2e4b0a1b2c3d4e500
  twopc show 6740c1a2e4b0a1b2c3d4e500 --json | jq '.legs[].account.balance'`,
	run: runShow,
}

type showReport struct {
	ServerTime time.Time `json:"serverTime"`
	// FoundBy says how the argument named the transaction: "id" or "key".
	FoundBy string `json:"foundBy"`
	// FoundIn is where the transaction was found: "log", or "archive"
	// (--archive), in Collection.
	FoundIn     string          `json:"foundIn"`
	Collection  string          `json:"collection"`
	Transaction json.RawMessage `json:"transaction"`
	// LogCopy is, for a transaction found in the archive, the document
	// the log holds under its id too, if it holds one: a copy its late
	// duplicate writes brought back after it was archived.
	LogCopy json.RawMessage `json:"logCopy,omitempty"`
	Legs    []legReport     `json:"legs"`
	found   *found
	txn     *txnDoc
}

type legReport struct {
	Index      int    `json:"index"`
	Ledger     string `json:"ledger"`
	Collection string `json:"collection,omitempty"` // "" if the ledger was not given
	// Database and Deployment are set for a ledger given by connection
	// string (--ledger NAME=URI): its database, and its hosts with any
	// password hidden.
	Database   string          `json:"database,omitempty"`
	Deployment string          `json:"deployment,omitempty"`
	AccountID  json.RawMessage `json:"accountId"`
	Amount     int64           `json:"amount"`
	Asset      string          `json:"asset,omitempty"`
	Marker     string          `json:"marker"`
	// Leg says what the account shows of the leg: applied, closed,
	// not-applied, no-account, or unknown-ledger.
	Leg     string          `json:"leg"`
	Account json.RawMessage `json:"account"` // the account document; null if none was read
	acct    bson.Raw
	id      bson.RawValue
}

// What an account shows of a leg.
const (
	legApplied       = "applied"        // its marker is in pendingTransactions
	legClosed        = "closed"         // settled or undone: fenced, or behind the fence line
	legNotApplied    = "not-applied"    // no trace of it
	legNoAccount     = "no-account"     // no such account
	legUnknownLedger = "unknown-ledger" // the ledger was not given
)

func runShow(ctx context.Context, cl *cli, cmd *command, args []string) error {
	fs := cl.flagSet(cmd)
	var g globals
	g.register(fs, withApplication|withLedgers|withArchive)
	pos, err := cl.parse(cmd, fs, args, 1, 1)
	if err != nil {
		return err
	}
	arg := pos[0]
	id, idErr := bson.ObjectIDFromHex(arg)
	keyErr := checkKey(arg)
	if idErr != nil && keyErr != nil {
		return cl.usage(cmd, fs, "%q is neither a transaction id (24 hexadecimal digits) nor an idempotency key: %v", arg, keyErr)
	}
	cn, err := g.connect(ctx, cl)
	if err != nil {
		return err
	}
	defer cn.close()
	var f *found
	by := "id"
	if idErr == nil {
		if f, err = cn.lookupTxn(ctx, id); err != nil {
			return err
		}
	}
	if f == nil && keyErr == nil {
		if f, err = cn.lookupKey(ctx, arg); err != nil {
			return err
		}
		by = "key"
	}
	if f == nil {
		return cn.notFoundArg(arg, idErr == nil, keyErr == nil)
	}
	rep, err := show(ctx, cn, f)
	if err != nil {
		return err
	}
	rep.FoundBy = by
	if g.json {
		return cl.printJSON(rep)
	}
	rep.print(cl.stdout)
	return nil
}

// show reports transaction f and the accounts of its legs.
func show(ctx context.Context, cn *conn, f *found) (*showReport, error) {
	now, err := cn.serverNow(ctx)
	if err != nil {
		return nil, err
	}
	t := &f.txnDoc
	id, _ := t.id.ObjectIDOK()
	rep := &showReport{ServerTime: now, FoundIn: f.where, Collection: f.collection, Transaction: plainJSON(t.raw),
		Legs: []legReport{}, found: f, txn: t}
	if f.logCopy != nil {
		rep.LogCopy = plainJSON(f.logCopy.raw)
	}
	for i, l := range t.legs {
		lr := legReport{Index: i, Ledger: l.ledger, AccountID: plainValue(l.account), Amount: l.amount, Asset: l.asset,
			Marker: schema.Marker(id, i).Hex(), Account: json.RawMessage("null"), id: l.account}
		coll, ok := cn.ledger(l.ledger)
		if !ok {
			lr.Leg = legUnknownLedger
			rep.Legs = append(rep.Legs, lr)
			continue
		}
		lr.Collection = coll.Name()
		if f, _ := cn.g.ledger(l.ledger); f.uri != "" {
			lr.Database, lr.Deployment = f.db, redact(hostsOf(f.uri))
		}
		raw, err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: l.account}}).Raw()
		switch {
		case errors.Is(err, mongo.ErrNoDocuments):
			lr.Leg = legNoAccount
		case err != nil:
			return nil, fmt.Errorf("read account %s of ledger %s: %w", human(l.account), ledgerName(l.ledger), err)
		default:
			lr.acct = raw
			lr.Account = plainJSON(raw)
			lr.Leg = legState(raw, schema.Marker(id, i), t.created)
		}
		rep.Legs = append(rep.Legs, lr)
	}
	return rep, nil
}

// legState says what account acct shows of the leg whose marker is m, of a
// transaction created at created.
func legState(acct bson.Raw, m bson.ObjectID, created time.Time) string {
	fenced := hasMarker(acct, schema.FencedLegs, schema.Fence(created, m))
	if line, ok := acct.Lookup(schema.FencedBefore).TimeOK(); ok && !created.IsZero() && !line.Before(created) {
		fenced = true // closed by the line: its fence, if any, was dropped
	}
	if tomb, _ := acct.Lookup(schema.Tombstone).BooleanOK(); tomb && !fenced {
		return legNoAccount
	}
	switch {
	case hasMarker(acct, "pendingTransactions", m):
		return legApplied
	case fenced:
		return legClosed
	}
	return legNotApplied
}

// fenceSpan describes fences: how many, and the times of the transactions
// whose legs they close, oldest and newest.
func fenceSpan(fences []bson.ObjectID) string {
	if len(fences) == 0 {
		return "none"
	}
	first, last := schema.FenceTime(fences[0]), schema.FenceTime(fences[0])
	for _, f := range fences[1:] {
		t := schema.FenceTime(f)
		if t.Before(first) {
			first = t
		}
		if t.After(last) {
			last = t
		}
	}
	return fmt.Sprintf("%d, of transactions made from %s to %s", len(fences), timestamp(first), timestamp(last))
}

// hasMarker reports whether array field of acct holds m.
func hasMarker(acct bson.Raw, field string, m bson.ObjectID) bool {
	for _, x := range markers(acct, field) {
		if x == m {
			return true
		}
	}
	return false
}

// markers returns the ObjectIDs array field of acct holds.
func markers(acct bson.Raw, field string) []bson.ObjectID {
	arr, ok := acct.Lookup(field).ArrayOK()
	if !ok {
		return nil
	}
	vals, _ := arr.Values()
	var ids []bson.ObjectID
	for _, v := range vals {
		if oid, ok := v.ObjectIDOK(); ok {
			ids = append(ids, oid)
		}
	}
	return ids
}

var legWords = map[string]string{
	legApplied:       "applied, not settled: its marker is in pendingTransactions",
	legClosed:        "closed (settled or undone): fenced, or behind the account's fence line",
	legNotApplied:    "not applied: no marker, not behind the fence line",
	legNoAccount:     "no such account",
	legUnknownLedger: "ledger not given: pass --ledger NAME=COLLECTION or NAME=URI to read its account",
}

func (r *showReport) print(w io.Writer) {
	t := r.txn
	by := ""
	if r.FoundBy == "key" {
		by = " by its key"
	}
	fmt.Fprintf(w, "Transaction %s, found%s in the %s (collection %s)\n", t.idString(), by, r.FoundIn, r.Collection)
	if c := r.found.logCopy; c != nil {
		fmt.Fprintf(w, "The log holds a copy too, %s (last modified %s): its own late duplicate writes brought it back after it was archived. "+
			"The archive's, shown here, is its first record.\n", c.state, timestamp(c.lastModified))
	}
	elems, _ := t.raw.Elements()
	tw := table(w)
	var u units
	for _, e := range elems {
		v := human(e.Value())
		switch e.Key() {
		case "_id":
			continue
		case "lastModified":
			v += fmt.Sprintf(" (untouched for %v)", age(r.ServerTime, t.lastModified))
		case "value", schema.Captured, schema.Released:
			v = r.txnAmount(&u, e.Value())
			if e.Key() == schema.Released {
				v += " (returned to the debited accounts when the hold ended)"
			}
			if e.Key() == schema.Captured && t.hold() && t.state != "applied" && t.state != "done" {
				v += fmt.Sprintf(" by its captures (their captureOf names it), before it was %s", t.reason)
			}
			if e.Key() == schema.Captured && t.captured != nil && *t.captured < t.value {
				code, _ := t.asset()
				v += fmt.Sprintf(" (of its value %s; the rest returned to the source)", u.of(t.value, code, false))
			}
		case schema.Legs:
			if len(t.legs) > 0 {
				v = plural(int64(len(t.legs)), "leg") + ", under Legs below"
			}
		}
		fmt.Fprintf(tw, "  %s\t%s\n", e.Key(), v)
	}
	if t.hold() && t.captured == nil {
		v := "nothing"
		if n := t.takenCredit(); n > 0 {
			code, _ := t.asset()
			v = u.of(n, code, false) + " by its captures (their captureOf names it)"
		}
		if t.state == "held" {
			v += " yet: it is held, for more captures or a void"
		}
		fmt.Fprintf(tw, "  %s\t%s\n", schema.Captured, v)
	}
	_ = tw.Flush()
	defer u.note(w)
	if len(r.Legs) == 0 {
		fmt.Fprintln(w, "\nNo legs.")
		return
	}
	fmt.Fprintln(w, "\nLegs:")
	for _, l := range r.Legs {
		where := "ledger " + ledgerName(l.Ledger)
		switch {
		case l.Deployment != "":
			where += fmt.Sprintf(" (collection %s.%s at %s)", l.Database, l.Collection, l.Deployment)
		case l.Collection != "":
			where += fmt.Sprintf(" (collection %s)", l.Collection)
		}
		fmt.Fprintf(w, "  %d. account %s, %s, amount %s\n", l.Index, human(l.id), where, u.of(l.Amount, l.Asset, true))
		fmt.Fprintf(w, "     leg (marker %s): %s\n", l.Marker, legWords[l.Leg])
		if l.acct == nil {
			continue
		}
		a := l.acct
		code, _ := a.Lookup(schema.Asset).StringValueOK()
		fmt.Fprintf(w, "     balance %s, pendingCredit %s, pendingDebit %s\n",
			fieldAmount(&u, a, schema.Balance, code), fieldAmount(&u, a, schema.PendingCredit, code), fieldAmount(&u, a, schema.PendingDebit, code))
		pending := markers(a, "pendingTransactions")
		fmt.Fprintf(w, "     pendingTransactions: %s\n", markerList(pending))
		fmt.Fprintf(w, "     fencedLegs: %s; fence line (fencedBefore) %s", fenceSpan(markers(a, schema.FencedLegs)), human(a.Lookup(schema.FencedBefore)))
		if tomb, _ := a.Lookup(schema.Tombstone).BooleanOK(); tomb {
			fmt.Fprint(w, "; a tombstone (fences of an account that did not exist)")
		}
		fmt.Fprintln(w)
	}
}

// markerList is a list of markers in a few words.
func markerList(ids []bson.ObjectID) string {
	if len(ids) == 0 {
		return "none"
	}
	const most = 5
	var parts []string
	for i, id := range ids {
		if i == most {
			parts = append(parts, fmt.Sprintf("and %d more", len(ids)-most))
			break
		}
		parts = append(parts, id.Hex())
	}
	return strings.Join(parts, ", ")
}

// txnAmount is an amount field of the transaction (its value, what it
// captured) as output shows it: with the scale of its legs' one asset;
// for legs of several assets, the integer stored, said to be a sum of
// minor units; any other value as stored.
func (r *showReport) txnAmount(u *units, v bson.RawValue) string {
	n, ok := v.AsInt64OK()
	if !ok || v.Type != bson.TypeInt64 && v.Type != bson.TypeInt32 {
		return human(v)
	}
	code, one := r.txn.asset()
	if !one {
		return fmt.Sprintf("%d (minor units, summed over the legs' assets %s)", n, series(r.txn.assets(), "and"))
	}
	return u.of(n, code, false)
}
