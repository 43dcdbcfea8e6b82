package twopc

// The engine: one call's transfers on their way through the steps (insert,
// apply, commit, settle), each step of all of them in shared writes (see
// stage.go), and what each caller is answered. Recovery's roll-forward reuses
// drive.

import (
	"context"
	"errors"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// engine carries one call's transfers through the steps (as mgo/txn's
// flusher does): Transfer, TransferLegs, TransferBatch and Reverse build
// one, and so does recovery's roll-forward of a taken-over transfer. The
// steps' writes are shared with other calls' engines through the
// coordinator's stages.
type engine struct {
	c *Coordinator
}

func newEngine(c *Coordinator) *engine { return &engine{c: c} }

// transfer is one transfer on its way through the steps: the transaction
// this call wrote (or means to), the claim once it owns it, and, once
// decided, the caller's answer.
type transfer struct {
	rec  *record
	o    *owned
	txn  *Txn
	err  error
	over bool // answered
	// driven ends the registration of a transaction this call took over
	// as driven by it (see resume); nil if none.
	driven func()
}

func (t *transfer) answer(txn *Txn, err error) { t.txn, t.err, t.over = txn, err, true }

// newTransfer makes the transaction of transfer t (validated), with key if
// not "", claimed by this coordinator and pending, under the policy of
// this coordinator, which it records.
func (c *Coordinator) newTransfer(t Txn, key string) *transfer {
	id := c.newID()
	if key != "" {
		id = keyID(key)
	}
	t.ID, t.State, t.Application, t.Key = id, StatePending, c.application, key
	// Provisional: the insert write stamps the time it carries (see
	// stampInsert). A call answered before that write returned (a step
	// hook's stop at StepInsert, a context that ended while the write was
	// under way) is told this one.
	t.Created = c.now().UTC().Truncate(time.Millisecond)
	legs := t.AllLegs()
	unnamed := make([]bool, len(legs))
	for i, l := range legs {
		unnamed[i] = l.Asset == ""
	}
	return &transfer{rec: &record{
		unnamed:       unnamed,
		Txn:           t,
		Claim:         c.claims.issue(),
		AllowNegative: c.allowNegative,
		LeaseMs:       c.staleAfter.Milliseconds(),
		TakeoverMs:    c.takeover().Milliseconds(),
		KeepMs:        c.history.keep.Milliseconds(),
		Archive:       c.history.archiveName(),
	}}
}

// run takes transfers ts through every step, each step of all of them in
// the same writes (see stage), and leaves each one's answer in it.
func (e *engine) run(ctx context.Context, ts []*transfer) {
	c := e.c
	var keys []string
	for _, t := range ts {
		if t.rec.Key != "" {
			keys = append(keys, t.rec.Key)
		}
	}
	release, waitedFor, err := c.keys.enter(ctx, keys)
	if err != nil {
		for _, t := range ts {
			if t.rec.Key != "" && t.rec.Key == waitedFor {
				// Its key's transaction is being made by the call waited
				// for: in progress, not "not made".
				t.answer(nil, errorf("twopc: transfer with key %q (transaction %s): %w: a call of this coordinator with the key is still running; repeat the call with the key, or GetByKey, for its outcome: %w",
					t.rec.Key, t.rec.ID.Hex(), ErrInProgress, err))
				continue
			}
			insertFailed(t, false, err)
		}
		return
	}
	defer release()
	if c.settler.isClosed() { // closed while it waited
		for _, t := range ts {
			t.answer(nil, ErrClosed)
		}
		return
	}
	// Transfers on different sets of ledgers go on apart, at once, from
	// their first read of a ledger on: one that is down or slow holds up
	// only the transfers with a leg on it.
	if sets := splitByLedgers(ts, func(t *transfer) []leg { return t.rec.legs() }); len(sets) > 1 {
		_ = parallel(len(sets), func(i int) error {
			e.runOn(ctx, sets[i])
			return nil
		})
		return
	}
	e.runOn(ctx, ts)
}

// runOn takes transfers ts, whose keys run has entered and whose legs are
// on one set of ledgers, from the check of their accounts to their end.
func (e *engine) runOn(ctx context.Context, ts []*transfer) {
	c := e.c
	// What can be known before the insert is refused here, with nothing
	// written: an amount above the ceiling, an id with no account, an
	// asset no account of the legs holds (a leg naming none takes its
	// account's: so before a repeat's legs are compared with its key's).
	e.refuseAbove(ctx, ts)
	e.refuseMissing(ctx, ts)
	e.fitAssets(ctx, ts)
	// On a sharded cluster, the shard keys of the log's collections and
	// of these ledgers' accounts are read once, before the first write
	// that needs them: a key the protocol does not rest on is refused,
	// with nothing written.
	if err := c.shards.need(ctx, ledgersOf(ts)...); err != nil {
		for _, t := range ts {
			if !t.over {
				insertFailed(t, false, err)
			}
		}
		return
	}
	claimedAt := c.now()
	calls := make([]*insertCall, 0, len(ts))
	for _, t := range ts {
		if t.over {
			continue
		}
		if err := ctx.Err(); err != nil {
			insertFailed(t, false, err)
			continue
		}
		// Its time is stamped when its insert is sent (see insertGroup),
		// not here: a wait in the insert stage does not count against
		// the mark's margin. The coordinator's first reading of the
		// server's clock, which the stamp is corrected by, is made here,
		// under the caller's context, rather than in the write.
		c.mark.sync(ctx)
		if err := c.at(ctx, StepInsert, t.rec); err != nil {
			t.answer(t.rec.txn(), insertUnknown(t.rec, err))
			continue
		}
		rec := *t.rec
		calls = append(calls, &insertCall{t: t, rec: &rec})
	}
	// A keyed transaction counts as driven by this call from before its
	// insert is sent: a repeat in this coordinator (keys that overlap:
	// one insert group) waits for it, not for its claim to be seen.
	driven := make(map[*transfer]func(), len(calls))
	for _, q := range calls {
		if q.rec.Key != "" {
			driven[q.t] = c.claims.drive(q.rec.ID)
		}
	}
	defer func() {
		for _, stop := range driven {
			stop()
		}
	}()
	if err := c.inserts.join(ctx, calls...); err != nil {
		// Left before its write (not sent), or given up on while a write
		// may still be filling calls in (unknown; the write's stamp is
		// left in the call's copy, which this goroutine does not read).
		sent := !errors.Is(err, errNotSent)
		for _, q := range calls {
			insertFailed(q.t, sent, err)
		}
		return
	}
	var mine, repeated []*transfer
	var priors []*record
	for _, q := range calls {
		t, r, cur, err := q.t, q.rec, q.cur, q.err
		t.rec = r // as written: stamped
		for attempt := 0; err == nil && r.Key == "" && cur.Claim != r.Claim && attempt < 3; attempt++ {
			// A fresh id is taken only by another transaction whose id
			// collided with it (or a placeholder Cancel wrote for that
			// one): not this transfer's to answer for. Take another id.
			r.ID = c.newID()
			q.sent = false // a new _id: nothing of it sent yet, stamped anew as it is
			cur, err = c.insert(ctx, r, &q.sent)
		}
		switch {
		case err != nil:
			insertFailed(t, q.sent, err)
		case cur.Claim != r.Claim:
			// A repeat: its key's transaction, made by an earlier call,
			// which this call does not drive.
			if stop := driven[t]; stop != nil {
				stop()
			}
			repeated, priors = append(repeated, t), append(priors, cur)
		case cur.State != StatePending:
			t.answer(c.outcome(cur))
		default:
			t.o = &owned{rec: cur, claimedAt: claimedAt}
			mine = append(mine, t)
		}
	}
	// The transfers it inserted are driven together; each repeat beside
	// them, alone once it took its transaction over, so that one waiting
	// for a live owner holds up no other transfer of a batch.
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.driveAll(ctx, mine, c.syncSettle) // the keyed ones registered as driven (above)
	}()
	_ = parallel(len(repeated), func(i int) error {
		t := repeated[i]
		if e.repeats(ctx, t, priors[i]) {
			defer t.driven()
			e.driveAll(ctx, []*transfer{t}, c.syncSettle)
		}
		return nil
	})
	<-done
}

