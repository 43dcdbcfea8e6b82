package twopc_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twopc/twopc"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// auditOK asserts that an audit of b finds nothing wrong.
func auditOK(t *testing.T, b *bank, msg string) {
	t.Helper()
	rep, err := b.c.Audit(testCtx(t))
	require.NoError(t, err)
	assert.True(t, rep.OK(), "%s: %+v", msg, rep.Violations)
}

// TestCaptureSplitHoldInParts: a hold of buyer → seller + fees is captured
// in two parts, each taking a part of every leg, each a transaction of its
// own with its own entries; between them the accounts show exactly what
// is still held, and the first part is spendable at once.
func TestCaptureSplitHoldInParts(t *testing.T) {
	b := newBank(t, twopc.WithSyncSettle())
	ctx := testCtx(t)
	b.open(map[string]int64{"buyer": 1000, "seller": 0, "fees": 0})
	hold, err := b.c.HoldLegs(ctx, []twopc.Leg{{Account: "buyer", Amount: -100}, {Account: "seller", Amount: 90}, {Account: "fees", Amount: 10}},
		twopc.WithMetadata(map[string]string{"order": "o-1"}))
	require.NoError(t, err)

	first, err := b.c.CaptureLegs(ctx, hold.ID, []int64{-50, 45, 5}, twopc.WithFinalCapture(false), twopc.WithKey("o-1/ship-1"),
		twopc.WithMetadata(map[string]string{"shipment": "1"}))
	require.NoError(t, err)
	assert.Equal(t, twopc.StateDone, first.State)
	assert.Equal(t, hold.ID, first.CaptureOf)
	assert.Equal(t, "o-1/ship-1", first.Key)
	assert.Equal(t, map[string]string{"shipment": "1"}, first.Metadata)
	h := b.txn(hold.ID)
	assert.Equal(t, twopc.StateHeld, h.State, "more may be captured")
	assert.Equal(t, []int64{50, 45, 5}, h.CapturedLegs)
	for id, want := range map[string][3]int64{"buyer": {900, 50, 0}, "seller": {45, 0, 45}, "fees": {5, 0, 5}} {
		a, err := b.c.Account(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, want, [3]int64{a.Balance, a.Held, a.PendingCredit}, "%s: balance, held, pending credit", id)
	}
	auditOK(t, b, "after the first part")
	// The first part is spendable on return.
	_, err = b.c.Transfer(ctx, "seller", "fees", 45)
	require.NoError(t, err)
	_, err = b.c.Transfer(ctx, "fees", "seller", 45)
	require.NoError(t, err)

	second, err := b.c.CaptureLegs(ctx, hold.ID, []int64{-40, 36, 4}, twopc.WithKey("o-1/ship-2"))
	require.NoError(t, err)
	assert.Equal(t, twopc.StateDone, second.State)
	h = b.txn(hold.ID)
	assert.Equal(t, twopc.StateDone, h.State, "the final capture ends the hold")
	assert.EqualValues(t, 90, h.Captured, "what its captures credited (81 + 9)")
	assert.Equal(t, []int64{90, 81, 9}, h.CapturedLegs)
	b.checkSettled(map[string]int64{"buyer": 1000, "seller": 0, "fees": 0})
	assert.Equal(t, []int64{910, 81, 9}, []int64{b.balance("buyer"), b.balance("seller"), b.balance("fees")}, "the rest (10) returned to the buyer")
	auditOK(t, b, "after the second part")

	// Each capture is its own entries; the hold is none.
	es := checkStatement(t, b.c, "buyer", 1000)
	var ids []bson.ObjectID
	for _, e := range es {
		ids = append(ids, e.Txn)
	}
	assert.Equal(t, []bson.ObjectID{first.ID, second.ID}, ids[:2])

	// Again by a key: the capture it made; a new capture: the hold ended.
	again, err := b.c.CaptureLegs(ctx, hold.ID, []int64{-50, 45, 5}, twopc.WithFinalCapture(false), twopc.WithKey("o-1/ship-1"),
		twopc.WithMetadata(map[string]string{"shipment": "1"}))
	require.NoError(t, err)
	assert.Equal(t, first.ID, again.ID)
	_, err = b.c.CaptureLegs(ctx, hold.ID, []int64{-50, 45, 5}, twopc.WithFinalCapture(false), twopc.WithKey("o-1/ship-1"))
	require.ErrorIs(t, err, twopc.ErrKeyConflict, "a repeat with other metadata, as any keyed repeat")
	_, err = b.c.Capture(ctx, hold.ID, 10)
	require.ErrorIs(t, err, twopc.ErrInvalidTransfer, "Capture of a hold of three legs is whole")
	_, err = b.c.CaptureLegs(ctx, hold.ID, []int64{-10, 9, 1})
	require.ErrorIs(t, err, twopc.ErrHoldCaptured)
}

