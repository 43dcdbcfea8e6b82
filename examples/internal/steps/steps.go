// Package steps prints a transfer's protocol steps as the demo and the
// two-banks example show them: each step with the state it left the
// transaction in.
package steps

import (
	"fmt"
	"io"
	"sync"

	"github.com/twopc/twopc"
)

// Printer prints each protocol step with the state the step left the
// transaction in. The step hook runs before a step, so a step's line is
// printed at the next step, whose hook sees the state it left, or, for the
// last step of a call, once the call has returned the transaction (see
// Returned). It is meant for one transaction at a time; the steps of its
// legs may run at once (the hook is called once per leg), each printed.
type Printer struct {
	mu      sync.Mutex
	out     io.Writer
	pending twopc.Step // the step last reached, not printed yet; 0 if none
}

// NewPrinter returns a Printer writing to out.
func NewPrinter(out io.Writer) *Printer { return &Printer{out: out} }

// Before is called by the step hook before step s of transaction t.
func (p *Printer) Before(s twopc.Step, t *twopc.Txn) {
	if t == nil || t.State == "" { // a recoverer's scan or clock: no transaction
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.flush(t.State)
	p.pending = s
}

// NotMade prints step s, which the hook stops, and why.
func (p *Printer) NotMade(s twopc.Step, t *twopc.Txn, why string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.flush(t.State)
	fmt.Fprintf(p.out, "    step %-9s not made (%s): the transaction stays %s\n", s, why, t.State)
}

// Returned prints the last step with the state of the transaction a call
// returned.
func (p *Printer) Returned(t *twopc.Txn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.flush(t.State)
}

func (p *Printer) flush(state twopc.State) {
	if p.pending != 0 {
		fmt.Fprintf(p.out, "    step %-9s leaves it %s\n", p.pending, state)
		p.pending = 0
	}
}