// owned is a transaction this process holds the claim of, and when it sent
// the write that took the claim, by its own monotonic clock.
type owned struct {
	rec       *record
	claimedAt time.Time

	// What a first apply round made with other transfers left for this
	// one to do alone (see applyFirst): legs to apply again, or why a leg
	// cannot apply.
	next []leg
	why  error

	// settledFirst is set once a debit of the transfer, refused for
	// funds, had its account's committed legs settled first (see
	// spendCommitted): a debit refused again is refused for good.
	settledFirst bool
}

// drive takes an owned pending transaction to its commit point, or rolls it
// back when a leg cannot apply; then settles it now (sync) or in the
// background.
func (e *engine) drive(ctx context.Context, o *owned, sync bool) (*Txn, error) {
	t := &transfer{rec: o.rec, o: o}
	// Driven by this call: a repeat in this coordinator waits for it
	// before taking the transaction over (a Recoverer's roll-forward).
	defer e.c.claims.drive(o.rec.ID)()
	e.driveAll(ctx, []*transfer{t}, sync)
	return t.txn, t.err
}

// driveAll drives owned pending transfers ts (see drive), each step of
// all of them in the same writes: their legs in one command per ledger,
// their commits in one, their settling in one batch. A transfer that
// leaves the common path (a leg that cannot apply, an account that changed
// under the write, a lost claim) goes on alone, beside the others.
//
// Transfers on different sets of ledgers are driven apart, at once, so
// that a ledger that is down or slow holds up only the transfers with a
// leg on it, even within one TransferBatch.
func (e *engine) driveAll(ctx context.Context, ts []*transfer, syncSettle bool) {
	if len(ts) > 1 {
		sets := splitByLedgers(ts, func(t *transfer) []leg { return t.o.rec.legs() })
		if len(sets) > 1 {
			_ = parallel(len(sets), func(i int) error {
				e.driveAll(ctx, sets[i], syncSettle)
				return nil
			})
			return
		}
	}
	var ready, alone []*transfer
	switch len(ts) {
	case 0:
		return
	case 1:
		alone = ts
	default:
		ready, alone = e.applyFirst(ctx, ts)
	}
	rest := func(i int) error {
		t := alone[i]
		why, err := t.o.why, error(nil)
		if why == nil {
			todo, round := t.o.rec.legs(), 0
			if t.o.next != nil {
				todo, round = t.o.next, 1
			}
			why, err = e.applyLegs(ctx, t.o, todo, round)
		}
		e.applied(ctx, t, why, err)
		if !t.over {
			e.commitEach(ctx, []*transfer{t}, syncSettle)
		}
		return nil
	}
	if len(ready) == 0 {
		_ = parallel(len(alone), rest)
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = parallel(len(alone), rest)
	}()
	e.commitEach(ctx, ready, syncSettle)
	<-done
}

