package main

import (
	"context"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/twopc/twopc/internal/schema"
)

// lease is when a transaction another process owns becomes eligible for a
// takeover (recover) or a cancel: once untouched, by the server's clock,
// for longer than its lease, the longest StaleAfter recorded in it
// (leaseMs), and never sooner than --min-lease, the tool's own (see
// recovery.go and the Canceler: staleness is lastModified before the
// server's clock less that lease).
type lease struct {
	recorded time.Duration // leaseMs; 0 if none is recorded
	minLease time.Duration
	from     time.Time // lastModified + max(recorded, minLease)
	last     time.Time // lastModified
}

// leaseOf is t's lease, judged with the floor minLease.
func leaseOf(t *txnDoc, minLease time.Duration) lease {
	ms, _ := t.raw.Lookup(schema.Lease).AsInt64OK()
	l := lease{recorded: time.Duration(max(ms, 0)) * time.Millisecond, minLease: minLease, last: t.lastModified}
	l.from = t.lastModified.Add(max(l.recorded, minLease))
	return l
}

// words says, at now by the server's clock, how long the transaction has
// been untouched of which lease, and when it becomes eligible:
// "untouched for 3s of its lease 1m0s (recorded in it); eligible from
// 2026-11-26T10:00:03.000Z (in 57s, by the server's clock)".
func (l lease) words(now time.Time) string {
	of := fmt.Sprintf("its lease %v (recorded in it)", l.recorded)
	switch {
	case l.recorded == 0:
		of = fmt.Sprintf("--min-lease %v (no lease is recorded in it)", l.minLease)
	case l.minLease > l.recorded:
		of = fmt.Sprintf("--min-lease %v (its recorded lease is %v)", l.minLease, l.recorded)
	}
	return fmt.Sprintf("untouched for %v of %s; eligible from %s (in %v, by the server's clock)",
		age(now, l.last), of, timestamp(l.from), until(now, l.from))
}

// until is how long from now t is: rounded up for reading, never
// negative.
func until(now, t time.Time) time.Duration {
	d := t.Sub(now)
	switch {
	case d <= 0:
		return 0
	case d < time.Second:
		return d.Round(time.Millisecond)
	}
	return (d + time.Second - 1).Truncate(time.Second)
}

// waiting is t, left because its lease l (with the floor minLease) had not
// run out, as of now.
func (t *txnDoc) waiting(l lease, minLease time.Duration, now time.Time) waitingTxn {
	return waitingTxn{ID: t.idString(), State: t.state, Application: t.application,
		LastModified: t.lastModified, Lease: seconds(l.recorded), MinLease: seconds(minLease),
		EligibleAt: l.from, EligibleIn: seconds(l.from.Sub(now)), lease: l}
}

// waitingTxn is an unfinished transaction a recovery pass left because its
// lease had not run out, and when it becomes eligible.
type waitingTxn struct {
	ID           string    `json:"id"`
	State        string    `json:"state"`
	Application  string    `json:"application"`
	LastModified time.Time `json:"lastModified"`
	Lease        float64   `json:"leaseSeconds"` // recorded in it; 0 if none is
	MinLease     float64   `json:"minLeaseSeconds"`
	// EligibleAt is lastModified plus the longer of its lease and
	// --min-lease, by the server's clock; EligibleIn, how long after the
	// pass's end that is.
	EligibleAt time.Time `json:"eligibleAt"`
	EligibleIn float64   `json:"eligibleInSeconds"`
	lease      lease
}

// leftForLease lists what a pass that began at before (by the server's
// clock) left for a lease, reading the server's clock again at its end:
// in r.Waiting, every unfinished transaction written by the library (a
// transaction time) that the pass did not claim (r.Transactions) and
// that is not eligible yet at the end, so was not at any time during the
// pass; in r.MinLeaseSkipped, those of them left for the --min-lease
// floor alone: with a lease recorded shorter than it, untouched at the
// pass's start for longer than that lease. The pass judged by its own
// clock reading, taken between before and the end: one untouched at
// before for longer than its lease was stale by its lease for the pass,
// and one not eligible at the end was not for the pass either; so each
// listed was left for its lease, and only one whose age crossed a bound
// during the pass can go unlisted.
func (r *recoverReport) leftForLease(ctx context.Context, cn *conn, before time.Time) error {
	end, err := cn.serverNow(ctx)
	if err != nil {
		return err
	}
	r.end = end
	claimed := map[string]bool{}
	for _, t := range r.Transactions {
		claimed[t.ID] = true
	}
	cur, err := cn.txns.Find(ctx, bson.D{
		{Key: "_id", Value: bson.D{{Key: "$type", Value: "objectId"}}},
		{Key: schema.Created, Value: bson.D{{Key: "$exists", Value: true}}},
		{Key: schema.State, Value: bson.D{{Key: "$in", Value: bson.A{"initial", "pending", "canceling"}}}},
	}, options.Find().SetSort(bson.D{{Key: schema.LastModified, Value: 1}}))
	if err != nil {
		return fmt.Errorf("find the transactions left for their lease: %w", err)
	}
	defer cur.Close(ctx)
	for cur.Next(ctx) && len(r.Waiting) < maxListed {
		t := parseTxn(cur.Current)
		l := leaseOf(&t, r.minLease)
		if claimed[t.idString()] || !l.from.After(end) {
			continue // taken by the pass, or eligible: not left for its lease
		}
		r.Waiting = append(r.Waiting, t.waiting(l, r.minLease, end))
		if l.recorded > 0 && l.recorded < r.minLease && t.lastModified.Before(before.Add(-l.recorded)) {
			untouched := before.Sub(t.lastModified)
			r.MinLeaseSkipped = append(r.MinLeaseSkipped, floorSkip{ID: t.idString(), State: t.state, Application: t.application,
				Untouched: seconds(untouched), Lease: seconds(l.recorded), MinLease: seconds(r.minLease),
				untouched: untouched, lease: l.recorded, eligibleAt: l.from})
		}
	}
	if err := cur.Err(); err != nil {
		return fmt.Errorf("find the transactions left for their lease: %w", err)
	}
	return nil
}
