package main

import (
	"context"
	"fmt"

	"github.com/twopc/twopc"
)

var reverseCommand = &command{
	name:    "reverse",
	args:    "ID",
	summary: "undo a committed transfer with a transfer back",
	help: `Reverse undoes committed transaction ID (applied or done) as the
tutorial says to (twopc's Coordinator.Reverse): a new transfer of the
same amounts the other way, made by the tool under its application name
and settled before it exits. Its idempotency key derives from ID, so
reversing twice moves the money back once: a reversal that committed is
returned again; one that was canceled (the destination lacked the funds
then) is followed by a new attempt. A hold is reversed as one order
once it ended (by its captures, or voided or expired after some): what
its committed captures took, all of them at once; a hold still held is
refused (void it, or let its last capture end it, first); a capture is
reversed only with its hold (refused on its own, naming the hold).

Reverse refuses (exit status 1) an id that names no transaction, a
transaction not committed (cancel it instead), and a reversal that
cannot apply (say the destination spent the money: insufficient funds).

Examples:
  twopc reverse 6740c1a2e4b0a1b2c3d4e500
  twopc reverse --ledger shanghai=accounts_sh 6740c1a2e4b0a1b2c3d4e500 --json`,
	run: runReverse,
}

func runReverse(ctx context.Context, cl *cli, cmd *command, args []string) error {
	fs := cl.flagSet(cmd)
	var g globals
	g.register(fs, withApplication|withLedgers|withArchive)
	id, cn, err := cl.oneID(ctx, cmd, fs, &g, args)
	if err != nil {
		return err
	}
	defer cn.close()
	t, err := cn.findAnywhere(ctx, id)
	switch {
	case err != nil:
		return err
	case t == nil:
		return refused(fmt.Errorf("%w: %s", twopc.ErrTxnNotFound, id.Hex()))
	case t.state == "canceled":
		return refused(fmt.Errorf("transaction %s is canceled: it moved nothing, there is nothing to reverse", id.Hex()))
	case t.state != "applied" && t.state != "done":
		return refused(fmt.Errorf("transaction %s is %s, not committed (applied or done): nothing to reverse; cancel it instead", id.Hex(), t.state))
	}
	if err := cn.needLedgers(t); err != nil {
		return err
	}
	c, err := cn.coordinator()
	if err != nil {
		return err
	}
	rev, err := c.Reverse(ctx, id)
	if cerr := closeCoordinator(c); err == nil && cerr != nil {
		err = fmt.Errorf("reversal of %s committed; settling it: %w", id.Hex(), cerr)
	}
	if err != nil {
		return err
	}
	after, err := cn.findTxn(ctx, rev.ID)
	if err != nil {
		return err
	}
	if after == nil {
		return fmt.Errorf("reversal %s of %s committed, but reading it found nothing", rev.ID.Hex(), id.Hex())
	}
	if g.json {
		return cl.printJSON(outcomeReport{ID: id.Hex(), Before: t.state, State: t.state,
			Transaction: jsonDoc{t}, Reversal: &jsonDoc{after}})
	}
	var u units
	fmt.Fprintf(cl.stdout, "Transaction %s (%s) is reversed by %s, %s: %s\n",
		id.Hex(), legSummary(t, &u)+capturedWords(t, &u), rev.ID.Hex(), after.state, legSummary(after, &u))
	u.note(cl.stdout)
	return nil
}
