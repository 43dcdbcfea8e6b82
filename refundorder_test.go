package twopc_test

// A hold refunded as one order (issue 48, item 3): one book for the hold
// across all its captures; a capture is not refunded on its own.

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc"
)

// TestRefundOrderOfTwoCaptures: a hold of 100 captured 30 then 50 (two
// shipments) is refunded as one order, in amounts that need both captures
// (25, then 45, then 10: 80 in all), each refund a transaction of its own
// naming the hold; a refund past what they captured is ErrRefundExceeded;
// a capture refunded or reversed on its own is ErrNotRefundable and writes
// nothing. Refundable follows the captures as they commit.
func TestRefundOrderOfTwoCaptures(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	b.open(map[string]int64{"buyer": 1000, "shop": 0})
	order, err := b.c.Hold(ctx, "buyer", "shop", 100)
	require.NoError(t, err)
	_, err = b.c.Refundable(ctx, order.ID)
	require.ErrorIs(t, err, twopc.ErrNotRefundable, "held, nothing captured")

	first, err := b.c.Capture(ctx, order.ID, 30, twopc.WithFinalCapture(false))
	require.NoError(t, err)
	assert.Equal(t, int64(30), refundable(t, b.c, order.ID), "the first shipment, the hold still held")
	second, err := b.c.Capture(ctx, order.ID, 50)
	require.NoError(t, err)
	assert.Equal(t, int64(80), refundable(t, b.c, order.ID), "both shipments")

	before := len(b.txns())
	for _, id := range []bson.ObjectID{first.ID, second.ID} {
		_, err := b.c.Refund(ctx, id, 1)
		assert.ErrorIs(t, err, twopc.ErrNotRefundable, "a capture on its own")
		assert.ErrorContains(t, err, order.ID.Hex(), "names its hold")
		_, err = b.c.Reverse(ctx, id)
		assert.ErrorIs(t, err, twopc.ErrNotRefundable)
		_, err = b.c.Refundable(ctx, id)
		assert.ErrorIs(t, err, twopc.ErrNotRefundable)
	}
	assert.Len(t, b.txns(), before, "nothing written")

	var made []*twopc.Txn
	for _, amount := range []int64{25, 45} {
		r, err := b.c.Refund(ctx, order.ID, amount)
		require.NoError(t, err)
		assert.Equal(t, order.ID, r.RefundOf)
		assert.Equal(t, "shop", r.Source)
		made = append(made, r)
	}
	_, err = b.c.Refund(ctx, order.ID, 11)
	require.ErrorIs(t, err, twopc.ErrRefundExceeded, "10 left of the 80 captured")
	last, err := b.c.Refund(ctx, order.ID, 10)
	require.NoError(t, err)
	assert.NotEqual(t, made[0].ID, last.ID)
	assert.Zero(t, refundable(t, b.c, order.ID))

	// One book, the hold's, whose entries name the captures they take
	// from, the oldest first.
	type take struct {
		ID     bson.ObjectID `bson:"id"`
		Amount int64         `bson:"amount"`
	}
	var book struct {
		Refunds []struct {
			ID       bson.ObjectID `bson:"id"`
			Amount   int64         `bson:"amount"`
			Captures []take        `bson:"captures"`
		} `bson:"refunds"`
	}
	require.NoError(t, b.db.Collection("transactions_refunds").FindOne(ctx, bson.D{{Key: "_id", Value: order.ID}}).Decode(&book))
	require.Len(t, book.Refunds, 3)
	assert.Equal(t, []take{{first.ID, 25}}, book.Refunds[0].Captures)
	assert.Equal(t, []take{{first.ID, 5}, {second.ID, 40}}, book.Refunds[1].Captures)
	assert.Equal(t, []take{{second.ID, 10}}, book.Refunds[2].Captures)
	for _, id := range []bson.ObjectID{first.ID, second.ID} {
		n, err := b.db.Collection("transactions_refunds").CountDocuments(ctx, bson.D{{Key: "_id", Value: id}})
		require.NoError(t, err)
		assert.Zero(t, n, "no book of a capture of its own")
	}
	_, err = b.c.Reverse(ctx, order.ID)
	require.ErrorIs(t, err, twopc.ErrRefundExceeded)
	b.checkSettled(map[string]int64{"buyer": 1000, "shop": 0})
	assert.Equal(t, int64(1000), b.balance("buyer"), "80 charged, 80 refunded, 20 released")
}

