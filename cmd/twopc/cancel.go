package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twopc/twopc"
)

var cancelCommand = &command{
	name:    "cancel",
	args:    "ID",
	summary: "roll back a transaction that has not reached its commit point",
	help: `Cancel cancels transaction ID (twopc's Canceler.Cancel): an initial or
pending transaction is claimed for the tool's application, moved to
canceling, its applied legs are fenced and undone, and it ends canceled;
a canceling one has its rollback finished; a canceled one is left as it
is. Cancel refuses (exit status 1) a transaction past its commit point
(applied or done: use reverse), and one a process owns and has touched
within its lease (still in progress; wait, or stop its process), judged
by the lease recorded in it, never less than --min-lease: the refusal
says when it becomes cancelable, its lastModified plus the longer of the
two, by the server's clock ("eligible from 2026-11-26T10:01:00.000Z (in
57s, by the server's clock)"; --json: eligibleAt, eligibleInSeconds,
leaseSeconds and minLeaseSeconds beside the error). Ownership is per
process, never per application name: --application with the owner's
name does not cancel it sooner. The cancel's claim writes the tool's
application name into the transaction's application field, in place of
its maker's: cancel prints both ("made by payments-1, canceled by
twopc-cli"; --json: madeBy and finishedBy).

An id that names no transaction is refused unless --placeholder is
given: then Cancel writes a canceled placeholder under the id, so that a
Transfer whose reply was lost, and whose insert may still arrive, can
never become a transfer (the way to settle an ambiguous Transfer error
for good).

If the log's final transactions are moved to an archive
(twopc.WithHistory), give it with --archive COLLECTION: cancel then finds
an archived transaction and answers from it (a done one is past its
commit point), and --placeholder writes nothing for it. Without
--archive, an archived id looks unknown, and --placeholder would write a
placeholder and report it canceled, whatever it did. reverse, capture
and void take --archive too.

Examples:
  twopc cancel 6740c1a2e4b0a1b2c3d4e500
  twopc cancel --placeholder 6740c1a2e4b0a1b2c3d4e500
  twopc cancel --placeholder --archive archive 6740c1a2e4b0a1b2c3d4e500
  twopc cancel --ledger shanghai=accounts_sh 6740c1a2e4b0a1b2c3d4e500 --json`,
	run: runCancel,
}

// outcomeReport is what cancel, reverse, capture and void did.
type outcomeReport struct {
	ID     string `json:"id"`
	Before string `json:"before"` // the state the transaction was in; "" if there was none
	State  string `json:"state"`
	// MadeBy is the application the transaction named before the command
	// (the one that made it, unless a takeover replaced it earlier), and
	// FinishedBy the one it names after: the library writes the name of
	// whoever claims a transaction (a cancel, capture or void claims it)
	// into its application field, so the document no longer names its
	// maker. Empty for reverse, which changes no claim of the transaction.
	MadeBy      string   `json:"madeBy,omitempty"`
	FinishedBy  string   `json:"finishedBy,omitempty"`
	Transaction jsonDoc  `json:"transaction"`
	Reversal    *jsonDoc `json:"reversal,omitempty"` // reverse: the transfer back
}

// madeBy says, in words, which application made a transaction (before)
// and which one finished it (after), by doing what.
// Either may be nil (a transaction archived, with no --archive given,
// between the reads): then its name is unknown.
func madeBy(before, after *txnDoc, did string) string {
	name := func(t *txnDoc) string {
		if t == nil {
			return "(not read)"
		}
		return appName(t.application)
	}
	return fmt.Sprintf("made by %s, %s by %s", name(before), did, name(after))
}

// appName is an application name as output shows it.
func appName(s string) string {
	if s == "" {
		return "(no application)"
	}
	return s
}

