package twopc_test

// The reads under history moving, with no hooks: page readers and
// BalanceAt readers beside two Recoverers archiving (or removing) the
// transfers they read.

import (
	"bytes"
	"errors"
	"flag"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/twopc/twopc"
)

var historyStressTransfers = flag.Int("historystress.transfers", 60, "transfers the history stress runs read while they move (make soak: 400)")

// truthEntry is an entry as the transfers made it, before anything moved.
type truthEntry struct {
	txn     bson.ObjectID
	leg     int
	amount  int64
	at      time.Time
	balance int64
}

// stressTruth is, per account, its opening and its entries in statement
// order with their running balances, read from the log before any moved.
type stressTruth map[string]struct {
	opening int64
	entries []truthEntry
}

// through is acct's balance through every entry at or before at.
func (st stressTruth) through(acct string, at time.Time) int64 {
	a := st[acct]
	bal := a.opening
	for _, e := range a.entries {
		if !e.at.After(at) {
			bal = e.balance
		}
	}
	return bal
}

// TestHistoryStressArchiving and TestHistoryStressRemoving: every page run
// lists each entry from its start once, with running balances that agree
// with the truth (and so with BalanceAt); every BalanceAt is the truth, or
// with removal ErrHistoryRemoved; and every checkpoint and opening
// recorded equals the sum it claims.
func TestHistoryStressArchiving(t *testing.T) { historyStress(t, true) }
func TestHistoryStressRemoving(t *testing.T)  { historyStress(t, false) }

