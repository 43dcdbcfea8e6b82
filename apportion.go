package twopc

// Apportionment: how a refund of a transfer of legs is split among them,
// exact over any sequence of refunds (PROTOCOL.md, Refunds).

import (
	"fmt"
	"math/big"
)

// shares returns total split among weights w (none negative, total at
// most their sum) by the highest-averages divisor method of Jefferson
// (D'Hondt), ties to the lowest index: the seats (i, j) of every weight
// w[i] > 0 and every j ≥ 1, ranked by w[i]/j descending, ties by i
// ascending, form one fixed total order, and share i is how many of the
// first total seats are weight i's. So:
//
//   - shares never lower a share as the total grows (house monotone):
//     the first total seats of a fixed order are among the first total+1,
//     so each share of total+1 is at least its share of total;
//   - the shares sum to total, and at the sum of the weights each share is
//     its weight exactly: the seats of value at least 1 are exactly those
//     with j ≤ w[i], W of them, every other seat's value is below 1; by
//     monotony no share ever exceeds its weight;
//   - each share is at least its quota rounded down, total·w[i]/W
//     (Jefferson's lower quota), which is where it is computed from: the
//     shares rounded down, then the few units left (fewer than the
//     weights) one at a time to the weight whose next seat ranks first,
//     the largest w[i]/(share+1), which takes the same seats as the order.
//
// Largest remainders is not monotone (the Alabama paradox: 5,400/3,600/
// 1,000 gives [8,5,2] of 15 and [9,6,1] of 16), which is why it is not used.
// All products are exact (math/big): weights and totals up to MaxInt64.
func shares(w []int64, total int64) []int64 {
	out := make([]int64, len(w))
	sum := new(big.Int)
	for _, x := range w {
		if x > 0 {
			sum.Add(sum, big.NewInt(x))
		}
	}
	if total <= 0 || sum.Sign() == 0 {
		return out
	}
	t := big.NewInt(total)
	given := int64(0)
	for i, x := range w {
		if x <= 0 {
			continue
		}
		q := new(big.Int).Mul(big.NewInt(x), t)
		out[i] = q.Quo(q, sum).Int64()
		given += out[i]
	}
	// Fewer than len(w) units are left (each share lost less than one).
	lhs, rhs := new(big.Int), new(big.Int)
	for ; given < total; given++ {
		best := -1
		for i, x := range w {
			if x <= 0 || out[i] >= x {
				continue // a weight's seats past its own rank below every seat of value 1 or more
			}
			if best < 0 {
				best = i
				continue
			}
			// w[i]/(out[i]+1) > w[best]/(out[best]+1), cross-multiplied.
			lhs.Mul(big.NewInt(x), new(big.Int).Add(big.NewInt(out[best]), big.NewInt(1)))
			rhs.Mul(big.NewInt(w[best]), new(big.Int).Add(big.NewInt(out[i]), big.NewInt(1)))
			if lhs.Cmp(rhs) > 0 {
				best = i
			}
		}
		if best < 0 {
			break // total past the weights' sum: not called so
		}
		out[best]++
	}
	return out
}

// refundTake returns what a refund of amount takes back from each leg of
// a transfer of legs (the transfer's own, signed), as amounts of no sign,
// given what each leg has returned already by the refunds made or in
// flight (returned, of no sign; nil: nothing). On each side apart (the
// credits, the debits), with R what that side returned and w its legs'
// amounts, the refund takes from leg i d[i] = shares(w, R+amount)[i] −
// returned[i] (at least 0): its share of the cumulative amount less what
// it returned. When the refunds live are a sequence of refunds whose
// takes were so computed, the d sum to amount and are the take; when a
// refund among them was canceled (its own takes given back), a leg may
// have returned more than its share, and the d sum to more than amount:
// the take is then shares(d, amount), each at most d[i]. Either way a
// take is never negative (no refund leg pays a party), no leg returns
// more than it received (returned + take ≤ its share of R+amount ≤ its
// amount), each side's takes sum to amount (so a refund's legs sum to
// zero), and the refund that brings the total to what the transfer moved
// takes exactly what is left of every leg (its shares are the legs'
// amounts). An amount past what is left on a side is an error.
func refundTake(legs []int64, returned []int64, amount int64) ([]int64, error) {
	take := make([]int64, len(legs))
	for _, credit := range []bool{true, false} {
		var idx []int
		var w, r []int64
		var W, R int64
		for i, l := range legs {
			if l == 0 || (l > 0) != credit {
				continue
			}
			got := int64(0)
			if i < len(returned) {
				got = returned[i]
			}
			mag := max(l, -l)
			if got < 0 || got > mag {
				return nil, fmt.Errorf("leg %d returned %d of %d", i, got, mag)
			}
			idx, w, r = append(idx, i), append(w, mag), append(r, got)
			W, R = W+mag, R+got // a side's amounts sum to what the transfer moved: no overflow
		}
		if amount > W-R {
			return nil, fmt.Errorf("%d left of %d; a refund of %d", W-R, W, amount)
		}
		s := shares(w, R+amount)
		d := make([]int64, len(w))
		var D int64
		for k := range w {
			d[k] = max(0, s[k]-r[k])
			D += d[k] // each at most w[k]-r[k]: no overflow
		}
		if D != amount {
			d = shares(d, amount)
		}
		for k, i := range idx {
			take[i] = d[k]
		}
	}
	return take, nil
}
