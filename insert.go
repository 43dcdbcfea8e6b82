package twopc

// The insert step: the guarded upsert that writes a new transaction, claimed
// and pending, alone (findAndModify) or grouped (one update command), and the
// one-_id-one-owner rule of a group.

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// insertUnknown is a transfer's error when its insert failed: it may have
// happened, or may still arrive. The caller gets the id, and Cancel
// settles it either way (a transaction that never arrived is canceled for
// good), or repeats the call with its key.
func insertUnknown(r *record, err error) error {
	return errorf("twopc: transfer %s: the insert's outcome is unknown; Cancel it, or repeat the transfer with its key: %w", r.ID.Hex(), err)
}

// insertFailed answers transfer t, whose insert failed with err. If any
// attempt may have been sent (sent), the outcome is unknown
// (insertUnknown). Otherwise this call wrote nothing: the caller gets no
// Txn and an error wrapping the cause. A keyed call is told so, not that
// the transfer was not made: a transaction an earlier call made under the
// key is as that call left it.
func insertFailed(t *transfer, sent bool, err error) {
	if sent {
		t.answer(t.rec.txn(), insertUnknown(t.rec, err))
		return
	}
	if !errors.Is(err, errNotSent) {
		err = errorf("%w: %w", errNotSent, err)
	}
	if t.rec.Key != "" {
		t.answer(nil, errorf("twopc: transfer with key %q: this call wrote nothing (%w); a transaction an earlier call made under the key, if any, stands as that call left it: repeat the call with the key, or GetByKey", t.rec.Key, err))
		return
	}
	t.answer(nil, errorf("twopc: transfer not made, %w", err))
}

// insertCall is one transfer's insert in the insert stage, and its
// outcome: the transaction under its _id as the write left it.
type insertCall struct {
	t *transfer
	// rec is the transaction the stage's write carries: a copy of t's,
	// which the write stamps (see stampInsert), so that a caller who gave
	// up on a write under way reads nothing the write sets. Its caller's
	// once join has returned with no error.
	rec  *record
	cur  *record
	err  error
	sent bool // a write of it may have reached the server
}

// insertAll is the insert stage's write. One insert is insert's single
// find-and-modify, which returns the document. Several are commands of the
// same guarded upserts, one statement each, at most writeBatch statements
// a command; a transaction counts as this call's, as written, only if the
// reply names its own statement (by index, as MongoDB numbers upserted
// statements) as having upserted its _id. Any other (an _id already taken,
// an earlier attempt's lost reply, a write error) is inserted again alone,
// which the upsert's guard makes harmless, and answered as a single insert
// is.
//
// One _id, one owner: calls whose transactions share an _id (one key,
// concurrent Reverse of one transfer, a fresh id that collided) never go
// in one command. The first of them does; the others are inserted alone
// after it, one at a time, and each learns from the document the
// find-and-modify returns whose claim the log holds, so exactly one call
// owns the transaction, as if the calls had come one after the other.
// Step hooks were called by each transfer's caller.
func (c *Coordinator) insertAll(ctx context.Context, calls []*insertCall) {
	// An insert alone goes as a group's does (see insertGroup), an
	// upsert that returns no document (it costs the server less than a
	// find-and-modify); the stored document is read only when the upsert
	// finds one there, by an insert alone after it.
	// The calls of each _id, in arrival order; the first of each goes in
	// the grouped commands.
	byID := map[bson.ObjectID][]*insertCall{}
	var ids []bson.ObjectID
	var grouped []*insertCall
	for _, q := range calls {
		id := q.rec.ID
		if byID[id] == nil {
			ids = append(ids, id)
			grouped = append(grouped, q)
		}
		byID[id] = append(byID[id], q)
	}
	for start := 0; start < len(grouped); start += c.writeBatch {
		c.log.insertGroup(ctx, grouped[start:min(start+c.writeBatch, len(grouped))], len(calls))
	}
	// The rest, alone: each _id's calls one after the other. Once one call
	// of the _id has the document as stored, it is every later call's
	// answer too (none of them wrote it): no need to send their inserts
	// only to be told so. A call with an outcome (inserted, or unknown
	// after a failed command) is left as it is.
	var alone []bson.ObjectID
	for _, id := range ids {
		if qs := byID[id]; len(qs) > 1 || qs[0].cur == nil && qs[0].err == nil {
			alone = append(alone, id)
		}
	}
	_ = parallel(len(alone), func(i int) error {
		var stored *record
		for _, q := range byID[alone[i]] {
			switch {
			case q.cur != nil || q.err != nil:
			case stored != nil:
				cp := *stored
				q.cur = &cp
			default:
				q.cur, q.err = c.log.insertOne(ctx, q.rec, &q.sent)
			}
			if q.err == nil && q.cur != nil {
				stored = q.cur
			}
		}
		return nil
	})
}

