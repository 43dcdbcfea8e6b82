package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/twopc/twopc/internal/schema"
	"go.mongodb.org/mongo-driver/v2/bson"
)

var listCommand = &command{
	name:    "list",
	summary: "transactions, filtered, least recently touched first",
	help: `List prints the transactions that match every filter given, sorted by
lastModified, least recently touched first, at most --limit of them.

--state takes a state (initial, pending, applied, done, canceling,
canceled, held), "unfinished" (initial, pending, applied, canceling) or
"final" (done, canceled); held is a hold waiting for its captures or a void; repeat it or separate states with commas. --account matches
a transfer's source or destination or any leg's account; the value is
matched as a string, and also as a number if it is an integer and as an
ObjectID if it is 24 hexadecimal digits; a document id is given as
Extended JSON ('{"region": "eu", "n": 7}'). --ledger NAME keeps the
transactions with a leg in that ledger ("" or "default": the default
ledger, where source and destination are), and with --account, that
account in that ledger. List reads only transactions, so here --ledger
takes a name, not NAME=COLLECTION. --older-than keeps those
untouched for longer than the duration, by the server's clock.
--application keeps those whose application field (the process that
created or last took over the transaction) is NAME; list has no
application name of its own. --meta KEY=VALUE keeps the transfers whose
metadata (twopc.WithMetadata) has KEY set to VALUE; repeat it to ask for
several. --key KEY keeps the transaction of idempotency key KEY
(twopc.WithKey; a reversal's is "reverse:ID"), read by the _id the
library derives from the key, as twopc show KEY finds it.

Each transaction's legs are shown with their amounts, as every command
shows amounts: with the asset's scale where its code has one (3.00
USD/2), else whole numbers, minor units for no asset, which the output
says once; a hold shows what its captures charged beside its value,
and once it ended what it released ("alice → shop 3.00 USD/2, captured
1.20 USD/2 in all, 1.80 USD/2 released"), a hold voided or expired after
captures included: canceled does not mean nothing was charged ("captured
nothing" says that); a hold held, what its captures took so far. --json prints the
documents as stored: amounts in minor units, with their asset codes.

With --archive COLLECTION, list reads the archive twopc.WithHistory moves
final transactions to as well as the log (the log first: one archived in
between is then found in the archive), and says where it found each:
log or archive. An id both hold is the archive's record, its first: the
log's is a copy the transaction's late duplicate writes brought back,
and is not listed for itself (--json: "alsoInLog": true).

Examples:
  twopc list --state pending --older-than 5m
  twopc list --state held --older-than 24h
  twopc list --account alice --limit 10
  twopc list --account alice --archive transactions_archive
  twopc list --meta order=o-17
  twopc list --key order/o-17 --archive transactions_archive
  twopc list --state unfinished --application payments-1 --json | jq -r '.transactions[]._id'`,
	run: runList,
}

// metaList is the repeatable --meta KEY=VALUE flag.
type metaList bson.D

func (l *metaList) String() string {
	parts := make([]string, len(*l))
	for i, e := range *l {
		parts[i] = e.Key + "=" + fmt.Sprint(e.Value)
	}
	return strings.Join(parts, ",")
}

func (l *metaList) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	switch {
	case !ok:
		return fmt.Errorf("%q is not KEY=VALUE", s)
	case k == "" || strings.HasPrefix(k, "$") || strings.ContainsAny(k, ".\x00"):
		return fmt.Errorf("metadata key %q: not empty, not starting with $, no . or NUL", k)
	}
	*l = append(*l, bson.E{Key: k, Value: v})
	return nil
}

// stateList is the repeatable --state flag.
type stateList []string

func (l *stateList) String() string { return strings.Join(*l, ",") }

