package twopc

// The transaction (Txn, its legs) and the calls that make and read one:
// Transfer and Get (TransferLegs is in multileg.go, TransferBatch in
// batch.go, Reverse in reverse.go, holds in hold.go). Each transfer call builds transfers and
// hands them to the engine (engine.go).

import (
	"context"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/twopc/twopc/internal/schema"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// Txn is a transfer as stored in the transactions collection: the
// tutorial's document, plus the idempotency key and, for a canceled
// transfer, the reason.
type Txn struct {
	ID           bson.ObjectID `bson:"_id"`
	Source       any           `bson:"source"`
	Destination  any           `bson:"destination"`
	Value        int64         `bson:"value"`
	State        State         `bson:"state"`
	LastModified time.Time     `bson:"lastModified"`
	Application  string        `bson:"application,omitempty"`
	Key          string        `bson:"key,omitempty"`
	Reason       string        `bson:"reason,omitempty"`
	// Metadata is the transfer's string metadata (WithMetadata), written
	// once with it; nil if none.
	Metadata map[string]string `bson:"metadata,omitempty"`
	// Created is the transaction time: when the coordinator that wrote the
	// transaction sent the write that inserted it (not when the transfer
	// was called or queued for that write), by that coordinator's clock
	// corrected to the server's (see PROTOCOL.md, Clocks), to the
	// millisecond. It never changes. Accounts' fence lines are compared
	// with it: an account refuses every leg of a transaction created at or
	// before its line (see ErrTooLate).
	Created time.Time `bson:"created,omitempty"`
	// Legs are the legs of a transfer made with TransferLegs (Source and
	// Destination are then nil, and Value is the total credited: for a
	// transfer of several assets, the total credited in the asset of its
	// first leg; each leg says its own); a
	// transfer made with Transfer keeps the tutorial's shape and has none.
	// AllLegs returns the legs of either.
	Legs []Leg `bson:"legs,omitempty"`
	// Hold marks a transfer made with Hold or HoldLegs: its legs apply,
	// then it waits in StateHeld for Capture, Void or its expiry.
	Hold bool `bson:"hold,omitempty"`
	// ExpiryMs is a hold's WithExpiry in milliseconds (0: none). The hold
	// expires ExpiryMs after HeldAt, by the server's clock.
	ExpiryMs int64 `bson:"expiryMs,omitempty"`
	// HeldAt is when the hold became held, by the server's clock
	// ($currentDate, in the write that made it held); zero before.
	HeldAt time.Time `bson:"heldAt,omitempty"`
	// Captured is, for a hold that ended after captures, what they
	// credited in all (in the asset of its first leg, as Value): Value if
	// captured whole. It is written by the write that ends the hold, with
	// Released: by its captures (StateApplied, then StateDone), or by Void
	// or expiry after some (StateCanceling, then StateCanceled, reason
	// "voided" or "expired": a canceled hold with Captured above 0
	// charged that much, by its captures). 0 while the hold is held (see
	// CapturedLegs), and for a hold ended with no capture.
	Captured int64 `bson:"captured,omitempty"`
	// Released is, for a hold that ended (by its captures, Void or
	// expiry), what no capture took and it returned to the debited
	// accounts: Value less Captured. 0 while held, for a hold captured
	// whole, and for one canceled before it was held.
	Released int64 `bson:"released,omitempty"`
	// CapturedLegs is, for a hold, what its captures made or in flight
	// took of each of its legs (AllLegs' order), as absolute amounts:
	// zeros until its first capture (see Coordinator.Capture).
	CapturedLegs []int64 `bson:"capturedLegs,omitempty"`
	// CaptureOf is, for a capture (Capture, CaptureLegs), the hold it
	// captures from; zero otherwise.
	CaptureOf bson.ObjectID `bson:"captureOf,omitempty"`
	// VoidMetadata is, for a hold voided with WithMetadata (Void), the
	// void's metadata, written by the void; nil otherwise.
	VoidMetadata map[string]string `bson:"voidMetadata,omitempty"`
	// VoidKey is, for a hold voided with WithKey, the void's key.
	VoidKey string `bson:"voidKey,omitempty"`
	// Asset is the asset of a transfer made with Transfer or Hold
	// (WithAsset): both its legs move it. "" for none, and for a transfer
	// made with TransferLegs, whose legs say theirs.
	Asset string `bson:"asset,omitempty"`
	// RefundOf is, for a refund (Refund, Reverse), the transfer it
	// refunds; zero otherwise.
	RefundOf bson.ObjectID `bson:"refundOf,omitempty"`
}

// Leg is one account's part in a transfer of any number of legs (see
// Coordinator.TransferLegs): a negative Amount is a debit of the account, a
// positive one a credit, in minor units.
type Leg struct {
	// Ledger names the ledger the account is in (see WithLedger); "" is
	// the coordinator's default ledger.
	Ledger  string `bson:"ledger,omitempty"`
	Account any    `bson:"account"`
	Amount  int64  `bson:"amount"`
	// Asset is the asset the leg moves (see AccountAsset): it applies only
	// to an account of that asset, and a leg of none ("") only to an
	// account with none. TransferLegs' amounts sum to zero per asset.
	Asset string `bson:"asset,omitempty"`
}

// String returns the leg as "account +amount" (a credit) or "account
// -amount" (a debit), the account prefixed with "ledger/" if the leg's
// ledger is not the default one.
func (l Leg) String() string {
	if l.Ledger != "" {
		return fmt.Sprintf("%s/%v %+d", l.Ledger, l.Account, l.Amount)
	}
	return fmt.Sprintf("%v %+d", l.Account, l.Amount)
}

// AllLegs returns the transfer's legs: Legs for a transfer made with
// TransferLegs, or the debit of Source and the credit of Destination.
func (t *Txn) AllLegs() []Leg {
	if len(t.Legs) > 0 {
		return append([]Leg(nil), t.Legs...)
	}
	return []Leg{{Account: t.Source, Amount: -t.Value, Asset: t.Asset}, {Account: t.Destination, Amount: t.Value, Asset: t.Asset}}
}

// SettledLegs returns what each leg of a committed transaction moves to
// or from its account's balance for good: AllLegs, except that a hold
// moves nothing itself (its captures do, each a transaction of its own
// with its own legs): every leg of a hold is 0.
func (t *Txn) SettledLegs() []Leg {
	legs := t.AllLegs()
	if t.Hold {
		for i := range legs {
			legs[i].Amount = 0
		}
	}
	return legs
}

// Get returns transaction id as it now stands: as WithHistory's archive
// holds it, if the archive holds it (the archive keeps a transaction's
// first record; see WithHistory), else as the transactions collection
// does. A transaction moving to the archive while Get reads is found: the
// archive is read again after a miss. An id that names no transaction
// gives ErrTxnNotFound; so does one WithHistory removed without an
// archive. A document whose state is not one of the seven gives
// ErrUnknownState, one the protocol could not have written
// ErrMalformedTxn, with the Txn as read.
func (c *Coordinator) Get(ctx context.Context, id bson.ObjectID) (_ *Txn, err error) {
	ctx, b := c.readBound(ctx, "get")
	defer func() { err = b.explain(err); b.end() }()
	r, _, err := c.log.lookup(ctx, id)
	if r == nil {
		return nil, err
	}
	return r.txn(), err
}

// GetByKey returns the transaction made with idempotency key key (see
// WithKey; Reverse's reversals have the keys "reverse:<id>", then
// "reverse:<id>:2", ...), as Get does: from the transactions collection or
// WithHistory's archive. If Cancel was called on the key's transaction
// before it arrived, GetByKey returns the canceled placeholder Cancel
// wrote. ErrTxnNotFound if no transaction has the key; a key WithKey would
// refuse gets ErrInvalidTransfer.
func (c *Coordinator) GetByKey(ctx context.Context, key string) (_ *Txn, err error) {
	if err := validateKey(key); err != nil {
		return nil, errorf("twopc: get by key: %w", err)
	}
	ctx, b := c.readBound(ctx, "get by key")
	defer func() { err = b.explain(err); b.end() }()
	r, _, err := c.log.lookup(ctx, keyID(key))
	if r == nil {
		return nil, err
	}
	if err == nil && r.Key != key && !r.Placeholder {
		return nil, errorf("%w: key %q (its _id holds a transaction of key %q)", ErrTxnNotFound, key, r.Key)
	}
	return r.txn(), err
}

// Transfer moves value (in minor units) from source to destination, two
// accounts of the coordinator's default ledger.
//
// It validates its input first, and returns ErrInvalidTransfer, writing
// nothing, for a value that is not positive; a source equal to the
// destination as the server sees ids (numbers compare by value at any
// depth: int32(1), int64(1) and 1.0 are one account, and so are
// {n: int32(1)} and {n: int64(1)}); a nil id; an id that cannot be an _id
// (an array, null, a Go value with no BSON form such as a channel or a
// func); an id holding, at any depth, a value whose equality the library
// cannot decide as every server does (Decimal128, Symbol, a regular
// expression, JavaScript, DBPointer, undefined, MinKey, MaxKey, NaN); an
// empty string; a string or document that is not valid UTF-8; a Go map of
// more than one key (its field order is random: give a document id as
// bson.D); a document id with an empty, dotted or $-prefixed key; and a key
// WithKey refuses. Ids may be strings, ObjectIDs, integers, documents: any
// value that can be an _id, but for those. Accounts collections with a
// non-simple default collation are not supported. An invalid id also
// wraps ErrInvalidAccountID.
//
// Before anything is written, Transfer reads the accounts this coordinator
// has not seen exist (one find per ledger; the coordinator remembers the
// accounts its reads and OpenAccount found): an id with no account, or
// only a tombstone, gives ErrAccountNotFound and a nil Txn, and nothing is
// written under that id, in the accounts or the log.
//
// Transfer inserts the transaction claimed by this coordinator and pending,
// applies both legs, and moves it to applied, the commit point: three round
// trips (four for the first transfer naming accounts the coordinator has
// not seen). It returns the transaction with State applied, or done under
// WithSyncSettle; settling (pulling the id from both accounts, then done)
// follows in the background, and a Recoverer finishes it if this process
// dies first. Until the transfer settles, the debit is out of the source's
// Balance (in its Account.Held) and the credit is in the destination's
// Account.PendingCredit, not yet in its Balance (see Account).
//
// The money is spendable when Transfer returns, in this process or
// another: a debit that its account's Balance (or floor room) refuses
// first reads the markers pending on that account, settles there the legs
// of those whose transactions the log holds committed (state applied;
// never pending, never held), and is tried again, once, under its own
// claim; if it is still short it is refused as before. Only that leg of
// each committed transaction is closed, guarded by its marker; the
// background settle closes the rest. A held credit (a hold not yet
// captured) and the credit of a transfer not yet committed are never
// spendable.
//
// Concurrent calls of one Coordinator share their writes; nothing is
// atomic across transfers, and a call whose ctx ends while a shared write
// is in flight returns at once, its transfer's outcome then being what
// its state says, as after a lost reply (a shared commit write is waited
// for, up to 2 s more, so as to answer by it).
//
// The call is bounded: it ends within the coordinator's call bound
// (WithCallTimeout, default 10 s, DefaultCallTimeout) or ctx's deadline,
// whichever comes first, every retry included. So when no server answers
// it fails within that bound (not the driver's server selection timeout,
// 30 s by default, once per retry), with an error that wraps the driver's
// and context.DeadlineExceeded, and says so when the bound ended it. A
// call whose ctx (or bound) ends after its commit was sent reads the
// transaction back on a context of its own (at most 2 s more) and answers
// by what the log holds: committed, the transaction and a nil error (under
// WithSyncSettle, an error saying it committed and settles in the
// background); still pending, the context's error; unread, an error saying
// the commit's outcome is unknown. It never reports pending a transfer the
// log holds committed.
//
// If a leg cannot apply, the transaction is rolled back and ends canceled,
// nothing moved, and Transfer returns ErrInsufficientFunds,
// ErrAccountNotFound (an account deleted after this coordinator last read
// it, or while the transfer was in flight: the rollback's fence then
// leaves a tombstone under its id), ErrBalanceOverflow, ErrInvalidAccount
// or ErrTooLate (an account's fence line is past the transaction's time). If a
// Canceler canceled it first, ErrCanceled; if another process took it
// over while this call stalled (a Recoverer, or a repeat of the call with
// its key), or a repeat of the call found its first attempt still driven
// elsewhere when its context ended, ErrInProgress (a call of this
// Coordinator with the same key is waited for). A key an earlier,
// different transaction holds gives ErrKeyConflict; a call after Close,
// ErrClosed. What is known before the insert is refused with nothing
// written: an amount above WithMaxAmount (ErrInvalidTransfer), an id with
// no account (ErrAccountNotFound), an asset the accounts do not hold as
// this Coordinator last read them (ErrAssetMismatch; a transfer naming no
// asset takes the one both accounts hold).
//
// If nothing this call sent can have reached the server (the context
// ended before the insert was sent, or while the call waited to be grouped
// with others' inserts; the driver found no server, or no connection, for
// any attempt), Transfer returns a nil Txn and an error that wraps the
// cause (errors.Is(err, context.Canceled), context.DeadlineExceeded): this
// call wrote nothing, and nothing of it will arrive. Without a key the
// transfer was not made. With WithKey, a transaction an earlier call made
// under the key stands as that call left it (repeat the call, or
// GetByKey); a call that gave up waiting for a call of this Coordinator
// with its key gets ErrInProgress. The driver's "operation not sent to
// server" for a deadline it saw would pass is not taken as nothing sent:
// with retryable writes it says so after an earlier attempt was sent.
//
// Any other error (the database, the context, a step hook) leaves the
// transaction where it stood, for a Recoverer: the returned Txn, when not
// nil, says where. An error with a Txn whose State is Committed means the
// money moved. If the insert's outcome is unknown (its reply was lost),
// the error gives the transaction's id: Cancel(id) settles the question
// for good (see Canceler.Cancel). With WithKey, Transfer can be repeated
// safely after any error, with a fresh context: the repeat finishes what
// the first attempt started and answers with its outcome (see WithKey,
// and WithTakeoverAfter for how long a repeat in another process waits
// for a live owner). A first attempt abandoned before any leg applied and
// not repeated within StaleAfter is rolled back by recovery (ErrCanceled,
// reason "stale_pending"): the money did not move, and a new transfer
// needs a new key.
//
// Errors: ErrInvalidTransfer (with ErrInvalidAccountID for an id),
// ErrAccountNotFound, ErrAssetMismatch, ErrShardKey or ErrClosed, nothing
// written;
// ErrInsufficientFunds, ErrLimitExceeded, ErrAssetMismatch,
// ErrAccountNotFound, ErrBalanceOverflow, ErrInvalidAccount or ErrTooLate,
// the transaction canceled, nothing moved; ErrCanceled, ErrInProgress,
// ErrKeyConflict; ErrUnknownState, ErrMalformedTxn or ErrTxnNotFound for a
// transaction document edited or deleted by hand.
func (c *Coordinator) Transfer(ctx context.Context, source, destination any, value int64, opts ...TransferOption) (*Txn, error) {
	if err := validateTransfer(source, destination, value); err != nil {
		return nil, err
	}
	return c.start(ctx, Txn{Source: source, Destination: destination, Value: value}, opts)
}

// start inserts and drives transfer t, whose legs were validated.
func (c *Coordinator) start(ctx context.Context, t Txn, opts []TransferOption) (*Txn, error) {
	return c.startWith(ctx, t, opts, nil)
}

// startWith is start, with prepare (if not nil) given the transfer's
// record before it is made: what a Txn does not carry (a capture's
// HoldLegs).
func (c *Coordinator) startWith(ctx context.Context, t Txn, opts []TransferOption, prepare func(*record)) (*Txn, error) {
	tc, err := transferOptions(opts)
	if err != nil {
		return nil, err
	}
	if err := holdOptions(&t, tc); err != nil {
		return nil, err
	}
	if tc.assetSet {
		if err := withAsset(&t, tc.asset); err != nil {
			return nil, err
		}
	}
	t.Metadata = tc.metadata
	if c.settler.isClosed() {
		return nil, ErrClosed
	}
	ctx, b := c.bound(ctx)
	defer b.end()
	tr := c.newTransfer(t, tc.key)
	if prepare != nil {
		prepare(tr.rec)
	}
	newEngine(c).run(ctx, []*transfer{tr})
	return tr.txn, b.explain(tr.err)
}

// validateTransfer checks Transfer's input before anything is written.
func validateTransfer(source, destination any, value int64) error {
	if value <= 0 {
		return errorf("%w: value %d is not positive", ErrInvalidTransfer, value)
	}
	if err := validateAccountID("source", source); err != nil {
		return errorf("%w: %w", ErrInvalidTransfer, err)
	}
	if err := validateAccountID("destination", destination); err != nil {
		return errorf("%w: %w", ErrInvalidTransfer, err)
	}
	if schema.SameID(source, destination) {
		return errorf("%w: source and destination are the same account %v", ErrInvalidTransfer, source)
	}
	return nil
}

// sameLegs reports whether two transfers have the same legs, in order; a
// leg of b marked unnamed (its asset not named by its caller) matches a's
// whatever its asset.
func sameLegs(a, b []leg, unnamed []bool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		sameAsset := a[i].asset == b[i].asset || i < len(unnamed) && unnamed[i]
		if a[i].delta != b[i].delta || a[i].ledger != b[i].ledger || !sameAsset || !schema.SameID(a[i].account, b[i].account) {
			return false
		}
	}
	return true
}

