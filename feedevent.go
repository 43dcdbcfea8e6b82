package twopc

// A feed's events, read from the transaction documents themselves: which
// events a transaction has reached, and the tags a feed's sequencer writes
// on it to number them. The transaction document is the outbox record:
// its commit, hold, capture, void, expiry and cancel are single-document
// writes already, and a tag is one more.

import (
	"strconv"
	"strings"
	"time"
)

// EventKind is what happened to a transaction, as a feed reports it.
type EventKind string

// The kinds of events a feed reports.
const (
	// EventCommitted: a transfer (Transfer, TransferLegs, TransferBatch,
	// a refund, a reversal) committed. At is its commit time.
	EventCommitted EventKind = "committed"
	// EventHeld: a hold's legs all applied; it waits for Capture, Void or
	// its expiry. At is when it was held.
	EventHeld EventKind = "held"
	// EventCaptured: a capture of a hold committed (Txn.CaptureOf names
	// the hold). At is its commit time.
	EventCaptured EventKind = "captured"
	// EventVoided: a hold ended by Void, its legs undone. At is when it
	// ended.
	EventVoided EventKind = "voided"
	// EventExpired: a hold ended by its expiry. At is when it ended.
	EventExpired EventKind = "expired"
	// EventCanceled: a transfer, hold or capture a call made ended
	// canceled, nothing moved. At is when it ended. Cancel's placeholder
	// for an id no transaction had, and a late copy of a transaction
	// (reason late_copy: its own insert delivered again after it left the
	// log), name transactions no caller made: they are not events.
	EventCanceled EventKind = "canceled"
)

// The two places a transaction has an event in, each tagged apart: the
// hold's held event, and the final one (committed, captured, voided,
// expired, canceled, or none).
const (
	slotHeld  = "h"
	slotFinal = "x"
)

// feedSlots are the two places, in their order within a transaction.
var feedSlots = [...]string{slotHeld, slotFinal}

// tagNone is a slot's tag when the transaction has no event there: a
// transaction that is not a hold has no held event; a placeholder, a late
// copy, and a hold ended by its captures (which are the events) have no
// final one. It takes the transaction out of the search for events not
// yet numbered.
const tagNone = "-"

// feedField is the field of a transaction document that holds feed
// name's tag for slot: a top-level field, so that the development
// server's index reads serve it as MongoDB's do.
func feedField(name, slot string) string { return "f" + slot + "_" + name }

// feedTag is the tag of an event numbered in batch b by epoch e: a
// string, compared only for equality.
func feedTag(b, e int64) string {
	return strconv.FormatInt(b, 36) + "." + strconv.FormatInt(e, 36)
}

// parseTag reads a tag back: its batch and epoch; ok false for tagNone
// or anything that is not a tag.
func parseTag(tag string) (b, e int64, ok bool) {
	bs, es, found := strings.Cut(tag, ".")
	if !found {
		return 0, 0, false
	}
	b, err1 := strconv.ParseInt(bs, 36, 64)
	e, err2 := strconv.ParseInt(es, 36, 64)
	return b, e, err1 == nil && err2 == nil && b > 0 && e > 0
}

// slotEvent is the event a transaction has in slot, as r shows it: its
// kind and time, or ok false if it has none there (yet, or ever: see
// slotSettled).
func slotEvent(r *record, slot string) (kind EventKind, at time.Time, ok bool) {
	switch slot {
	case slotHeld:
		if r.Hold && !r.HeldAt.IsZero() {
			return EventHeld, r.HeldAt, true
		}
		return "", time.Time{}, false
	}
	switch {
	case r.State.Committed() && r.Hold:
		return "", time.Time{}, false // ended by its captures: they are the events
	case r.State.Committed() && !r.CaptureOf.IsZero():
		return EventCaptured, r.CommittedAt, true
	case r.State.Committed():
		return EventCommitted, r.CommittedAt, true
	case r.State != StateCanceled || r.Placeholder || r.Reason == reasonLateCopy:
		return "", time.Time{}, false
	case r.Hold && r.Reason == reasonVoided:
		return EventVoided, r.LastModified, true
	case r.Hold && r.Reason == reasonExpired:
		return EventExpired, r.LastModified, true
	}
	return EventCanceled, r.LastModified, true
}

// slotSettled reports whether r's slot will have no other event than the
// one it shows now (or none): its held slot once the hold was held, or
// once the transaction is final without having been held; its final slot
// once the transaction is final. A feed tags a slot only then, so a tag
// never has to change.
func slotSettled(r *record, slot string) bool {
	final := r.State.Committed() || r.State == StateCanceled
	if slot == slotHeld {
		return final || r.State == StateHeld
	}
	return final
}

// eventID is an event's identity, the same at every delivery: the
// transaction and the kind. A transaction has at most one event in each
// of its two slots (held, final), of different kinds, and each slot's
// event is settled before it is tagged: no kind recurs on one
// transaction, and a capture is a transaction of its own.
func eventID(r *record, kind EventKind) string { return r.ID.Hex() + "." + string(kind) }