// TestCaptureBadPartsWriteNothing: parts of the wrong count or sign, or
// not summing to zero, are ErrInvalidTransfer (parts past their legs,
// ErrCaptureExceeded: TestCapturePastTheLegIsExceeded), and nothing is
// written.
func TestCaptureBadPartsWriteNothing(t *testing.T) {
	b := newBank(t, twopc.WithSyncSettle())
	ctx := testCtx(t)
	b.open(map[string]int64{"A": 1000, "B": 0, "C": 0})
	hold, err := b.c.HoldLegs(ctx, []twopc.Leg{{Account: "A", Amount: -100}, {Account: "B", Amount: 60}, {Account: "C", Amount: 40}})
	require.NoError(t, err)
	before := b.accountStates()
	held := b.txn(hold.ID)
	for _, parts := range [][]int64{{-10, 10}, {10, -5, -5}, {-10, 5, 4}, {0, 0, 0}} {
		_, err := b.c.CaptureLegs(ctx, hold.ID, parts)
		require.ErrorIs(t, err, twopc.ErrInvalidTransfer, "%v", parts)
	}
	_, err = b.c.Capture(ctx, hold.ID, 0)
	require.ErrorIs(t, err, twopc.ErrInvalidTransfer)
	assert.Equal(t, before, b.accountStates())
	assert.Equal(t, held, b.txn(hold.ID))
	assert.Len(t, b.txns(), 1, "no capture written")
}

// TestCaptureSeveralThenVoid: two captures of part of a hold, then a Void
// with a key and metadata: the captures moved their parts, the void
// releases the rest and records its key and metadata once; a keyed repeat
// under another key, or with other metadata, is ErrKeyConflict.
func TestCaptureSeveralThenVoid(t *testing.T) {
	b := newBank(t, twopc.WithSyncSettle())
	ctx := testCtx(t)
	b.open(map[string]int64{"A": 1000, "B": 0})
	hold, err := b.c.Hold(ctx, "A", "B", 100)
	require.NoError(t, err)
	for _, amount := range []int64{30, 20} {
		_, err := b.c.Capture(ctx, hold.ID, amount, twopc.WithFinalCapture(false))
		require.NoError(t, err)
	}
	auditOK(t, b, "two parts captured")
	_, err = b.c.Void(ctx, hold.ID, twopc.WithFinalCapture(false))
	require.ErrorIs(t, err, twopc.ErrInvalidTransfer, "a void takes a key and metadata only")
	why := map[string]string{"why": "out of stock"}
	_, err = b.c.Void(ctx, hold.ID, twopc.WithKey("order-9/void"), twopc.WithMetadata(why))
	require.NoError(t, err)
	h := b.txn(hold.ID)
	assert.Equal(t, twopc.StateCanceled, h.State)
	assert.Equal(t, "voided", h.Reason)
	assert.Equal(t, why, h.VoidMetadata)
	assert.Equal(t, "order-9/void", h.VoidKey)
	again, err := b.c.Void(ctx, hold.ID, twopc.WithKey("order-9/void"), twopc.WithMetadata(why))
	require.NoError(t, err, "void again, by its key")
	assert.Equal(t, why, again.VoidMetadata)
	_, err = b.c.Void(ctx, hold.ID, twopc.WithKey("another"))
	require.ErrorIs(t, err, twopc.ErrKeyConflict)
	_, err = b.c.Void(ctx, hold.ID, twopc.WithKey("order-9/void"), twopc.WithMetadata(map[string]string{"why": "again"}))
	require.ErrorIs(t, err, twopc.ErrKeyConflict, "a keyed repeat with other metadata")
	_, err = b.c.Void(ctx, hold.ID)
	require.NoError(t, err, "an unkeyed repeat: the void as it is")
	b.checkSettled(map[string]int64{"A": 1000, "B": 0})
	assert.EqualValues(t, 950, b.balance("A"))
	assert.EqualValues(t, 50, b.balance("B"))
	_, err = b.c.Capture(ctx, hold.ID, 10)
	require.ErrorIs(t, err, twopc.ErrHoldVoided)
	auditOK(t, b, "voided")
}