// applyFirst makes the first apply round of transfers ts together (see
// applyRound), and returns those whose legs all applied and those that go
// on alone; it answers those it is done with.
func (e *engine) applyFirst(ctx context.Context, ts []*transfer) (ready, alone []*transfer) {
	c := e.c
	var calls []*applyCall
	var of []*transfer
	for _, t := range ts {
		err := c.at(ctx, StepApply, t.o.rec)
		if err == nil {
			err = e.renew(ctx, t.o)
		}
		if err != nil {
			e.applied(ctx, t, nil, err)
			continue
		}
		calls = append(calls, &applyCall{o: t.o, todo: t.o.rec.legs()})
		of = append(of, t)
	}
	if err := c.applies.join(ctx, calls...); err != nil {
		for _, t := range of {
			e.applied(ctx, t, nil, err)
		}
		return nil, nil
	}
	for i, q := range calls {
		t := of[i]
		switch {
		case q.unsent || (q.err != nil && transient(ctx, q.err)):
			alone = append(alone, t) // from the first round again, alone
		case q.err != nil:
			e.applied(ctx, t, nil, q.err)
		case q.lost:
			e.applied(ctx, t, nil, errLost)
		case q.why != nil:
			alone = append(alone, t)
			t.o.why = q.why
		case len(q.next) > 0:
			t.o.next = q.next
			alone = append(alone, t)
		default:
			ready = append(ready, t)
		}
	}
	return ready, alone
}

