package twopc_test

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc"
)

var (
	refundAcceptTransfers = flag.Int("refundaccept.transfers", 20, "transfers of 2 to 5 legs TestRefundAcceptance refunds (make soak: 150)")
	refundAcceptSeed      = flag.Uint64("refundaccept.seed", 0, "TestRefundAcceptance's seed (0: the clock's)")
)

// refundAsk is one refund of a plan: proportional (legs nil: amount) or
// by leg (legs: what each named leg takes back).
type refundAsk struct {
	amount int64
	legs   []twopc.Leg
}

// refundDone is what one refund of a plan answered.
type refundDone struct {
	ask refundAsk
	txn *twopc.Txn
	err error
}

// TestRefundAcceptance (issue 48's goal, its refunds): -refundaccept.transfers
// transfers of 2 to 5 legs (one to three payers, the rest paid), each
// account opened with exactly what the transfer takes from or gives it, so
// a party holds only the transfer's money. Each is refunded by a random
// sequence of 1 to 10 refunds, proportional and by leg (a receiver named,
// a payer named, or one of each), small enough that most fit, half of them
// sent by one coordinator and half by another at once; a refund past what
// is left (of the transfer, or of a leg named) is refused with
// ErrRefundExceeded, and any other error fails the test. Then: no refund
// leg pays a party (each leg is its transfer leg turned), a leg named took
// exactly what was asked, no leg has returned more than it received, the
// book holds exactly the refunds made (a refusal wrote nothing), every
// balance is the transfer's less what was returned, and the sum of all is
// conserved; the rest, Refundable, is refunded at once (the accounts hold
// the money), which brings every leg to exactly what it received and
// every account back to its opening. It also refunds a two-capture order
// as one (refundAcceptOrder) and reverses an exchange under two keys at
// once (refundAcceptExchange).
func TestRefundAcceptance(t *testing.T) {
	ctx := testCtx(t)
	seed := *refundAcceptSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (-refundaccept.seed)", seed)
	rng := rand.New(rand.NewPCG(seed, 48))
	b := newBank(t, twopc.WithSyncSettle())
	other := b.coordinator(twopc.WithSyncSettle())
	var made, refused, byLeg int
	for k := range *refundAcceptTransfers {
		legs, opening := randomSale(rng, k)
		b.open(opening)
		sale, err := b.c.TransferLegs(ctx, legs)
		require.NoError(t, err, "transfer %d: %v", k, legs)
		plan := refundPlan(rng, legs)

		done := make([]refundDone, len(plan))
		var wg sync.WaitGroup
		for half, c := range []*twopc.Coordinator{b.c, other} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := half; i < len(plan); i += 2 {
					ask := plan[i]
					var txn *twopc.Txn
					var err error
					if ask.legs == nil {
						txn, err = c.Refund(ctx, sale.ID, ask.amount)
					} else {
						txn, err = c.RefundLegs(ctx, sale.ID, ask.legs)
					}
					done[i] = refundDone{ask, txn, err}
				}
			}()
		}
		wg.Wait()

		received := map[any]int64{} // each leg's signed amount
		for _, l := range legs {
			received[l.Account] = l.Amount
		}
		returned := map[any]int64{} // what each leg returned, signed as the refunds moved it
		var count int
		for i, d := range done {
			if errors.Is(d.err, twopc.ErrRefundExceeded) {
				refused++
				continue
			}
			require.NoError(t, d.err, "transfer %d, refund %d: %+v", k, i, d.ask)
			count++
			if d.ask.legs != nil {
				byLeg++
			}
			checkRefundLegs(t, d, received, returned)
		}
		made += count
		for _, l := range legs {
			back := returned[l.Account]
			require.LessOrEqual(t, max(back, -back), max(l.Amount, -l.Amount), "leg %v returned more than it received", l)
			require.Equal(t, opening[l.Account.(string)]+l.Amount+back, b.balance(l.Account), "balance of %v", l.Account)
		}
		require.Len(t, b.book(sale.ID).Refunds, count, "the book holds the refunds made, and nothing of those refused")

		left := refundable(t, b.c, sale.ID)
		if left > 0 {
			rest, err := other.Refund(ctx, sale.ID, left)
			require.NoError(t, err, "transfer %d: the rest, %d, while the accounts hold it", k, left)
			checkRefundLegs(t, refundDone{refundAsk{amount: left}, rest, nil}, received, returned)
		}
		book := b.book(sale.ID)
		assert.Zero(t, book.Left)
		for i, l := range legs {
			require.Equal(t, -l.Amount, returned[l.Account], "leg %v, refunded to zero", l)
			require.Equal(t, max(l.Amount, -l.Amount), book.Returned[i])
			require.Equal(t, opening[l.Account.(string)], b.balance(l.Account))
		}
	}
	all := map[string]int64{}
	for _, d := range b.txns() {
		for _, l := range d.SettledLegs() {
			all[l.Account.(string)] = 0
		}
	}
	var total int64
	for id := range all {
		total += b.balance(id)
	}
	var opened int64
	for _, d := range b.txns() {
		if d.RefundOf.IsZero() {
			for _, l := range d.SettledLegs() {
				if l.Amount < 0 {
					opened -= l.Amount // each payer opened with exactly what it paid; receivers with 0
				}
			}
		}
	}
	require.Equal(t, opened, total, "balances conserved")
	t.Logf("%d transfers, %d refunds made (%d by leg), %d refused past what was left", *refundAcceptTransfers, made, byLeg, refused)
	require.Positive(t, made)

	refundAcceptOrder(t, b, other, rng)
	refundAcceptExchange(t, b, other, rng)
}

