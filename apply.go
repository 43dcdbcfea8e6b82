package twopc

// The apply step, the coordinator's side: it applies the legs of an owned
// pending transaction under its claim, in the apply stage's shared writes,
// and judges by reading the accounts what each outcome means. The writes
// themselves are the ledger's (ledgerapply.go, ledgerwrite.go, leg.go).

import (
	"context"
	"errors"
	"sync"
	"time"
)

// maxApplyRounds bounds the apply-inspect rounds of one drive: a round
// repeats only when an account changed between the write and the read.
const maxApplyRounds = 4

// maxUnsent bounds how often one attempt to apply legs joins the apply
// stage again after its call was left unsent (see applyRound).
const maxUnsent = 16

// errLost reports that this process no longer owns the transaction: it was
// taken over, canceled or settled by someone else.
var errLost = errors.New("twopc: claim lost")

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
func (e *engine) applyLegs(ctx context.Context, o *owned, todo []leg, round int) (why error, err error) {
	c := e.c
	for ; round < maxApplyRounds; round++ {
		var q *applyCall
		err := c.try(ctx, StepApply, o.rec, func(ctx context.Context) error {
			// The claim check sits right before every attempt (see
			// applyRound for the write's deadline). A call left unsent
			// (its claim grew too old while it waited for a write, or the
			// write ran out of time before its command) sent nothing: it
			// renews and joins again, which is not a failed attempt.
			for unsent := 0; ; unsent++ {
				if err := e.renew(ctx, o); err != nil {
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
					return errorf("the claim is too old to send the legs, %d times: %w", unsent+1, context.DeadlineExceeded)
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
	return nil, errorf("legs of %s did not apply in %d rounds: the accounts keep changing", o.rec.ID.Hex(), maxApplyRounds)
}

// renew refreshes the owner's claim when an eighth of its takeover lease
// (the one recorded in it: see WithTakeoverAfter) has passed since it was taken (by this process's
// monotonic clock, from when the claiming write was sent, so never later
// than the server's view). A leg write, sent with a deadline of half of
// the takeover lease after the claim, is therefore never sent on a claim a
// repeat of the call in another process may already have taken over, nor
// one another application's Recoverer may (StaleAfter is never shorter).
// errLost if the claim is gone.
func (e *engine) renew(ctx context.Context, o *owned) error {
	c := e.c
	if c.now().Sub(o.claimedAt) < o.rec.takeoverLease(c.staleAfter)/8 {
		return nil
	}
	sent := c.now()
	cur, moved, err := c.log.advance(ctx, o.rec, move{step: StepRenew, from: StatePending, to: StatePending, claim: o.rec.Claim})
	if err != nil {
		return err
	}
	if !moved {
		return errLost
	}
	o.rec, o.claimedAt = cur, sent
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
// could start to look taken over (half of the takeover lease after it was
// taken: see WithTakeoverAfter): the driver will not send it later, and
// passes the rest as maxTimeMS so that the server gives up too. A call
// whose claim is within a quarter of the takeover lease of that deadline
// is not sent (unsent): its caller renews the claim and tries again, so a
// group's deadline is never closer than that.
// A write that fails by the group's deadline leaves each call's outcome
// unknown and transient: its caller applies again, alone, under its own.
func (c *Coordinator) applyRound(ctx context.Context, calls []*applyCall) {
	now := c.now()
	var deadline time.Time
	var legs []leg
	var recs []*record
	var owner []*applyCall
	for _, q := range calls {
		// Not sent on a claim a quarter of its lease from its deadline:
		// its caller renews it first (renew does, long before that age:
		// at an eighth), so that one old claim never gives a group's
		// write less than that.
		lease := q.o.rec.takeoverLease(c.staleAfter)
		d := q.o.claimedAt.Add(lease / 2)
		if d.Sub(now) < lease/4 {
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
	modified, refused, unknown, unsent, err := c.ledgers.applyAll(wctx, recs, legs)
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
	accts, err := c.ledgers.inspectLegs(ctx, judged)
	var short []shortDebit // debits refused for funds, before settleFirst
	var adopt []adoption   // accounts to adopt before their legs go again
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
		if werr, ok := unknown[i]; ok && verdict == legRetry {
			// A transient write error (a primary stepping down, a shard's
			// failover): the leg's outcome is unknown, never a refusal.
			// Its caller applies again, as after a lost reply.
			q.err = werr
			continue
		}
		if msg, ok := refused[i]; ok && verdict == legRetry {
			// The server refused the write for a reason the account's
			// fields do not show: a schema validator, a
			// pendingTransactions that is not an array, a document grown
			// too large. It will refuse it again.
			verdict, why = legBlocked, errorf("%w: account %v: the server refused the leg: %s", ErrInvalidAccount, l.account, msg)
		}
		switch verdict {
		case legFenced:
			q.lost = true
		case legBlocked:
			if s := (shortDebit{q: q, l: l, a: accts[j], why: why}); s.spendable() {
				short = append(short, s)
				continue
			}
			q.why = why
		case legRetry:
			q.next = append(q.next, l)
		case legAdopt:
			adopt = append(adopt, adoption{q: q, l: l, a: accts[j]})
		}
	}
	adoptAll(ctx, c.ledgers, adopt)
	spendCommitted(ctx, c.log, c.ledgers, short)
}

// adoption is a leg of an apply call whose account is to be adopted
// before the leg goes again, with the account as the round read it.
type adoption struct {
	q *applyCall
	l leg
	a *account
}

// adoptAll adopts the accounts of adopt (one command per ledger, the
// ledgers' at once) and sends each leg again in its call's next round;
// a leg whose ledger's adoption failed leaves its call's outcome unknown.
func adoptAll(ctx context.Context, ls ledgers, adopt []adoption) {
	if len(adopt) == 0 {
		return
	}
	legs := make([]leg, len(adopt))
	for i, x := range adopt {
		legs[i] = x.l
	}
	errs := make([]error, len(adopt))
	_ = ls.perLedger(legs, func(l *Ledger, mine []leg, idx []int) error {
		accts := make([]*account, len(idx))
		for j, i := range idx {
			accts[j] = adopt[i].a
		}
		err := l.adopt(ctx, accts, mine)
		for _, i := range idx { // distinct indexes: no lock needed
			errs[i] = err
		}
		return nil
	})
	for i, x := range adopt {
		switch {
		case x.q.err != nil || x.q.lost || x.q.why != nil:
		case errs[i] != nil:
			x.q.err = errs[i]
		default:
			x.q.next = append(x.q.next, x.l)
		}
	}
}

// spendCommitted settles first (see settleFirst) the committed legs on the
// accounts of the debits in short, and sends each debit again in its
// call's next round if its account took a close; the others are refused
// for funds, as judged. Each transfer settles first once: a debit still
// short after it is refused. A debit whose settling first failed (the
// log's read, or the closes) has an unknown outcome, as after a lost
// reply: its caller applies again, and settles first again.
func spendCommitted(ctx context.Context, g *txnLog, ls ledgers, short []shortDebit) {
	if len(short) == 0 {
		return
	}
	again, failed := settleFirst(ctx, g, ls, short)
	unknown := map[*applyCall]bool{}
	for i, s := range short {
		if q := s.q; failed[i] != nil {
			// The log's read or the closes failed: the debit's outcome
			// is unknown, never a refusal. Its caller applies again (and
			// settles first again), as after a lost reply.
			unknown[q] = true
			if q.err == nil && !q.lost && q.why == nil {
				q.err = failed[i]
			}
		}
	}
	for i, s := range short {
		q := s.q
		if unknown[q] {
			continue
		}
		q.o.settledFirst = true
		switch {
		case q.err != nil || q.lost || q.why != nil:
		case again[i]:
			q.next = append(q.next, s.l)
		default:
			q.why = s.why
		}
	}
}

// applyAll sends the guarded writes that apply legs, each of transaction
// recs[i], one command per ledger, the ledgers' at once. It returns how
// many applied, the server's reasons for the legs it refused (by index in
// legs), the transient write errors of legs whose outcome is unknown (by
// index in legs), the legs left unsent, and any other error: a failure
// whose outcome is unknown, or a write-concern error.
func (ls ledgers) applyAll(ctx context.Context, recs []*record, legs []leg) (int64, map[int]string, map[int]error, map[int]bool, error) {
	var mu sync.Mutex
	var modified int64
	refused := map[int]string{}
	unknown := map[int]error{}
	unsent := map[int]bool{}
	err := ls.perLedger(legs, func(l *Ledger, mine []leg, idx []int) error {
		of := make([]*record, len(idx))
		for j, i := range idx {
			of[j] = recs[i]
		}
		n, why, lost, left, err := l.apply(ctx, of, mine)
		mu.Lock()
		defer mu.Unlock()
		modified += n
		for j, msg := range why {
			refused[idx[j]] = msg
		}
		for j, werr := range lost {
			unknown[idx[j]] = werr
		}
		for _, j := range left {
			unsent[idx[j]] = true
		}
		return err
	})
	return modified, refused, unknown, unsent, err
}

// inspect reads the accounts of legs of r, in order, from their ledgers
// (at once); nil for a missing one.
func (c *Coordinator) inspect(ctx context.Context, r *record, legs []leg) ([]*account, error) {
	if err := c.at(ctx, StepInspect, r); err != nil {
		return nil, err
	}
	return c.ledgers.inspectLegs(ctx, legs)
}

// inspectLegs reads the accounts of legs, in order, one read per ledger,
// the ledgers' at once; nil for a missing one.
func (ls ledgers) inspectLegs(ctx context.Context, legs []leg) ([]*account, error) {
	out := make([]*account, len(legs))
	err := ls.perLedger(legs, func(l *Ledger, mine []leg, idx []int) error {
		accts, err := l.inspect(ctx, mine)
		for j, a := range accts { // distinct indexes: no lock needed
			out[idx[j]] = a
		}
		return err
	})
	return out, err
}
