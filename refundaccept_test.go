package twopc_test

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
// every account back to its opening.
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