// refundAcceptOrder refunds a two-capture order as one: a hold of 2 to 5
// legs (randomSale's) captured in two parts of each leg (the second the
// last, taking the rest), refunded in random amounts from two coordinators
// at once, then the rest, to zero. No refund leg pays a party, no leg
// returns more than its captures took, no capture is taken from for more
// than it credited (the book's entries name the captures they take from),
// and at zero every capture and every leg returned exactly what it took,
// every account back at its opening.
func refundAcceptOrder(t *testing.T, b *bank, other *twopc.Coordinator, rng *rand.Rand) {
	t.Helper()
	ctx := testCtx(t)
	legs, opening := randomSale(rng, -1)
	b.open(opening)
	order, err := b.c.HoldLegs(ctx, legs)
	require.NoError(t, err, "order: %v", legs)
	var total int64
	for _, l := range legs {
		total += max(l.Amount, 0)
	}
	first, second := make([]int64, len(legs)), make([]int64, len(legs))
	if total > 1 {
		// The first shipment takes a of each side's total: each leg
		// its part of a by cumulative rounding, at most what it holds.
		a := 1 + rng.Int64N(total-1)
		for _, credit := range []bool{true, false} {
			var cum, prev int64
			for i, l := range legs {
				if (l.Amount > 0) != credit {
					continue
				}
				cum += max(l.Amount, -l.Amount)
				next := cum * a / total
				first[i] = next - prev
				if !credit {
					first[i] = -first[i]
				}
				prev = next
			}
		}
	}
	for i, l := range legs {
		second[i] = l.Amount - first[i]
	}
	credited := map[bson.ObjectID]int64{} // each capture's credits
	for i, parts := range [][]int64{first, second} {
		var opts []twopc.TransferOption
		if i == 0 {
			opts = append(opts, twopc.WithFinalCapture(false))
		}
		if !slices.ContainsFunc(parts, func(n int64) bool { return n != 0 }) {
			continue // an order of 1: one shipment
		}
		capture, err := b.c.CaptureLegs(ctx, order.ID, parts, opts...)
		require.NoError(t, err, "capture %d of %v: %v", i+1, legs, parts)
		for _, l := range capture.AllLegs() {
			credited[capture.ID] += max(l.Amount, 0)
		}
	}
	require.Equal(t, total, refundable(t, b.c, order.ID), "both shipments")

	received := map[any]int64{}
	for _, l := range legs {
		received[l.Account] = l.Amount
	}
	returned := map[any]int64{}
	check := func(whole bool) {
		t.Helper()
		var book struct {
			Refunds []struct {
				Captures []struct {
					ID     bson.ObjectID `bson:"id"`
					Amount int64         `bson:"amount"`
				} `bson:"captures"`
			} `bson:"refunds"`
		}
		require.NoError(t, b.db.Collection("transactions_refunds").FindOne(ctx, bson.D{{Key: "_id", Value: order.ID}}).Decode(&book))
		took := map[bson.ObjectID]int64{}
		for _, e := range book.Refunds {
			for _, c := range e.Captures {
				_, ok := credited[c.ID]
				require.True(t, ok, "an entry names %s, not a capture of the order", c.ID.Hex())
				took[c.ID] += c.Amount
			}
		}
		for id, credit := range credited {
			require.LessOrEqual(t, took[id], credit, "capture %s returned more than it took", id.Hex())
			if whole {
				require.Equal(t, credit, took[id], "capture %s, refunded to zero", id.Hex())
			}
		}
		for _, l := range legs {
			back := returned[l.Account]
			require.LessOrEqual(t, max(back, -back), max(l.Amount, -l.Amount), "leg %v returned more than its captures took", l)
			if whole {
				require.Equal(t, -l.Amount, back, "leg %v, refunded to zero", l)
			}
		}
	}
	for range 3 {
		left := refundable(t, b.c, order.ID)
		if left == 0 {
			break
		}
		done := make([]refundDone, 2)
		var wg sync.WaitGroup
		for i, c := range []*twopc.Coordinator{b.c, other} {
			amount := 1 + rng.Int64N(max(1, left/3))
			wg.Add(1)
			go func() {
				defer wg.Done()
				txn, err := c.Refund(ctx, order.ID, amount)
				done[i] = refundDone{refundAsk{amount: amount}, txn, err}
			}()
		}
		wg.Wait()
		for _, d := range done {
			if errors.Is(d.err, twopc.ErrRefundExceeded) {
				continue
			}
			require.NoError(t, d.err, "a refund of %d of the order %v", d.ask.amount, legs)
			require.Equal(t, order.ID, d.txn.RefundOf)
			checkRefundLegs(t, d, received, returned)
		}
		check(false)
	}
	if left := refundable(t, b.c, order.ID); left > 0 {
		rest, err := other.Refund(ctx, order.ID, left)
		require.NoError(t, err, "the rest of the order, %d, while the accounts hold it", left)
		checkRefundLegs(t, refundDone{refundAsk{amount: left}, rest, nil}, received, returned)
	}
	check(true)
	assert.Zero(t, refundable(t, b.c, order.ID))
	for id, bal := range opening {
		require.Equal(t, bal, b.balance(id), "balance of %s, the order refunded to zero", id)
	}
}

