package twopc_test

// What the sharded tests compare: each call's reported outcome against
// its transaction's final document, and the audit's total.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc"
)

// outcome is what a call reported of its transaction, and the transaction.
type outcome struct {
	kind string // transfer, batch, hold, capture, void
	id   bson.ObjectID
	hold bson.ObjectID // a capture's or void's hold
	said reported
	err  error
}

// reported is what a call said became of its transaction.
type reported int

const (
	saidUnknown   reported = iota // an error that leaves the outcome to the log
	saidCommitted                 // the money moved
	saidCanceled                  // rolled back: nothing moved
)

func (r reported) String() string {
	return [...]string{"unknown", "committed", "canceled"}[r]
}

// refusals are the errors of a transfer that was rolled back and ended
// canceled, nothing moved (Transfer's documentation).
var refusals = []error{
	twopc.ErrInsufficientFunds, twopc.ErrAccountNotFound, twopc.ErrBalanceOverflow, twopc.ErrInvalidAccount,
	twopc.ErrTooLate, twopc.ErrCanceled, twopc.ErrLimitExceeded, twopc.ErrTooManyHolds,
}

// refusal is the refusal err wraps, if any.
func refusal(err error) error {
	for _, r := range refusals {
		if errors.Is(err, r) {
			return r
		}
	}
	return nil
}

// reportedOf reads what a call that returned txn and err said: a Txn past
// the commit point says the money moved, even beside an error; a Txn
// canceled, or a refusal, says it did not; anything else leaves it to the
// log.
func reportedOf(txn *twopc.Txn, err error) reported {
	switch {
	case txn != nil && txn.State.Committed():
		return saidCommitted
	case txn != nil && txn.State == twopc.StateCanceled, refusal(err) != nil:
		return saidCanceled
	}
	return saidUnknown
}

// outcomes collects the calls of concurrent workers.
type outcomes struct {
	mu  sync.Mutex
	all []outcome
}

func (o *outcomes) add(kind string, txn *twopc.Txn, err error, hold bson.ObjectID) outcome {
	oc := outcome{kind: kind, hold: hold, said: reportedOf(txn, err), err: err}
	if txn != nil {
		oc.id = txn.ID
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.all = append(o.all, oc)
	return oc
}

func (o *outcomes) list() []outcome {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.all)
}

// checkOutcomes finishes what is left (the settler, then recovery passes)
// and checks every call against its transaction as the log holds it
// (Get): each is final; none reported committed is canceled, none
// reported canceled is done; a capture reported committed ended its hold
// captured, a void reported its hold canceled. It returns how many calls
// said each thing.
func checkOutcomes(ctx context.Context, t *testing.T, b *bank, calls []outcome) map[string]int {
	t.Helper()
	require.NoError(t, b.c.Settle(ctx))
	b.recoverAll()
	counts := map[string]int{}
	for _, oc := range calls {
		counts[oc.kind+" "+oc.said.String()]++
		if oc.id.IsZero() {
			continue // nothing of it was written, or it did not say what
		}
		got, err := b.c.Get(ctx, oc.id)
		require.NoError(t, err, "%s %s", oc.kind, oc.id.Hex())
		assert.Truef(t, got.State.Final(), "%s %s is %s after recovery", oc.kind, oc.id.Hex(), got.State)
		switch oc.said {
		case saidCommitted:
			assert.Equalf(t, twopc.StateDone, got.State, "%s %s was reported committed", oc.kind, oc.id.Hex())
		case saidCanceled:
			assert.Equalf(t, twopc.StateCanceled, got.State, "%s %s was reported canceled (%v)", oc.kind, oc.id.Hex(), oc.err)
		}
		if oc.kind == "capture" && oc.said == saidCommitted {
			h, err := b.c.Get(ctx, oc.hold)
			require.NoError(t, err)
			assert.Equalf(t, twopc.StateDone, h.State, "hold %s of a committed final capture", oc.hold.Hex())
		}
	}
	return counts
}

// auditTotal asserts that an audit finds nothing wrong and that the
// default ledger holds total.
func auditTotal(ctx context.Context, t *testing.T, b *bank, total int64) {
	t.Helper()
	b.serverPastTxns()
	rep, err := b.c.Audit(ctx, twopc.WithExpectedTotal("", total))
	require.NoError(t, err)
	assert.True(t, rep.OK(), "%+v", rep.Violations)
	require.Len(t, rep.Totals, 1)
	assert.True(t, rep.Totals[0].Decided, "nothing is in flight")
	assert.Equal(t, total, rep.Totals[0].Actual, "the ledger's money")
}

// openMany opens n accounts named prefix00, prefix01, … with balance each.
func openMany(b *bank, prefix string, n int, balance int64) ([]string, map[string]int64, int64) {
	opening := map[string]int64{}
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s%02d", prefix, i)
		opening[ids[i]] = balance
	}
	b.open(opening)
	return ids, opening, int64(n) * balance
}

// closed reports whether ch is closed.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
