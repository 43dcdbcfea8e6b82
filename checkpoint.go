package twopc

// Checkpoints, and the records of history that left the log: what lets a
// statement sum an account's entries from a recent point, and what tells
// it that a sum could have missed one.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/twopc/twopc/internal/clockskew"
	"github.com/twopc/twopc/internal/schema"
)

// checkpointsSuffix names the checkpoints collection after the
// transactions collection: "transactions_checkpoints" by default.
const checkpointsSuffix = schema.CheckpointsSuffix

// Checkpoints: once a read has summed checkpointEvery entries or more
// past an account's last checkpoint, it records the account's balance
// through the last whole millisecond of them at least checkpointHorizon
// old (a commit is visible well within it), so that later reads sum only
// the entries after it. A Recoverer's removal checkpoint (WithHistory, no
// archive) takes only transactions committed at least checkpointHorizon
// ago (history.go checkpointRemoval).
//
// A checkpoint is saved for good: one that missed an entry committed
// before its time (a commit that became visible later than the horizon
// after its stamp) keeps every later sum from it wrong. The age is
// judged by the server's clock; on a sharded cluster, the router's,
// against stamps of each shard's clock, so the horizon holds only while
// every shard's clock is well within it of the router's (see
// statementHorizon, and PROTOCOL.md, Clocks). A minute: far above a
// commit's way to visibility and any skew NTP leaves, at the cost of
// summing a minute's entries past the checkpoint.
const (
	checkpointEvery   = 1000
	checkpointHorizon = clockskew.CheckpointHorizon
)

// maxHistoryReads bounds the readings of one answer that a pass moving
// history out of the log keeps invalidating (see statement.sum).
const maxHistoryReads = 10

// checkpoint is an account's balance through a time: its opening plus
// every entry with At at or before it, in the log, any archive and the
// transactions removed. One is written only from a read that saw every
// entry up to its time (see statement.sum), so every reader of the
// account takes it, whatever history it reads itself.
type checkpoint struct {
	ID      string    `bson:"_id"` // key|at in ms, zero-padded, and |removal for a removal checkpoint
	Key     string    `bson:"key"` // the account's entry key (see entryKey)
	At      time.Time `bson:"at"`
	Balance int64     `bson:"balance"`
	// Removal marks a checkpoint written before entries through At were
	// removed (WithHistory, no archive): no answer before it.
	Removal bool `bson:"removal,omitempty"`
}

// movedKey is the key of the archive markers in the checkpoints
// collection; an entry key (see entryKey) starts with a digit, never
// with "|".
const movedKey = "|moved"

// moved is an archive marker: a pass moving transactions to archive writes,
// before it moves them, the latest commit time among them (At only grows).
// A reader that does not read that archive cannot see those entries: it
// answers nothing that needs one (ErrHistoryRemoved), only what a
// checkpoint at or after At covers.
type moved struct {
	ID      string    `bson:"_id"` // "|moved|" and the archive's database.collection
	Key     string    `bson:"key"` // movedKey
	At      time.Time `bson:"at"`
	Archive string    `bson:"archive"` // database.collection
}

// markMoved records, before transactions committed through at move to
// archive, that entries through at may be there (see moved). An error
// means the pass must not move them.
func (c *Coordinator) markMoved(ctx context.Context, archive *mongo.Collection, at time.Time) error {
	name := schema.Namespace(archive)
	write := func(ctx context.Context) error {
		_, err := c.checkpoints.UpdateOne(ctx, bson.D{{Key: "_id", Value: movedKey + "|" + name}},
			bson.D{
				{Key: "$max", Value: bson.D{{Key: "at", Value: at}}},
				{Key: "$set", Value: bson.D{{Key: "key", Value: movedKey}, {Key: "archive", Value: name}}},
			}, options.UpdateOne().SetUpsert(true))
		return err
	}
	err := c.retry(ctx, write)
	if mongo.IsDuplicateKeyError(err) {
		err = c.retry(ctx, write) // two passes' upserts at once: it exists now
	}
	return err
}

