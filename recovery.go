package twopc

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Recoverer finishes what processes that stopped left behind, judged by
// the server's clock. A transaction is stale once its lastModified is
// older than its lease: the longest StaleAfter recorded in it by the
// processes that claimed it, or the Recoverer's coordinator's own, if
// longer. Each pass (RecoverOnce; Run makes one every interval):
//
//   - settles every applied transaction to done, whatever its age and
//     owner: it is past its commit point, and will happen. Settling is
//     guarded and idempotent, so racing the owner's own background
//     settling is harmless, and a committed transfer is settled no later
//     than the next pass.
//   - takes over each stale pending transaction with a guarded write and
//     reads its accounts. If none of its legs was applied, it rolls it back
//     to canceled: presumed abort, for nobody was told it would happen, and
//     its insert may have arrived after its caller gave up on it (reason
//     "stale_pending"; a later Transfer with its key gets ErrCanceled). If
//     a leg of it was applied, it rolls it forward: it applies the legs not
//     yet applied, commits it and settles it to done; if one of them cannot
//     apply (overdraft, missing account, overflow, bad balance, a fence
//     line past it), it rolls it back to canceled instead. A stale pending
//     hold is always rolled back, even when every leg applied: held is its
//     decision, and nobody was told of one.
//   - finishes the rollback of each stale canceling transaction, to
//     canceled.
//   - cancels each stale initial transaction (the coordinator inserts
//     transactions already pending, so only a document of this library
//     edited by hand is met here).
//   - voids each held hold past its expiry (see WithExpiry) as expired, and
//     rolls it back to canceled. A held hold is never rolled back for being
//     old: only its expiry, Capture or Void end it.
//   - with WithHistory, moves each final transaction whose time to keep
//     has passed to the archive collection,
//     or removes it (keyed transactions and Cancel's placeholders are kept
//     for good; see WithHistory).
//
// A transaction with a leg on a ledger the Recoverer's coordinator was not
// given (see WithLedger) is left for a recoverer that has it, and counted
// failed; so is one the protocol could not have written (ErrMalformedTxn).
// With a ledger's deployment unreachable, nothing waits on a clock: a
// stale pending transaction with a leg there is decided only once every
// ledger it touches can be read (it stays pending, its applied legs held,
// until then); a canceling one is rolled back on the ledgers that can be
// reached and stays canceling until the rest return; an applied one
// settles where it can and stays applied until the rest return. Any number of recoverers, of any applications, may run at once: a
// takeover is conditional on the claim and lastModified the recoverer
// read, so exactly one wins each transaction.
//
// Fences need no Recoverer: the writes that touch an account drop them
// (see PROTOCOL.md, Limits). Documents the library did not write (no
// transaction time: the tutorial's protocol, another program) are left
// alone.
type Recoverer struct {
	c        *Coordinator
	interval time.Duration
	batch    int
	logger   *slog.Logger
}

// NewRecoverer returns a recoverer working for c, under c's application
// name, StaleAfter and step hook.
func NewRecoverer(c *Coordinator, opts ...RecoverOption) *Recoverer {
	r := &Recoverer{c: c, interval: DefaultInterval, batch: DefaultRecoveryBatch, logger: slog.New(slog.DiscardHandler)}
	if c != nil {
		r.logger = c.logger
	}
	for _, o := range opts {
		if o != nil {
			o(r)
		}
	}
	return r
}

// RecoveryReport counts what one recovery pass did.
type RecoveryReport struct {
	RolledForward int // pending transactions taken to their commit point and done
	Settled       int // applied transactions settled to done
	RolledBack    int // pending or canceling transactions rolled back to canceled
	Canceled      int // stale initial transactions canceled
	Skipped       int // transactions another process took or moved first
	Failed        int // transactions left as they were after an error (see the error)
	Removed       int // final transactions moved to the archive or removed (WithHistory)
	Expired       int // held holds past their expiry voided to canceled (WithExpiry)
}

// Finished is how many transactions the pass took to done or canceled.
func (rep RecoveryReport) Finished() int {
	return rep.RolledForward + rep.Settled + rep.RolledBack + rep.Canceled + rep.Expired
}