// WithAsset sets the asset a Transfer, Hold or TransferBatch request
// moves (see AccountAsset): both its legs apply only to accounts of that
// asset, checked by the server in each leg's write (ErrAssetMismatch, the
// transfer canceled, nothing moved). For TransferLegs and HoldLegs it is
// the asset of every leg that names none (a leg naming another is
// ErrInvalidTransfer); for Reverse, which moves the original's assets, it
// may only repeat them. Without it, each leg that names no asset takes its
// account's, as the Coordinator last read it (a transfer of two legs, the
// asset both accounts hold; accounts of two assets, or of another asset
// than one named, are ErrAssetMismatch before the insert, nothing
// written); the leg writes still require the asset, so an account changed
// since is refused by the server. A code that is not valid (see
// AccountAsset) is ErrInvalidTransfer; nothing is written.
func WithAsset(code string) TransferOption {
	return func(c *transferConfig) { c.asset, c.assetSet = code, true }
}

// withAsset gives transfer t, whose legs were validated, the asset code:
// its own, for a transfer of two legs; every leg's that names none, for
// one of legs, whose sums per asset are then checked again.
func withAsset(t *Txn, code string) error {
	if len(t.Legs) == 0 {
		t.Asset = code
		return nil
	}
	legs := append([]Leg(nil), t.Legs...)
	for i := range legs {
		switch legs[i].Asset {
		case "":
			legs[i].Asset = code
		case code:
		default:
			return errorf("%w: leg %d moves asset %s, not WithAsset's %s", ErrInvalidTransfer, i, legs[i].Asset, code)
		}
	}
	credited, err := validateLegs(legs)
	if err != nil {
		return err
	}
	t.Legs, t.Value = legs, credited
	return nil
}

