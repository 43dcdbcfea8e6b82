package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/twopc/twopc"
)

// Exit statuses (see the package documentation).
const (
	exitOK     = 0 // done; or, for audit and doctor, nothing wrong found
	exitFailed = 1 // a check failed (audit, doctor), or the operation was refused
	exitUsage  = 2 // the command line is wrong
	exitServer = 3 // cannot connect, the server failed a command, or interrupted
)

// exitError is an error that says which exit status it stands for. With a
// nil err, what went wrong has been printed already.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// usageErrorf is a usage error: exit status 2.
func usageErrorf(format string, a ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, a...)}
}

// refused is an operation the library or the tool declined: exit status 1.
func refused(err error) error { return &exitError{code: exitFailed, err: err} }

// errCheckFailed ends a command whose output already says what failed.
var errCheckFailed = &exitError{code: exitFailed}

// refusals are the library's errors that answer "no" (exit status 1),
// not "could not ask" (3).
var refusals = []error{
	twopc.ErrTxnNotFound, twopc.ErrNotCancelable, twopc.ErrInProgress, twopc.ErrCanceled,
	twopc.ErrMalformedTxn, twopc.ErrUnknownState, twopc.ErrUnknownLedger, twopc.ErrKeyConflict,
	twopc.ErrInsufficientFunds, twopc.ErrAccountNotFound, twopc.ErrBalanceOverflow,
	twopc.ErrInvalidAccount, twopc.ErrTooLate, twopc.ErrInvalidTransfer, twopc.ErrAuditFailed,
	twopc.ErrHoldExpired, twopc.ErrHoldVoided, twopc.ErrHoldCaptured, twopc.ErrNotHold, twopc.ErrTooManyHolds,
}

// exitCode is the exit status err stands for.
func exitCode(err error) int {
	if err == nil {
		return exitOK
	}
	var e *exitError
	if errors.As(err, &e) {
		return e.code
	}
	for _, r := range refusals {
		if errors.Is(err, r) {
			return exitFailed
		}
	}
	return exitServer
}

// exit prints err, if it has not been, and returns its exit status. The
// message goes to stderr, on one line, naming the command; a usage error
// adds where to read more.
func (cl *cli) exit(err error) int {
	code := exitCode(err)
	var e *exitError
	if err == nil || (errors.As(err, &e) && e.err == nil) {
		return code // nothing wrong, or printed already
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "twopc") {
		msg = cl.prefix() + msg
	}
	fmt.Fprintln(cl.stderr, msg)
	if code == exitUsage {
		if cl.cmd != "" {
			fmt.Fprintf(cl.stderr, "Run 'twopc help %s' for its usage.\n", cl.cmd)
		} else {
			fmt.Fprintln(cl.stderr, "Run 'twopc help' for usage.")
		}
	}
	return code
}

// prefix begins a message about the command being run.
func (cl *cli) prefix() string {
	if cl.cmd == "" {
		return "twopc: "
	}
	return "twopc " + cl.cmd + ": "
}
