package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc"
)

var captureCommand = &command{
	name:    "capture",
	args:    "[--] ID AMOUNT | ID --minor N",
	summary: "capture a held transfer (a hold): all of it, or part of a two-leg one, now and more later (--more)",
	help: `Capture captures hold ID for AMOUNT (twopc's Coordinator.Capture): the
capture is a transfer of its own (its captureOf names the hold), which
the tool settles before it exits: the destination receives AMOUNT. By
default it is the hold's last: the hold then ends (done) and the rest
returns to the source. With --more the rest stays held for more captures
(the hold ends when captured whole, voided or expired). The tool then
says what the hold's captures took: when the capture ended the hold, in
all and what was released ("Captured 8.00 USD/2 in all, 2.00 USD/2
released."); with --more, so far and what is still held. A hold of more
than two legs is captured whole (the library's CaptureLegs takes a part
of each leg).

AMOUNT is written as the tool prints the hold's amounts: for an asset
whose code has a scale, with that many decimal places (22.00 for a hold
of USD/2: 2200 minor units; "22.00 USD/2" is read too); for a hold of no
asset, or of a code with no scale, a whole number (minor units for no
asset). A whole number for an asset with decimal places is a usage error
(exit status 2), never read as minor units or as whole units: write
22.00, or give the minor units with --minor N instead of AMOUNT
(--minor 2200). A hold whose legs are of several assets takes --minor
only.

A capture is reserved in the hold's book before it is made, so captures
at once never take more than the hold holds. Capture refuses (exit
status 1) a hold that was voided, expired (a hold past its expiry by the
server's clock is voided by the capture itself), or ended by its
captures; an AMOUNT of zero, more than the hold's value, or more than is
left of it; and a transaction that is not a hold. (A negative AMOUNT reads as a flag: it
is a usage error, exit status 2, unless it follows "--".) Capture again for the same amount
succeeds and prints the transaction: safe to repeat after a lost reply.
The library's messages count minor units; on a refusal the tool says
what the hold is, in the hold's own amounts.

The capture claims the hold under the tool's application name, which the
library writes into the transaction's application field in place of the
name of the application that made the hold; capture (and void) print
both: "made by payments-1, captured by twopc-cli" (--json: madeBy and
finishedBy).

Examples:
  twopc capture 6740c1a2e4b0a1b2c3d4e500 25.00
  twopc capture 6740c1a2e4b0a1b2c3d4e500 --minor 2500
  twopc capture 6740c1a2e4b0a1b2c3d4e500 10.00 --more
  twopc capture --ledger beijing=mongodb://127.0.0.1:27018/bank.accounts 6740c1a2e4b0a1b2c3d4e500 25.00 --json`,
	run: runCapture,
}

var voidCommand = &command{
	name:    "void",
	args:    "ID",
	summary: "void a held transfer (a hold): what no capture took returns, it ends canceled",
	help: `Void voids hold ID (twopc's Coordinator.Void): the hold moves from held
to canceling, its legs are fenced and undone (the source's held amount
returns to its balance, the destination's pending credit goes), and it
ends canceled with reason "voided". What its captures took before stays
taken: the tool says what they charged and what the void released
("captured 120.00 USD/2 in all, 180.00 USD/2 released", or "captured
nothing, 300.00 USD/2 released"), as the hold records them (its captured
and released fields, which list and show print too).

Void refuses (exit status 1) a hold that was captured or expired, and a
transaction that is not a hold. Void again succeeds, finishing the
rollback if a first void stopped before it ended. As capture does, it
prints the application that made the hold and the one that voided it,
whose name the transaction's application field now holds.

Examples:
  twopc void 6740c1a2e4b0a1b2c3d4e500
  twopc void --ledger shanghai=accounts_sh 6740c1a2e4b0a1b2c3d4e500 --json`,
	run: runVoid,
}

// maxCaptureKeys bounds the keys capture tries after captures under the
// earlier ones were canceled.
const maxCaptureKeys = 100