// TestCapturesAtOnceNeverExceed: 24 captures of 10 of a hold of 100, at
// once from two coordinators: exactly 10 are made, the others get
// ErrCaptureExceeded (or find the hold ended: ErrHoldCaptured), and the
// hold, captured whole, ends done with nothing returned.
func TestCapturesAtOnceNeverExceed(t *testing.T) {
	b := newBank(t, twopc.WithSyncSettle())
	ctx := testCtx(t)
	b.open(map[string]int64{"A": 1000, "B": 0})
	other := b.coordinator(twopc.WithApplication("other"), twopc.WithSyncSettle())
	hold, err := b.c.Hold(ctx, "A", "B", 100)
	require.NoError(t, err)
	const n = 24
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := b.c
			if i%2 == 1 {
				c = other
			}
			_, errs[i] = c.Capture(ctx, hold.ID, 10, twopc.WithFinalCapture(false))
		}()
	}
	wg.Wait()
	made := 0
	for _, err := range errs {
		switch {
		case err == nil:
			made++
		case errors.Is(err, twopc.ErrCaptureExceeded), errors.Is(err, twopc.ErrHoldCaptured):
		default:
			t.Errorf("unexpected: %v", err)
		}
	}
	assert.Equal(t, 10, made)
	b.recoverAll() // a hold left complete by a capture that lost its end ends here
	h := b.txn(hold.ID)
	assert.Equal(t, twopc.StateDone, h.State)
	assert.EqualValues(t, 100, h.Captured)
	b.checkSettled(map[string]int64{"A": 1000, "B": 0})
	assert.EqualValues(t, 900, b.balance("A"))
	assert.EqualValues(t, 100, b.balance("B"))
	auditOK(t, b, "captured whole")
}