// TransferOption configures one Transfer.
type TransferOption func(*transferConfig)

type transferConfig struct {
	asset     string
	assetSet  bool // WithAsset was given
	metadata  map[string]string
	key       string
	keyed     bool // WithKey was given, maybe with ""
	expiry    time.Duration
	expirySet bool // WithExpiry was given
	notFinal  bool // WithFinalCapture(false)
}

// WithKey sets an idempotency key: a call (Transfer, TransferLegs, a
// keyed request of TransferBatch, Hold, HoldLegs, Capture, CaptureLegs,
// Refund, Reverse) repeated with the same key answers with the first
// transaction made under it, and never moves money twice. A repeat
// finishes what the first attempt started: one that finds it pending (its
// first call timed out, lost its reply or died) takes it over, once no
// owner is alive, and rolls it forward, committed (held, for a hold), or
// rolled back with the server's refusal if a leg cannot apply. In the
// Coordinator that made the attempt it takes over as soon as none of its
// calls drives the transaction; from another Coordinator (another
// application, or another process sharing its name), once the attempt has
// been untouched for its owner's takeover lease (WithTakeoverAfter, 5 s by
// default); a repeat whose context ends first gets ErrInProgress and
// spends nothing. Of concurrent calls with one key, exactly one owns the
// transaction at a time, and a call made while a call of the same
// Coordinator with the same key is still running waits for that call to
// end. Keys are unique across the transactions collection: a key used by
// a different transaction gets ErrKeyConflict, so give each transfer its
// own. Keyed transactions are kept for good, even under WithHistory.
//
// Which outcomes leave the key free: a call refused before its insert
// (ErrInvalidTransfer, an amount above WithMaxAmount included;
// ErrAccountNotFound for an id with no account; ErrAssetMismatch for an
// asset the accounts do not hold, as the coordinator last read them; a
// leg naming no asset takes its account's) or that sent nothing records
// nothing under the key, so the corrected call may use it; if the key
// already names a transaction, a repeat returns that one even after its
// accounts are gone. A call refused by the accounts after its insert
// (funds, limits, overflow, an account changed since it was read) ends
// canceled under the key, and a repeat answers the same refusal; so does
// one rolled back by a Recoverer after StaleAfter with no repeat
// (ErrCanceled, reason stale_pending). A key is valid UTF-8, not empty,
// and at most MaxKeyLen bytes; any other gets ErrInvalidTransfer, and
// nothing is written. A step hook or an observer must not make a call with
// the key of the call it is called from: that call waits for itself until
// its context ends.
func WithKey(key string) TransferOption {
	return func(t *transferConfig) { t.key, t.keyed = key, true }
}