func runCapture(ctx context.Context, cl *cli, cmd *command, args []string) error {
	fs := cl.flagSet(cmd)
	var g globals
	g.register(fs, withApplication|withLedgers|withArchive)
	var minor optionalString
	fs.Var(&minor, "minor", "capture `N` minor units, whatever the hold's asset, instead of an AMOUNT")
	more := fs.Bool("more", false, "keep the rest held for more captures (the capture is not the hold's last)")
	pos, err := cl.parse(cmd, fs, args, 1, 2)
	if err != nil {
		return err
	}
	id, err := cl.parseID(cmd, fs, pos[0])
	if err != nil {
		return err
	}
	var amount int64
	switch {
	case len(pos) == 2 && minor.set:
		return cl.usage(cmd, fs, "give AMOUNT or --minor N, not both")
	case len(pos) == 1 && !minor.set:
		return cl.usage(cmd, fs, "no AMOUNT: give it as the hold's amounts are printed (22.00 for USD/2), or --minor N")
	case minor.set:
		if amount, err = strconv.ParseInt(minor.value, 10, 64); err != nil {
			return cl.usage(cmd, fs, "--minor %q is not a whole number of minor units", minor.value)
		}
	default:
		if err := amountSyntax(pos[1]); err != nil {
			return cl.usage(cmd, fs, "AMOUNT %v", err)
		}
	}
	return resolveHold(ctx, cl, &g, id, func(before *txnDoc) error {
		if minor.set || !before.hold() {
			return nil // a transaction that is not a hold: the library says so
		}
		code, one := before.asset()
		if !one {
			return cl.usage(cmd, fs, "hold %s has legs of %s: give the amount in minor units with --minor N", id.Hex(), series(before.assets(), "and"))
		}
		n, err := parseAmount(pos[1], code)
		switch {
		case errors.Is(err, errBareInteger):
			return cl.usage(cmd, fs, "AMOUNT %v, or --minor %s for %s minor units", err, pos[1], pos[1])
		case err != nil:
			return cl.usage(cmd, fs, "AMOUNT %v", err)
		}
		amount = n
		return nil
	}, func(c *twopc.Coordinator) error {
		// Keyed by the hold and the amount: the same capture again (after
		// a lost reply) returns the capture it made. One canceled (its
		// process died before its commit, and recovery rolled it back)
		// stays canceled under its key: the next key is tried, as Reverse
		// does.
		for n := 1; ; n++ {
			key := fmt.Sprintf("twopc capture %s %d %t", id.Hex(), amount, *more)
			if n > 1 {
				key += fmt.Sprintf(" #%d", n)
			}
			txn, err := c.Capture(ctx, id, amount, twopc.WithKey(key), twopc.WithFinalCapture(!*more))
			if txn == nil || txn.CaptureOf != id || txn.State != twopc.StateCanceled || n == maxCaptureKeys {
				return err
			}
		}
	}, func(before, after *txnDoc, u *units) string {
		code, _ := after.asset()
		out := fmt.Sprintf("Hold %s (%s) is captured for %s; it is %s (%s).",
			id.Hex(), legSummary(after, u), u.of(amount, code, false), after.state, madeBy(before, after, "captured"))
		if w := after.chargedWords(u); w != "" {
			out += " C" + strings.TrimPrefix(w, "c") + "." // "Captured 8.00 USD/2 in all, 2.00 USD/2 released."
		}
		return out
	})
}

func runVoid(ctx context.Context, cl *cli, cmd *command, args []string) error {
	fs := cl.flagSet(cmd)
	var g globals
	g.register(fs, withApplication|withLedgers|withArchive)
	pos, err := cl.parse(cmd, fs, args, 1, 1)
	if err != nil {
		return err
	}
	id, err := cl.parseID(cmd, fs, pos[0])
	if err != nil {
		return err
	}
	return resolveHold(ctx, cl, &g, id, nil, func(c *twopc.Coordinator) error {
		_, err := c.Void(ctx, id)
		return err
	}, func(before, after *txnDoc, u *units) string {
		moved := after.chargedWords(u) // "captured 6.00 USD/2 in all, 4.00 USD/2 released"
		if moved == "" {
			moved = "nothing moved"
		}
		return fmt.Sprintf("Hold %s (%s) is voided; it is %s: %s (%s).",
			id.Hex(), legSummary(after, u), after.state, moved, madeBy(before, after, "voided"))
	})
}

// resolveHold connects, checks that hold id's ledgers are given, calls
// prepare (if not nil) with the transaction as it is, runs resolve (a
// capture or a void) on a coordinator with every ledger, waits for its
// settling, and prints the transaction as it ends (done says so in words,
// given it before and after, its amounts through u), with the application
// that made it and the one that resolved it: the library writes the
// resolver's name in the document's application field, in place of the
// maker's.
func resolveHold(ctx context.Context, cl *cli, g *globals, id bson.ObjectID, prepare func(before *txnDoc) error,
	resolve func(*twopc.Coordinator) error, done func(before, after *txnDoc, u *units) string) error {
	cn, err := g.connect(ctx, cl)
	if err != nil {
		return err
	}
	defer cn.close()
	before, err := cn.findAnywhere(ctx, id)
	switch {
	case err != nil:
		return err
	case before == nil:
		return refused(fmt.Errorf("%w: %s", twopc.ErrTxnNotFound, id.Hex()))
	}
	if err := cn.needLedgers(before); err != nil {
		return err
	}
	if prepare != nil {
		if err := prepare(before); err != nil {
			return err
		}
	}
	c, err := cn.coordinator(twopc.WithSyncSettle())
	if err != nil {
		return err
	}
	rerr := resolve(c)
	if cerr := closeCoordinator(c); rerr == nil && cerr != nil {
		rerr = cerr
	}
	after, err := cn.findAnywhere(ctx, id)
	if rerr != nil {
		// The refusal (or the failure) is the answer; what a read after
		// it finds, if it can read, is only a note.
		if err == nil && !g.json && after != nil && !errors.Is(rerr, twopc.ErrNotHold) {
			fmt.Fprintf(cl.stderr, "twopc: hold %s is %s, %s\n", id.Hex(), after.state, holdWords(after))
		}
		return rerr
	}
	switch {
	case err != nil:
		return err
	case after == nil:
		return fmt.Errorf("hold %s was resolved, but reading it found nothing", id.Hex())
	}
	if g.json {
		return cl.printJSON(outcomeReport{ID: id.Hex(), Before: before.state, State: after.state,
			MadeBy: before.application, FinishedBy: after.application, Transaction: jsonDoc{after}})
	}
	var u units
	fmt.Fprintln(cl.stdout, done(before, after, &u))
	u.note(cl.stdout)
	return nil
}

// holdWords says what hold t holds and captured, in its own amounts.
func holdWords(t *txnDoc) string {
	var u units
	code, _ := t.asset()
	words := "value " + u.of(t.value, code, false)
	switch {
	case t.captured != nil:
		words += ", captured " + u.of(*t.captured, code, false)
	case t.takenCredit() > 0:
		words += ", its captures took " + u.of(t.takenCredit(), code, false)
	}
	if u.minor {
		words += " (" + strings.ToLower(minorNote[:1]) + strings.TrimSuffix(minorNote[1:], ".") + ")"
	}
	return words
}
