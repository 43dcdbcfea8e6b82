package twopc

import (
	"errors"
	"fmt"
	"strings"
)

// Errors returned by the library. Match them with errors.Is: the library
// wraps them with the transaction, account or state they concern.
var (
	// ErrInvalidTransfer reports bad input to Transfer: a value that is not
	// positive, a source equal to the destination, or an account id that is
	// nil or cannot be a document _id. Nothing is written.
	ErrInvalidTransfer = errors.New("twopc: invalid transfer")

	// ErrInvalidAccountID reports an account id that is nil or cannot be
	// a document _id whose equality the library decides as the server
	// does (see Transfer), given to OpenAccount, Account or Balance, or in
	// a transfer (which also wraps ErrInvalidTransfer). Nothing is written.
	ErrInvalidAccountID = errors.New("twopc: invalid account id")

	// ErrAccountExists reports an OpenAccount of an id that names an
	// account already: the account is left as it was.
	ErrAccountExists = errors.New("twopc: account already exists")

	// ErrNegativeBalance reports an OpenAccount with a balance below zero.
	// Nothing is written.
	ErrNegativeBalance = errors.New("twopc: opening balance below zero")

	// ErrInsufficientFunds reports that the debit would have taken the source
	// balance below zero. The transaction ends canceled; no balance changes.
	ErrInsufficientFunds = errors.New("twopc: insufficient funds")

	// ErrAccountNotFound reports that the source or destination account does
	// not exist. The transaction ends canceled; no balance changes.
	ErrAccountNotFound = errors.New("twopc: account not found")

	// ErrBalanceOverflow reports that a leg would take a balance past the
	// range of int64. The transaction ends canceled; no balance changes.
	ErrBalanceOverflow = errors.New("twopc: balance would overflow int64")

	// ErrInvalidAccount reports an account document whose balance is missing
	// or not an integer. The transaction ends canceled; no balance changes.
	ErrInvalidAccount = errors.New("twopc: account balance is missing or not an integer")

	// ErrTooLate reports a leg refused by an account's fence line: the
	// account has already closed the legs of every transaction created at
	// or before a time at or after this one's (see the package
	// documentation). It is what a leg write delivered after its
	// transaction finished meets; a new transfer meets it only if the
	// clock of the host that created it is behind the others' by more than
	// the fence retention. The transaction ends canceled; no balance
	// changes.
	ErrTooLate = errors.New("twopc: transaction older than the account's fence line")

	// ErrCanceled reports that the transaction was canceled before it
	// reached its commit point: by a Canceler, or by recovery, which rolls
	// back a stale transaction none of whose legs was applied (reason
	// "stale_pending"). Its applied legs are (or will be) undone.
	ErrCanceled = errors.New("twopc: transaction canceled")

	// ErrInProgress reports that the transaction's outcome is not decided by
	// this call: another application owns it (it took over a stalled owner,
	// or a call with the same key is still running in another
	// coordinator; within one coordinator a call with the key of a call
	// still running waits for it and returns its outcome). Its owner or a
	// Recoverer will finish it; read it later with Coordinator.Get.
	ErrInProgress = errors.New("twopc: transaction in progress elsewhere")

	// ErrNotCancelable reports a Cancel of a transaction past its commit
	// point (applied or done). Undo it with Coordinator.Reverse.
	ErrNotCancelable = errors.New("twopc: transaction is past its commit point")

	// ErrTxnNotFound reports a transaction id that names no transaction.
	ErrTxnNotFound = errors.New("twopc: transaction not found")

	// ErrKeyConflict reports a Transfer whose idempotency key was already used
	// by a transfer with a different source, destination or value.
	ErrKeyConflict = errors.New("twopc: idempotency key used for a different transfer")

	// ErrUnknownState reports a transaction document whose state is not one
	// of the six the protocol knows (edited by hand, or by another program).
	// The library leaves it alone.
	ErrUnknownState = errors.New("twopc: transaction in unknown state")

	// ErrMalformedTxn reports a transaction document the protocol could not
	// have written: a value that is not positive, ids that are not valid or
	// equal, fields of the wrong type. The library leaves it alone: it is
	// not rolled forward, back or canceled, and recovery counts it failed.
	ErrMalformedTxn = errors.New("twopc: malformed transaction document")

	// ErrUnknownLedger reports a ledger name the coordinator was not given
	// (see WithLedger): in a transfer's legs (nothing is written), or in a
	// transaction recovery found (it is left for a coordinator that has
	// that ledger, and counted failed).
	ErrUnknownLedger = errors.New("twopc: unknown ledger")

	// ErrClosed reports a call on a Coordinator after Close.
	ErrClosed = errors.New("twopc: coordinator closed")
)

// Reason codes stored in a canceled transaction's reason field, so that the
// transfer log says why, and a retry with the same key returns the same error.
const (
	reasonInsufficientFunds = "insufficient_funds"
	reasonAccountNotFound   = "account_not_found"
	reasonBalanceOverflow   = "balance_overflow"
	reasonInvalidAccount    = "invalid_account"
	reasonTooLate           = "too_late"
	reasonCanceled          = "canceled"
	reasonStaleInitial      = "stale_initial"
	reasonStalePending      = "stale_pending"
	reasonVoided            = "voided"
	reasonExpired           = "expired"
	reasonTooManyHolds      = "too_many_holds"
	reasonLateCopy          = "late_copy"
)

// reasonErrors pairs reason codes with their errors; a reason that maps to
// an error already listed is only read, never written by reasonOf.
var reasonErrors = []struct {
	reason string
	err    error
}{
	{reasonInsufficientFunds, ErrInsufficientFunds},
	{reasonAccountNotFound, ErrAccountNotFound},
	{reasonBalanceOverflow, ErrBalanceOverflow},
	{reasonInvalidAccount, ErrInvalidAccount},
	{reasonTooLate, ErrTooLate},
	{reasonCanceled, ErrCanceled},
	{reasonStaleInitial, ErrCanceled},
	{reasonStalePending, ErrCanceled},
	{reasonVoided, ErrHoldVoided},
	{reasonExpired, ErrHoldExpired},
	{reasonTooManyHolds, ErrTooManyHolds},
	{reasonLateCopy, ErrCanceled},
}

// reasonOf is the reason code for err.
func reasonOf(err error) string {
	if errors.Is(err, errStalePending) {
		return reasonStalePending
	}
	for _, re := range reasonErrors {
		if errors.Is(err, re.err) {
			return re.reason
		}
	}
	return reasonCanceled
}

// errorOfReason is the error a canceled transaction's reason stands for.
func errorOfReason(reason string) error {
	for _, re := range reasonErrors {
		if re.reason == reason {
			return re.err
		}
	}
	return ErrCanceled
}

// prefix begins every error message of the library.
const prefix = "twopc: "

// errorf is fmt.Errorf for the library's errors: the message carries the
// package's prefix once, however many of the errors it wraps carry it too
// ("twopc: transfer X: insufficient funds", not "twopc: transfer X: twopc:
// insufficient funds"). What it wraps is unchanged for errors.Is and
// errors.As.
func errorf(format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	msg := err.Error()
	first := strings.Index(msg, prefix)
	if first < 0 || !strings.Contains(msg[first+len(prefix):], prefix) {
		return err
	}
	head := first + len(prefix)
	return &prefixed{msg: msg[:head] + strings.ReplaceAll(msg[head:], prefix, ""), err: err}
}

// prefixed is an error whose message errorf tidied.
type prefixed struct {
	msg string
	err error
}

func (e *prefixed) Error() string { return e.msg }
func (e *prefixed) Unwrap() error { return e.err }