// refundAcceptExchange reverses an exchange of random amounts of two
// assets under two caller keys, from two coordinators at once: one
// reversal is made, the other is ErrRefundExceeded (the book is whole or
// nothing), each key's repeat answers as its first call did, and every
// account is back at its opening: the exchange moved back once, though
// every account holds enough for a second.
func refundAcceptExchange(t *testing.T, b *bank, other *twopc.Coordinator, rng *rand.Rand) {
	t.Helper()
	ctx := testCtx(t)
	usd, eur := 1+rng.Int64N(1000), 1+rng.Int64N(1000)
	opening := map[string]int64{"fx-alice-usd": usd, "fx-desk-usd": 2 * usd, "fx-alice-eur": eur, "fx-desk-eur": eur}
	b.openAsset("USD/2", map[string]int64{"fx-alice-usd": usd, "fx-desk-usd": 2 * usd})
	b.openAsset("EUR/2", map[string]int64{"fx-alice-eur": eur, "fx-desk-eur": eur})
	fx, err := b.c.TransferLegs(ctx, []twopc.Leg{
		{Account: "fx-alice-usd", Amount: -usd, Asset: "USD/2"}, {Account: "fx-desk-usd", Amount: usd, Asset: "USD/2"},
		{Account: "fx-desk-eur", Amount: -eur, Asset: "EUR/2"}, {Account: "fx-alice-eur", Amount: eur, Asset: "EUR/2"},
	})
	require.NoError(t, err)
	keys := []string{"fx/req-3", "fx/req-4"}
	got := make([]*twopc.Txn, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, c := range []*twopc.Coordinator{b.c, other} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = c.Reverse(ctx, fx.ID, twopc.WithKey(keys[i]))
		}()
	}
	wg.Wait()
	won := slices.IndexFunc(errs, func(err error) bool { return err == nil })
	require.GreaterOrEqual(t, won, 0, "one reversal made: %v", errs)
	lost := 1 - won
	require.ErrorIs(t, errs[lost], twopc.ErrRefundExceeded, "the second reversal, under %q", keys[lost])
	assert.Equal(t, fx.ID, got[won].RefundOf)
	repeat, err := other.Reverse(ctx, fx.ID, twopc.WithKey(keys[won]))
	require.NoError(t, err)
	assert.Equal(t, got[won].ID, repeat.ID, "the winning key's repeat: the reversal made")
	_, err = b.c.Reverse(ctx, fx.ID, twopc.WithKey(keys[lost]))
	require.ErrorIs(t, err, twopc.ErrRefundExceeded, "the losing key's repeat")
	for id, bal := range opening {
		require.Equal(t, bal, b.balance(id), "balance of %s: moved back once", id)
	}
}