func runCancel(ctx context.Context, cl *cli, cmd *command, args []string) error {
	fs := cl.flagSet(cmd)
	var g globals
	g.register(fs, withApplication|withLedgers|withArchive)
	placeholder := fs.Bool("placeholder", false, "if no transaction has the id, write a canceled placeholder under it")
	minLease := fs.Duration("min-lease", defaultMinLease, "cancel no transaction of another application untouched for less than this, whatever its recorded lease")
	id, cn, err := cl.oneID(ctx, cmd, fs, &g, args)
	if err != nil {
		return err
	}
	defer cn.close()
	if *minLease <= 0 {
		return cl.usage(cmd, fs, "--min-lease must be positive")
	}
	before, err := cn.findAnywhere(ctx, id)
	switch {
	case err != nil:
		return err
	case before == nil && !*placeholder:
		return refused(fmt.Errorf("%w: %s; nothing was written (--placeholder writes a canceled placeholder under the id, "+
			"to settle for good a Transfer whose outcome is unknown)", twopc.ErrTxnNotFound, id.Hex()))
	case before != nil:
		if err := cn.needLedgers(before); err != nil {
			return err
		}
	}
	c, err := cn.coordinator(twopc.WithStaleAfter(*minLease))
	if err != nil {
		return err
	}
	defer func() { _ = closeCoordinator(c) }()
	_, cerr := twopc.NewCanceler(c).Cancel(ctx, id)
	after, err := cn.findAnywhere(ctx, id)
	switch {
	case err != nil:
		return err
	case after == nil && cerr == nil:
		// Moved to an archive since (twopc.WithHistory) and --archive not
		// given: the cancel's answer stands, its document is not here.
		return fmt.Errorf("transaction %s was canceled, but reading it found nothing: archived since? give --archive", id.Hex())
	}
	rep := outcomeReport{ID: id.Hex()}
	if before != nil {
		rep.Before, rep.MadeBy = before.state, before.application
	}
	if after != nil {
		rep.State, rep.FinishedBy = after.state, after.application
		rep.Transaction = jsonDoc{after}
	}
	if cerr != nil {
		if errors.Is(cerr, twopc.ErrInProgress) && after != nil {
			return cl.notYet(ctx, cn, cerr, after, *minLease, g.json)
		}
		if !g.json && after != nil {
			fmt.Fprintf(cl.stderr, "twopc cancel: transaction %s is %s\n", id.Hex(), after.state)
		}
		return cerr
	}
	if g.json {
		return cl.printJSON(rep)
	}
	switch {
	case before == nil:
		fmt.Fprintf(cl.stdout, "No transaction had id %s: wrote a canceled placeholder, so none ever will.\n", id.Hex())
	case before.state == "canceled":
		fmt.Fprintf(cl.stdout, "Transaction %s was already canceled.\n", id.Hex())
	default:
		fmt.Fprintf(cl.stdout, "Transaction %s was %s; it is %s: its applied legs are undone (%s).\n",
			id.Hex(), before.state, rep.State, madeBy(before, after, "canceled"))
	}
	return nil
}

// cancelWait is what cancel --json prints for a transaction another
// application owns whose lease has not run out: the error, and when it
// becomes eligible (see lease).
type cancelWait struct {
	jsonError
	waitingTxn
}

// notYet is cancel's refusal of transaction t, which a process owns and
// touched within its lease (cerr, ErrInProgress): it says when the
// transaction becomes eligible by the server's clock; under --json, in a
// document of its own.
func (cl *cli) notYet(ctx context.Context, cn *conn, cerr error, t *txnDoc, minLease time.Duration, asJSON bool) error {
	now, err := cn.serverNow(ctx)
	if err != nil {
		return cerr
	}
	l := leaseOf(t, minLease)
	err = refused(fmt.Errorf("%w: %s", cerr, l.words(now)))
	if asJSON {
		if jerr := cl.printJSON(cancelWait{jsonError: jsonError{Error: cl.message(err), ExitStatus: exitFailed},
			waitingTxn: t.waiting(l, minLease, now)}); jerr != nil {
			return jerr
		}
	}
	return err
}
