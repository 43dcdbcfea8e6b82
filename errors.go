package twopc

import (
	"errors"
	"fmt"
	"strings"
)

// Errors returned by the library. Match them with errors.Is: the library
// wraps them with the transaction, account or state they concern.
var (
	// ErrInvalidTransfer reports bad input, refused before anything is
	// written: to Transfer, a value that is not positive, a source equal to
	// the destination as the server sees ids, or an account id the library
	// refuses (see Transfer); to TransferLegs and HoldLegs, legs that break
	// its rules; an idempotency key that is empty, not valid UTF-8 or longer
	// than MaxKeyLen; metadata past WithMetadata's limits; WithExpiry on a
	// transfer that is not a hold; a Capture amount that is not positive,
	// or not the whole Value of a hold of more than two legs, and
	// CaptureLegs parts of the wrong count or sign, all 0, or not summing
	// to zero (a capture past what a leg holds is ErrCaptureExceeded); a
	// TransferBatch of more than MaxBatch, or a request of it that repeats
	// an earlier one's key. Nothing is written.
	ErrInvalidTransfer = errors.New("twopc: invalid transfer")

	// ErrInvalidAccountID reports an account id that is nil or cannot be
	// a document _id whose equality the library decides as the server
	// does (see Transfer), given to OpenAccount, Account or Balance, or in
	// a transfer (which also wraps ErrInvalidTransfer). Nothing is written.
	ErrInvalidAccountID = errors.New("twopc: invalid account id")

	// ErrAccountExists reports an OpenAccount of an id that names an
	// account already: the account is left as it was.
	ErrAccountExists = errors.New("twopc: account already exists")

	// ErrNegativeBalance reports an OpenAccount with a balance below zero
	// and no floor (AccountFloor). Nothing is written.
	ErrNegativeBalance = errors.New("twopc: opening balance below zero")

	// ErrInsufficientFunds reports that the debit would have taken the source
	// balance below zero, or, for an account with limits, below its floor
	// (AccountFloor), counting what holds and transfers in flight have
	// already taken. The transaction ends canceled; no balance changes.
	ErrInsufficientFunds = errors.New("twopc: insufficient funds")

	// ErrLimitExceeded reports that a credit would have taken an account
	// above its ceiling (AccountCeiling), counting every leg in flight on
	// it as if it settled or was undone: the transaction ends canceled and
	// no balance changes. OpenAccount returns it for an opening balance
	// outside the limits it is given (nothing is written).
	ErrLimitExceeded = errors.New("twopc: account limit exceeded")

	// ErrAssetMismatch reports a leg whose asset is not its account's
	// (AccountAsset, WithAsset; a leg of no asset applies only to an
	// account with none): the server refuses it in the write that would
	// move the money, so no coordinator of this version, however
	// configured, moves money across assets. The transaction ends
	// canceled; no balance changes.
	// SetLimits returns it for an AccountAsset other than the account's.
	ErrAssetMismatch = errors.New("twopc: asset mismatch")

	// ErrMissingIndex reports that an index the library reads by does not
	// exist, under WithManagedIndexes (which stops the coordinator making
	// them): the error names each missing one by its collection and keys.
	// The low-water mark's reading (which then fails, and accounts keep
	// their fences), a Recoverer pass and a statement return it until the
	// indexes exist; no read scans the log in their place.
	ErrMissingIndex = errors.New("twopc: missing index")

	// ErrShardKey reports a collection of the library sharded on a key the
	// protocol does not rest on, read through the router of a sharded
	// cluster: the log, its checkpoints, refund books and feeds, and
	// WithHistory's archive must be unsharded or sharded on {_id: "hashed"}, and an
	// accounts collection unsharded or sharded on {_id: "hashed"} or {_id:
	// 1} (see PROTOCOL.md, Scale-out). The error names each collection, its
	// key and why. A coordinator reads the keys once, before the first
	// write that inserts or upserts into a collection (a transfer, hold,
	// capture or refund is then not made; OpenAccount, SetLimits and
	// Cancel's placeholder write nothing) and before its first read that
	// needs an index; EnsureIndexes reads them all again, before it makes
	// any index.
	ErrShardKey = errors.New("twopc: shard key not supported")

	// ErrFeedTruncated reports a feed position older than what the feed
	// still has: history (WithHistory) moved or removed transactions of
	// the batches after it, once every feed had published them. The
	// reader fell behind the time the log keeps transactions; nothing is
	// skipped silently.
	ErrFeedTruncated = errors.New("twopc: feed position older than what the feed keeps")

	// ErrFeedDeleted reports a feed that Feed.Delete deleted: its name is
	// not used again.
	ErrFeedDeleted = errors.New("twopc: feed deleted")

	// ErrInvalidFeed reports a feed name that is not 1 to 32 of a-z, 0-9
	// and _, or a Position that is not one a feed gave. Nothing is
	// written.
	ErrInvalidFeed = errors.New("twopc: invalid feed")

	// ErrAccountNotFound reports that an account a leg names does not exist
	// in its ledger (no document, or only a tombstone). A transfer naming
	// such an id is refused before its insert, with a nil Txn, and writes
	// nothing, in the accounts or the log (a keyed one records nothing
	// under its key). Only an account deleted after the coordinator last
	// read it, or while a transfer to it was in flight, is found missing
	// when its leg applies: that transaction ends canceled, no balance
	// changes, and its rollback's fence leaves a tombstone under the id
	// (see PROTOCOL.md, Fences). Coordinator.Account and Ledger.Account
	// return it too.
	ErrAccountNotFound = errors.New("twopc: account not found")

	// ErrBeforeOpening reports a BalanceAt for a time before the account
	// was opened: before the time OpenAccount recorded in it (its opening,
	// {balance, at}, at by the clock corrected to the server's), with no
	// entry of the account at or before that time. An account OpenAccount
	// did not open (inserted by hand, or by another program) has no
	// opening time recorded: BalanceAt answers its opening balance for any
	// time before its first entry. Nothing is written.
	ErrBeforeOpening = errors.New("twopc: before the account was opened")

	// ErrBalanceOverflow reports that a leg would take a balance out of the
	// range of int64, once every leg in flight on the account settled or
	// was undone: a credit applies only if balance+value is at most
	// MaxInt64 with nothing else in flight on the account, or, with legs
	// in flight, if the balance and the held debits (Account.Held) are each
	// at most MaxInt64/4 and the pending credits (Account.PendingCredit)
	// plus value at most MaxInt64/2; a debit allowed below zero (see
	// WithAllowNegative) may not take the balance below MinInt64. So a
	// committed transfer always settles, and a balance above MaxInt64/4
	// takes a credit only while nothing else is in flight on it. The
	// transaction ends canceled; no balance changes.
	ErrBalanceOverflow = errors.New("twopc: balance would overflow int64")

	// ErrInvalidAccount reports an account document whose balance is missing
	// or not an int32 or int64 (a float, a string), whose fencedLegs is
	// not an array, or whose fence line
	// (fencedBefore) is neither a date nor null, or, for an account with
	// limits, whose floorRoom or ceilingRoom is not an integer, or that the
	// server refuses a leg on for a reason the account's fields do not show
	// (a schema validator, a document grown too large); never for a
	// transient error (a primary stepping down, a shard's failover: the
	// RetryableWriteError label or a retryable code), which is retried. The
	// transaction ends canceled; no balance changes. Coordinator.Account
	// and Ledger.Account return it for a balance that is not an integer.
	// OpenAccount and SetLimits return it, writing nothing, for an asset
	// code or limits that are not valid (see AccountAsset, AccountFloor).
	ErrInvalidAccount = errors.New("twopc: account balance is missing or not an integer")

	// ErrTooLate reports a leg refused by an account's fence line. Each
	// transaction carries its transaction time (Txn.Created, stamped by a
	// clock corrected to the server's), and each account a fence line,
	// which the writes on it move up to the coordinator's low-water mark
	// (the oldest unfinished transaction, and never within half a second
	// of the server's clock), dropping the fences below it; the account
	// then refuses every leg of a transaction created at or before its
	// line. It is what a leg write delivered after its transaction
	// finished meets; a new transfer meets it only if it reached the log
	// more than that half second after its time (a failover during its
	// insert, a server clock that could not be read and a host clock far
	// behind). The transaction ends canceled; no balance changes.
	ErrTooLate = errors.New("twopc: transaction older than the account's fence line")

	// ErrCanceled reports that the transaction was canceled before it
	// reached its commit point: by a Canceler (reason "canceled"), or by
	// recovery, which rolls back a stale pending transaction none of whose
	// legs was applied, or a stale pending hold (reason "stale_pending"),
	// and cancels a stale initial one (reason "stale_initial"). Its applied
	// legs are (or will be) undone.
	ErrCanceled = errors.New("twopc: transaction canceled")

	// ErrInProgress reports that the transaction's outcome is not decided by
	// this call: another application owns it (it took over a stalled owner,
	// or a call with the same key is still running in another
	// coordinator; within one coordinator a call with the key of a call
	// still running waits for it and returns its outcome). Its owner or a
	// Recoverer will finish it; read it later with Coordinator.Get.
	ErrInProgress = errors.New("twopc: transaction in progress elsewhere")

	// ErrNotCancelable reports a Cancel of a transaction past its commit
	// point (applied or done, in the log or in WithHistory's archive). Undo
	// it with Coordinator.Reverse.
	ErrNotCancelable = errors.New("twopc: transaction is past its commit point")

	// ErrNotRefundable reports a Refund, RefundLegs, Reverse or
	// Refundable of a transaction that moved nothing to give back: one not
	// yet at its commit point (initial or pending: let it finish, by
	// waiting or by repeating its call with its key, and read it with
	// Get), a held hold with nothing captured (it moves nothing until
	// captured: release it with Void), one canceling or canceled (a hold
	// voided or expired with nothing captured, a placeholder of Cancel: it
	// moved nothing); or of a capture of a hold, which is refunded with
	// its hold, as one order (see Refund; the error names the hold).
	// Nothing is written.
	ErrNotRefundable = errors.New("twopc: transaction not refundable")

	// ErrTxnNotFound reports a transaction id that names no transaction.
	ErrTxnNotFound = errors.New("twopc: transaction not found")

	// ErrKeyConflict reports a call whose idempotency key (WithKey) was
	// already used by a different transaction: other legs (accounts,
	// ledgers or amounts; for Transfer, another source, destination or
	// value), a hold where this is a transfer or the other way round, a
	// hold with another expiry, or other metadata (WithMetadata). Keys are unique across the transactions
	// collection, whichever call made them: give each transfer its own. The
	// returned Txn is the one that holds the key; nothing is written.
	ErrKeyConflict = errors.New("twopc: idempotency key used for a different transfer")

	// ErrUnknownState reports a transaction document whose state is not one
	// of the seven the protocol knows (see State; edited by hand, or by
	// another program): from Get, Cancel, Reverse and a call repeating its
	// key. The library leaves it alone, recovery included.
	ErrUnknownState = errors.New("twopc: transaction in unknown state")

	// ErrMalformedTxn reports a transaction document the protocol could not
	// have written: a value that is not positive, ids that are not valid or
	// equal, fields of the wrong type; and, from Cancel, a document without
	// a transaction time (the tutorial's protocol, another program). The
	// library leaves it alone: it is not rolled forward, back or canceled,
	// and recovery counts it failed.
	ErrMalformedTxn = errors.New("twopc: malformed transaction document")

	// ErrUnknownLedger reports a ledger name the coordinator was not given
	// (see WithLedger): in a transfer's legs (nothing is written), or in a
	// transaction recovery found (it is left for a coordinator that has
	// that ledger, and counted failed).
	ErrUnknownLedger = errors.New("twopc: unknown ledger")

	// ErrClosed reports a call that would start or decide a transfer
	// (Transfer, TransferLegs, TransferBatch, Hold, HoldLegs, Capture,
	// CaptureLegs, Void, Refund, Reverse) on a Coordinator after Close.
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
	reasonLimitExceeded     = "limit_exceeded"
	reasonAssetMismatch     = "asset_mismatch"
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
	{reasonLimitExceeded, ErrLimitExceeded},
	{reasonAssetMismatch, ErrAssetMismatch},
}

// reasonOf is the reason code for err.
func reasonOf(err error) string {
	if errors.Is(err, errStalePending) {
		return reasonStalePending
	}
	if errors.Is(err, errLateCopy) {
		return reasonLateCopy
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
// package's prefix once ("twopc: transfer X: insufficient funds", not
// "twopc: transfer X: twopc: insufficient funds"). An error among args
// whose message starts with the prefix is printed without it when the
// message already has one before it (from format, or an earlier such
// error); other arguments (an account id, a key) are printed as they are.
// What it wraps is unchanged for errors.Is and errors.As.
func errorf(format string, args ...any) error {
	seen := strings.HasPrefix(format, prefix)
	for i, a := range args {
		err, ok := a.(error)
		if !ok || !strings.HasPrefix(err.Error(), prefix) {
			continue
		}
		if seen {
			args[i] = unprefixed{err}
		}
		seen = true
	}
	return fmt.Errorf(format, args...)
}

// unprefixed is an error printed without the package's prefix, as part of
// a message that has it already.
type unprefixed struct{ err error }

func (e unprefixed) Error() string { return strings.TrimPrefix(e.err.Error(), prefix) }
func (e unprefixed) Unwrap() error { return e.err }