// TestRefundOrderVoidedAfterCaptures: a hold captured 60 and voided has a
// base of 60, and Reverse of it returns the 60 at once, once.
func TestRefundOrderVoidedAfterCaptures(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	b.open(map[string]int64{"buyer": 1000, "shop": 0})
	order, err := b.c.Hold(ctx, "buyer", "shop", 100)
	require.NoError(t, err)
	_, err = b.c.Capture(ctx, order.ID, 20, twopc.WithFinalCapture(false))
	require.NoError(t, err)
	_, err = b.c.Capture(ctx, order.ID, 40, twopc.WithFinalCapture(false))
	require.NoError(t, err)
	_, err = b.c.Void(ctx, order.ID)
	require.NoError(t, err)
	assert.Equal(t, int64(60), refundable(t, b.c, order.ID))
	rev, err := b.c.Reverse(ctx, order.ID)
	require.NoError(t, err)
	assert.Equal(t, int64(60), rev.Value, "every capture reversed, in one transfer")
	_, err = b.c.Reverse(ctx, order.ID, twopc.WithKey("again"))
	require.ErrorIs(t, err, twopc.ErrRefundExceeded)
	b.checkSettled(map[string]int64{"buyer": 1000, "shop": 0})
	assert.Equal(t, int64(1000), b.balance("buyer"))
}

// TestRefundOrderAtOnce: refunds of a two-capture order from two
// coordinators at once never return more than its captures took.
func TestRefundOrderAtOnce(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	other := b.coordinator(twopc.WithSyncSettle())
	b.open(map[string]int64{"buyer": 1000, "shop": 500})
	order, err := b.c.Hold(ctx, "buyer", "shop", 100)
	require.NoError(t, err)
	_, err = b.c.Capture(ctx, order.ID, 40, twopc.WithFinalCapture(false))
	require.NoError(t, err)
	_, err = b.c.Capture(ctx, order.ID, 30)
	require.NoError(t, err)
	var wg sync.WaitGroup
	var mu sync.Mutex
	made := 0
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := b.c
			if i%2 == 1 {
				c = other
			}
			_, err := c.Refund(ctx, order.ID, 10)
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				made++
			} else {
				assert.ErrorIs(t, err, twopc.ErrRefundExceeded)
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, 7, made, "70 captured: seven refunds of 10")
	require.NoError(t, other.Settle(ctx))
	b.checkSettled(map[string]int64{"buyer": 1000, "shop": 500})
	assert.Equal(t, int64(1000), b.balance("buyer"))
}

// TestRefundOrderOfLegs: a hold of legs (buyer −100, seller +70, fees
// +30) captured in two parts of each leg is refunded as one order: the
// seller's part only first (RefundLegs), then the rest in proportion to
// what each leg has left, to exactly zero; every leg returns what its
// captures took, no more.
func TestRefundOrderOfLegs(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	b.open(map[string]int64{"buyer": 1000, "seller": 0, "fees": 0})
	order, err := b.c.HoldLegs(ctx, []twopc.Leg{{Account: "buyer", Amount: -100}, {Account: "seller", Amount: 70}, {Account: "fees", Amount: 30}})
	require.NoError(t, err)
	_, err = b.c.CaptureLegs(ctx, order.ID, []int64{-50, 35, 15}, twopc.WithFinalCapture(false))
	require.NoError(t, err)
	_, err = b.c.CaptureLegs(ctx, order.ID, []int64{-20, 14, 6})
	require.NoError(t, err)
	assert.Equal(t, int64(70), refundable(t, b.c, order.ID))

	item, err := b.c.RefundLegs(ctx, order.ID, []twopc.Leg{{Account: "seller", Amount: 10}})
	require.NoError(t, err)
	assert.Equal(t, order.ID, item.RefundOf)
	assert.Equal(t, int64(39), b.balance("seller"))
	assert.Equal(t, int64(21), b.balance("fees"), "the fee kept")
	for _, part := range []int64{30, 30} {
		_, err := b.c.Refund(ctx, order.ID, part)
		require.NoError(t, err)
	}
	assert.Zero(t, refundable(t, b.c, order.ID))
	b.checkSettled(map[string]int64{"buyer": 1000, "seller": 0, "fees": 0})
	assert.Equal(t, int64(1000), b.balance("buyer"))
	assert.Zero(t, b.balance("seller"))
	assert.Zero(t, b.balance("fees"))
}

// TestRefundOrderCountsCommittedCaptures: a capture of a held hold whose
// process died before its commit (pending, in flight) is not in the
// order's base until it commits: only the committed capture's 30 is
// refundable.
func TestRefundOrderCountsCommittedCaptures(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	b.open(map[string]int64{"buyer": 1000, "shop": 500})
	order, err := b.c.Hold(ctx, "buyer", "shop", 100)
	require.NoError(t, err)
	_, err = b.c.Capture(ctx, order.ID, 30, twopc.WithFinalCapture(false))
	require.NoError(t, err)
	stuck, err := b.coordinator(twopc.WithStepHook(crashAt(twopc.StepCommit))).Capture(ctx, order.ID, 20, twopc.WithFinalCapture(false))
	require.Error(t, err)
	require.NotNil(t, stuck)
	require.Equal(t, twopc.StatePending, b.txn(stuck.ID).State)
	assert.Equal(t, int64(30), refundable(t, b.c, order.ID))
	_, err = b.c.Refund(ctx, order.ID, 31)
	require.ErrorIs(t, err, twopc.ErrRefundExceeded)
	_, err = b.c.Refund(ctx, order.ID, 30)
	require.NoError(t, err)
}