// applied answers t when applying its legs ended in an error or with a leg
// that cannot apply (why: it is rolled back).
func (e *engine) applied(ctx context.Context, t *transfer, why, err error) {
	c := e.c
	o := t.o
	if errors.Is(err, errLost) {
		cur, rerr := c.log.read(ctx, o.rec.ID)
		if rerr != nil {
			t.answer(o.rec.txn(), rerr)
			return
		}
		t.answer(c.outcome(cur))
		return
	}
	if err != nil {
		t.answer(o.rec.txn(), errorf("twopc: transfer %s: %w", o.rec.ID.Hex(), err))
		return
	}
	if why != nil {
		t.answer(c.abort(ctx, o.rec, why))
	}
}

// commitEach commits transfers ts, whose legs all applied, in the commit
// stage, and settles those it moved: now (sync), in one batch, or in the
// background.
func (e *engine) commitEach(ctx context.Context, ts []*transfer, sync bool) {
	c := e.c
	var calls []*commitCall
	var of []*transfer
	for _, t := range ts {
		if err := c.at(ctx, StepCommit, t.o.rec); err != nil {
			t.answer(t.o.rec.txn(), errorf("twopc: transfer %s: %w", t.o.rec.ID.Hex(), err))
			continue
		}
		calls = append(calls, &commitCall{rec: t.o.rec})
		of = append(of, t)
	}
	if err := c.commits.join(ctx, calls...); err != nil {
		// Given up on: not sent (pending, as the call holds it), or in a
		// write that did not end within the stage's grace, which may still
		// be filling calls in (its outcome unknown).
		if !errors.Is(err, errNotSent) {
			err = commitUnknown(err, errors.New("the write it was in had not ended"))
		}
		for _, t := range of {
			t.answer(t.o.rec.txn(), errorf("twopc: transfer %s: %w", t.o.rec.ID.Hex(), err))
		}
		return
	}
	var settle []*record
	var settling []*transfer
	for i, q := range calls {
		t := of[i]
		switch {
		case q.err != nil:
			t.answer(q.cur.txn(), errorf("twopc: transfer %s: %w", t.o.rec.ID.Hex(), q.err))
		case !q.moved:
			t.answer(c.outcome(q.cur))
		case q.cur.State == StateHeld:
			t.answer(q.cur.txn(), nil) // a hold, made: nothing to settle
		default:
			settle = append(settle, q.cur)
			settling = append(settling, t)
		}
	}
	if len(settle) == 0 {
		return
	}
	now, errs := c.settleCommitted(ctx, settle, sync)
	for i, t := range settling {
		if errs[i] != nil {
			t.answer(now[i].txn(), errorf("twopc: transfer %s committed; settling: %w", now[i].ID.Hex(), errs[i]))
			continue
		}
		t.answer(now[i].txn(), nil)
	}
}