// TestCaptureLateDuplicateAfterASecond: a hold older than its accounts'
// fence lines is captured twice; then every write of the first capture is
// delivered again, late, after the second (its reservation, insert,
// apply, commit, close, done): nothing changes, not the money, not the
// hold's book. A capture is guarded by its own markers, fences and time,
// never by the hold's marker alone.
func TestCaptureLateDuplicateAfterASecond(t *testing.T) {
	b := newBank(t, twopc.WithSyncSettle())
	ctx := testCtx(t)
	b.open(map[string]int64{"A": 1000, "B": 0})
	hold, err := b.c.Hold(ctx, "A", "B", 100)
	require.NoError(t, err)
	b.moveLine(time.Now().Add(time.Millisecond), "A", "B") // the accounts' lines pass the hold's time

	rec := &writeRecorder{}
	first, err := twopc.NewCoordinator(rec.database(b), twopc.WithApplication("first"), twopc.WithSyncSettle())
	require.NoError(t, err)
	t.Cleanup(func() { _ = first.Close(context.Background()) })
	c1, err := first.Capture(ctx, hold.ID, 30, twopc.WithFinalCapture(false))
	require.NoError(t, err)
	require.Equal(t, twopc.StateDone, c1.State, "a hold older than the lines is captured")
	c2, err := b.c.Capture(ctx, hold.ID, 40, twopc.WithFinalCapture(false))
	require.NoError(t, err)
	require.Equal(t, twopc.StateDone, c2.State)
	balances, book := b.accountStates(), b.txn(hold.ID)

	resendAll(t, b.db, rec.recorded())
	resendAll(t, b.db, rec.recorded()) // twice
	assert.Equal(t, balances, b.accountStates(), "a late capture write moved money")
	assert.Equal(t, book, b.txn(hold.ID), "a late capture write changed the hold's book")
	b.recoverAll()
	assert.Equal(t, balances, b.accountStates())
	auditOK(t, b, "after the late writes")

	_, err = b.c.Capture(ctx, hold.ID, 30) // the rest, final
	require.NoError(t, err)
	b.checkSettled(map[string]int64{"A": 1000, "B": 0})
	assert.EqualValues(t, 900, b.balance("A"))
	assert.EqualValues(t, 100, b.balance("B"))
}

// TestCaptureCanceledGivesBack: a capture refused at its apply (its
// credit's account gone) is canceled and gives its reservation back: the
// hold can be captured for the whole again.
func TestCaptureCanceledGivesBack(t *testing.T) {
	b := newBank(t, twopc.WithSyncSettle())
	ctx := testCtx(t)
	b.open(map[string]int64{"A": 1000, "B": 0})
	hold, err := b.c.Hold(ctx, "A", "B", 100)
	require.NoError(t, err)
	// The hold's marker leaves B by hand: the capture's apply there
	// matches nothing and is judged refused.
	_, err = b.db.Collection("accounts").UpdateOne(ctx, bson.D{{Key: "_id", Value: "B"}},
		bson.D{{Key: "$pull", Value: bson.D{{Key: "pendingTransactions", Value: twopc.LegMarker(hold.ID, 1)}}}})
	require.NoError(t, err)
	capture, err := b.c.Capture(ctx, hold.ID, 60, twopc.WithFinalCapture(false))
	require.ErrorIs(t, err, twopc.ErrInvalidAccount)
	require.NotNil(t, capture)
	assert.Equal(t, twopc.StateCanceled, capture.State)
	h := b.txn(hold.ID)
	assert.Equal(t, []int64{0, 0}, h.CapturedLegs, "given back")
	assert.Equal(t, twopc.StateHeld, h.State)
	assert.EqualValues(t, 900, b.balance("A"), "nothing moved")
	assert.EqualValues(t, 100, b.account("A").Debit)
}

// TestCaptureBookBounded: a hold's book holds at most MaxCaptures captures;
// the next is ErrCaptureExceeded and writes nothing.
func TestCaptureBookBounded(t *testing.T) {
	b := newBank(t, twopc.WithSyncSettle())
	ctx := testCtx(t)
	b.open(map[string]int64{"A": 10_000, "B": 0})
	hold, err := b.c.Hold(ctx, "A", "B", 2*twopc.MaxCaptures)
	require.NoError(t, err)
	for range twopc.MaxCaptures {
		_, err := b.c.Capture(ctx, hold.ID, 1, twopc.WithFinalCapture(false))
		require.NoError(t, err)
	}
	n := len(b.txns())
	_, err = b.c.Capture(ctx, hold.ID, 1, twopc.WithFinalCapture(false))
	require.ErrorIs(t, err, twopc.ErrCaptureExceeded)
	assert.Len(t, b.txns(), n, "nothing written")
	raw, err := b.db.Collection("transactions").FindOne(ctx, bson.D{{Key: "_id", Value: hold.ID}}).Raw()
	require.NoError(t, err)
	t.Logf("a hold with %d captures: %d bytes", twopc.MaxCaptures, len(raw))
	assert.Less(t, len(raw), 16<<10, "the hold's document stays small")
	_, err = b.c.Void(ctx, hold.ID)
	require.NoError(t, err)
	b.checkSettled(map[string]int64{"A": 10_000, "B": 0})
	assert.EqualValues(t, twopc.MaxCaptures, b.balance("B"))
}

