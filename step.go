package twopc

import (
	"context"
	"fmt"
)

// Step names a point in the protocol where the coordinator, canceler or
// recoverer is about to make a database operation. A step hook (see
// WithStepHook) is called at every step, so a test can stop or stall the
// protocol anywhere, as mgo/txn's chaos breakpoints do.
type Step int

// The protocol's steps, in the order a transfer meets them.
const (
	// StepInsert: insert the transaction, already claimed and pending.
	StepInsert Step = iota + 1
	// StepApply: apply the not yet applied legs (debit and credit) to the accounts.
	StepApply
	// StepInspect: read the accounts to learn which legs applied and why others did not.
	StepInspect
	// StepRenew: renew the owner's claim (refresh lastModified) before a leg write.
	StepRenew
	// StepCommit: pending to applied, the commit point (for a hold, pending
	// to held).
	StepCommit
	// StepSettle: pull the transaction from the accounts' pendingTransactions and fence it.
	StepSettle
	// StepDone: applied to done.
	StepDone
	// StepRead: read a transaction.
	StepRead
	// StepCancel: initial or pending to canceling.
	StepCancel
	// StepFence: fence an account against the transaction, before undoing its leg.
	StepFence
	// StepUndo: undo an applied leg.
	StepUndo
	// StepCanceled: canceling to canceled.
	StepCanceled
	// StepScan: the recoverer looks for stale transactions (Txn is nil).
	StepScan
	// StepTakeover: claim a stale transaction for this application.
	StepTakeover
	// StepClock: read the server's clock, to judge staleness (Txn is nil).
	StepClock
	// StepCapture: a capture's reservation in its hold's book, and a
	// hold's end by its captures, held to applied (see
	// Coordinator.CaptureLegs).
	StepCapture
	// StepVoid: held to canceling, a hold's void or expiry (see Coordinator.Void).
	StepVoid
	// StepExists: read, before the insert, the accounts a transfer names
	// that the coordinator has not seen exist (see Transfer).
	StepExists
)

var stepNames = [...]string{
	StepInsert:   "insert",
	StepApply:    "apply",
	StepInspect:  "inspect",
	StepRenew:    "renew",
	StepCommit:   "commit",
	StepSettle:   "settle",
	StepDone:     "done",
	StepRead:     "read",
	StepCancel:   "cancel",
	StepFence:    "fence",
	StepUndo:     "undo",
	StepCanceled: "canceled",
	StepScan:     "scan",
	StepTakeover: "takeover",
	StepClock:    "clock",
	StepCapture:  "capture",
	StepVoid:     "void",
	StepExists:   "exists",
}

// Steps lists every step, for tests that crash the protocol at each one.
func Steps() []Step {
	s := make([]Step, 0, len(stepNames)-1)
	for i := StepInsert; int(i) < len(stepNames); i++ {
		s = append(s, i)
	}
	return s
}

// String returns the step's name.
func (s Step) String() string {
	if s > 0 && int(s) < len(stepNames) {
		return stepNames[s]
	}
	return fmt.Sprintf("Step(%d)", int(s))
}

// StepError wraps the error a step hook returned. The operation it stands
// before was not made.
type StepError struct {
	Step Step
	Err  error
}

func (e *StepError) Error() string { return fmt.Sprintf("step %s: %v", e.Step, e.Err) }

// Unwrap returns the hook's error.
func (e *StepError) Unwrap() error { return e.Err }

// at calls the step hook, if any, with a copy of the transaction.
func (c *config) at(ctx context.Context, step Step, r *record) error {
	if c.hook == nil {
		return nil
	}
	var t *Txn
	if r != nil {
		cp := r.Txn
		cp.Legs = append([]Leg(nil), cp.Legs...)
		t = &cp
	}
	if err := c.hook(ctx, step, t); err != nil {
		return &StepError{Step: step, Err: err}
	}
	return nil
}
