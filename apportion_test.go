package twopc_test

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/twopc/twopc"
)

// TestUnitApportionShares: the refunds' apportionment on known cases (the
// Alabama paradox's split, which largest remainders gets wrong, ties to
// the first weight, the exact weights at their sum, amounts near
// MaxInt64), and as properties over random weights: the shares sum to the
// total, each is at least its quota rounded down and at most its weight,
// and none is ever lower for a larger total.
func TestUnitApportionShares(t *testing.T) {
	for _, c := range []struct {
		w     []int64
		total int64
		want  []int64
	}{
		{[]int64{5400, 3600, 1000}, 15, []int64{9, 5, 1}},
		{[]int64{5400, 3600, 1000}, 16, []int64{9, 6, 1}},
		{[]int64{5400, 3600, 1000}, 10000, []int64{5400, 3600, 1000}},
		{[]int64{67, 33}, 50, []int64{34, 16}},
		{[]int64{67, 33}, 100, []int64{67, 33}},
		{[]int64{5, 5}, 1, []int64{1, 0}},
		{[]int64{5, 5}, 2, []int64{1, 1}},
		{[]int64{333, 333, 334}, 500, []int64{167, 166, 167}},
		{[]int64{0, 7, 0}, 3, []int64{0, 3, 0}},
		{[]int64{math.MaxInt64 - 1, 1}, math.MaxInt64 - 1, []int64{math.MaxInt64 - 1, 0}},
		{[]int64{math.MaxInt64 - 1, 1}, math.MaxInt64, []int64{math.MaxInt64 - 1, 1}},
		{[]int64{1 << 62, 1 << 62, 1<<62 - 1}, 3, []int64{1, 1, 1}},
	} {
		assert.Equal(t, c.want, twopc.Shares(c.w, c.total), "%v of %d", c.w, c.total)
	}

	rng := rand.New(rand.NewPCG(48, 1))
	for range 400 {
		w := randomWeights(rng, 1+rng.IntN(5), int64(1+rng.IntN(60)))
		W := sum(w)
		prev := make([]int64, len(w))
		for total := int64(0); total <= W; total++ {
			s := twopc.Shares(w, total)
			checkShares(t, w, total, s)
			for i := range s {
				require.GreaterOrEqual(t, s[i], prev[i], "%v: share %d of %d below its share of %d: %v, %v", w, i, total, total-1, s, prev)
			}
			prev = s
		}
		require.Equal(t, w, prev, "the shares of the sum are the weights")
	}
	for range 400 { // large amounts: pairs of totals
		w := randomWeights(rng, 1+rng.IntN(5), math.MaxInt64/5)
		W := sum(w)
		total := rng.Int64N(W)
		a, b := twopc.Shares(w, total), twopc.Shares(w, total+1)
		checkShares(t, w, total, a)
		checkShares(t, w, total+1, b)
		for i := range a {
			require.GreaterOrEqual(t, b[i], a[i], "%v: %d then %d: %v then %v", w, total, total+1, a, b)
		}
		require.Equal(t, w, twopc.Shares(w, W))
	}
}

// TestUnitApportionRefunds: a refund's legs over random transfers of 2 to
// 5 legs and random sequences of 1 to 10 refunds, some of them canceled
// (their own legs given back, as a refused refund's release does): no
// refund leg has the original leg's sign (none pays a party), each side
// of a refund takes exactly its amount (its legs sum to zero), no leg ever
// returns more than it received, while no refund was canceled each leg's
// total is its share of the cumulative amount (so it never goes down),
// and the refund of what is left takes exactly what is left of every leg.
// The cases: a sale of 67/33 refunded 50 and 50, a payout of 5 and
// 5 refunded ten times 1, 333/333/334 refunded 500 and 500.
func TestUnitApportionRefunds(t *testing.T) {
	seq := func(legs []int64, amounts ...int64) [][]int64 {
		var out [][]int64
		returned := make([]int64, len(legs))
		for _, a := range amounts {
			take, err := twopc.RefundTake(legs, returned, a)
			require.NoError(t, err)
			out = append(out, take)
			for i := range take {
				returned[i] += take[i]
			}
		}
		return out
	}
	assert.Equal(t, [][]int64{{50, 34, 16}, {50, 33, 17}}, seq([]int64{-100, 67, 33}, 50, 50))
	ten := seq([]int64{-5, -5, 10}, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1)
	var x, y int64
	for _, take := range ten {
		x, y = x+take[0], y+take[1]
	}
	assert.Equal(t, []int64{5, 5}, []int64{x, y}, "the payer side: %v", ten)
	assert.Equal(t, [][]int64{{500, 167, 166, 167}, {500, 166, 167, 167}}, seq([]int64{-1000, 333, 333, 334}, 500, 500))
	_, err := twopc.RefundTake([]int64{-100, 67, 33}, []int64{60, 40, 20}, 41)
	assert.Error(t, err, "past what is left")
	big := seq([]int64{-math.MaxInt64, math.MaxInt64 - 2, 1, 1}, math.MaxInt64/3, math.MaxInt64/3, math.MaxInt64-2*(math.MaxInt64/3))
	assert.Equal(t, []int64{math.MaxInt64, math.MaxInt64 - 2, 1, 1}, add(big...), "exact at MaxInt64")

	rng := rand.New(rand.NewPCG(48, 2))
	for n := range 3000 {
		legs := randomLegs(rng, 2+rng.IntN(4), []int64{10, 1000, math.MaxInt64 / 8}[n%3])
		base := int64(0)
		for _, l := range legs {
			base += max(l, 0)
		}
		returned := make([]int64, len(legs))
		var live [][]int64 // takes of the refunds made or in flight
		var total int64
		canceled := false
		for k, steps := 0, 1+rng.IntN(10); k < steps && total < base; k++ {
			amount := 1 + rng.Int64N(base-total)
			if k < steps-1 && rng.IntN(2) == 0 {
				amount = 1 + rng.Int64N(max(1, (base-total)/int64(steps-k)))
			}
			take, err := twopc.RefundTake(legs, returned, amount)
			require.NoError(t, err)
			checkTake(t, legs, returned, take, amount)
			for i := range take {
				returned[i] += take[i]
			}
			total += amount
			live = append(live, take)
			if !canceled {
				require.Equal(t, sideShares(legs, total), returned, "%v after %d: each leg its share of the total", legs, total)
			}
			if len(live) > 0 && rng.IntN(4) == 0 { // a refund among them refused: its own legs given back
				j := rng.IntN(len(live))
				for i := range live[j] {
					returned[i] -= live[j][i]
				}
				total = sumSide(legs, returned)
				live = append(live[:j], live[j+1:]...)
				canceled = true
			}
		}
		if total < base {
			take, err := twopc.RefundTake(legs, returned, base-total)
			require.NoError(t, err)
			checkTake(t, legs, returned, take, base-total)
			for i := range take {
				returned[i] += take[i]
			}
		}
		for i, l := range legs {
			require.Equal(t, max(l, -l), returned[i], "%v: leg %d refunded to exactly zero", legs, i)
		}
	}
}

