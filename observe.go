package twopc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Observing the protocol: an Observer (WithObserver) is told of every
// state transition this process writes and of every recovery action, for
// metrics and tracing; the logger (WithLogger, WithRecoveryLogger) gets
// the lines a person reads.
//
// Every line the library logs about a transaction carries these
// attributes, under these keys:
//
//	txn          the transaction's _id, in hex
//	step         the step the line is about (see Step), when it is about one
//	application  the application of the process that logs it (WithApplication)
//
// A line about a whole recovery pass ("twopc: recovery pass", and one
// that failed or succeeded after failed ones) is about no one
// transaction: it carries application and the pass's report, and each
// transaction the pass took on and failed has a line of its own
// ("twopc: recovery could not finish the transaction in this pass; ...")
// with txn, step when known, action (a RecoveryAction) and err. Other
// keys: state (a State), err (an error), report (a RecoveryReport),
// taken_from (the application a takeover took a transaction from), batch
// (how many transactions a settle batch carried), failed (how many passes
// failed before one that succeeded), failing_for (how long the low-water
// mark's readings failed), panic and stack (an Observer's panic).

// The keys of the attributes the library logs (see above).
const (
	logTxn         = "txn"
	logStep        = "step"
	logApplication = "application"
)

// Observer receives the protocol's events as they happen: every state
// transition and every recovery action of the Coordinator it is given to
// (WithObserver), and of the Cancelers and Recoverers working for it.
//
// Its funcs are called synchronously, on the goroutine that made the
// write (for a group commit, its leader's, once the others have gone on),
// right after the write's outcome is known, and from many
// goroutines at once (concurrent transfers, background settling, a
// recovery pass): they must be safe for concurrent use and fast, a few
// microseconds (count, observe a histogram, hand the event to a channel
// that does not block), since the transfer waits for them; and they must
// not call back into the Coordinator, its Recoverers or Cancelers (a
// Transfer or Settle from an observer can deadlock). An Observer
// cannot change the protocol's outcome: the events are copies, and a func
// that panics is recovered, logged ("twopc: observer panicked", at error
// level, with the panic and its stack) and the protocol goes on. Either
// func may be nil. The repository's examples/observe has Prometheus and
// OpenTelemetry observers.
type Observer struct {
	// Transition is called for every write that moves, or tries to move,
	// a transaction's state: the insert that creates it pending, every
	// guarded move (a claim renewed or taken over is a move from a state
	// to itself, Step StepRenew or StepTakeover), the commit point alone
	// or in a group commit (one event per transaction of the group), the
	// moves to done and canceled (one per transaction of a settle batch),
	// and the canceled placeholder Cancel writes for an id no transaction
	// has.
	Transition func(ctx context.Context, e TransitionEvent)

	// Recovery is called for every action a Recoverer takes on a
	// transaction (see RecoveryAction), once it knows the outcome.
	Recovery func(ctx context.Context, e RecoveryEvent)
}

// Outcome is what a write or a recovery action did, as its event reports
// it; the values are short words fit for a metric label.
type Outcome string

// The three outcomes.
const (
	// OutcomeMoved: the transaction is in the event's To state, moved by
	// this write (or an earlier attempt of it whose reply was lost); for
	// a recovery action, the action was done (the transaction taken over,
	// or, as the RecoveryReport counts, rolled forward, settled, rolled
	// back or canceled).
	OutcomeMoved Outcome = "moved"
	// OutcomeNotMoved: the write's guard did not match, because someone
	// else moved the transaction first (another process, a Canceler, a
	// Recoverer, a takeover); the protocol then goes by what it finds. For
	// a recovery action, another process did it or took the transaction
	// first (Skipped in the report).
	OutcomeNotMoved Outcome = "not_moved"
	// OutcomeError: the write or action failed, a step hook's error
	// (*StepError) included; the transaction may or may not have moved,
	// and recovery finishes it (Failed in the report).
	OutcomeError Outcome = "error"
)

// String returns the outcome's name.
func (o Outcome) String() string { return string(o) }

