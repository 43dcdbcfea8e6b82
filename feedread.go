package twopc

// Reading a feed: only published batches, in number order; within a
// batch each event after its cause, then by the server's stamp of the move
// that settled it (sortBatch): never by Event.At, which can move (a
// cancel's is its lastModified, which a late copy of its insert
// refreshes), where a position must not. A batch's events are
// fixed once it is published (its run tags nothing more for it, and no
// other run's tag is taken for it), so a position is a batch and how
// many of its events were read.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// feedPosition is a Position read: batch b, of which n events were read.
type feedPosition struct{ b, n int64 }

// parsePosition reads a Position; "" is the start.
func parsePosition(p Position) (feedPosition, error) {
	if p == "" {
		return feedPosition{b: 1}, nil
	}
	bs, ns, ok := strings.Cut(string(p), ".")
	b, err1 := strconv.ParseInt(bs, 10, 64)
	n, err2 := strconv.ParseInt(ns, 10, 64)
	if !ok || err1 != nil || err2 != nil || b < 1 || n < 0 {
		return feedPosition{}, errorf("%w: position %q", ErrInvalidFeed, p)
	}
	return feedPosition{b: b, n: n}, nil
}

// notBefore is the filter of a group's document whose saved position
// (posB, posN) is not after p: a save of p may follow it.
func (p feedPosition) notBefore() bson.D {
	return bson.D{{Key: "$or", Value: bson.A{
		bson.D{{Key: "posB", Value: bson.D{{Key: "$lt", Value: p.b}}}},
		bson.D{{Key: "posB", Value: p.b}, {Key: "posN", Value: bson.D{{Key: "$lte", Value: p.n}}}},
	}}}
}

// String is the position as a Position.
func (p feedPosition) String() Position { return Position(fmt.Sprintf("%d.%d", p.b, p.n)) }

// Read returns up to limit events after position after ("" is the start
// of what the feed keeps), from the batches published, and the position
// after the last one returned (after itself if there is none yet). Delivery is at least
// once: a reader that keeps the position of the last event it handled,
// and resumes from it, gets every event, in the same order every time
// (Event.ID tells a repeat). ErrFeedTruncated if history moved or removed
// transactions of a batch at or after the position (the reader fell
// behind what the log keeps): never a silent gap. The call, every batch
// it reads, is bounded by the read bound (WithReadTimeout).
func (f *Feed) Read(ctx context.Context, after Position, limit int) (_ []Event, _ Position, err error) {
	ctx, b := f.c.readBound(ctx, f.readName())
	defer func() { err = b.explain(err); b.end() }()
	for try := 0; ; try++ {
		evs, pos, err := f.read1(ctx, after, limit)
		if after == "" && errors.Is(err, ErrFeedTruncated) && try < 10 {
			continue // history moved the start meanwhile: start again from it
		}
		return evs, pos, err
	}
}

// readName names the feed's reads in their errors (see plain).
func (f *Feed) readName() string { return fmt.Sprintf("feed %q", f.name) }

// read1 is one attempt of Read.
func (f *Feed) read1(ctx context.Context, after Position, limit int) ([]Event, Position, error) {
	if f.err != nil {
		return nil, after, f.err
	}
	if limit < 1 {
		return nil, after, errorf("%w: limit %d", ErrInvalidFeed, limit)
	}
	pos, err := parsePosition(after)
	if err != nil {
		return nil, after, err
	}
	d, err := f.read(ctx)
	if err != nil {
		return nil, after, err
	}
	if after == "" && pos.b <= d.Gone {
		pos = feedPosition{b: d.Gone + 1} // the start of what the feed keeps
	}
	if pos.b <= d.Gone {
		return nil, after, errorf("%w: feed %q, batch %d (history moved batches up to %d)", ErrFeedTruncated, f.name, pos.b, d.Gone)
	}
	first := pos.b
	var out []Event
	for len(out) < limit && pos.b <= d.Published {
		evs, err := f.readBatch(ctx, d, pos.b)
		if err != nil {
			return nil, after, err
		}
		if pos.n > int64(len(evs)) {
			again, err := f.read(ctx)
			if err != nil {
				return nil, after, err
			}
			if pos.b <= again.Gone {
				return nil, after, errorf("%w: feed %q, batch %d (history moved batches up to %d while it was read)", ErrFeedTruncated, f.name, pos.b, again.Gone)
			}
			return nil, after, errorf("%w: position %q: batch %d has %d events", ErrInvalidFeed, after, pos.b, len(evs))
		}
		b := pos.b
		for i := pos.n; i < int64(len(evs)) && len(out) < limit; i++ {
			pos = feedPosition{b: b, n: i + 1}
			if i+1 == int64(len(evs)) {
				pos = feedPosition{b: b + 1} // the batch read whole: the next one's start
			}
			e := evs[i]
			e.Pos = pos.String()
			out = append(out, e)
		}
		if pos.b == b && pos.n == int64(len(evs)) {
			pos = feedPosition{b: b + 1} // an empty batch, or one read whole before
		}
	}
	if pos.b == first && len(out) == 0 {
		return nil, pos.String(), nil // nothing read: nothing to confirm
	}
	// A second look, whenever a batch was read (with events or none):
	// history records a batch it takes transactions of before it moves
	// them, so if that record is still below the batches read, none of
	// their transactions was taken during the reads.
	again, err := f.read(ctx)
	if err != nil {
		return nil, after, err
	}
	if first <= again.Gone {
		return nil, after, errorf("%w: feed %q, batch %d (history moved batches up to %d while it was read)", ErrFeedTruncated, f.name, first, again.Gone)
	}
	return out, pos.String(), nil
}