// insertGroup sends the guarded upserts of calls, whose _ids are distinct,
// in one command, and fills in the calls it inserted (cur) and those whose
// outcome the command left unknown (err); the others are left empty, to
// be inserted alone. of is the size of the stage's group, for the
// observers. Each transaction is stamped as the command is built, right
// before it is sent (see stampInsert).
func (g *txnLog) insertGroup(ctx context.Context, calls []*insertCall, of int) {
	if len(calls) == 1 && calls[0].rec.KeepMs > 0 {
		// A transaction WithHistory will move out of the log is inserted
		// alone, by a find-and-modify that returns its lastModified,
		// which its commit then requires (see commitMove): a late copy
		// of it is never committed.
		return
	}
	at := g.mark.stamp(ctx)
	models := make([]mongo.WriteModel, len(calls))
	for i, q := range calls {
		stampInsert(q.rec, q.sent, at)
		filter, update := insertWrite(q.rec)
		models[i] = updateByID(filter, update).SetUpsert(true)
	}
	start := time.Now()
	var res *mongo.BulkWriteResult
	sent := false
	err := g.retrySent(ctx, &sent, func(ctx context.Context) error {
		var err error
		res, err = g.txns.BulkWrite(ctx, models, unorderedWrite)
		return err
	})
	for _, q := range calls {
		q.sent = q.sent || sent // an insert alone after it may find its own document
	}
	var bwe mongo.BulkWriteException
	if err != nil && (!errors.As(err, &bwe) || bwe.WriteConcernError != nil || len(bwe.WriteErrors) == 0) {
		// Not answered, or not durably: every insert's outcome is unknown.
		for _, q := range calls {
			q.err = err
			g.transition(ctx, q.rec.ID, inserted, start, of, false, err)
		}
		return
	}
	for i, q := range calls {
		// The statement's own index, and its own _id: a reply that numbers
		// upserts otherwise (FerretDB v1's count) can only send a
		// transaction to be inserted again alone, never make two calls
		// owners of one.
		var id bson.ObjectID
		if res != nil {
			id, _ = res.UpsertedIDs[int64(i)].(bson.ObjectID)
		}
		if id != q.rec.ID {
			continue // inserted again alone
		}
		cur := *q.rec
		cur.LastModified = start // the server's clock set the stored one; not read back
		cur.guessed = true
		q.cur = &cur
		g.transition(ctx, cur.ID, inserted, start, of, true, nil)
	}
	g.readBackMovable(ctx, calls)
}

// movable reports whether WithHistory will move r out of the log, to its
// archive or removed: keyless, with a time to keep. A late insert can
// bring such a transaction back into the log unseen (see WithHistory).
func movable(r *record) bool { return r.KeepMs > 0 && r.Key == "" }

// readBackMovable reads the lastModified the server gave the transactions
// of calls that WithHistory will move out of the log (see movable), which
// a grouped insert does not return: their commit requires it (see
// commitMove), so that a commit delivered again after their move, when a
// late insert has brought a copy back, is refused. So no copy is ever
// committed, and a committed document is never a copy: statements tell an
// entry from a copy by the document alone. Transactions kept for good
// need not: nothing rebuilds them unseen. One find for the group. If it
// fails, those transfers' outcome is unknown to their callers, and they
// are left pending to recovery, which reads them before it moves them:
// none is committed without its lastModified.
func (g *txnLog) readBackMovable(ctx context.Context, calls []*insertCall) {
	mine := map[bson.ObjectID]*insertCall{}
	var ids bson.A
	for _, q := range calls {
		if r := q.cur; r != nil && r.guessed && movable(r) {
			mine[r.ID] = q
			ids = append(ids, r.ID)
		}
	}
	if len(ids) == 0 {
		return
	}
	var stored []record
	err := g.retry(ctx, func(ctx context.Context) error {
		cur, err := g.txns.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}},
			options.Find().SetProjection(bson.D{{Key: fieldLastModified, Value: 1}, {Key: fieldClaim, Value: 1}, {Key: fieldState, Value: 1}}))
		if err != nil {
			return err
		}
		stored = stored[:0]
		return cur.All(ctx, &stored)
	})
	if err == nil {
		for _, s := range stored {
			if q := mine[s.ID]; q != nil && s.Claim == q.cur.Claim && s.State == StatePending {
				q.cur.LastModified, q.cur.guessed = s.LastModified, false
			}
		}
	}
	for _, q := range mine {
		if q.cur.guessed {
			// Inserted, and not to be committed unguarded: unknown.
			q.cur, q.err = nil, cmpErr(err, errorf("twopc: transaction %s: its lastModified was not read back after its grouped insert", q.t.rec.ID.Hex()))
		}
	}
}