func historyStress(t *testing.T, archived bool) {
	ctx := testCtx(t)
	b := newBank(t)
	var archive *mongo.Collection
	if archived {
		archive = b.db.Collection("archive")
	}
	keep := twopc.WithHistory(time.Millisecond, archive)
	accts := []string{"A", "B", "C"}
	_, err := b.db.Collection("accounts").InsertOne(ctx, bson.D{{Key: "_id", Value: "A"}, {Key: "balance", Value: int64(100_000)}, {Key: "pendingTransactions", Value: bson.A{}}})
	require.NoError(t, err)
	w := b.coordinator(keep, twopc.WithSyncSettle())
	require.NoError(t, w.OpenAccount(ctx, "B", 50_000))
	require.NoError(t, w.OpenAccount(ctx, "C", 20_000))
	rng := rand.New(rand.NewPCG(1, 2))
	for range *historyStressTransfers {
		i := rng.IntN(3)
		j := (i + 1 + rng.IntN(2)) % 3
		_, err := w.Transfer(ctx, accts[i], accts[j], int64(1+rng.IntN(50)))
		require.NoError(t, err)
	}

	// The truth, from the log before anything moved.
	truth := stressTruth{"A": {opening: 100_000}, "B": {opening: 50_000}, "C": {opening: 20_000}}
	var txns []struct {
		ID          bson.ObjectID `bson:"_id"`
		Source      string        `bson:"source"`
		Destination string        `bson:"destination"`
		Value       int64         `bson:"value"`
		State       string        `bson:"state"`
		CommittedAt time.Time     `bson:"committedAt"`
		Created     time.Time     `bson:"created"`
	}
	cur, err := b.db.Collection("transactions").Find(ctx, bson.D{})
	require.NoError(t, err)
	require.NoError(t, cur.All(ctx, &txns))
	require.Len(t, txns, *historyStressTransfers)
	for _, x := range txns {
		require.Equal(t, "done", x.State)
		for leg, l := range []struct {
			acct   string
			amount int64
		}{{x.Source, -x.Value}, {x.Destination, x.Value}} {
			a := truth[l.acct]
			a.entries = append(a.entries, truthEntry{txn: x.ID, leg: leg, amount: l.amount, at: x.CommittedAt})
			truth[l.acct] = a
		}
	}
	for id, a := range truth {
		slices.SortFunc(a.entries, func(x, y truthEntry) int {
			if c := x.at.Compare(y.at); c != 0 {
				return c
			}
			if xd, yd := x.amount < 0, y.amount < 0; xd != yd {
				if yd {
					return -1
				}
				return 1
			}
			if c := bytes.Compare(x.txn[:], y.txn[:]); c != 0 {
				return c
			}
			return x.leg - y.leg
		})
		bal := a.opening
		for i := range a.entries {
			bal += a.entries[i].amount
			a.entries[i].balance = bal
		}
		truth[id] = a
	}
	slices.SortFunc(txns, func(x, y struct {
		ID          bson.ObjectID `bson:"_id"`
		Source      string        `bson:"source"`
		Destination string        `bson:"destination"`
		Value       int64         `bson:"value"`
		State       string        `bson:"state"`
		CommittedAt time.Time     `bson:"committedAt"`
		Created     time.Time     `bson:"created"`
	}) int {
		return x.CommittedAt.Compare(y.CommittedAt)
	})

	// Two Recoverers move them, a slice at a time: the next slice is aged
	// once a pass has run since the last.
	var passes atomic.Int64
	passed := make(chan struct{})
	readDone := make(chan struct{}, 1)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 2 {
		r := twopc.NewRecoverer(b.coordinator(twopc.WithApplication("mover"), keep, twopc.WithCheckpoints(1000, 0)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, err := r.RecoverOnce(ctx)
				assert.NoError(t, err, "recoverer %d", i)
				passes.Add(1)
				select {
				case passed <- struct{}{}:
				default: // the pacer is not waiting
				}
				select { // the next pass after a read
				case <-readDone:
				case <-stop:
					return
				}
			}
		}()
	}
	moved := make(chan struct{})
	go func() {
		defer close(moved)
		const slices = 6
		for s := range slices {
			from, to := s*len(txns)/slices, (s+1)*len(txns)/slices
			var ids bson.A
			for _, x := range txns[from:to] {
				ids = append(ids, x.ID)
			}
			_, err := b.db.Collection("transactions").UpdateMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}},
				bson.D{{Key: "$set", Value: bson.D{{Key: "lastModified", Value: time.Now().Add(-2 * time.Hour)}}}})
			assert.NoError(t, err)
			for range 2 { // two passes that began after the slice was aged, at least one whole
				select {
				case <-passed:
				case <-stop:
					return
				}
			}
		}
	}()

	// Readers: pages from a random entry's time, and balances at one, until
	// every transfer moved and each reader read twice more.
	var reads, refused atomic.Int64
	reader := func(seed uint64) {
		defer wg.Done()
		c := b.coordinator(keep, twopc.WithCheckpoints(3, 0))
		rng := rand.New(rand.NewPCG(seed, 7))
		after := 0
		for after < 2 {
			select {
			case <-moved:
				after++
			default:
			}
			acct := accts[rng.IntN(3)]
			es := truth[acct].entries
			if len(es) == 0 {
				continue
			}
			since := es[rng.IntN(len(es))].at
			if rng.IntN(2) == 0 { // the latest third: more of them outlive a removal
				since = es[len(es)-1-rng.IntN(len(es)/3+1)].at
			}
			select {
			case readDone <- struct{}{}:
			default:
			}
			if rng.IntN(2) == 0 {
				at, err := c.BalanceAt(ctx, "", acct, since)
				reads.Add(1)
				if !archived && errors.Is(err, twopc.ErrHistoryRemoved) {
					refused.Add(1)
					continue
				}
				if !assert.NoError(t, err) || !assert.Equal(t, truth.through(acct, since), at, "BalanceAt(%s, %v)", acct, since) {
					return
				}
				continue
			}
			var got []truthEntry
			q := twopc.StatementQuery{Since: since, Limit: 1 + rng.IntN(7)}
			var err error
			for {
				var p twopc.StatementPage
				p, err = c.Statement(ctx, "", acct, q)
				if err != nil {
					break
				}
				for _, e := range p.Entries {
					got = append(got, truthEntry{txn: e.Txn, amount: e.Amount, at: e.At, balance: e.Balance})
				}
				if q.After = p.Next; q.After == "" {
					break
				}
			}
			reads.Add(1)
			if !archived && errors.Is(err, twopc.ErrHistoryRemoved) {
				refused.Add(1)
				continue
			}
			if !assert.NoError(t, err) {
				return
			}
			var want []truthEntry
			for _, e := range es {
				if !e.at.Before(since) {
					want = append(want, truthEntry{txn: e.txn, amount: e.amount, at: e.at, balance: e.balance})
				}
			}
			if !assert.Equal(t, want, got, "pages of %s from %v", acct, since) {
				return
			}
		}
	}
	var readers sync.WaitGroup
	for i := range 3 {
		readers.Add(1)
		wg.Add(1)
		go func() {
			defer readers.Done()
			reader(uint64(i))
		}()
	}
	readers.Wait()
	close(stop)
	wg.Wait()
	left, err := b.db.Collection("transactions").CountDocuments(ctx, bson.D{})
	require.NoError(t, err)
	assert.Zero(t, left, "every transfer moved")
	t.Logf("%d transfers moved by two Recoverers in %d passes; %d reads, %d refused with ErrHistoryRemoved", len(txns), passes.Load(), reads.Load(), refused.Load())

	// Every checkpoint and opening recorded is the truth.
	for _, acct := range accts {
		checkRecordedSums(t, b.db, acct, truth[acct].opening, func(at time.Time) int64 { return truth.through(acct, at) })
	}
}