// RecoverOnce makes one recovery pass (see Recoverer), judging
// staleness and expiry by the server's clock at its start: it settles the
// applied transactions, finishes the stale ones, voids the holds past
// their expiry, and, with
// WithHistory, archives or removes what is due. It returns the report and
// the first error it met; a transaction it failed on stays as it was for
// the next pass, and does not stop the pass. A document that is not a
// transaction the protocol wrote (see ErrMalformedTxn) is counted as
// failed and left alone.
//
// A pass is not bounded as a whole, but each of its round trips is: each
// read (a batch of a scan) by the read bound (WithReadTimeout), and each
// transaction it takes on (each batch it settles or removes) by the call
// bound (WithCallTimeout). When a bound ends one, the server is not
// answering: the pass stops there, with an error that says so, and the
// next pass goes on from where it stopped (a transaction it was taking
// over waits for StaleAfter again).
func (r *Recoverer) RecoverOnce(ctx context.Context) (rep RecoveryReport, err error) {
	if r == nil || r.c == nil {
		return rep, errors.New("twopc: recover: Recoverer has no Coordinator (use NewRecoverer)")
	}
	c := r.c
	b := c.trips(ctx, "recover")
	defer func() { err = b.explain(err) }()
	// Every scan of the pass reads by an index: made (or checked) first.
	if err := b.write(ctx, c.indexes.need); err != nil {
		return rep, errorf("twopc: recover: %w", err)
	}
	now, err := b.serverNow(ctx, c.log)
	if err != nil {
		return rep, errorf("twopc: recover: %w", err)
	}
	var firstErr error
	fail := func(err error) {
		rep.Failed++
		firstErr = cmpErr(firstErr, err)
	}
	// steps are the pass's parts, in order; a part one of whose round
	// trips its bound ended (the server did not answer) ends the pass.
	steps := []func() error{
		// Applied: settle, whatever the age, in batches.
		func() error {
			return r.each(ctx, b, bson.D{{Key: fieldState, Value: StateApplied}}, fail, func(recs []*record) {
				start := time.Now()
				var done []*record
				var left []unsettled
				err := b.write(ctx, func(ctx context.Context) (err error) {
					done, left, err = c.settle(ctx, recs)
					return err
				})
				rep.Settled += len(done)
				if err != nil {
					fail(err)
				}
				for _, t := range done {
					r.report(ctx, t.ID, StateApplied, RecoverySettle, start, OutcomeMoved, 0, nil)
				}
				for _, u := range left {
					r.report(ctx, u.rec.ID, StateApplied, RecoverySettle, start, OutcomeError, u.step, u.err)
				}
			})
		},
		// Stale initial, pending and canceling: take over and finish, one by one.
		func() error {
			stale := bson.D{
				{Key: fieldState, Value: bson.D{{Key: "$in", Value: bson.A{StateInitial, StatePending, StateCanceling}}}},
				{Key: fieldLastModified, Value: bson.D{{Key: "$lt", Value: now.Add(-c.staleAfter)}}},
			}
			return r.each(ctx, b, stale, fail, func(recs []*record) {
				for _, t := range recs {
					if !t.LastModified.Before(now.Add(-t.lease(c.staleAfter))) {
						continue // its owner's StaleAfter is longer than ours
					}
					err := b.write(ctx, func(ctx context.Context) error { return r.recover(ctx, t, &rep) })
					if err != nil {
						fail(errorf("transaction %s: %w", t.ID.Hex(), err))
					}
					if b.tripped() {
						return
					}
				}
			})
		},
		// Holds past their expiry: void them.
		func() error { return r.expireHolds(ctx, b, now, &rep, fail) },
		// Held holds captured in parts whose captures are all reserved:
		// end them.
		func() error { return r.endHolds(ctx, b, &rep, fail) },
		// Held holds not looked at before: confirm their legs are on their
		// accounts, or void the copy a late insert and commit rebuilt.
		func() error { return r.confirmHolds(ctx, b, &rep, fail) },
		// History past its time to keep.
		func() error {
			n, err := r.prune(ctx, b, now)
			rep.Removed = n
			return err
		},
	}
	for _, step := range steps {
		if err := step(); err != nil {
			firstErr = cmpErr(firstErr, err)
		}
		if b.tripped() {
			break
		}
	}
	if firstErr != nil {
		return rep, errorf("twopc: recover: %w", firstErr)
	}
	return rep, nil
}