// checkRefundLegs checks refund d, made, against its transfer's legs
// (received, signed) and adds its legs to returned: each leg is a leg of
// the transfer turned (none pays a party), the legs sum to zero and the
// credits to the refund's Value, and a leg named took what was asked.
func checkRefundLegs(t *testing.T, d refundDone, received, returned map[any]int64) {
	t.Helper()
	var sum, credits int64
	took := map[any]int64{}
	for _, l := range d.txn.AllLegs() {
		got, ok := received[l.Account]
		require.True(t, ok, "refund leg %v is not a leg of the transfer", l)
		require.True(t, l.Amount != 0 && (l.Amount > 0) == (got < 0), "refund leg %v pays a party (the transfer's leg: %d)", l, got)
		returned[l.Account] += l.Amount
		took[l.Account] = max(l.Amount, -l.Amount)
		sum += l.Amount
		credits += max(l.Amount, 0)
	}
	require.Zero(t, sum)
	require.Equal(t, d.txn.Value, credits)
	for _, l := range d.ask.legs {
		require.Equal(t, l.Amount, took[l.Account], "leg %v named", l)
	}
	if d.ask.legs == nil {
		require.Equal(t, d.ask.amount, d.txn.Value)
	}
}

// randomSale is transfer k of 2 to 5 legs, one to three of them payers
// (each 1 to 1,000), the rest paid a random split of what they paid (each
// at least 1), with the opening of each account: a payer exactly what it
// pays, a payee nothing.
func randomSale(rng *rand.Rand, k int) ([]twopc.Leg, map[string]int64) {
	n := 2 + rng.IntN(4)
	payers := 1 + rng.IntN(min(3, n-1))
	var legs []twopc.Leg
	opening := map[string]int64{}
	var total int64
	for i := range payers {
		amount := 1 + rng.Int64N(1000)
		id := fmt.Sprintf("t%d-payer%d", k, i)
		legs = append(legs, twopc.Leg{Account: id, Amount: -amount})
		opening[id] = amount
		total += amount
	}
	payees := n - payers
	for total < int64(payees) {
		legs[0].Amount--
		opening[legs[0].Account.(string)]++
		total++
	}
	rest := total
	for j := range payees {
		amount := rest
		if j < payees-1 {
			amount = 1 + rng.Int64N(rest-int64(payees-1-j))
		}
		id := fmt.Sprintf("t%d-payee%d", k, j)
		legs = append(legs, twopc.Leg{Account: id, Amount: amount})
		opening[id] = 0
		rest -= amount
	}
	rng.Shuffle(len(legs), func(i, j int) { legs[i], legs[j] = legs[j], legs[i] })
	return legs, opening
}

// refundPlan is 1 to 10 refunds of a transfer of legs, proportional or by
// leg, each asking about a sixth of what is there at most.
func refundPlan(rng *rand.Rand, legs []twopc.Leg) []refundAsk {
	var base int64
	var payers, payees []twopc.Leg
	for _, l := range legs {
		if l.Amount > 0 {
			base += l.Amount
			payees = append(payees, l)
		} else {
			payers = append(payers, l)
		}
	}
	some := func(of int64) int64 { return 1 + rng.Int64N(max(1, of/6)) }
	pick := func(side []twopc.Leg) twopc.Leg { return side[rng.IntN(len(side))] }
	plan := make([]refundAsk, 1+rng.IntN(10))
	for i := range plan {
		switch rng.IntN(4) {
		case 0:
			plan[i] = refundAsk{amount: some(base)}
		case 1:
			l := pick(payees)
			plan[i] = refundAsk{legs: []twopc.Leg{{Account: l.Account, Amount: some(l.Amount)}}}
		case 2:
			l := pick(payers)
			plan[i] = refundAsk{legs: []twopc.Leg{{Account: l.Account, Amount: some(-l.Amount)}}}
		default:
			p, q := pick(payers), pick(payees)
			a := some(min(-p.Amount, q.Amount))
			plan[i] = refundAsk{legs: []twopc.Leg{{Account: q.Account, Amount: a}, {Account: p.Account, Amount: a}}}
		}
	}
	return plan
}