// TestCaptureStatementsOfHandInsertedAccounts: on accounts inserted by hand
// (no opening recorded: statements derive it from the account, its legs in
// flight and its entries), a hold captured in part, with the rest still
// held, gives statements whose running balances agree with the accounts,
// while a second capture is in flight and once it settled.
func TestCaptureStatementsOfHandInsertedAccounts(t *testing.T) {
	b := newBank(t)
	ctx := testCtx(t)
	b.insertByHand(map[string]any{"A": int64(1000), "B": int64(0)})
	hold, err := b.c.Hold(ctx, "A", "B", 100)
	require.NoError(t, err)
	_, err = b.c.Capture(ctx, hold.ID, 30, twopc.WithFinalCapture(false))
	require.NoError(t, err) // committed; its close may still be in the background
	checkStatement(t, b.c, "A", 1000)
	checkStatement(t, b.c, "B", 0)
	require.NoError(t, b.c.Settle(ctx))
	checkStatement(t, b.c, "A", 1000)
	checkStatement(t, b.c, "B", 0)
	_, err = b.c.Capture(ctx, hold.ID, 20)
	require.NoError(t, err)
	require.NoError(t, b.c.Settle(ctx))
	a := checkStatement(t, b.c, "A", 1000)
	require.Len(t, a, 2)
	assert.EqualValues(t, 950, a[1].Balance)
	b.checkSettled(map[string]int64{"A": 1000, "B": 0})
}

// TestCapturesDeliveredAgain: holds of two and three legs, captured in
// parts at random (some final, some not), voided, or left held, from three
// workers at once; then every write command they sent is delivered again,
// twice, in order, as a network that kept them all would: no balance or
// pending amount moves, no hold's book changes, and the audit finds
// nothing wrong, before and after recovery.
func TestCapturesDeliveredAgain(t *testing.T) {
	b := newBank(t, twopc.WithSyncSettle())
	ctx := testCtx(t)
	b.open(map[string]int64{"A": 100_000, "B": 100_000, "C": 0, "D": 0, "F": 0})
	rec := &writeRecorder{}
	c, err := twopc.NewCoordinator(rec.database(b), twopc.WithApplication("recorded"), twopc.WithSyncSettle())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	const workers, each = 3, 8
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 38))
			for range each {
				payer := []string{"A", "B"}[rng.IntN(2)]
				var hold *twopc.Txn
				var err error
				split := rng.IntN(2) == 0
				if split {
					hold, err = c.HoldLegs(ctx, []twopc.Leg{{Account: payer, Amount: -100}, {Account: "C", Amount: 90}, {Account: "F", Amount: 10}})
				} else {
					hold, err = c.Hold(ctx, payer, "D", 100)
				}
				if !assert.NoError(t, err) {
					return
				}
				for part := 0; part < 3; part++ {
					final := rng.IntN(3) == 0
					if split {
						n := int64(1 + rng.IntN(3))
						_, err = c.CaptureLegs(ctx, hold.ID, []int64{-10 * n, 9 * n, n}, twopc.WithFinalCapture(final))
					} else {
						_, err = c.Capture(ctx, hold.ID, int64(1+rng.IntN(40)), twopc.WithFinalCapture(final))
					}
					if err != nil || final {
						break
					}
				}
				if rng.IntN(2) == 0 {
					_, _ = c.Void(ctx, hold.ID)
				}
			}
		}()
	}
	wg.Wait()
	auditOK(t, b, "after the captures")
	balances := b.accountStates()
	books := map[bson.ObjectID][]int64{}
	for _, d := range b.txns() {
		if d.Hold {
			books[d.ID] = d.CapturedLegs
		}
	}
	t.Logf("%d write commands recorded, %d transactions", len(rec.recorded()), len(b.txns()))

	resendAll(t, b.db, rec.recorded())
	resendAll(t, b.db, rec.recorded())
	assert.Equal(t, balances, b.accountStates(), "a write delivered again moved money")
	for _, d := range b.txns() {
		if d.Hold {
			assert.Equal(t, books[d.ID], d.CapturedLegs, "hold %s's book", d.ID.Hex())
		}
	}
	auditOK(t, b, "after the writes delivered again")
	b.recoverAll()
	auditOK(t, b, "after recovery")
	for id, s := range b.accountStates() {
		if s.Debit == 0 && s.Credit == 0 {
			continue
		}
		assert.NotEmptyf(t, s.Pending, "account %s holds pending amounts with no leg in flight", id)
	}
}