// gone is what a reader knows of history that left the log, read at one
// point: the account's latest removal checkpoint, and the latest commit
// time moved to an archive this reader does not read. Two readings that
// are equal bracket a read that no removal and no such move could have
// shortened (see statement.sum).
type gone struct {
	removed time.Time // the latest removal checkpoint's At; zero: none
	moved   time.Time // the latest moved At of another archive; zero: none
	archive string    // that archive's database.collection
}

// past reports whether entries at or before t may be missing for the
// reader: through a removal, or in an archive it does not read. inclusive
// says whether an answer needs the entries at t itself too (a page from t,
// a balance through part of t's millisecond).
func (g gone) past(t time.Time, inclusive bool) error {
	for _, b := range []struct {
		at  time.Time
		how string
	}{{g.removed, "were removed"}, {g.moved, "were moved to " + g.archive + ", an archive this coordinator does not read (WithHistory)"}} {
		if b.at.IsZero() {
			continue
		}
		if t.IsZero() || t.Before(b.at) || (inclusive && t.Equal(b.at)) {
			return errorf("%w: entries through %v %s", ErrHistoryRemoved, b.at.UTC().Format(time.RFC3339Nano), b.how)
		}
	}
	return nil
}

// gone reads what left the log (see gone): two finds by the checkpoints'
// {key, at} index.
func (s *statement) gone(ctx context.Context) (gone, error) {
	var g gone
	cp, err := s.latestCheckpoint(ctx, bson.E{Key: "removal", Value: true})
	if err != nil {
		return g, err
	}
	if cp != nil {
		g.removed = cp.At
	}
	ms, err := findAll[moved](ctx, &s.c.config, s.c.checkpoints, bson.D{{Key: "key", Value: movedKey}})
	if err != nil {
		return g, errorf("twopc: read checkpoints: %w", err)
	}
	own := ""
	if s.archive != nil {
		own = schema.Namespace(s.archive)
	}
	for _, m := range ms {
		if m.Archive != own && m.At.After(g.moved) {
			g.moved, g.archive = m.At, m.Archive
		}
	}
	// An account opened after every entry moved (by OpenAccount's time,
	// the corrected clock, less the margin a transaction time is allowed
	// to lead the log by) has none of its entries among them: its entries
	// commit after it exists.
	if at, ok := s.doc.Lookup(fieldOpening, "at").DateTimeOK(); ok && !g.moved.IsZero() &&
		time.UnixMilli(at).Add(-s.c.markMargin).After(g.moved) {
		g.moved, g.archive = time.Time{}, ""
	}
	return g, nil
}

// errHistoryMoving is a read that a removal or a move to another archive
// may have shortened: it is read again.
var errHistoryMoving = errors.New("twopc: history moved during the read")

