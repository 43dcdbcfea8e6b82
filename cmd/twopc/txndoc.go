package main

import (
	"time"

	"github.com/twopc/twopc/internal/schema"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// txnDoc is a transaction document as the tool reads it: loosely, so that
// a document of any shape (another program's, one edited by hand) can be
// listed and shown.
type txnDoc struct {
	raw          bson.Raw
	id           bson.RawValue
	state        string
	application  string
	reason       string
	lastModified time.Time
	created      time.Time
	placeholder  bool
	twoLegged    bool // source and destination, not legs
	legs         []legDoc
}

// legDoc is one leg: a transfer's source (its debit) and destination (its
// credit), or an element of its legs.
type legDoc struct {
	ledger  string
	account bson.RawValue
	amount  int64
	asset   string // "": none
}

// parseTxn reads what the tool needs of a transaction document.
func parseTxn(raw bson.Raw) txnDoc {
	t := txnDoc{raw: raw, id: raw.Lookup("_id")}
	t.state, _ = raw.Lookup(schema.State).StringValueOK()
	t.application, _ = raw.Lookup(schema.Application).StringValueOK()
	t.reason, _ = raw.Lookup(schema.Reason).StringValueOK()
	t.lastModified, _ = raw.Lookup(schema.LastModified).TimeOK()
	t.created, _ = raw.Lookup(schema.Created).TimeOK()
	t.placeholder, _ = raw.Lookup(schema.Placeholder).BooleanOK()
	if arr, ok := raw.Lookup(schema.Legs).ArrayOK(); ok {
		vals, _ := arr.Values()
		for _, v := range vals {
			d, ok := v.DocumentOK()
			if !ok {
				continue
			}
			var l legDoc
			l.ledger, _ = d.Lookup("ledger").StringValueOK()
			l.account = d.Lookup("account")
			l.amount, _ = d.Lookup("amount").AsInt64OK()
			l.asset, _ = d.Lookup(schema.Asset).StringValueOK()
			t.legs = append(t.legs, l)
		}
		return t
	}
	src, dst := raw.Lookup("source"), raw.Lookup("destination")
	if src.Type != 0 || dst.Type != 0 {
		value, _ := raw.Lookup("value").AsInt64OK()
		t.twoLegged = true
		asset, _ := raw.Lookup(schema.Asset).StringValueOK()
		t.legs = []legDoc{{account: src, amount: -value, asset: asset}, {account: dst, amount: value, asset: asset}}
	}
	return t
}

// oid returns the transaction's _id as an ObjectID, which every
// transaction the library writes has.
func (t *txnDoc) oid() (bson.ObjectID, bool) { return t.id.ObjectIDOK() }

// idString is the _id as output shows it.
func (t *txnDoc) idString() string { return human(t.id) }

// final reports whether the state is done or canceled.
func final(state string) bool { return state == "done" || state == "canceled" }
