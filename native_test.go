package twopc_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/twopc/twopc/internal/native"
)

// TestNativeTransactions runs the simulation's kind of transfers (several
// workers, hot accounts, a random value, one call in ten cut off by its
// context mid-transaction, as a process dying would) with MongoDB's own
// multi-document transactions instead of the library, and then the same
// checker as every run of the library: RELIABILITY.md's row for native
// transactions. On a server without them (a standalone mongod, the dev
// server) every transfer must fail with native.ErrNoTransactions and move
// nothing: the path a user of such a server takes.
func TestNativeTransactions(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	opening := map[string]int64{}
	ids := make([]string, 12)
	setup := rand.New(rand.NewPCG(1, 0))
	for i := range ids {
		ids[i] = fmt.Sprintf("acct-%03d", i)
		opening[ids[i]] = setup.Int64N(1000)
	}
	b.open(opening)
	nb, err := native.New(ctx, b.db)
	require.NoError(t, err)
	t.Logf("server has multi-document transactions: %v", nb.Supported())

	const workers, each = 8, 40
	var committed, refused, cut, unsupported atomic.Int64
	var mu sync.Mutex
	var others []error
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(1, uint64(w+1)))
			for n := 0; n < each; n++ {
				src, dst := ids[rng.IntN(3)], ids[rng.IntN(len(ids))]
				for dst == src {
					dst = ids[rng.IntN(len(ids))]
				}
				callCtx, cancel := ctx, context.CancelFunc(func() {})
				if rng.IntN(10) == 0 {
					callCtx, cancel = context.WithTimeout(ctx, time.Duration(rng.IntN(5000))*time.Microsecond)
				}
				_, err := nb.Transfer(callCtx, src, dst, 1+rng.Int64N(200))
				cancel()
				switch {
				case err == nil:
					committed.Add(1)
				case errors.Is(err, native.ErrInsufficientFunds):
					refused.Add(1)
				case errors.Is(err, native.ErrNoTransactions):
					unsupported.Add(1)
				case errors.Is(err, context.DeadlineExceeded):
					cut.Add(1)
				default:
					mu.Lock()
					others = append(others, err)
					mu.Unlock()
				}
			}
		}(w)
	}
	wg.Wait()
	require.Empty(t, others, "errors besides refusals and cut-off calls")
	b.checkSettled(opening)
	for _, id := range ids {
		require.GreaterOrEqualf(t, b.balance(id), int64(0), "balance of %s", id)
	}
	if !nb.Supported() {
		require.Equal(t, int64(workers*each), unsupported.Load(), "every transfer refused for want of transactions")
		require.Empty(t, b.txns(), "nothing written")
		t.Logf("no multi-document transactions on this server: %d transfers refused with ErrNoTransactions, nothing moved", unsupported.Load())
		return
	}
	require.Zero(t, unsupported.Load())
	require.Positive(t, committed.Load())
	t.Logf("%d transfers: %d committed, %d refused (insufficient funds), %d cut off mid-transaction; checker passed",
		workers*each, committed.Load(), refused.Load(), cut.Load())
}