// each finds the transactions matching filter, oldest first (by created,
// read by the {state, created} index: filter names a state), and hands
// them to fn in batches. A document that does not decode, or is not a
// transaction the protocol could have written, goes to bad instead.
//
// Its reads are bounded by b's read bound, each (a batch) on its own; fn
// bounds what it does with each batch.
func (r *Recoverer) each(ctx context.Context, b trips, filter bson.D, bad func(error), fn func([]*record)) error {
	// Only documents this library wrote: a transaction of the tutorial's
	// protocol or of another program has no transaction time, and its
	// legs are not shaped as ours (a tutorial credit is already in the
	// balance): settling or rolling it back would move money.
	only := bson.D{{Key: "_id", Value: bson.D{{Key: "$type", Value: "objectId"}}}}
	if !slices.ContainsFunc(filter, func(e bson.E) bool { return e.Key == fieldCreated }) {
		only = append(only, bson.E{Key: fieldCreated, Value: bson.D{{Key: "$exists", Value: true}}})
	}
	filter = append(only, filter...)
	var cur *mongo.Cursor
	err := b.read(ctx, func(ctx context.Context) error {
		return r.c.try(ctx, StepScan, nil, func(ctx context.Context) error {
			var err error
			cur, err = r.c.log.txns.Find(ctx, filter,
				options.Find().SetSort(bson.D{{Key: fieldCreated, Value: 1}}).SetBatchSize(int32(r.batch)))
			return err
		})
	})
	if err != nil {
		return err
	}
	defer b.r.close(ctx, cur)
	batch := make([]*record, 0, r.batch)
	for b.r.next(ctx, cur) {
		if b.tripped() {
			return cur.Err() // fn's bound ended it: the server does not answer
		}
		var t record
		if err := cur.Decode(&t); err != nil {
			bad(errorf("%w: %v: %v", ErrMalformedTxn, cur.Current.Lookup("_id"), err))
			continue
		}
		if err := t.check(); err != nil {
			bad(err)
			continue
		}
		if batch = append(batch, &t); len(batch) == r.batch {
			fn(batch)
			batch = make([]*record, 0, r.batch)
		}
	}
	if len(batch) > 0 {
		fn(batch)
	}
	return cur.Err()
}