// settleCommitted settles committed transactions recs: in the background
// (in one batch at least) unless sync or the settler is closed, else now,
// together. It returns each as it now stands, and the error that left it
// unsettled, if any (recovery settles it then). What a sync settle cannot
// settle because ctx has ended (before it, when the commit was read back
// after ctx's end: see readAfter, or while it settles) is left to the
// background, and its error says so.
func (c *Coordinator) settleCommitted(ctx context.Context, recs []*record, sync bool) ([]*record, []error) {
	now := append([]*record(nil), recs...)
	errs := make([]error, len(recs))
	if (!sync || ctx.Err() != nil) && c.settler.enqueue(recs...) {
		if sync {
			for i := range errs {
				errs[i] = errorf("the call's context ended before it settled; settling in the background: %w", ctx.Err())
			}
		}
		return now, errs
	}
	done, left, _ := c.settle(ctx, recs)
	byID := map[bson.ObjectID]*record{}
	for _, r := range done {
		byID[r.ID] = r
	}
	failed := map[bson.ObjectID]error{}
	for _, u := range left {
		failed[u.rec.ID] = u.err
	}
	var later []int // cut off by ctx's end
	for i, r := range recs {
		if err := failed[r.ID]; err != nil {
			errs[i] = err
			if ctx.Err() != nil {
				later = append(later, i)
			}
		} else if d := byID[r.ID]; d != nil {
			now[i] = d
		}
	}
	if len(later) > 0 {
		rest := make([]*record, len(later))
		for k, i := range later {
			rest[k] = recs[i]
		}
		if c.settler.enqueue(rest...) {
			for _, i := range later {
				errs[i] = errorf("%w; settling in the background", errs[i])
			}
		}
	}
	return now, errs
}

// abort rolls back an owned pending transaction whose leg cannot apply,
// and returns why.
func (c *Coordinator) abort(ctx context.Context, r *record, why error) (*Txn, error) {
	cur, moved, err := c.log.advance(ctx, r, move{
		step: StepCancel, from: StatePending, to: StateCanceling, claim: r.Claim,
		set: bson.D{{Key: fieldReason, Value: reasonOf(why)}},
	})
	if err != nil {
		return cur.txn(), errorf("twopc: transfer %s: rolling back (%v): %w", r.ID.Hex(), why, err)
	}
	if !moved {
		return c.outcome(cur)
	}
	cur, err = c.rollback(ctx, cur)
	if err != nil {
		return cur.txn(), errorf("twopc: transfer %s: rolling back (%v): %w", r.ID.Hex(), why, err)
	}
	return cur.txn(), errorf("twopc: transfer %s: %w", r.ID.Hex(), why)
}

// outcome reports a transaction this call no longer drives: committed (or
// a hold made) is success, canceled the reason's error, anything else in
// progress.
func (c *Coordinator) outcome(r *record) (*Txn, error) {
	switch {
	case r.State.Committed(), r.State == StateHeld:
		return r.txn(), nil
	case r.State == StateCanceled || r.State == StateCanceling:
		return r.txn(), errorf("twopc: transfer %s is %s: %w", r.ID.Hex(), r.State, errorOfReason(r.Reason))
	case !r.State.Valid():
		return r.txn(), errorf("%w: transfer %s is %q", ErrUnknownState, r.ID.Hex(), r.State)
	default:
		return r.txn(), errorf("%w: transfer %s is %s, owned by %q", ErrInProgress, r.ID.Hex(), r.State, r.Application)
	}
}

// replay answers a Transfer whose key an earlier transfer holds.
func (c *Coordinator) replay(prior, asked *record) (*Txn, error) {
	if prior.Placeholder {
		return c.outcome(prior) // canceled before it arrived
	}
	if sameCall(prior, asked) != nil {
		return prior.txn(), errorf("%w: key %q is transaction %s (legs %v)",
			ErrKeyConflict, asked.Key, prior.ID.Hex(), prior.AllLegs())
	}
	return c.outcome(prior)
}

// ledgersOf returns the names of the ledgers ts, those not answered yet,
// have legs on.
func ledgersOf(ts []*transfer) []string {
	seen := map[string]bool{}
	var names []string
	for _, t := range ts {
		if t.over {
			continue
		}
		for _, lg := range t.rec.legs() {
			if !seen[lg.ledger] {
				seen[lg.ledger] = true
				names = append(names, lg.ledger)
			}
		}
	}
	return names
}