// TransitionEvent is one write of a transaction's state, as an Observer
// receives it.
type TransitionEvent struct {
	Txn bson.ObjectID
	// Application is the application of the process that made the write.
	Application string
	// From and To are the states the write moves the transaction between.
	// From is empty for a write that creates the transaction: Transfer's
	// insert (To pending) and Cancel's placeholder (To canceled).
	From, To State
	// Step is the step of the write: StepInsert, StepRenew, StepTakeover,
	// StepCommit (for a hold, pending → held), StepDone, StepCancel,
	// StepCanceled, StepCapture or StepVoid.
	Step Step
	// Duration is how long the write took, from before it was sent to its
	// outcome: its retries and the read that settles an ambiguous outcome
	// included (a step hook that blocks counts too). For a write carrying
	// several transactions, each gets the whole write's duration.
	Duration time.Duration
	// Outcome is what the write did. The moves to done and canceled need
	// no claim (anyone may finish a transaction), so one that finds the
	// transaction already there is reported not moved even when it was an
	// earlier attempt of the same write, whose reply was lost, that moved
	// it. A write that carried several transactions (Batch > 1) is exact
	// per transaction for a group commit (it reads back those it is unsure
	// of); for the moves to done of a settle batch the server says only
	// how many moved, so when another process settled some of the batch
	// first, each is reported moved.
	Outcome Outcome
	// Err is the error, with OutcomeError.
	Err error
	// Batch is how many transactions the write carried: 1, or more for a
	// group commit or a settle batch.
	Batch int
	// Reason is the reason a move to canceling records (for a hold,
	// "voided" or "expired"; see HoldEvent); "" for other moves.
	Reason string
}

// The events of a hold's life, as TransitionEvent.HoldEvent names them.
const (
	HoldEventHold    = "hold"    // pending → held: the hold is made
	HoldEventCapture = "capture" // held → applied: captured (then settled to done)
	HoldEventVoid    = "void"    // held → canceling, voided (then rolled back to canceled)
	HoldEventExpire  = "expire"  // held → canceling, expired (then rolled back to canceled)
)

// HoldEvent names what a transition that moved did to a hold: one of the
// HoldEvent constants, or "" for any other transition, and for one that
// did not move (its Outcome is not OutcomeMoved).
func (e TransitionEvent) HoldEvent() string {
	if e.Outcome != OutcomeMoved {
		return ""
	}
	switch {
	case e.From == StatePending && e.To == StateHeld:
		return HoldEventHold
	case e.From == StateHeld && e.To == StateApplied:
		return HoldEventCapture
	case e.From == StateHeld && e.To == StateCanceling && e.Reason == reasonExpired:
		return HoldEventExpire
	case e.From == StateHeld && e.To == StateCanceling:
		return HoldEventVoid
	}
	return ""
}

// RecoveryAction names what a Recoverer does to a transaction.
type RecoveryAction string

// The recovery actions, as a RecoveryEvent names them.
const (
	// RecoveryTakeover: claim a stale initial, pending or canceling
	// transaction for the recoverer's application. One of the actions
	// below follows a takeover that moved.
	RecoveryTakeover RecoveryAction = "takeover"
	// RecoveryRollForward: drive a taken pending transaction, a leg of
	// which was applied, to its commit point and done. A leg that cannot
	// apply makes it a roll back, reported as RecoveryRollBack; an error
	// before the recoverer knew which is reported as this one.
	RecoveryRollForward RecoveryAction = "roll_forward"
	// RecoverySettle: settle an applied transaction to done (in batches:
	// each transaction of a batch gets the batch's duration).
	RecoverySettle RecoveryAction = "settle"
	// RecoveryRollBack: roll back to canceled a taken pending transaction
	// none of whose legs was applied (presumed abort), a taken pending
	// hold (even with every leg applied), one a roll forward found a leg
	// of that cannot apply, or a canceling one.
	RecoveryRollBack RecoveryAction = "roll_back"
	// RecoveryCancelInitial: take a stale initial transaction to canceled.
	RecoveryCancelInitial RecoveryAction = "cancel_initial"
	// RecoveryRemove: move a final transaction past its time
	// to keep to the archive, or remove it (WithHistory), in batches. A
	// batch whose guarded delete removed fewer than it named (another
	// recoverer was first) reports all of them not_moved.
	RecoveryRemove RecoveryAction = "remove"
	// RecoveryExpire: a held hold past its expiry (WithExpiry) voided and
	// rolled back to canceled.
	RecoveryExpire RecoveryAction = "expire"
)

