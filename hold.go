package twopc

// Holds: a transfer whose legs apply and then wait, held, for the caller's
// decision (Capture or Void) or for its expiry. Two-phase commit's
// uncertainty period, the moment between the two phases, made durable and
// handed to the caller (PROTOCOL.md, "Holds").

import (
	"context"
	"errors"
	"maps"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Errors of holds. Each is returned wrapped, with the transaction; match
// them with errors.Is.
var (
	// ErrHoldExpired: the hold expired (see WithExpiry) before it was
	// captured; it was voided, and nothing moved. Capture and Void of an
	// expired hold return it.
	ErrHoldExpired = errors.New("twopc: hold expired")
	// ErrHoldVoided: Capture of a hold that was voided.
	ErrHoldVoided = errors.New("twopc: hold voided")
	// ErrHoldCaptured: Void of a hold that was captured, or Capture of one
	// captured for another amount.
	ErrHoldCaptured = errors.New("twopc: hold captured")
	// ErrNotHold: Capture or Void of a transaction that is not a hold.
	ErrNotHold = errors.New("twopc: transaction is not a hold")
	// ErrTooManyHolds: a leg of a hold found its account carrying MaxHolds
	// legs in flight; the hold was rolled back, and nothing moved.
	ErrTooManyHolds = errors.New("twopc: account carries too many holds")
)

// MaxHolds bounds the holds one account carries. A hold keeps its leg's
// marker in the account's pendingTransactions until it is captured,
// voided or expired, so a hold's leg applies only to an account that
// carries fewer than MaxHolds markers of legs in flight (holds and
// transfers under way together); at the bound it is refused with
// ErrTooManyHolds, the hold is rolled back and nothing moves. Transfers
// are not bounded by it: their markers leave within a lease. An account at
// the bound holds at most 500 markers of 17 bytes each (about 8.5 kB), and
// the audit's DefaultPendingBound (1,000) is above it.
const MaxHolds = 500

// Hold reserves value on source for destination, and returns once the
// hold is durable, in StateHeld. While it is held, Account shows:
//
//   - for the source, Balance already lower by value, and value in Held
//     (its pendingDebit): the money is reserved and cannot be spent;
//   - for the destination, Balance unchanged, and value in PendingCredit:
//     on its way in, not spendable, and gone again if the hold is voided;
//   - for both, the hold's id in PendingTransactions.
//
// Capture moves the captured amount into the destination's Balance (the
// rest back into the source's) when it settles, and clears Held and
// PendingCredit of the hold; Void and expiry return value to the source's
// Balance and clear them too.
//
// Hold validates and refuses as Transfer does, and keys work as with
// WithKey (a repeat with another expiry is ErrKeyConflict).
//
// A held transfer is decided: no Recoverer rolls it back for being old,
// and a crash of the process that made it changes nothing. It ends only by
// Capture (done), Void (canceled; Canceler.Cancel of a held hold is its
// Void) or, with WithExpiry, its expiry (canceled, by a Recoverer pass or
// a Capture or Void that finds it expired). A
// Hold whose process dies before the hold is held is rolled back by
// recovery, as any unfinished transfer that nobody was told of, even if
// its legs applied (a stale pending hold is never rolled forward).
//
// It is bounded as Transfer is (WithCallTimeout), and a call whose context
// ends after the hold's commit was sent answers by what the log holds.
// An error with a Txn whose State is StateHeld means the hold was made.
// With WithKey, Hold can be repeated safely after any error: it returns
// the first attempt's transaction in whatever state it reached.
//
// Errors: ErrInvalidTransfer (with ErrInvalidAccountID for an id; a
// WithExpiry under a millisecond; an amount above WithMaxAmount),
// ErrAccountNotFound, ErrAssetMismatch (an asset the accounts do not
// hold, as last read), ErrShardKey or ErrClosed, nothing written; ErrInsufficientFunds, ErrLimitExceeded,
// ErrAssetMismatch, ErrAccountNotFound (an account gone after the
// coordinator read it), ErrBalanceOverflow, ErrInvalidAccount, ErrTooLate
// or ErrTooManyHolds (an account already carrying MaxHolds legs in
// flight), the hold rolled back, nothing moved; ErrCanceled, ErrInProgress,
// ErrKeyConflict; for a keyed repeat of a hold since voided or expired,
// ErrHoldVoided or ErrHoldExpired; ErrUnknownState, ErrMalformedTxn or
// ErrTxnNotFound for a transaction document edited or deleted by hand.
func (c *Coordinator) Hold(ctx context.Context, source, destination any, value int64, opts ...TransferOption) (*Txn, error) {
	if err := validateTransfer(source, destination, value); err != nil {
		return nil, err
	}
	return c.start(ctx, Txn{Source: source, Destination: destination, Value: value, Hold: true}, opts)
}

// HoldLegs holds a transfer of any number of legs summing to zero (see
// TransferLegs and Hold): every debit comes off its account's balance at
// once, every credit waits. Capture takes the whole Value of a hold of
// more than two legs.
//
// Errors: Hold's, with ErrUnknownLedger: ErrInvalidTransfer (with
// ErrInvalidAccountID for an id, ErrUnknownLedger for a ledger this
// coordinator was not given; a leg above WithMaxAmount),
// ErrAccountNotFound, ErrAssetMismatch (as Hold), ErrShardKey or
// ErrClosed, nothing written; ErrInsufficientFunds, ErrLimitExceeded,
// ErrAssetMismatch, ErrAccountNotFound, ErrBalanceOverflow,
// ErrInvalidAccount, ErrTooLate or ErrTooManyHolds, the hold rolled back,
// nothing moved; ErrCanceled, ErrInProgress, ErrKeyConflict; ErrHoldVoided
// or ErrHoldExpired for a keyed repeat; ErrUnknownState, ErrMalformedTxn or
// ErrTxnNotFound for a transaction document edited or deleted by hand.
func (c *Coordinator) HoldLegs(ctx context.Context, legs []Leg, opts ...TransferOption) (*Txn, error) {
	t, err := c.legsTxn(legs)
	if err != nil {
		return nil, err
	}
	t.Hold = true
	return c.start(ctx, t, opts)
}

// WithExpiry sets a hold's expiry: a hold not captured within d of
// becoming held is voided, as expired, by the next Recoverer pass (or by a
// Capture or Void that finds it expired), and Capture after that returns
// ErrHoldExpired. Until one of those voids it, an expired hold stays held,
// and a Capture whose write lands first still captures. The expiry is
// recorded in the hold (Txn.ExpiryMs) and runs from Txn.HeldAt, the time
// the hold became held, by the server's clock (set only by the write that
// made it held, so a late duplicate of the hold's insert cannot push it
// back); it is judged by the server's clock too, never by the clock of the
// process that asks: time decides only which of capture and expiry
// happens, never whether money moves twice. d is rounded down to the
// millisecond and must be at least one; WithExpiry on a Transfer or
// TransferLegs, or with a smaller d, gets ErrInvalidTransfer. Without it,
// a hold stays held until Capture or Void.
func WithExpiry(d time.Duration) TransferOption {
	return func(t *transferConfig) { t.expiry, t.expirySet = d, true }
}

// holdOptions records tc's expiry in hold t, or refuses it.
func holdOptions(t *Txn, tc transferConfig) error {
	if !tc.expirySet {
		return nil
	}
	switch {
	case !t.Hold:
		return errorf("%w: WithExpiry is for holds (Hold, HoldLegs), not transfers", ErrInvalidTransfer)
	case tc.expiry < time.Millisecond:
		return errorf("%w: expiry %v is less than a millisecond", ErrInvalidTransfer, tc.expiry)
	}
	t.ExpiryMs = tc.expiry.Milliseconds()
	return nil
}

// expiry is the hold's WithExpiry; 0: none.
func (r *record) expiry() time.Duration { return time.Duration(r.ExpiryMs) * time.Millisecond }

// expired reports whether held hold r is past its expiry at server time
// now: ExpiryMs after HeldAt, which only the write that made it held sets
// (a late duplicate of its insert refreshes lastModified, not heldAt).
func (r *record) expired(now time.Time) bool {
	return r.State == StateHeld && r.ExpiryMs > 0 && !r.HeldAt.IsZero() && !now.Before(r.HeldAt.Add(r.expiry()))
}

// Void releases a held transfer: what no capture of it took returns to
// the debited accounts, and it ends canceled (reason "voided"). It waits
// for the captures in flight (ErrInProgress while one is), and is one
// guarded write on the hold, which races the hold's end by its captures
// and its expiry: Void of a hold captured whole, or whose final capture
// is made, returns ErrHoldCaptured (and the hold ended by its captures,
// if a capture in flight before them, since given back, had kept it
// held), of an expired one ErrHoldExpired (a
// held hold past its expiry by the server's clock is voided as expired by
// the Void itself). Void again returns the transaction, finishing its
// rollback if it is not yet canceled: a void is repeated safely by the
// hold's id. WithKey and WithMetadata record the void's key and metadata
// on the hold (Txn.VoidKey, Txn.VoidMetadata), by the void's own write; a
// keyed repeat under another key, or with other metadata, is
// ErrKeyConflict, and an unkeyed repeat leaves the first's. A void key is
// the hold's: the same key may void another hold. Void takes no other
// option (ErrInvalidTransfer). A transaction
// that is not a hold gets ErrNotHold, a hold still being made
// ErrInProgress. Void is bounded, and answers after its context's end, as
// Capture does.
//
// Errors: ErrInvalidTransfer (an option other than WithKey and
// WithMetadata, or a key or metadata Transfer refuses) or ErrClosed,
// nothing written; ErrTxnNotFound, ErrNotHold; ErrHoldCaptured,
// ErrHoldExpired, or for a hold canceled before it was held the error that
// canceled it (one of Hold's: ErrCanceled, ErrInsufficientFunds, ...);
// ErrInProgress (a hold still being made, a capture of it in flight, a
// hold that kept moving); ErrKeyConflict; ErrUnknownLedger for a hold with
// a leg on a ledger this coordinator was not given (its rollback is left
// to a coordinator that has it); ErrUnknownState or ErrMalformedTxn for a
// document edited by hand.
func (c *Coordinator) Void(ctx context.Context, id bson.ObjectID, opts ...TransferOption) (_ *Txn, err error) {
	if c.settler.isClosed() {
		return nil, ErrClosed
	}
	tc, err := transferOptions(opts)
	if err != nil {
		return nil, err
	}
	if tc.assetSet || tc.expirySet || tc.notFinal {
		return nil, errorf("%w: void %s: Void takes WithKey and WithMetadata only", ErrInvalidTransfer, id.Hex())
	}
	// again answers a repeat of a void: the same, or one under another
	// key, or with other metadata, than the void's (ErrKeyConflict).
	again := func(r *record) error {
		if tc.keyed && (r.VoidKey != tc.key || !maps.Equal(r.VoidMetadata, tc.metadata)) {
			return errorf("%w: void %s: it was voided under key %q with metadata %v", ErrKeyConflict, id.Hex(), r.VoidKey, r.VoidMetadata)
		}
		return nil
	}
	ctx, b := c.bound(ctx)
	defer func() { err = b.explain(err); b.end() }()
	for attempt := 0; attempt < 3; attempt++ {
		r, err := c.heldOne(ctx, id, "void")
		if err != nil {
			return r.txn(), err
		}
		switch {
		case r.State == StateCanceling && r.Reason == reasonVoided:
			cur, err := c.rollback(ctx, r)
			if err != nil {
				return cur.txn(), errorf("twopc: void %s: %w", id.Hex(), err)
			}
			return cur.txn(), again(cur)
		case r.State == StateCanceled && r.Reason == reasonVoided:
			return r.txn(), again(r)
		case r.State != StateHeld:
			return r.txn(), c.resolved(r, "void")
		}
		// Expired already, by the server's clock: the expiry's void, not
		// this one, and the caller is told so.
		if expired, cur, err := c.expireIfDue(ctx, r, "void"); err != nil {
			return cur.txn(), err
		} else if expired {
			continue
		}
		// Every capture reserved in its book committed first: what is
		// left of each leg is then what the void releases. A hold whose
		// book is complete is ended by its captures, not voided.
		if r, err = (captureBook{c}).settled(ctx, r, "void"); err != nil {
			return r.txn(), err
		}
		if complete(r) {
			// Its captures end it, every one committed: a capture in
			// flight before them (given back just now, its caller gone)
			// kept the last of them from ending it. It is ended here, as
			// that capture or a recovery pass would.
			c.endCaptured(ctx, r.ID)
			if cur, err := c.log.read(ctx, r.ID); err == nil {
				r = cur
			}
			return r.txn(), errorf("twopc: void %s: %w: its captures took it whole, or its final capture was made", id.Hex(), ErrHoldCaptured)
		}
		m := voidMove(c, r, reasonVoided)
		m.set = append(m.set, endedAmounts(r, false)...)
		if len(tc.metadata) > 0 {
			m.set = append(m.set, bson.E{Key: fieldVoidMetadata, Value: metadataDoc(tc.metadata)})
		}
		if tc.keyed {
			m.set = append(m.set, bson.E{Key: fieldVoidKey, Value: tc.key})
		}
		cur, moved, err := c.log.advance(ctx, r, m)
		if err != nil {
			return cur.txn(), errorf("twopc: void %s: %w", id.Hex(), err)
		}
		if !moved {
			continue
		}
		cur, err = c.rollback(ctx, cur)
		if err != nil {
			return cur.txn(), errorf("twopc: void %s: %w", id.Hex(), err)
		}
		return cur.txn(), nil
	}
	return nil, errorf("twopc: void %s: %w: it kept moving", id.Hex(), ErrInProgress)
}

// heldOne reads transaction id for Capture or Void (op), from the log or
// the archive, and refuses one that is not a hold.
func (c *Coordinator) heldOne(ctx context.Context, id bson.ObjectID, op string) (*record, error) {
	if id.IsZero() {
		return nil, errorf("twopc: %s: %w: the zero id", op, ErrTxnNotFound)
	}
	r, _, err := c.log.lookup(ctx, id)
	if err != nil {
		return r, errorf("twopc: %s %s: %w", op, id.Hex(), err)
	}
	if !r.Hold || r.Placeholder {
		return r, errorf("twopc: %s %s: %w: it is a transfer (%s)", op, id.Hex(), ErrNotHold, r.State)
	}
	return r, nil
}

// resolved is the error of Capture or Void (op) of hold r, which another
// decision resolved, or which was never held, or is not held yet.
func (c *Coordinator) resolved(r *record, op string) error {
	switch {
	case r.State.Committed():
		return errorf("twopc: %s %s: %w for %d", op, r.ID.Hex(), ErrHoldCaptured, r.Captured)
	case r.State == StateCanceling || r.State == StateCanceled:
		return errorf("twopc: %s %s: it is %s: %w", op, r.ID.Hex(), r.State, errorOfReason(r.Reason))
	default:
		return errorf("twopc: %s %s: %w: the hold is %s, owned by %q", op, r.ID.Hex(), ErrInProgress, r.State, r.Application)
	}
}

// voidMove is the guarded move held → canceling for reason (voided or
// expired), claimed for c. Any process may make it; the guard is the
// state alone, the same as a capture's, so exactly one of them lands.
func voidMove(c *Coordinator, r *record, reason string) move {
	return move{
		step: StepVoid, from: StateHeld, to: StateCanceling, anyClaim: true, book: true, seq: r.CapturesSeq,
		newClaim: c.claims.issue(), application: c.application, lease: c.staleAfter, takeover: c.takeover(),
		set: bson.D{{Key: fieldReason, Value: reason}},
	}
}

// expire voids held hold r, found past its expiry, and rolls it back. The
// move is also guarded by the heldAt r was read with, the time the server
// recorded when it became held, which the expiry was judged from.
// It returns the transaction as it now stands and whether this call made
// the move (else another call decided first).
func (c *Coordinator) expire(ctx context.Context, r *record) (*record, bool, error) {
	r, err := (captureBook{c}).settled(ctx, r, "expire")
	if err != nil {
		return r, false, err
	}
	if complete(r) {
		// Its captures, reserved before it expired, end it.
		return r, false, (captureBook{c}).end(ctx, r.ID)
	}
	m := voidMove(c, r, reasonExpired)
	m.set = append(m.set, endedAmounts(r, false)...)
	m.heldAt = r.HeldAt
	cur, moved, err := c.log.advance(ctx, r, m)
	if err != nil || !moved {
		return cur, moved, err
	}
	cur, err = c.rollback(ctx, cur)
	return cur, true, err
}

// expireIfDue voids held hold r as expired if it is past its expiry by the
// server's clock, for Capture or Void (op), which then answer from what
// the transaction says. It reports whether r was past its expiry; an
// expiry this call decided but could not roll back is ErrHoldExpired
// still (the rollback is left to recovery).
func (c *Coordinator) expireIfDue(ctx context.Context, r *record, op string) (bool, *record, error) {
	if r.ExpiryMs == 0 {
		return false, r, nil
	}
	now, err := c.log.serverNow(ctx)
	if err != nil {
		return false, r, errorf("twopc: %s %s: %w", op, r.ID.Hex(), err)
	}
	if !r.expired(now) {
		return false, r, nil
	}
	cur, moved, err := c.expire(ctx, r)
	switch {
	case moved && err != nil:
		return true, cur, errorf("twopc: %s %s: %w (rolling it back: %w)", op, r.ID.Hex(), ErrHoldExpired, err)
	case err != nil:
		return true, cur, errorf("twopc: %s %s: expiring: %w", op, r.ID.Hex(), err)
	}
	return true, cur, nil
}
