package twopc

import (
	"context"
	"maps"

	"github.com/twopc/twopc/internal/schema"
)

// MaxBatch is the most transfers one TransferBatch call takes.
const MaxBatch = 1000

// TransferRequest is one transfer of a batch (see TransferBatch): either
// Source, Destination and Value, as Transfer takes them, or Legs, as
// TransferLegs takes them; and its own idempotency key, if any (see
// WithKey).
type TransferRequest struct {
	Source      any
	Destination any
	Value       int64
	Legs        []Leg
	Key         string
	// Metadata is the transfer's metadata, as WithMetadata gives it.
	Metadata map[string]string
	// Asset is the asset it moves, as WithAsset gives it.
	Asset string
}

// TransferResult is one transfer's outcome in a batch: what Transfer (or
// TransferLegs) would have returned for it alone.
type TransferResult struct {
	Txn *Txn
	Err error
}

// TransferBatch makes many independent transfers in one call, for a caller
// that has them all at once (a payroll, a run of payouts). Each is a
// transfer of its own, with the guarantees, errors and idempotency key it
// would have alone: results[i] is what Transfer (or TransferLegs) would
// have returned for reqs[i], and one transfer's failure (a refused leg, an
// invalid request, a repeated key, an id with no account) is its own: a
// transfer naming an id with no account gets ErrAccountNotFound and a nil
// Txn, with nothing written, while the others go on. Nothing is atomic
// across the batch: some may commit while others are canceled.
//
// The batch costs a constant number of commands for each WithWriteBatch
// statements (up to MaxBatch transfers): its inserts go in one command per
// that many, its legs in one per that many per ledger, its commits in one,
// and its settling in one batch for each set of ledgers its transfers are
// on. Transfers on different sets of ledgers go on apart, at once, so a
// ledger that is down or slow holds up only those with a leg on it.
// A transfer whose leg cannot apply, or whose accounts changed under the
// write, goes on alone, beside the others, with the commands it would take
// alone.
//
// The whole batch is one call under one bound, which grows with its size:
// WithCallTimeout's (default 10 s) and 50 ms for each transfer it makes,
// 60 s for a full batch of MaxBatch at the default (a full batch took from
// 5 s to 53 s on a busy dev server: PROTOCOL.md, "Errors and bad input").
// When it passes, the transfers not yet committed fail with its error;
// give a batch against a slower server a larger WithCallTimeout.
//
// A request that is not valid (as Transfer or TransferLegs would refuse it,
// or with a key an earlier request of the batch has) gets ErrInvalidTransfer
// and nothing of it is written. The call's own error, with no results, is
// ErrInvalidTransfer for more than MaxBatch requests, or ErrClosed.
//
// Errors: the call's, ErrInvalidTransfer or ErrClosed, with no results;
// each result's, TransferLegs' (see there): ErrInvalidTransfer (with
// ErrInvalidAccountID for an id, ErrUnknownLedger for a ledger; a leg
// above WithMaxAmount), ErrAccountNotFound, ErrAssetMismatch (an asset
// the accounts do not hold, as last read), ErrShardKey or ErrClosed,
// nothing written;
// ErrInsufficientFunds, ErrLimitExceeded, ErrAssetMismatch,
// ErrAccountNotFound, ErrBalanceOverflow, ErrInvalidAccount or ErrTooLate,
// the transaction canceled, nothing moved; ErrCanceled, ErrInProgress,
// ErrKeyConflict; ErrUnknownState, ErrMalformedTxn or ErrTxnNotFound for a
// transaction document edited or deleted by hand.
func (c *Coordinator) TransferBatch(ctx context.Context, reqs []TransferRequest) ([]TransferResult, error) {
	if len(reqs) > MaxBatch {
		return nil, errorf("%w: %d transfers in one batch, more than MaxBatch (%d)", ErrInvalidTransfer, len(reqs), MaxBatch)
	}
	if c.settler.isClosed() {
		return nil, ErrClosed
	}
	out := make([]TransferResult, len(reqs))
	var ts []*transfer
	var at []int // at[j] is the index in reqs of ts[j]
	keys := map[string]int{}
	for i, q := range reqs {
		t, err := c.requested(q)
		if err == nil && q.Key != "" {
			err = validateKey(q.Key)
		}
		if err == nil {
			err = validateMetadata(q.Metadata)
		}
		if len(q.Metadata) > 0 {
			t.Metadata = maps.Clone(q.Metadata)
		}
		if err == nil && q.Key != "" {
			if j, ok := keys[q.Key]; ok {
				err = errorf("%w: key %q is also the key of transfer %d of the batch", ErrInvalidTransfer, q.Key, j)
			} else {
				keys[q.Key] = i
			}
		}
		if err != nil {
			out[i].Err = errorf("twopc: batch transfer %d: %w", i, err)
			continue
		}
		ts = append(ts, c.newTransfer(t, q.Key))
		at = append(at, i)
	}
	// Its transfers' leg writes are sent in the batch's shared commands,
	// which take longer the more legs they carry: each records a takeover
	// lease grown to fit them (see takeoverFor).
	legs := 0
	for _, t := range ts {
		legs += len(t.rec.AllLegs())
	}
	for _, t := range ts {
		t.rec.TakeoverMs = c.takeoverFor(legs).Milliseconds()
	}
	ctx, b := c.batchBound(ctx, len(ts))
	defer b.end()
	newEngine(c).run(ctx, ts)
	for j, t := range ts {
		out[at[j]] = TransferResult{Txn: t.txn, Err: b.explain(t.err)}
	}
	return out, nil
}

// requested validates a request of a batch, and returns its transfer.
func (c *Coordinator) requested(q TransferRequest) (Txn, error) {
	var t Txn
	if len(q.Legs) > 0 {
		if q.Source != nil || q.Destination != nil || q.Value != 0 {
			return Txn{}, errorf("%w: a request with legs has no source, destination or value", ErrInvalidTransfer)
		}
		var err error
		if t, err = c.legsTxn(q.Legs); err != nil {
			return Txn{}, err
		}
	} else {
		if err := validateTransfer(q.Source, q.Destination, q.Value); err != nil {
			return Txn{}, err
		}
		t = Txn{Source: q.Source, Destination: q.Destination, Value: q.Value}
	}
	if q.Asset != "" {
		if err := schema.ValidAsset(q.Asset); err != nil {
			return Txn{}, errorf("%w: %w", ErrInvalidTransfer, err)
		}
		if err := withAsset(&t, q.Asset); err != nil {
			return Txn{}, err
		}
	}
	return t, nil
}