// String returns the action's name.
func (a RecoveryAction) String() string { return string(a) }

// RecoveryEvent is one recovery action on one transaction, as an Observer
// receives it.
type RecoveryEvent struct {
	Txn bson.ObjectID
	// Application is the application of the recoverer.
	Application string
	Action      RecoveryAction
	// State is the state the recoverer found the transaction in.
	State State
	// Duration is how long the action took (the takeover is an action of
	// its own, not counted in the one that follows it).
	Duration time.Duration
	Outcome  Outcome
	// Err is the error, with OutcomeError.
	Err error
}

// outcomeOf is the outcome of a write or action that returned moved and
// err.
func outcomeOf(moved bool, err error) Outcome {
	switch {
	case err != nil:
		return OutcomeError
	case moved:
		return OutcomeMoved
	default:
		return OutcomeNotMoved
	}
}

// transition reports a write of m's move on transaction id, begun at
// start, to the observers.
func (c *config) transition(ctx context.Context, id bson.ObjectID, m move, start time.Time, batch int, moved bool, err error) {
	if len(c.observers) == 0 {
		return
	}
	e := TransitionEvent{
		Txn: id, Application: c.application, From: m.from, To: m.to, Step: m.step,
		Duration: time.Since(start), Outcome: outcomeOf(moved, err), Err: err, Batch: batch,
	}
	for _, f := range m.set {
		if r, ok := f.Value.(string); ok && f.Key == fieldReason {
			e.Reason = r
		}
	}
	for _, o := range c.observers {
		if o.Transition != nil {
			c.safely(ctx, id, e.Step, func() { o.Transition(ctx, e) })
		}
	}
}

// recovered reports recovery action a on transaction id, found in state
// found and begun at start, to the observers.
func (c *config) recovered(ctx context.Context, id bson.ObjectID, found State, a RecoveryAction, start time.Time, outcome Outcome, err error) {
	if len(c.observers) == 0 {
		return
	}
	e := RecoveryEvent{
		Txn: id, Application: c.application, Action: a, State: found,
		Duration: time.Since(start), Outcome: outcome, Err: err,
	}
	for _, o := range c.observers {
		if o.Recovery != nil {
			c.safely(ctx, id, 0, func() { o.Recovery(ctx, e) })
		}
	}
}

// safely calls an observer's func, and logs it if it panics: an observer
// never changes the protocol's outcome.
func (c *config) safely(ctx context.Context, id bson.ObjectID, step Step, f func()) {
	defer func() {
		if p := recover(); p != nil {
			c.logger.ErrorContext(ctx, "twopc: observer panicked",
				append(c.logAttrs(id, step), "panic", fmt.Sprint(p), "stack", string(debug.Stack()))...)
		}
	}()
	f()
}

// logAttrs are the attributes of a log line about transaction id at step
// (none if zero): txn, step and application.
func (c *config) logAttrs(id bson.ObjectID, step Step) []any {
	attrs := make([]any, 0, 8)
	attrs = append(attrs, slog.String(logTxn, id.Hex()))
	if step != 0 {
		attrs = append(attrs, slog.String(logStep, step.String()))
	}
	return append(attrs, slog.String(logApplication, c.application))
}

// stepOf is the step whose hook stopped the operation that returned err,
// or zero if none did.
func stepOf(err error) Step {
	var se *StepError
	if errors.As(err, &se) {
		return se.Step
	}
	return 0
}