// readBatch returns the events of published batch b in their order (see
// sortBatch).
func (f *Feed) readBatch(ctx context.Context, d *feedDoc, b int64) ([]Event, error) {
	tag := feedTag(b, d.owner(b))
	var all []found
	for _, slot := range feedSlots {
		field := feedField(f.name, slot)
		_, err := f.scan(ctx, bson.D{{Key: field, Value: tag}}, 0, func(raw bson.Raw) error {
			var r record
			if err := bson.Unmarshal(raw, &r); err != nil {
				return err
			}
			kind, at, ok := slotEvent(&r, slot)
			if !ok {
				// A tag on a slot with no event: a tag write delivered late
				// onto a late copy of a transaction history moved (a copy
				// never has an event). Skipped, never an error that would
				// stop every reader at this batch.
				return nil
			}
			txn := r.txn()
			switch kind {
			case EventHeld:
				txn.State = StateHeld
			case EventVoided, EventExpired, EventCanceled:
				txn.State = StateCanceled
			default:
				txn.State = StateApplied
			}
			all = append(all, found{e: Event{ID: eventID(&r, kind), Kind: kind, Txn: *txn, At: at}, slot: slot, rec: &r})
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	sortBatch(all)
	out := make([]Event, len(all))
	for i, x := range all {
		out[i] = x.e
	}
	return out, nil
}

// found is an event of a batch read, with its slot and its transaction
// as read.
type found struct {
	e    Event
	slot string
	rec  *record
}

// sortBatch orders a batch's events: each after its causes in the batch
// (a hold's end after its held event, a capture after its hold's held
// event, a refund or a reversal after its transfer's event, and a refund
// of a hold after its held event and its captures in the batch, those it
// takes from among them), and otherwise by the time of the move that
// settled each (the server's stamp: heldAt for a held event, eventAt for a
// final one), then by transaction and slot. An event's key is the latest
// of its own time and its causes' keys, and its depth one more than the
// deepest of theirs, so a cause sorts first. Every input is
// fixed once the batch is published (a settled slot's move is not made
// again; a late copy's insert refreshes lastModified, never these), so a
// position never moves.
func sortBatch(all []found) {
	type key struct {
		at    time.Time
		depth int
	}
	at := map[string][]int{}              // id.slot → its index in all
	captures := map[bson.ObjectID][]int{} // a hold → its captures' captured events in all
	for i, x := range all {
		at[x.rec.ID.Hex()+"."+x.slot] = []int{i}
		if x.slot == slotFinal && !x.rec.CaptureOf.IsZero() {
			captures[x.rec.CaptureOf] = append(captures[x.rec.CaptureOf], i)
		}
	}
	keys := make([]*key, len(all))
	var keyOf func(i, guard int) key
	keyOf = func(i, guard int) key {
		if keys[i] != nil {
			return *keys[i]
		}
		x := all[i]
		k := key{at: x.rec.EventAt}
		if x.slot == slotHeld {
			k.at = x.rec.HeldAt
		}
		var causes []int
		if x.slot == slotFinal {
			if p, slot, ok := causeOf(x.rec); ok {
				causes = append(causes, at[p.Hex()+"."+slot]...)
				if !x.rec.RefundOf.IsZero() {
					// A refund of a hold: after its held event and its
					// captures (those it takes from among them).
					causes = append(causes, at[p.Hex()+"."+slotHeld]...)
					causes = append(causes, captures[p]...)
				}
			} else if x.rec.Hold {
				causes = append(causes, at[x.rec.ID.Hex()+"."+slotHeld]...)
			}
		}
		if guard < len(all) {
			for _, j := range causes {
				c := keyOf(j, guard+1)
				if c.at.After(k.at) {
					k.at = c.at
				}
				k.depth = max(k.depth, c.depth+1)
			}
		}
		keys[i] = &k
		return k
	}
	idx := make([]int, len(all))
	for i := range all {
		keyOf(i, 0)
		idx[i] = i
	}
	slices.SortFunc(idx, func(i, j int) int {
		x, y := keys[i], keys[j]
		if c := x.at.Compare(y.at); c != 0 {
			return c
		}
		if c := x.depth - y.depth; c != 0 {
			return c
		}
		if c := bytes.Compare(all[i].rec.ID[:], all[j].rec.ID[:]); c != 0 {
			return c
		}
		return strings.Compare(all[i].slot, all[j].slot) // "h" before "x"
	})
	sorted := make([]found, len(all))
	for n, i := range idx {
		sorted[n] = all[i]
	}
	copy(all, sorted)
}

// All returns the events after position after, following the feed: when
// it has read every published batch it waits (WithFeedPoll) and reads
// again, until ctx is done or the loop stops. An error ends it, yielded
// with a zero Event (ctx's error when ctx is done). Each read is a Read,
// bounded as Read is (WithReadTimeout): the loop as a whole is not.
func (f *Feed) All(ctx context.Context, after Position) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		pos := after
		for {
			evs, next, err := f.Read(ctx, pos, f.cfg.batch)
			if err != nil {
				yield(Event{}, err)
				return
			}
			for _, e := range evs {
				if !yield(e, nil) {
					return
				}
			}
			pos = next
			if len(evs) == 0 {
				if err := sleepCtx(ctx, f.cfg.poll); err != nil {
					yield(Event{}, err)
					return
				}
			}
		}
	}
}