// checkShares checks the shares s of total among w: their sum is total,
// each within its weight and at least its quota rounded down.
func checkShares(t *testing.T, w []int64, total int64, s []int64) {
	t.Helper()
	W := new(big.Int)
	for _, x := range w {
		W.Add(W, big.NewInt(x))
	}
	got := new(big.Int)
	for i := range s {
		got.Add(got, big.NewInt(s[i]))
		require.LessOrEqual(t, s[i], w[i], "%v of %d: %v", w, total, s)
		q := new(big.Int).Mul(big.NewInt(w[i]), big.NewInt(total))
		q.Quo(q, W)
		require.GreaterOrEqual(t, s[i], q.Int64(), "%v of %d: %v: below its quota", w, total, s)
	}
	require.Zero(t, got.Cmp(big.NewInt(total)), "%v of %d: %v", w, total, s)
}

// checkTake checks a refund's take of amount from legs that returned
// returned already: none negative, each side amount in all, no leg past
// what it received.
func checkTake(t *testing.T, legs, returned, take []int64, amount int64) {
	t.Helper()
	var credits, debits int64
	for i, l := range legs {
		require.GreaterOrEqual(t, take[i], int64(0), "%v %v: a refund leg pays a party: %v", legs, returned, take)
		require.LessOrEqual(t, take[i], max(l, -l)-returned[i], "%v %v: leg %d returns more than it received: %v", legs, returned, i, take)
		if l > 0 {
			credits += take[i]
		} else {
			debits += take[i]
		}
	}
	require.Equal(t, amount, credits, "%v %v: credits taken %v", legs, returned, take)
	require.Equal(t, amount, debits, "%v %v: debits taken %v", legs, returned, take)
}

// sideShares is each leg's share of total on its side.
func sideShares(legs []int64, total int64) []int64 {
	out := make([]int64, len(legs))
	for _, credit := range []bool{true, false} {
		var idx []int
		var w []int64
		for i, l := range legs {
			if (l > 0) == credit {
				idx, w = append(idx, i), append(w, max(l, -l))
			}
		}
		for k, s := range twopc.Shares(w, total) {
			out[idx[k]] = s
		}
	}
	return out
}

// sumSide is what the credits of legs returned.
func sumSide(legs, returned []int64) int64 {
	var s int64
	for i, l := range legs {
		if l > 0 {
			s += returned[i]
		}
	}
	return s
}

// randomWeights is n positive weights, each at most limit.
func randomWeights(rng *rand.Rand, n int, limit int64) []int64 {
	w := make([]int64, n)
	for i := range w {
		w[i] = 1 + rng.Int64N(limit)
	}
	return w
}

// randomLegs is n legs summing to zero, one or more of each sign, each at
// most limit.
func randomLegs(rng *rand.Rand, n int, limit int64) []int64 {
	for {
		debits := 1 + rng.IntN(n-1)
		legs := randomWeights(rng, n, limit)
		var d, c int64
		for i := range legs {
			if i < debits {
				d += legs[i]
			} else {
				c += legs[i]
			}
		}
		// The larger side's last leg takes the difference.
		switch {
		case d > c && legs[n-1]+d-c <= limit:
			legs[n-1] += d - c
		case c > d && legs[debits-1]+c-d <= limit:
			legs[debits-1] += c - d
		case c != d:
			continue
		}
		for i := range debits {
			legs[i] = -legs[i]
		}
		rng.Shuffle(n, func(i, j int) { legs[i], legs[j] = legs[j], legs[i] })
		return legs
	}
}

// sum is the sum of w.
func sum(w []int64) int64 {
	var s int64
	for _, x := range w {
		s += x
	}
	return s
}

// add is the takes added leg by leg.
func add(takes ...[]int64) []int64 {
	out := make([]int64, len(takes[0]))
	for _, take := range takes {
		for i := range take {
			out[i] += take[i]
		}
	}
	return out
}