// inserted is the insert's move, from no state, as the observers hear it.
var inserted = move{step: StepInsert, to: StatePending}

// insert writes the new transaction alone (see insertOne), after calling
// the step hook.
func (c *Coordinator) insert(ctx context.Context, r *record, sent *bool) (*record, error) {
	if err := c.at(ctx, StepInsert, r); err != nil {
		*sent = true // a step hook's stop stands for a crash: unknown
		return nil, err
	}
	return c.log.insertOne(ctx, r, sent)
}

// stampInsert gives r its transaction time, at, by the clock corrected
// to the server's (lowWater.stamp), taken right before the insert write
// that carries r is built and sent: a transaction must reach the log
// within the mark's margin of its time (see lowWater), and that counts
// from the write, not from when its transfer was queued for it (a wait
// in the insert stage behind a write in flight, a step hook). Unless a
// write of r may have been sent already (sent): a later write of the same
// _id (a group's statement inserted again alone) carries the time the
// first carried, which the upsert's $setOnInsert kept if that one landed,
// so that r tells the time the log holds. The retries of one write send
// the document as built, with its time.
func stampInsert(r *record, sent bool, at time.Time) {
	if !sent {
		r.Created = at
	}
}

// insertWrite is the guarded upsert that inserts r, claimed and pending,
// with lastModified from the server's clock, keyed by its _id: a retry
// after a lost reply finds it rather than inserting a second one.
func insertWrite(r *record) (filter, update bson.D) {
	var doc bson.D
	if len(r.Legs) > 0 {
		doc = bson.D{{Key: fieldLegs, Value: r.Legs}}
	} else {
		doc = bson.D{{Key: "source", Value: r.Source}, {Key: "destination", Value: r.Destination}}
		if r.Asset != "" {
			doc = append(doc, bson.E{Key: fieldAsset, Value: r.Asset})
		}
	}
	doc = append(doc, bson.D{
		{Key: "value", Value: r.Value},
		{Key: fieldState, Value: r.State},
		{Key: fieldApplication, Value: r.Application},
		{Key: fieldCreated, Value: r.Created},
		{Key: fieldLease, Value: r.LeaseMs},
		{Key: fieldTakeover, Value: r.TakeoverMs},
	}...)
	if r.AllowNegative {
		doc = append(doc, bson.E{Key: fieldAllowNegative, Value: true})
	}
	if r.Hold {
		doc = append(doc, bson.E{Key: fieldHold, Value: true})
		if r.ExpiryMs > 0 {
			doc = append(doc, bson.E{Key: fieldExpiryMs, Value: r.ExpiryMs})
		}
		// The book's counts, one per leg, that its captures reserve
		// against (see capture.go).
		doc = append(doc, bson.E{Key: fieldCapturedLegs, Value: make([]int64, len(r.AllLegs()))})
	}
	if !r.CaptureOf.IsZero() {
		doc = append(doc, bson.E{Key: fieldCaptureOf, Value: r.CaptureOf}, bson.E{Key: fieldHoldLegs, Value: r.HoldLegs})
	}
	if r.KeepMs > 0 {
		doc = append(doc, bson.E{Key: fieldKeep, Value: r.KeepMs})
		if r.Archive != "" {
			doc = append(doc, bson.E{Key: fieldArchive, Value: r.Archive})
		}
	}
	if r.Key != "" {
		doc = append(doc, bson.E{Key: fieldKey, Value: r.Key})
	}
	if !r.RefundOf.IsZero() {
		doc = append(doc, bson.E{Key: fieldRefundOf, Value: r.RefundOf})
	}
	if len(r.Metadata) > 0 {
		doc = append(doc, bson.E{Key: fieldMetadata, Value: metadataDoc(r.Metadata)})
	}
	if keys := entryKeys(r); len(keys) > 0 {
		doc = append(doc, bson.E{Key: fieldEntryKeys, Value: keys})
	}
	// A fresh _id is nobody else's: the filter is the _id alone, which
	// every server serves from its index, and a retry that finds the
	// document only refreshes this transfer's own lastModified. A key's _id
	// may be an earlier transfer's, whose lastModified a retry must not
	// refresh (that would keep a dead owner's transaction from going
	// stale): the filter adds the claim, so that only this call's own
	// document matches and any other fails on the _id's uniqueness.
	filter = bson.D{{Key: "_id", Value: r.ID}}
	if r.Key != "" {
		filter = append(filter, bson.E{Key: fieldClaim, Value: r.Claim}) // the claim comes from the filter's equality
	} else {
		doc = append(doc, bson.E{Key: fieldClaim, Value: r.Claim})
	}
	update = bson.D{
		{Key: "$setOnInsert", Value: doc},
		{Key: "$currentDate", Value: bson.D{{Key: fieldLastModified, Value: true}}},
	}
	return filter, update
}

