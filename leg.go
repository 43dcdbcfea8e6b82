package twopc

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// The coordinator's side of the legs: it applies them under its claim,
// settles committed transactions, and removes fences, telling its ledger
// (ledger.go) what to write and deciding from its log (the transactions
// collection) what each outcome means.

// maxApplyRounds bounds the apply-inspect rounds of one drive: a round
// repeats only when an account changed between the write and the read.
const maxApplyRounds = 4

// maxUnsent bounds how often one attempt to apply legs joins the apply
// stage again after its call was left unsent (see applyRound).
const maxUnsent = 16

// errLost reports that this process no longer owns the transaction: it was
// taken over, canceled or settled by someone else.
var errLost = errors.New("twopc: claim lost")

func (r *record) legs() []leg {
	all := r.AllLegs()
	out := make([]leg, len(all))
	for i, l := range all {
		out[i] = leg{ledger: l.Ledger, account: l.Account, delta: l.Amount, marker: legMarker(r.ID, i)}
	}
	return out
}

// applyCall is one transfer's legs in the apply stage: the legs of an
// owned pending transaction to apply, and what the round found.
type applyCall struct {
	o    *owned
	todo []leg

	err  error // the write's or the read's outcome is unknown (or a hook stopped it)
	lost bool  // a leg is fenced: someone else settled or rolled back the transaction
	why  error // a leg cannot apply, and why
	next []leg // legs to try again: not applied, and nothing stops them now

	unsent bool // not sent: the claim was too old to send a leg on (see applyRound)
}

// applyLegs applies the legs of an owned pending transaction that are not
// applied yet, in one command per ledger. When not every leg reports
// applied, it reads the accounts to learn what actually happened rather
// than assume: a leg already applied (an earlier attempt, or a recoverer),
// a leg that cannot apply (returned as why, with the reason's error), or a
// fence (errLost: someone else settled or rolled back the transaction).
// Each round joins the apply stage, so that concurrent transfers share its
// commands; the first round of a batch was made by applyFirst.
func (c *Coordinator) applyLegs(ctx context.Context, o *owned, todo []leg, round int) (why error, err error) {
	for ; round < maxApplyRounds; round++ {
		var q *applyCall
		err := c.try(ctx, StepApply, o.rec, func(ctx context.Context) error {
			// The claim check sits right before every attempt (see
			// applyRound for the write's deadline). A call left unsent
			// (its claim grew too old while it waited for a write, or the
			// write ran out of time before its command) sent nothing: it
			// renews and joins again, which is not a failed attempt.
			for unsent := 0; ; unsent++ {
				if err := c.renew(ctx, o); err != nil {
					return err
				}
				q = &applyCall{o: o, todo: todo} // a new one: a write given up on may still fill the last in
				if err := c.applies.join(ctx, q); err != nil {
					return err
				}
				if !q.unsent {
					return q.err
				}
				if unsent == maxUnsent {
					return fmt.Errorf("the claim is too old to send the legs, %d times: %w", unsent+1, context.DeadlineExceeded)
				}
			}
		})
		switch {
		case err != nil:
			// Not answered, or answered with a write-concern error
			// (applied on the primary perhaps, but not durably: do not
			// judge by reading). Recovery will apply again.
			return nil, err
		case q.lost:
			return nil, errLost
		case q.why != nil:
			return q.why, nil
		case len(q.next) == 0:
			return nil, nil
		}
		todo = q.next
	}
	return nil, fmt.Errorf("legs of %s did not apply in %d rounds: the accounts keep changing", o.rec.ID.Hex(), maxApplyRounds)
}

// renew refreshes the owner's claim when an eighth of StaleAfter has
// passed since it was taken (by this process's monotonic clock, from when
// the claiming write was sent, so never later than the server's view). A
// leg write, sent with a deadline of half of StaleAfter after the claim, is
// therefore never sent on a claim another application may already have
// taken over. errLost if the claim is gone.
func (c *Coordinator) renew(ctx context.Context, o *owned) error {
	if c.now().Sub(o.claimedAt) < c.staleAfter/8 {
		return nil
	}
	sent := c.now()
	cur, moved, err := c.advance(ctx, o.rec, move{step: StepRenew, from: StatePending, to: StatePending, claim: o.rec.Claim})
	if err != nil {
		return err
	}
	if !moved {
		return errLost
	}
	o.rec, o.claimedAt = cur, sent
	return nil
}