// sum returns the account's balance through hi: its opening plus every
// entry with At at or before hi that in keeps (a page's first entry keeps
// those up to itself within its millisecond: then before is true, and the
// base must lie before hi's millisecond). If the read summed
// checkpointEvery entries or more, it records a checkpoint through the
// last whole millisecond of them at least checkpointHorizon old.
//
// It holds by construction against passes moving history out of the log.
// A removal writes its checkpoint before it deletes, and a move to an
// archive its marker before it moves (see moved); so any deletion or move
// that could shorten this read's entries after its base wrote a record
// with a later time before it began. gone is read before the base and
// again after the scan: if the two readings differ, the read is made
// again from the newest base; if they are equal, no such pass began
// before the second reading, so none took an entry from the scan, which
// came before it. (A move to this reader's own archive takes nothing
// from it: see scan.) Only such a read records a checkpoint or a derived
// opening.
func (s *statement) sum(ctx context.Context, hi, now time.Time, before bool, in func(*entry) bool) (int64, error) {
	for range maxHistoryReads {
		g, err := s.gone(ctx)
		if err != nil {
			return 0, err
		}
		if err := g.past(hi, before); err != nil {
			return 0, err
		}
		at := bson.D{{Key: "$lte", Value: hi}}
		if before {
			at = bson.D{{Key: "$lt", Value: hi}}
		}
		cp, err := s.latestCheckpoint(ctx, bson.E{Key: "at", Value: at})
		if err != nil {
			return 0, err
		}
		var base int64
		var lo time.Time
		switch {
		case cp != nil:
			base, lo = cp.Balance, cp.At.Add(time.Millisecond)
			if err := g.past(cp.At, false); err != nil {
				return 0, err // no checkpoint past the move to another archive
			}
		case !g.removed.IsZero() || !g.moved.IsZero():
			return 0, g.past(time.Time{}, false)
		default:
			base, err = s.opening(ctx)
			if errors.Is(err, errHistoryMoving) {
				continue
			}
			if err != nil {
				return 0, err
			}
		}
		var all []entry
		if lo.IsZero() || !lo.After(hi) {
			if all, _, err = s.scan(ctx, lo, hi, false, -1); err != nil {
				return 0, err
			}
		}
		again, err := s.gone(ctx)
		if err != nil {
			return 0, err
		}
		if again != g {
			continue
		}
		sum, running := base, base
		var mark *checkpoint
		limit := now.Add(-s.c.checkpointHorizon)
		for i := range all {
			e := &all[i]
			running += e.Amount
			if in(e) {
				sum += e.Amount
			}
			// A checkpoint through e's millisecond, if it is whole here and old enough.
			if i >= s.c.checkpointEvery-1 && !e.At.After(limit) && (i == len(all)-1 || !all[i+1].At.Equal(e.At)) && e.At.Before(hi) {
				mark = &checkpoint{Key: s.key, At: e.At, Balance: running}
			}
		}
		if mark != nil {
			if err := s.saveCheckpoint(ctx, mark); err != nil {
				// Only the next read pays: it sums from the checkpoint before.
				s.c.logger.Debug("twopc: writing a statement checkpoint", "error", err)
			}
		}
		return sum, nil
	}
	return 0, errorf("%w: account %v: history kept moving out of the log while its entries were summed; try again", ErrInProgress, s.account)
}

// latestCheckpoint returns the account's latest checkpoint that also
// matches cond (a condition on at, or the removal flag); nil if none.
func (s *statement) latestCheckpoint(ctx context.Context, cond bson.E) (*checkpoint, error) {
	cps, err := findAll[checkpoint](ctx, &s.c.config, s.c.checkpoints, bson.D{{Key: "key", Value: s.key}, cond},
		options.Find().SetSort(bson.D{{Key: "at", Value: -1}}).SetLimit(1))
	if err != nil {
		return nil, errorf("twopc: read checkpoints: %w", err)
	}
	if len(cps) == 0 {
		return nil, nil
	}
	return &cps[0], nil
}

// saveCheckpoint records cp, once: a checkpoint that exists already (the
// same key, time and kind) is the same.
func (s *statement) saveCheckpoint(ctx context.Context, cp *checkpoint) error {
	cp.ID = fmt.Sprintf("%s|%020d", cp.Key, cp.At.UnixMilli())
	if cp.Removal {
		cp.ID += "|removal"
	}
	if _, err := s.c.checkpoints.InsertOne(ctx, cp); err != nil && !mongo.IsDuplicateKeyError(err) {
		return err
	}
	return nil
}

// checkpointThrough records a removal checkpoint of account in ledger at
// time at (see Recoverer.checkpointRemoval), from a read that saw every
// entry through it (see statement.sum). An account that is gone (or a
// tombstone) needs none.
func (c *Coordinator) checkpointThrough(ctx context.Context, ledger string, account any, at time.Time) error {
	s, err := c.statement(ctx, ledger, account)
	if errors.Is(err, ErrAccountNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	// A removal checkpoint at or after at, written by an earlier pass
	// while these transactions were still in the log (a transaction
	// finished later than one committed after it), counts them already.
	if cp, err := s.latestCheckpoint(ctx, bson.E{Key: "removal", Value: true}); err != nil {
		return err
	} else if cp != nil && !cp.At.Before(at) {
		return nil
	}
	now, err := c.log.serverNow(ctx)
	if err != nil {
		return err
	}
	bal, err := s.sum(ctx, at, now, false, func(*entry) bool { return true })
	if err != nil {
		return err
	}
	return s.saveCheckpoint(ctx, &checkpoint{Key: s.key, At: at, Balance: bal, Removal: true})
}