// recover takes over one stale transaction and finishes it. The takeover
// and the action that follows are each reported to the observers.
func (r *Recoverer) recover(ctx context.Context, t *record, rep *RecoveryReport) error {
	c := r.c
	// A transaction with a leg on a ledger this coordinator was not given
	// is left to a recoverer that has it, before any claim: taking it
	// over would only hold it from that recoverer for a whole lease.
	if err := c.ledgers.knows(t.legs()); err != nil {
		return errorf("%w: left to a recoverer that has it", err)
	}
	sent := c.now()
	start := time.Now()
	cur, moved, err := c.log.advance(ctx, t, move{
		step: StepTakeover, from: t.State, to: t.State,
		claim: t.Claim, lastModified: t.LastModified,
		newClaim: c.claims.issue(), application: c.application, lease: c.staleAfter, takeover: c.takeover(),
	})
	r.report(ctx, t.ID, t.State, RecoveryTakeover, start, outcomeOf(moved, err), StepTakeover, err)
	if err != nil {
		return err
	}
	if !moved {
		rep.Skipped++
		return nil
	}
	r.logger.DebugContext(ctx, "twopc: took over",
		append(c.logAttrs(cur.ID, StepTakeover), "state", cur.State, "taken_from", t.Application)...)
	start = time.Now()
	// done reports action a: done (moved), skipped (not moved: another
	// process moved the transaction first), or failed.
	done := func(a RecoveryAction, outcome Outcome, err error) error {
		r.report(ctx, cur.ID, cur.State, a, start, outcome, 0, err)
		switch outcome {
		case OutcomeNotMoved:
			rep.Skipped++
		case OutcomeMoved:
			switch a {
			case RecoveryRollForward:
				rep.RolledForward++
			case RecoveryRollBack:
				rep.RolledBack++
			case RecoveryCancelInitial:
				rep.Canceled++
			}
		}
		return err
	}
	switch cur.State {
	case StatePending:
		applied, closed, err := c.begun(ctx, cur)
		if err != nil {
			return done(RecoveryRollForward, OutcomeError, err)
		}
		if !applied || cur.Hold {
			// No leg was applied: presume abort. Its owner stopped (or
			// its insert arrived after the caller gave up on it), and no
			// one has been told it will happen. A hold not yet held is
			// rolled back even if its legs applied: held is its
			// decision, and nobody was told of one. With a leg closed
			// and none applied, it is a late copy of a transaction
			// removed from the log (see begun): canceled, reason
			// "late_copy", never committed, so that no statement lists
			// it; its rollback's writes are refused as its legs were.
			why := errStalePending
			if closed && !applied {
				why = errLateCopy
			}
			if _, err := c.abort(ctx, cur, why); err != nil && !errors.Is(err, why) {
				switch {
				case errors.Is(err, ErrInProgress), errors.Is(err, ErrCanceled), isLegReason(err):
					return done(RecoveryRollBack, OutcomeNotMoved, nil)
				}
				return done(RecoveryRollBack, OutcomeError, err)
			}
			return done(RecoveryRollBack, OutcomeMoved, nil)
		}
		_, err = newEngine(c).drive(ctx, &owned{rec: cur, claimedAt: sent}, true)
		switch {
		case err == nil:
			return done(RecoveryRollForward, OutcomeMoved, nil)
		case isLegReason(err):
			return done(RecoveryRollBack, OutcomeMoved, nil)
		case errors.Is(err, ErrInProgress), errors.Is(err, ErrCanceled):
			return done(RecoveryRollForward, OutcomeNotMoved, nil)
		default:
			return done(RecoveryRollForward, OutcomeError, err)
		}
	case StateCanceling:
		if _, err := c.rollback(ctx, cur); err != nil {
			return done(RecoveryRollBack, OutcomeError, err)
		}
		return done(RecoveryRollBack, OutcomeMoved, nil)
	case StateInitial:
		next, moved, err := c.log.advance(ctx, cur, move{
			step: StepCancel, from: StateInitial, to: StateCanceling, claim: cur.Claim,
			set: bson.D{{Key: fieldReason, Value: reasonStaleInitial}},
		})
		if err != nil || !moved {
			return done(RecoveryCancelInitial, outcomeOf(moved, err), err)
		}
		if _, err := c.rollback(ctx, next); err != nil {
			return done(RecoveryCancelInitial, OutcomeError, err)
		}
		return done(RecoveryCancelInitial, OutcomeMoved, nil)
	}
	return nil
}

// report tells the observers of recovery action a on transaction id,
// found in state found and begun at start, and, if it failed, logs it to
// the recoverer's logger with the step it failed at: step if not zero,
// else the step whose hook stopped it, if one did.
func (r *Recoverer) report(ctx context.Context, id bson.ObjectID, found State, a RecoveryAction, start time.Time, outcome Outcome, step Step, err error) {
	r.c.recovered(ctx, id, found, a, start, outcome, err)
	if outcome != OutcomeError {
		return
	}
	if step == 0 {
		step = stepOf(err)
	}
	r.logger.WarnContext(ctx, "twopc: recovery could not finish the transaction in this pass; nothing is lost: it stays where the pass stopped, and the next pass takes it on again",
		append(r.c.logAttrs(id, step), "action", a, "state", found, "err", err)...)
}

// errStalePending is why recovery rolls back a stale pending transaction
// none of whose legs was applied.
var errStalePending = errorf("%w: no leg was applied before its owner went stale", ErrCanceled)