// MaxKeyLen is the longest idempotency key, in bytes (see WithKey).
const MaxKeyLen = 512

// validateKey checks an idempotency key that was asked for (see WithKey).
func validateKey(key string) error {
	switch {
	case key == "":
		return errorf("%w: an empty idempotency key", ErrInvalidTransfer)
	case len(key) > MaxKeyLen:
		return errorf("%w: an idempotency key of %d bytes, more than MaxKeyLen (%d)", ErrInvalidTransfer, len(key), MaxKeyLen)
	case !utf8.ValidString(key):
		return errorf("%w: idempotency key %q is not valid UTF-8", ErrInvalidTransfer, key)
	}
	return nil
}

// transferOptions applies opts, and checks the key if one was asked for.
func transferOptions(opts []TransferOption) (transferConfig, error) {
	var tc transferConfig
	for _, o := range opts {
		if o != nil {
			o(&tc)
		}
	}
	if tc.keyed {
		if err := validateKey(tc.key); err != nil {
			return tc, err
		}
	}
	if err := validateMetadata(tc.metadata); err != nil {
		return tc, err
	}
	if tc.assetSet {
		if err := schema.ValidAsset(tc.asset); err != nil {
			return tc, errorf("%w: WithAsset: %w", ErrInvalidTransfer, err)
		}
	}
	if len(tc.metadata) == 0 {
		tc.metadata = nil
	}
	return tc, nil
}
