package main

import (
	"errors"
	"fmt"
	"strconv"
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
	twopc.ErrHoldExpired, twopc.ErrHoldVoided, twopc.ErrHoldCaptured, twopc.ErrNotHold, twopc.ErrTooManyHolds, twopc.ErrCaptureExceeded,
	twopc.ErrBeforeOpening, twopc.ErrNotRefundable,
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
// adds where to read more. Under --json, a failure also writes a JSON
// error object on stdout, {"error": ..., "exitStatus": N}, unless the
// command wrote its JSON document already (audit's report, recover's
// with its error).
func (cl *cli) exit(err error) int {
	code := exitCode(err)
	if code != exitOK && cl.jsonOutput() && !cl.wroteJSON {
		msg := "exit status " + strconv.Itoa(code)
		var e *exitError
		if !errors.As(err, &e) || e.err != nil {
			msg = cl.message(err)
		}
		_ = cl.printJSON(jsonError{Error: msg, ExitStatus: code})
	}
	var e *exitError
	if err == nil || (errors.As(err, &e) && e.err == nil) {
		return code // nothing wrong, or printed already
	}
	msg := cl.message(err)
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

// message is err as the tool says it: naming the command, unless the
// library's "twopc: " begins it already.
func (cl *cli) message(err error) string {
	msg := err.Error()
	switch {
	case strings.HasPrefix(msg, "twopc"):
		return msg
	case cl.cmd == "":
		return "twopc: " + msg
	}
	return "twopc " + cl.cmd + ": " + msg
}

// jsonError is what a failure under --json writes on stdout.
type jsonError struct {
	Error      string `json:"error"`
	ExitStatus int    `json:"exitStatus"`
}

// jsonOutput reports whether the command's output is JSON: its --json
// flag is set, or, for a command line that failed to parse before it, is
// given.
func (cl *cli) jsonOutput() bool {
	if cl.fs != nil {
		if f := cl.fs.Lookup("json"); f != nil && f.Value.String() == "true" {
			return true
		}
	}
	for _, a := range cl.args {
		if a == "--" {
			break
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "json" {
			continue
		}
		if !hasValue {
			return true
		}
		b, err := strconv.ParseBool(value)
		return err == nil && b
	}
	return false
}
