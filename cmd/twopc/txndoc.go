package main

import (
	"fmt"
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
	value        int64   // what it moves: a transfer's value, or what its legs credit
	captured     *int64  // what an ended hold's captures moved; nil if none is recorded
	released     *int64  // what an ended hold returned to its debited accounts; nil if none is recorded
	taken        []int64 // a hold's capturedLegs: what its captures made or in flight took of each leg
}

// takenCredit is what a hold's captures made or in flight credited: the
// credit legs' shares of its capturedLegs (of the first leg's asset).
func (t *txnDoc) takenCredit() int64 {
	legs := t.legs
	var n int64
	for i, x := range t.taken {
		if i < len(legs) && legs[i].amount > 0 && legs[i].asset == legs[0].asset {
			n += x
		}
	}
	return n
}

// charged is what hold t's captures took, as recorded when it ended
// (captured), else what its book says its captures made or in flight
// took (a hold still held, or one ended by an earlier build); ended
// reports that the hold ended with captured recorded, or by a void or
// expiry (then its book is what its captures took: every capture in it
// committed before the void).
func (t *txnDoc) charged() (n int64, ended bool) {
	switch {
	case t.captured != nil:
		return *t.captured, true
	case t.state == "canceled" || t.state == "canceling":
		return t.takenCredit(), true
	}
	return t.takenCredit(), false
}

// chargedWords says what hold t charged and released, in its own amounts
// (through u): "captured 8.00 USD/2 in all, 2.00 USD/2 released" for one
// ended, "captured nothing, 10.00 USD/2 released" for one voided or
// expired with no capture, "captured 6.00 USD/2 so far, 4.00 USD/2 still
// held" for one held; "" for a transaction that is not a hold, and for a
// hold held with nothing captured.
func (t *txnDoc) chargedWords(u *units) string {
	if !t.hold() {
		return ""
	}
	code, _ := t.asset()
	n, ended := t.charged()
	if !ended {
		if n == 0 || t.state != "held" {
			return ""
		}
		return fmt.Sprintf("captured %s so far, %s still held", u.of(n, code, false), u.of(t.value-n, code, false))
	}
	words := "captured nothing"
	if n > 0 {
		words = "captured " + u.of(n, code, false) + " in all"
	}
	released := t.value - n
	if t.released != nil {
		released = *t.released
	}
	if released > 0 && (t.state == "canceled" || t.state == "canceling" || t.state == "done" || t.state == "applied") {
		words += ", " + u.of(released, code, false) + " released"
	}
	return words
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
	t.value, _ = raw.Lookup("value").AsInt64OK()
	if n, ok := raw.Lookup(schema.Captured).AsInt64OK(); ok {
		t.captured = &n
	}
	if n, ok := raw.Lookup(schema.Released).AsInt64OK(); ok {
		t.released = &n
	}
	if arr, ok := raw.Lookup("capturedLegs").ArrayOK(); ok {
		vals, _ := arr.Values()
		for _, v := range vals {
			n, _ := v.AsInt64OK()
			t.taken = append(t.taken, n)
		}
	}
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
		t.twoLegged = true
		asset, _ := raw.Lookup(schema.Asset).StringValueOK()
		t.legs = []legDoc{{account: src, amount: -t.value, asset: asset}, {account: dst, amount: t.value, asset: asset}}
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

// hold reports whether t is a hold (Coordinator.Hold).
func (t *txnDoc) hold() bool {
	h, _ := t.raw.Lookup(schema.Hold).BooleanOK()
	return h
}

// assets are the asset codes of t's legs, each once, in leg order ("" for
// none).
func (t *txnDoc) assets() []string {
	var codes []string
	for _, l := range t.legs {
		if !contains(codes, l.asset) {
			codes = append(codes, l.asset)
		}
	}
	return codes
}

// asset is the one asset of t's legs, the unit of its value and of what
// it captured; one is false when its legs are of several assets (then
// its value is a sum of minor units of each).
func (t *txnDoc) asset() (code string, one bool) {
	codes := t.assets()
	if len(codes) > 1 {
		return "", false
	}
	if len(codes) == 1 {
		code = codes[0]
	}
	return code, true
}