// settle closes the legs of committed transactions on their accounts (pull
// the id from pendingTransactions and fence it, and move a credit from
// pendingCredit to the balance; bulk writes of up to writeBatch legs) and
// then moves those whose legs all closed to done (one write for the
// batch). Both writes are guarded and idempotent, so anyone may settle an
// applied transaction, any number of times. It returns the transactions it
// moved to done, and those it left applied with the step it stopped at and
// why.
//
// The transactions on one set of ledgers are settled apart from those on
// another, at once (see byLedgerSet): a ledger that is down or slow holds
// up, and fails, only the transactions with a leg on it.
func (c *Coordinator) settle(ctx context.Context, recs []*record) ([]*record, []unsettled, error) {
	var batch []*record
	var left []unsettled
	var firstErr error
	for _, r := range recs {
		if err := c.at(ctx, StepSettle, r); err != nil {
			firstErr = cmpErr(firstErr, err)
			left = append(left, unsettled{r, StepSettle, err})
			continue
		}
		batch = append(batch, r)
	}
	var mu sync.Mutex
	var done []*record
	parts := byLedgerSet(batch)
	_ = parallel(len(parts), func(i int) error {
		d, l, err := c.settleOn(ctx, parts[i])
		mu.Lock()
		defer mu.Unlock()
		done, left = append(done, d...), append(left, l...)
		firstErr = cmpErr(firstErr, err)
		return nil
	})
	return done, left, firstErr
}

// settleOn settles recs, whose step hooks were called (see settle).
func (c *Coordinator) settleOn(ctx context.Context, recs []*record) ([]*record, []unsettled, error) {
	var left []unsettled
	failed, firstErr := c.closeLegs(ctx, recs)
	var ready []*record
	for i, r := range recs {
		if why := failed[i]; why != nil {
			left = append(left, unsettled{r, StepSettle, why})
			continue
		}
		if err := c.at(ctx, StepDone, r); err != nil {
			firstErr = cmpErr(firstErr, err)
			left = append(left, unsettled{r, StepDone, err})
			continue
		}
		ready = append(ready, r)
	}
	done, err := c.finish(ctx, ready, move{step: StepDone, from: StateApplied, to: StateDone, anyClaim: true})
	if err != nil {
		for _, r := range ready {
			left = append(left, unsettled{r, StepDone, err})
		}
	}
	return done, left, cmpErr(firstErr, err)
}

// byLedgerSet splits recs by the set of ledgers their legs are on, in the
// order each set first appears.
func byLedgerSet(recs []*record) [][]*record {
	return splitByLedgers(recs, func(r *record) []leg { return r.legs() })
}

// splitByLedgers splits xs by the set of ledgers the legs of each are on
// (see ledgerSet), in the order each set first appears.
func splitByLedgers[T any](xs []T, legs func(T) []leg) [][]T {
	var parts [][]T
	at := map[string]int{}
	for _, x := range xs {
		k := ledgerSet(legs(x))
		i, ok := at[k]
		if !ok {
			i = len(parts)
			at[k] = i
			parts = append(parts, nil)
		}
		parts[i] = append(parts[i], x)
	}
	return parts
}

// unsettled is a committed transaction settle left applied: the step it
// stopped at, and why.
type unsettled struct {
	rec  *record
	step Step
	err  error
}