// TestCapturePastTheLegIsExceeded: a capture of more than a hold's leg
// holds at all (11.00 of a 10.00 hold; a part past its leg, MinInt64
// included) is ErrCaptureExceeded, as one of more than its captures left
// of it is (5.00 after 6.00), never ErrInvalidTransfer; each is refused
// before anything is written: nothing reserved in the hold's book, no
// capture inserted, no account touched.
func TestCapturePastTheLegIsExceeded(t *testing.T) {
	b := newBank(t, twopc.WithSyncSettle())
	ctx := testCtx(t)
	b.open(map[string]int64{"A": 5000, "B": 0, "C": 0})
	hold, err := b.c.Hold(ctx, "A", "B", 1000)
	require.NoError(t, err)
	legs, err := b.c.HoldLegs(ctx, []twopc.Leg{{Account: "A", Amount: -100}, {Account: "B", Amount: 60}, {Account: "C", Amount: 40}})
	require.NoError(t, err)
	_, err = b.c.Capture(ctx, hold.ID, 600, twopc.WithFinalCapture(false))
	require.NoError(t, err)
	raw := func(id bson.ObjectID) bson.Raw {
		doc, err := b.db.Collection("transactions").FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Raw()
		require.NoError(t, err)
		return doc
	}
	accounts, n, held, heldLegs := b.accountStates(), len(b.txns()), raw(hold.ID), raw(legs.ID)

	exceeded := func(err error, what string) {
		t.Helper()
		assert.ErrorIs(t, err, twopc.ErrCaptureExceeded, what)
		assert.NotErrorIs(t, err, twopc.ErrInvalidTransfer, what)
	}
	_, err = b.c.Capture(ctx, hold.ID, 1100)
	exceeded(err, "11.00 of a 10.00 hold")
	_, err = b.c.Capture(ctx, hold.ID, 500)
	exceeded(err, "5.00 after 6.00 was captured")
	for _, parts := range [][]int64{{-200, 160, 40}, {-41, 0, 41}, {math.MinInt64, 60, 40}} {
		_, err := b.c.CaptureLegs(ctx, legs.ID, parts)
		exceeded(err, fmt.Sprint(parts))
	}
	assert.Equal(t, accounts, b.accountStates(), "no account touched")
	assert.Len(t, b.txns(), n, "no capture inserted")
	assert.Equal(t, held, raw(hold.ID), "nothing reserved in the hold's book")
	assert.Equal(t, heldLegs, raw(legs.ID), "nothing reserved in the hold's book")

	_, err = b.c.Capture(ctx, hold.ID, 400)
	require.NoError(t, err, "what is left is captured")
	_, err = b.c.Void(ctx, legs.ID)
	require.NoError(t, err)
	b.checkSettled(map[string]int64{"A": 5000, "B": 0, "C": 0})
	assert.EqualValues(t, 1000, b.balance("B"))
}