func (l *stateList) Set(s string) error {
	for _, st := range strings.Split(s, ",") {
		st = strings.TrimSpace(st)
		switch {
		case st == "unfinished":
			*l = append(*l, unfinishedStates...)
		case st == "final":
			*l = append(*l, "done", "canceled")
		case contains(states, st):
			*l = append(*l, st)
		default:
			return fmt.Errorf("unknown state %q: want one of %s, unfinished or final", st, strings.Join(states, ", "))
		}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// optionalString is a string flag that knows whether it was given.
type optionalString struct {
	value string
	set   bool
}

func (o *optionalString) String() string { return o.value }
func (o *optionalString) Set(s string) error {
	o.value, o.set = s, true
	return nil
}

type listReport struct {
	ServerTime time.Time `json:"serverTime"`
	Count      int       `json:"count"`
	Truncated  bool      `json:"truncated"` // more matched than --limit
	// Transactions are the documents, each with "foundIn" ("log" or
	// "archive") added first, and "alsoInLog": true for one found in the
	// archive of which the log holds a copy.
	Transactions []json.RawMessage `json:"transactions"`
	txns         []*found
	archive      bool // --archive was given
}

func runList(ctx context.Context, cl *cli, cmd *command, args []string) error {
	fs := cl.flagSet(cmd)
	var g globals
	g.register(fs, withArchive)
	var st stateList
	var ledger optionalString
	fs.Var(&st, "state", "only transactions in `STATE` (repeatable, or comma-separated)")
	account := fs.String("account", "", "only transactions with a leg on account `ID`")
	fs.Var(&ledger, "ledger", "only transactions with a leg in ledger `NAME` (with --account: that account there)")
	olderThan := fs.Duration("older-than", 0, "only transactions untouched for longer than `DURATION`")
	application := fs.String("application", "", "only transactions last written by application `NAME`")
	limit := fs.Int("limit", 50, "print at most `N` transactions (0: all)")
	var meta metaList
	fs.Var(&meta, "meta", "only transfers whose metadata has `KEY=VALUE` (repeatable)")
	var key optionalString
	fs.Var(&key, "key", "only the transaction of idempotency key `KEY`")
	if _, err := cl.parse(cmd, fs, args, 0, 0); err != nil {
		return err
	}
	switch {
	case *limit < 0:
		return cl.usage(cmd, fs, "--limit must not be negative")
	case *olderThan < 0:
		return cl.usage(cmd, fs, "--older-than must not be negative")
	case strings.Contains(ledger.value, "="):
		return cl.usage(cmd, fs, "--ledger takes a ledger's name here, not %q: list reads only the transactions collection", ledger.value)
	}
	if key.set {
		if err := checkKey(key.value); err != nil {
			return cl.usage(cmd, fs, "--key %q: %v", key.value, err)
		}
	}
	if ledger.value == "default" {
		ledger.value = ""
	}
	var ids []any
	if *account != "" {
		var err error
		if ids, err = accountValues(*account); err != nil {
			return cl.usage(cmd, fs, "--account %s: %v", *account, err)
		}
	}

	cn, err := g.connectExisting(ctx, cl)
	if err != nil {
		return err
	}
	defer cn.close()
	now, err := cn.serverNow(ctx)
	if err != nil {
		return err
	}
	filter := bson.D{}
	if len(st) > 0 {
		filter = append(filter, bson.E{Key: schema.State, Value: bson.D{{Key: "$in", Value: st}}})
	}
	if ids != nil {
		or := bson.A{bson.D{{Key: schema.Legs + ".account", Value: bson.D{{Key: "$in", Value: ids}}}}}
		if !ledger.set || ledger.value == "" {
			or = append(or,
				bson.D{{Key: "source", Value: bson.D{{Key: "$in", Value: ids}}}},
				bson.D{{Key: "destination", Value: bson.D{{Key: "$in", Value: ids}}}})
		}
		filter = append(filter, bson.E{Key: "$or", Value: or})
	}
	if ledger.set && ledger.value != "" {
		filter = append(filter, bson.E{Key: schema.Legs + ".ledger", Value: ledger.value})
	}
	if *olderThan > 0 {
		filter = append(filter, bson.E{Key: schema.LastModified, Value: bson.D{{Key: "$lt", Value: now.Add(-*olderThan)}}})
	}
	if *application != "" {
		filter = append(filter, bson.E{Key: schema.Application, Value: *application})
	}
	for _, e := range meta {
		filter = append(filter, bson.E{Key: schema.Metadata + "." + e.Key, Value: e.Value})
	}
	if key.set {
		filter = append(filter, keyFilter(key.value)...)
	}
	// A leg's account and ledger are matched together here: the filter
	// above matches them on any legs (FerretDB v1 has no $elemMatch on
	// fields).
	keep := func(t *txnDoc) bool {
		if !ledger.set {
			return true
		}
		for _, l := range t.legs {
			if l.ledger == ledger.value && (ids == nil || sameAccount(l.account, ids)) {
				return true
			}
		}
		return false
	}
	limitEach := int64(0)
	if *limit > 0 && !ledger.set {
		limitEach = int64(*limit)
	}
	all, more, err := cn.findTxns(ctx, filter, limitEach)
	if err != nil {
		return err
	}
	rep := &listReport{ServerTime: now, Transactions: []json.RawMessage{}, Truncated: more, archive: cn.archive != nil}
	for _, t := range all {
		if !keep(&t.txnDoc) {
			continue
		}
		if *limit > 0 && len(rep.txns) == *limit {
			rep.Truncated = true
			break
		}
		rep.txns = append(rep.txns, t)
		rep.Transactions = append(rep.Transactions, withFoundIn(t))
	}
	rep.Count = len(rep.txns)
	if g.json {
		return cl.printJSON(rep)
	}
	rep.print(cl.stdout, *limit)
	return nil
}

// accountValues are the values an --account argument matches.
func accountValues(s string) ([]any, error) {
	if strings.HasPrefix(s, "{") {
		var d bson.D
		if err := bson.UnmarshalExtJSON([]byte(s), false, &d); err != nil {
			return nil, fmt.Errorf("not an Extended JSON document: %v", err)
		}
		return []any{d}, nil
	}
	vals := []any{s}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		vals = append(vals, n)
	}
	if oid, err := bson.ObjectIDFromHex(s); err == nil {
		vals = append(vals, oid)
	}
	return vals, nil
}

// sameAccount reports whether account id v is one of ids, as the server
// compares them and the library does (schema.SameID: numbers by value,
// inside documents too).
func sameAccount(v bson.RawValue, ids []any) bool {
	for _, id := range ids {
		if schema.SameID(v, id) {
			return true
		}
	}
	return false
}

func (r *listReport) print(w io.Writer, limit int) {
	if len(r.txns) == 0 {
		fmt.Fprintln(w, "No transaction matches.")
		return
	}
	tw := table(w)
	where := ""
	if r.archive {
		where = "FOUND IN\t"
	}
	fmt.Fprintf(tw, "ID\t%sSTATE\tUNTOUCHED FOR\tAPPLICATION\tLEGS\tREASON\n", where)
	var u units
	for _, f := range r.txns {
		t := &f.txnDoc
		if r.archive {
			where = f.where + "\t"
			if f.logCopy != nil {
				where = f.where + " (a copy in the log)\t"
			}
		}
		reason := t.reason
		if reason == "" {
			reason = "-"
		}
		app := t.application
		if app == "" {
			app = "-"
		}
		fmt.Fprintf(tw, "%s\t%s%s\t%v\t%s\t%s\t%s\n", t.idString(), where, t.state, age(r.ServerTime, t.lastModified), app, legSummary(t, &u)+capturedWords(t, &u), reason)
	}
	_ = tw.Flush()
	u.note(w)
	if r.Truncated {
		fmt.Fprintf(w, "(the %d least recently touched; more match: --limit 0 lists all)\n", limit)
	}
}

// capturedWords is what hold t charged, as list adds it to its legs
// (see chargedWords): a hold voided or expired after captures says what
// they took ("alice → shop 100.00 USD/2, captured 60.00 USD/2 in all,
// 40.00 USD/2 released"), never only "canceled"; "" for a transfer, and
// for a hold held with nothing captured.
func capturedWords(t *txnDoc, u *units) string {
	if w := t.chargedWords(u); w != "" {
		return ", " + w
	}
	return ""
}

// legSummary is a transaction's legs in a few words, their amounts
// through u.
func legSummary(t *txnDoc, u *units) string {
	if t.twoLegged {
		return fmt.Sprintf("%s → %s %s", human(t.legs[0].account), human(t.legs[1].account), u.of(t.legs[1].amount, t.legs[1].asset, false))
	}
	if len(t.legs) == 0 {
		if t.placeholder {
			return "(placeholder)"
		}
		return "-"
	}
	var parts []string
	for i, l := range t.legs {
		if i == 3 {
			parts = append(parts, fmt.Sprintf("+%d more", len(t.legs)-3))
			break
		}
		acct := human(l.account)
		if l.ledger != "" {
			acct = l.ledger + "/" + acct
		}
		parts = append(parts, acct+" "+u.of(l.amount, l.asset, true))
	}
	return strings.Join(parts, ", ")
}