// finish moves recs, whose step hooks were already called, with the
// claim-free move m: one guarded update for all of them, or one
// find-and-modify for a single transaction so that its caller gets the
// stored document back.
//
// The observers are told of each transaction's move. A single one that
// does not match was finished by someone else (or by an attempt whose
// reply was lost): not moved. The update of several says only how many
// moved, so each is reported moved when it succeeds.
func (c *Coordinator) finish(ctx context.Context, recs []*record, m move) ([]*record, error) {
	m.set = append(m.set, bson.E{Key: fieldFences, Value: true})
	m.retain = c.fenceRetention
	start := time.Now()
	switch len(recs) {
	case 0:
		return nil, nil
	case 1:
		var cur record
		err := c.retry(ctx, func(ctx context.Context) error {
			return c.txns.FindOneAndUpdate(ctx, m.filter(recs[0].ID), m.update(),
				options.FindOneAndUpdate().SetReturnDocument(options.After)).Decode(&cur)
		})
		if errors.Is(err, mongo.ErrNoDocuments) {
			// Finished already: by someone else, or by an attempt whose
			// reply was lost. Re-read to say which state it is in.
			now, err := c.read(ctx, recs[0].ID)
			c.transition(ctx, recs[0].ID, m, start, 1, false, nil)
			if err != nil || now.State != m.to {
				return nil, err
			}
			return []*record{now}, nil
		}
		c.transition(ctx, recs[0].ID, m, start, 1, err == nil, err)
		if err != nil {
			return nil, err
		}
		return []*record{&cur}, nil
	}
	ids := make(bson.A, len(recs))
	for i, r := range recs {
		ids[i] = r.ID
	}
	filter := m.filter(bson.ObjectID{})
	filter[0].Value = bson.D{{Key: "$in", Value: ids}}
	err := c.retry(ctx, func(ctx context.Context) error {
		_, err := c.txns.UpdateMany(ctx, filter, m.update())
		return err
	})
	for _, r := range recs {
		c.transition(ctx, r.ID, m, start, len(recs), err == nil, err)
	}
	if err != nil {
		return nil, err
	}
	out := make([]*record, len(recs))
	for i, r := range recs {
		cp := *r
		cp.State = m.to
		out[i] = &cp
	}
	return out, nil
}

// unfence removes the fences of final transactions from their accounts and
// moves each account's fence line forward past them, in one atomic update
// per account, and then clears the transactions' fences flag. The fence
// line then refuses their legs however late they arrive, so removing a
// fence never depends on time.
//
// A fence line is moved past a transaction only if no transaction still
// unfinished (initial, pending, canceling) that touches the same account
// was created at or before it: the line would refuse that transaction's
// remaining legs (which is safe, it rolls back, but needless). Time and
// retention only decide when fences go, never whether a leg applies.
//
// It tells report what became of each transaction it takes on: unfenced
// (moved), held back by an older unfinished transaction (not moved), or
// failed.
func (c *Coordinator) unfence(ctx context.Context, recs []*record, report func(r *record, outcome Outcome, err error)) (int, error) {
	var firstErr error
	var due []*record
	for _, r := range recs {
		if r.foreign() || r.Placeholder {
			continue
		}
		if err := c.at(ctx, StepUnfence, r); err != nil {
			firstErr = cmpErr(firstErr, err)
			report(r, OutcomeError, err)
			continue
		}
		due = append(due, r)
	}
	if len(due) == 0 {
		return 0, firstErr
	}
	open, err := c.openBefore(ctx, due)
	if err != nil {
		for _, r := range due {
			report(r, OutcomeError, err)
		}
		return 0, cmpErr(firstErr, err)
	}
	var ready []*record
	for _, r := range due {
		if open.clear(r) { // else an older unfinished transaction shares an account
			ready = append(ready, r)
		} else {
			report(r, OutcomeNotMoved, nil)
		}
	}
	failed, err := c.unfenceLegs(ctx, ready)
	firstErr = cmpErr(firstErr, err)
	var ids bson.A
	var cleared []*record
	for i, r := range ready {
		if why := failed[i]; why != nil {
			report(r, OutcomeError, why)
			continue
		}
		ids = append(ids, r.ID)
		cleared = append(cleared, r)
	}
	if len(ids) == 0 {
		return 0, firstErr
	}
	var n int64
	err = c.retry(ctx, func(ctx context.Context) error {
		res, err := c.txns.UpdateMany(ctx,
			bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}, {Key: fieldFences, Value: true}},
			bson.D{{Key: "$unset", Value: bson.D{{Key: fieldFences, Value: ""}}}})
		if res != nil {
			n = res.ModifiedCount
		}
		return err
	})
	for _, r := range cleared {
		report(r, outcomeOf(err == nil, err), err)
	}
	return int(n), cmpErr(firstErr, err)
}

// maxOpenScan bounds the unfinished transactions one unfence reads.
const maxOpenScan = 1000

// openTxns is what unfence knows of the unfinished transactions: the
// earliest transaction time of those touching each account, and, if it
// could not read them all, a time before which it saw every one.
type openTxns struct {
	earliest map[string]time.Time
	cut      time.Time // zero: all were read
}