// errLateCopy is why recovery cancels a pending transaction with a leg
// closed and none applied: a copy a late insert brought back (see begun).
var errLateCopy = errorf("%w: a copy of a transaction removed from the log, brought back by its insert delivered late", ErrCanceled)

// begun reads the accounts of pending transaction r's legs at majority
// read concern and reports whether a leg was applied (its marker is on
// its account) and whether one is closed (fenced, or behind its account's
// fence line). A leg is closed only by a settle or a rollback, which come
// after the transaction has left pending, and a closed leg stays closed
// (a fence leaves only as the line passes it), so a pending transaction
// with a closed leg and none applied is a copy: its document left pending
// once, was removed (WithHistory), and its insert, delivered again late,
// brought it back.
func (c *Coordinator) begun(ctx context.Context, r *record) (applied, closed bool, err error) {
	legs := r.legs()
	accts, err := c.inspect(ctx, r, legs)
	if err != nil {
		return false, false, err
	}
	for i, l := range legs {
		switch v, why := judge(accts[i], r, l); {
		case v == legApplied:
			applied = true
		case closedVerdict(v, why):
			closed = true
		}
	}
	return applied, closed, nil
}

// isLegReason reports whether err says a leg could not apply.
func isLegReason(err error) bool {
	return errors.Is(err, ErrInsufficientFunds) || errors.Is(err, ErrAccountNotFound) ||
		errors.Is(err, ErrBalanceOverflow) || errors.Is(err, ErrInvalidAccount) || errors.Is(err, ErrTooLate) ||
		errors.Is(err, ErrTooManyHolds) || errors.Is(err, ErrLimitExceeded) || errors.Is(err, ErrAssetMismatch)
}

// Run makes a recovery pass at once and then every interval (WithInterval,
// default 30s), until ctx ends; then it returns ctx's error. It logs each
// pass that did something, and each error, to the recoverer's logger (a
// pass's line carries the application and the pass's report, and each
// transaction it took on and failed has a line of its own); an error does
// not stop it. A pass that failed is logged at warn level when its error
// is transient (the server did not answer), else at error level, and the
// first pass that succeeds after failed ones at info level, with how many
// failed: nothing a failed pass left is lost, the next pass goes on from
// where it stopped.
func (r *Recoverer) Run(ctx context.Context) error {
	t := time.NewTicker(r.interval)
	defer t.Stop()
	failed := 0
	for {
		rep, err := r.RecoverOnce(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			failed++
			level := slog.LevelError
			if transient(context.Background(), err) {
				level = slog.LevelWarn
			}
			r.logger.Log(ctx, level, "twopc: recovery pass failed; nothing is lost: what it did not finish waits for the next pass",
				logApplication, r.c.application, "err", err, "report", rep)
		case err == nil && failed > 0:
			r.logger.InfoContext(ctx, "twopc: recovery pass succeeded after failed passes; nothing was lost",
				logApplication, r.c.application, "failed", failed, "report", rep)
			failed = 0
		case rep != (RecoveryReport{}):
			r.logger.InfoContext(ctx, "twopc: recovery pass", logApplication, r.c.application, "report", rep)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// RecoverOption configures a Recoverer.
type RecoverOption func(*Recoverer)

// WithInterval sets how often Run makes a recovery pass (default 30s).
func WithInterval(d time.Duration) RecoverOption {
	return func(r *Recoverer) {
		if d > 0 {
			r.interval = d
		}
	}
}

// WithRecoveryLogger sets the logger Run reports passes and errors to
// (default: the coordinator's logger).
func WithRecoveryLogger(l *slog.Logger) RecoverOption {
	return func(r *Recoverer) {
		if l != nil {
			r.logger = l
		}
	}
}

// WithBatch sets how many stale transactions one pass takes on at most
// (default 100); a pass that finds a full batch goes on with the next.
func WithBatch(n int) RecoverOption {
	return func(r *Recoverer) {
		if n > 0 {
			r.batch = n
		}
	}
}