// insertOne writes the new transaction (see insertWrite) in one
// find-and-modify. If the _id is an earlier transfer's (same key), it
// returns that transaction; the caller compares claims to tell. It sets
// *sent once an attempt may have reached the server. r is stamped right
// before the write is sent, unless a write of it may have been sent
// already (see stampInsert).
func (g *txnLog) insertOne(ctx context.Context, r *record, sent *bool) (*record, error) {
	stampInsert(r, *sent, g.mark.stamp(ctx))
	filter, update := insertWrite(r)
	var cur record
	start := time.Now()
	err := g.retrySent(ctx, sent, func(ctx context.Context) error {
		return decodeReply(g.txns.FindOneAndUpdate(ctx, encoded(filter), encoded(update), upsertReturnAfter), &cur)
	})
	if mongo.IsDuplicateKeyError(err) {
		prior, err := g.read(ctx, r.ID)
		if prior == nil && errors.Is(err, ErrTxnNotFound) {
			// Taken, then not found: removed since (WithHistory), or not
			// yet visible at majority. Not ErrTxnNotFound: it may exist.
			err = errorf("the _id was taken by a document that is not found now (removed by WithHistory, or not yet majority-committed): %v", err)
		}
		if prior == nil {
			g.transition(ctx, r.ID, inserted, start, 1, false, err)
			return nil, err
		}
		g.transition(ctx, r.ID, inserted, start, 1, false, nil) // another transaction has the _id
		return prior, nil
	}
	if err != nil {
		g.transition(ctx, r.ID, inserted, start, 1, false, err)
		return nil, err
	}
	g.transition(ctx, r.ID, inserted, start, 1, cur.Claim == r.Claim, nil)
	if cur.Claim == r.Claim {
		// This call's insert: the server wrote lastModified by its clock.
		g.mark.written(cur.Created, cur.LastModified)
	}
	return &cur, nil
}

// keyCalls makes the calls of one coordinator with one idempotency key
// run one after another: a call whose key is the key of a call still
// running (a client retrying a request that is in flight) waits for that
// call to end, then runs, and finds the transaction it left, so it is
// answered with that transaction's outcome rather than ErrInProgress for
// a transfer this very coordinator is making. Calls of other coordinators
// are not known here; the insert's guard orders those (one _id, one owner).
type keyCalls struct {
	mu      sync.Mutex
	running map[string]chan struct{} // closed when the call running the key ends

	// waits, if set (tests only), is called, under mu, when a call starts
	// waiting for another with its key.
	waits func()
	// off (tests only) lets calls with one key run at once, so that tests
	// can put them in one insert group and check the group's own rule.
	off bool
}

// enter waits until no other call runs any of keys, then marks them as
// this call's until release is called. If ctx ends while it waits, it
// returns the context's error, wrapping errNotSent, and the key of the
// running call it was waiting for.
func (k *keyCalls) enter(ctx context.Context, keys []string) (release func(), waitedFor string, err error) {
	if len(keys) == 0 || k.off {
		return func() {}, "", nil
	}
	for {
		k.mu.Lock()
		var busy chan struct{}
		for _, key := range keys {
			if ch, ok := k.running[key]; ok {
				busy, waitedFor = ch, key
				break
			}
		}
		if busy == nil {
			mine := make(chan struct{})
			if k.running == nil {
				k.running = map[string]chan struct{}{}
			}
			for _, key := range keys {
				k.running[key] = mine
			}
			k.mu.Unlock()
			return func() {
				k.mu.Lock()
				for _, key := range keys {
					if k.running[key] == mine {
						delete(k.running, key)
					}
				}
				k.mu.Unlock()
				close(mine)
			}, "", nil
		}
		if k.waits != nil {
			k.waits()
		}
		k.mu.Unlock()
		select {
		case <-busy:
		case <-ctx.Done():
			return nil, waitedFor, errorf("%w: %w", errNotSent, ctx.Err())
		}
	}
}