// clear reports whether r's fences may go: no unfinished transaction on
// its accounts was created at or before it.
func (o openTxns) clear(r *record) bool {
	if !o.cut.IsZero() && !r.Created.Before(o.cut) {
		return false
	}
	for _, l := range r.legs() {
		if t, ok := o.earliest[legKey(l.ledger, l.account)]; ok && !r.Created.Before(t) {
			return false
		}
	}
	return true
}

// openBefore reads the unfinished transactions created no later than the
// latest of recs, oldest first, at most maxOpenScan of them.
func (c *Coordinator) openBefore(ctx context.Context, recs []*record) (openTxns, error) {
	latest := recs[0].Created
	for _, r := range recs[1:] {
		if r.Created.After(latest) {
			latest = r.Created
		}
	}
	o := openTxns{earliest: map[string]time.Time{}}
	var open []struct {
		Source      bson.RawValue `bson:"source"`
		Destination bson.RawValue `bson:"destination"`
		Legs        []struct {
			Ledger  string        `bson:"ledger"`
			Account bson.RawValue `bson:"account"`
		} `bson:"legs"`
		Created time.Time `bson:"created"`
	}
	err := c.retry(ctx, func(ctx context.Context) error {
		cur, err := c.txns.Find(ctx, bson.D{
			{Key: fieldState, Value: bson.D{{Key: "$in", Value: bson.A{StateInitial, StatePending, StateCanceling}}}},
			{Key: fieldCreated, Value: bson.D{{Key: "$lte", Value: latest}}},
		}, options.Find().
			SetProjection(bson.D{{Key: "source", Value: 1}, {Key: "destination", Value: 1}, {Key: fieldLegs + ".account", Value: 1}, {Key: fieldLegs + ".ledger", Value: 1}, {Key: fieldCreated, Value: 1}}).
			SetSort(bson.D{{Key: fieldCreated, Value: 1}}).
			SetLimit(maxOpenScan))
		if err != nil {
			return err
		}
		open = open[:0]
		return cur.All(ctx, &open)
	})
	if err != nil {
		return o, err
	}
	for _, t := range open {
		keys := map[string]bool{}
		for _, id := range []bson.RawValue{t.Source, t.Destination} {
			if id.Type != 0 {
				keys[legKey("", id)] = true
			}
		}
		for _, l := range t.Legs {
			keys[legKey(l.Ledger, l.Account)] = true
		}
		for key := range keys {
			if e, ok := o.earliest[key]; !ok || t.Created.Before(e) {
				o.earliest[key] = t.Created
			}
		}
	}
	if len(open) == maxOpenScan {
		o.cut = open[len(open)-1].Created
	}
	return o, nil
}

// cmpErr keeps the first error.
func cmpErr(first, next error) error {
	if first != nil {
		return first
	}
	return next
}

// onLedgers runs f on every ledger of the coordinator (see parallel), and
// returns the first error. f must do nothing on a ledger none of its work
// is on.
func (c *Coordinator) onLedgers(f func(*Ledger) error) error {
	ledgers := make([]*Ledger, 0, len(c.ledgers))
	for _, l := range c.ledgers {
		ledgers = append(ledgers, l)
	}
	return parallel(len(ledgers), func(i int) error { return f(ledgers[i]) })
}

// perLedger runs f once for each ledger that legs are on, with that
// ledger's legs and their indexes in legs (see parallel), and returns the
// first error; ErrUnknownLedger if a leg is on a ledger the coordinator
// was not given.
func (c *Coordinator) perLedger(legs []leg, f func(l *Ledger, mine []leg, idx []int) error) error {
	type part struct {
		l    *Ledger
		mine []leg
		idx  []int
	}
	var parts []*part
	byName := map[string]*part{}
	for i, lg := range legs {
		p := byName[lg.ledger]
		if p == nil {
			l, ok := c.ledgers[lg.ledger]
			if !ok {
				return fmt.Errorf("%w: %q", ErrUnknownLedger, lg.ledger)
			}
			p = &part{l: l}
			byName[lg.ledger] = p
			parts = append(parts, p)
		}
		p.mine = append(p.mine, lg)
		p.idx = append(p.idx, i)
	}
	return parallel(len(parts), func(i int) error { return f(parts[i].l, parts[i].mine, parts[i].idx) })
}