// TestRefundOrderWhileCaptured: refunds of a held hold race the captures
// that commit meanwhile, from two coordinators: a refund is made or
// refused ErrRefundExceeded, never more is refunded than the captures
// committed took, and every entry's captures add up to its amount.
func TestRefundOrderWhileCaptured(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	other := b.coordinator(twopc.WithSyncSettle())
	b.open(map[string]int64{"buyer": 1000, "shop": 500})
	order, err := b.c.Hold(ctx, "buyer", "shop", 100)
	require.NoError(t, err)
	_, err = b.c.Capture(ctx, order.ID, 10, twopc.WithFinalCapture(false))
	require.NoError(t, err)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 5 {
			_, err := b.c.Capture(ctx, order.ID, 10, twopc.WithFinalCapture(false))
			assert.NoError(t, err)
		}
	}()
	var mu sync.Mutex
	refunded := int64(0)
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := b.c
			if i%2 == 1 {
				c = other
			}
			for range 8 {
				_, err := c.Refund(ctx, order.ID, 5)
				if err != nil {
					assert.ErrorIs(t, err, twopc.ErrRefundExceeded)
					continue
				}
				mu.Lock()
				refunded += 5
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	assert.LessOrEqual(t, refunded, int64(60))
	left := refundable(t, b.c, order.ID)
	assert.Equal(t, int64(60)-refunded, left)
	if left > 0 {
		_, err := b.c.Refund(ctx, order.ID, left)
		require.NoError(t, err)
	}
	var book struct {
		Refunds []struct {
			Amount   int64 `bson:"amount"`
			Captures []struct {
				Amount int64 `bson:"amount"`
			} `bson:"captures"`
		} `bson:"refunds"`
	}
	require.NoError(t, b.db.Collection("transactions_refunds").FindOne(ctx, bson.D{{Key: "_id", Value: order.ID}}).Decode(&book))
	for _, e := range book.Refunds {
		var n int64
		for _, c := range e.Captures {
			n += c.Amount
		}
		assert.Equal(t, e.Amount, n, "an entry's captures add up to it")
	}
	_, err = b.c.Void(ctx, order.ID)
	require.NoError(t, err)
	require.NoError(t, other.Settle(ctx))
	b.checkSettled(map[string]int64{"buyer": 1000, "shop": 500})
	assert.Equal(t, int64(1000), b.balance("buyer"), "60 captured, 60 refunded, 40 released")
}

// TestRefundOrderReadBeforeCapture: a refund of a held hold of three legs
// reads the order (the first capture's 50), then, before its reservation,
// a second capture commits and a refund of the order grown takes 45 of
// the seller's 49 (more than the 35 the refund read): the refund of 4
// reads the order again and is made, where it failed with "the refund book does not
// add up" (no named error). The order is then refunded to exactly zero.
func TestRefundOrderReadBeforeCapture(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	b.open(map[string]int64{"buyer": 1000, "seller": 0, "fees": 0})
	order, err := b.c.HoldLegs(ctx, []twopc.Leg{{Account: "buyer", Amount: -100}, {Account: "seller", Amount: 70}, {Account: "fees", Amount: 30}})
	require.NoError(t, err)
	_, err = b.c.CaptureLegs(ctx, order.ID, []int64{-50, 35, 15}, twopc.WithFinalCapture(false))
	require.NoError(t, err)

	var seen []int64 // the order's value, as each reservation read it
	refunder := b.coordinator(twopc.WithSyncSettle(), twopc.WithRefundHook(func(id bson.ObjectID, value int64) {
		seen = append(seen, value)
		if len(seen) > 1 {
			return
		}
		_, err := b.c.CaptureLegs(ctx, order.ID, []int64{-20, 14, 6}, twopc.WithFinalCapture(false))
		require.NoError(t, err)
		_, err = b.c.RefundLegs(ctx, order.ID, []twopc.Leg{{Account: "seller", Amount: 45}})
		require.NoError(t, err)
	}))
	r, err := refunder.Refund(ctx, order.ID, 4) // within the 50 − 45 the order as first read leaves
	require.NoError(t, err, "made on the order read again")
	assert.Equal(t, []int64{50, 70}, seen, "read before the second capture, then again after it")
	assert.Equal(t, order.ID, r.RefundOf)
	for _, l := range r.Legs {
		if l.Account == "buyer" {
			assert.Equal(t, int64(4), l.Amount)
		} else {
			assert.Negative(t, l.Amount, "no refund leg pays %v", l.Account)
		}
	}
	assert.Equal(t, int64(21), refundable(t, b.c, order.ID), "70 captured, 45 and 4 refunded")
	_, err = refunder.Refund(ctx, order.ID, 22)
	require.ErrorIs(t, err, twopc.ErrRefundExceeded)
	_, err = refunder.Refund(ctx, order.ID, 21)
	require.NoError(t, err)
	assert.Zero(t, b.balance("seller"), "the seller returned exactly the 49 it received")
	assert.Zero(t, b.balance("fees"), "the fees account returned exactly its 21")
	_, err = b.c.Void(ctx, order.ID)
	require.NoError(t, err)
	assert.Equal(t, int64(1000), b.balance("buyer"))
}