// parallel runs f(0) to f(n-1), at once when n > 1 (each may be a round
// trip to another deployment: they overlap), and returns the first error.
func parallel(n int, f func(i int) error) error {
	if n == 1 {
		return f(0)
	}
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(i); err != nil {
				mu.Lock()
				first = cmpErr(first, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return first
}

// knows checks that every leg of legs is on a ledger of the coordinator.
func (c *Coordinator) knows(legs []leg) error {
	for _, lg := range legs {
		if _, ok := c.ledgers[lg.ledger]; !ok {
			return fmt.Errorf("%w: %q", ErrUnknownLedger, lg.ledger)
		}
	}
	return nil
}

// applyRound is the apply stage's write: one round of calls, whose legs
// are all on one set of ledgers (see applyStages), the legs of all of them
// sent in commands of at most writeBatch statements per ledger (the
// ledgers' at once), each under its own guard. When every leg reports
// applied, that is all. When not, it reads the accounts of all of them
// (one read per ledger) and judges each leg (see judge), so that a leg
// that cannot apply fails only its own transfer.
//
// The write carries a deadline at which the oldest claim among the calls
// could start to look stale (half of StaleAfter after it was taken): the
// driver will not send it later, and passes the rest as maxTimeMS so that
// the server gives up too. A call whose claim is within a quarter of
// StaleAfter of that deadline is not sent (unsent): its caller renews the
// claim and tries again, so a group's deadline is never closer than that.
// A write that fails by the group's deadline leaves each call's outcome
// unknown and transient: its caller applies again, alone, under its own.
func (c *Coordinator) applyRound(ctx context.Context, calls []*applyCall) {
	now := c.now()
	var deadline time.Time
	var legs []leg
	var recs []*record
	var owner []*applyCall
	for _, q := range calls {
		// Not sent on a claim a quarter of StaleAfter from its deadline:
		// its caller renews it first (renew does, long before that age:
		// at an eighth), so that one old claim never gives a group's
		// write less than that.
		d := q.o.claimedAt.Add(c.staleAfter / 2)
		if d.Sub(now) < c.staleAfter/4 {
			q.unsent = true
			continue
		}
		if deadline.IsZero() || d.Before(deadline) {
			deadline = d
		}
		for _, l := range q.todo {
			legs, recs, owner = append(legs, l), append(recs, q.o.rec), append(owner, q)
		}
	}
	if len(legs) == 0 {
		return
	}
	wctx, cancel := context.WithTimeout(ctx, deadline.Sub(now))
	modified, refused, unsent, err := c.applyAll(wctx, recs, legs)
	cancel()
	if err != nil {
		for _, q := range owner {
			q.err = err
		}
		return
	}
	for i := range unsent {
		owner[i].unsent = true // its caller renews and sends it again
	}
	if modified == int64(len(legs)-len(unsent)) {
		return // every leg sent applied
	}
	var judged []leg // the legs of the calls that were sent whole
	var of []int     // their indexes in legs
	for i, q := range owner {
		if q.unsent {
			continue
		}
		if len(of) == 0 || owner[of[len(of)-1]] != q {
			q.err = c.at(ctx, StepInspect, q.o.rec)
		}
		judged, of = append(judged, legs[i]), append(of, i)
	}
	if len(judged) == 0 {
		return
	}
	accts, err := c.inspectLegs(ctx, judged)
	for j, l := range judged {
		i := of[j]
		q := owner[i]
		switch {
		case q.err != nil || q.lost || q.why != nil:
			continue
		case err != nil:
			q.err = err
			continue
		}
		verdict, why := judge(accts[j], q.o.rec, l)
		if msg, ok := refused[i]; ok && verdict == legRetry {
			// The server refused the write for a reason the account's
			// fields do not show: a schema validator, a
			// pendingTransactions that is not an array, a document grown
			// too large. It will refuse it again.
			verdict, why = legBlocked, fmt.Errorf("%w: account %v: the server refused the leg: %s", ErrInvalidAccount, l.account, msg)
		}
		switch verdict {
		case legFenced:
			q.lost = true
		case legBlocked:
			q.why = why
		case legRetry:
			q.next = append(q.next, l)
		}
	}
}

// applyAll sends the guarded writes that apply legs, each of transaction
// recs[i], one command per ledger, the ledgers' at once. It returns how
// many applied, the server's reasons for the legs it refused (by index in
// legs), and any other error: a failure whose outcome is unknown, or a
// write-concern error.
func (c *Coordinator) applyAll(ctx context.Context, recs []*record, legs []leg) (int64, map[int]string, map[int]bool, error) {
	var mu sync.Mutex
	var modified int64
	refused := map[int]string{}
	unsent := map[int]bool{}
	err := c.perLedger(legs, func(l *Ledger, mine []leg, idx []int) error {
		of := make([]*record, len(idx))
		for j, i := range idx {
			of[j] = recs[i]
		}
		n, why, sent, err := l.apply(ctx, of, mine)
		mu.Lock()
		defer mu.Unlock()
		modified += n
		for j, msg := range why {
			refused[idx[j]] = msg
		}
		for j := sent; j < len(idx); j++ {
			unsent[idx[j]] = true
		}
		return err
	})
	return modified, refused, unsent, err
}

// inspect reads the accounts of legs of r, in order, from their ledgers
// (at once); nil for a missing one.
func (c *Coordinator) inspect(ctx context.Context, r *record, legs []leg) ([]*account, error) {
	if err := c.at(ctx, StepInspect, r); err != nil {
		return nil, err
	}
	return c.inspectLegs(ctx, legs)
}

// inspectLegs reads the accounts of legs, in order, one read per ledger,
// the ledgers' at once; nil for a missing one.
func (c *Coordinator) inspectLegs(ctx context.Context, legs []leg) ([]*account, error) {
	out := make([]*account, len(legs))
	err := c.perLedger(legs, func(l *Ledger, mine []leg, idx []int) error {
		accts, err := l.inspect(ctx, mine)
		for j, a := range accts { // distinct indexes: no lock needed
			out[idx[j]] = a
		}
		return err
	})
	return out, err
}

// closeLegs closes the legs of committed transactions recs on every
// ledger, and returns, by index in recs, why a leg of a transaction may
// not have closed.
func (c *Coordinator) closeLegs(ctx context.Context, recs []*record) (map[int]error, error) {
	return c.eachLedgerFailed(ctx, recs, (*Ledger).closeLegs)
}

// unfenceLegs removes the fences of final transactions recs on every
// ledger (see Ledger.unfenceLegs).
func (c *Coordinator) unfenceLegs(ctx context.Context, recs []*record) (map[int]error, error) {
	return c.eachLedgerFailed(ctx, recs, (*Ledger).unfenceLegs)
}

// eachLedgerFailed runs write on every ledger (it skips legs of other
// ledgers) and returns, by index in recs, why a transaction may not have
// been written: the error of a ledger it has a leg on, never another's. A
// transaction naming a ledger the coordinator lacks is failed. The second
// result is the first of those errors.
func (c *Coordinator) eachLedgerFailed(ctx context.Context, recs []*record, write func(*Ledger, context.Context, []*record) (map[int]bool, error)) (map[int]error, error) {
	failed := map[int]error{}
	var firstErr error
	for i, r := range recs {
		if err := c.knows(r.legs()); err != nil {
			failed[i] = fmt.Errorf("transaction %s: %w", r.ID.Hex(), err)
			firstErr = cmpErr(firstErr, failed[i])
		}
	}
	var mu sync.Mutex
	err := c.onLedgers(func(l *Ledger) error {
		f, err := write(l, ctx, recs)
		mu.Lock()
		defer mu.Unlock()
		for i := range f {
			why := err
			if why == nil {
				why = fmt.Errorf("transaction %s: a write to its leg on ledger %q may not have been applied", recs[i].ID.Hex(), l.name)
			}
			failed[i] = cmpErr(failed[i], why)
		}
		return err
	})
	return failed, cmpErr(firstErr, err)
}

// fenceAndUndo closes the legs of canceling transaction r on every ledger
// (see Ledger.fenceAndUndo).
func (c *Coordinator) fenceAndUndo(ctx context.Context, r *record) error {
	return c.perLedger(r.legs(), func(l *Ledger, mine []leg, _ []int) error { return l.fenceAndUndo(ctx, r, mine) })
}
