package twopc_test

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/internal/schema"
)

// markCoordinator is a coordinator on b's database whose low-water mark
// is read only when the test says (ReadMark), with no margin behind the
// server's clock, so that a test decides when lines move.
func markCoordinator(b *bank, db *mongo.Database, opts ...twopc.Option) *twopc.Coordinator {
	b.t.Helper()
	if db == nil {
		db = b.db
	}
	c, err := twopc.NewCoordinator(db, append([]twopc.Option{twopc.WithFrozenMark(), twopc.WithMarkMargin(0), twopc.WithSyncSettle()}, opts...)...)
	require.NoError(b.t, err)
	b.t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// markPast reads c's mark until it is at or past when (the server's clock
// has millisecond steps), and returns it. Nothing unfinished may be older
// than when.
func markPast(t *testing.T, c *twopc.Coordinator, when time.Time) time.Time {
	t.Helper()
	for i := 0; ; i++ {
		mark, err := twopc.ReadMark(testCtx(t), c)
		require.NoError(t, err)
		if !mark.Before(when) {
			return mark
		}
		require.Less(t, i, 100_000, "the mark stays before %v: %v", when, mark)
		runtime.Gosched()
	}
}

// lineOf is the line a write for a transaction created at created moves
// an account's line up to, given mark: never its own time.
func lineOf(mark, created time.Time) time.Time {
	if own := created.Add(-time.Millisecond); own.Before(mark) {
		return own
	}
	return mark
}

// TestMarkDropsFencesInTheApply: the fences of an account stay until an
// apply there moves its line up to the mark; then they go, every one at
// once, and only the line refuses their legs, keyed or not, delivered
// again however late.
func TestMarkDropsFencesInTheApply(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	b.open(map[string]int64{"hot": 0, "p0": 100, "p1": 100, "p2": 100})
	rec := &writeRecorder{}
	c := markCoordinator(b, rec.database(b))
	var latest time.Time
	for i := 0; i < 9; i++ {
		var opts []twopc.TransferOption
		if i%2 == 0 { // keyed: its id is its key's digest, not a time
			opts = append(opts, twopc.WithKey(fmt.Sprintf("order-%d", i)))
		}
		txn, err := c.Transfer(ctx, []string{"p0", "p1", "p2"}[i%3], "hot", 1, opts...)
		require.NoError(t, err)
		latest = txn.Created
	}
	require.Len(t, b.account("hot").Fenced, 9, "no mark yet: every fence stays")
	earlier := rec.recorded()

	// Past the latest by 2 ms: the next transfer's time is later than the
	// latest's, so a line short of its own time still passes them all.
	mark := markPast(t, c, latest.Add(2*time.Millisecond))
	last, err := c.Transfer(ctx, "p0", "hot", 1)
	require.NoError(t, err)
	hot := b.account("hot")
	assert.Equal(t, []bson.ObjectID{twopc.LegFence(last, 1)}, hot.Fenced, "the apply dropped the fences below the mark")
	assert.Equal(t, lineOf(mark, last.Created), hot.FencedBefore, "and moved the line up to it")
	assert.Len(t, b.account("p1").Fenced, 3, "an account no write touched since keeps its fences")

	resendAll(t, b.db, earlier)
	b.checkSettled(map[string]int64{"hot": 0, "p0": 100, "p1": 100, "p2": 100})
	assert.Equal(t, int64(10), b.balance("hot"), "no leg applied twice")
}

// TestMarkBoundsAnAccountThatOnlySeesRollbacks: a payer refused for want
// of funds gets a fence from every rollback and never an apply; the
// rollback's own line write keeps it bounded. An account deleted after the
// coordinator saw it gets one tombstone fence, from the one transfer that
// found it gone; the transfers after it are refused before their insert
// and add nothing. The audit does not count the tombstone as an account.
func TestMarkBoundsAnAccountThatOnlySeesRollbacks(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	b.open(map[string]int64{"poor": 0, "A": 100, "B": 0})
	rec := &writeRecorder{}
	c := markCoordinator(b, rec.database(b))
	b.seenThenDeleted(c, "ghost")
	opened := len(rec.recorded()) // its opening is not a write to deliver again
	var latest time.Time
	var first *twopc.Txn
	for i := 0; i < 5; i++ {
		txn, err := c.Transfer(ctx, "poor", "B", 1)
		require.ErrorIs(t, err, twopc.ErrInsufficientFunds)
		txn2, err := c.Transfer(ctx, "A", "ghost", 1)
		require.ErrorIs(t, err, twopc.ErrAccountNotFound)
		if i == 0 {
			require.NotNil(t, txn2, "rolled back: c took ghost to exist")
			first = txn2
		} else {
			assert.Nil(t, txn2, "refused before its insert: c read ghost gone")
		}
		latest = txn.Created
	}
	require.Len(t, b.account("poor").Fenced, 5)
	assert.Equal(t, []bson.ObjectID{twopc.LegFence(first, 1)}, b.account("ghost").Fenced, "one tombstone fence")
	earlier := rec.recorded()[opened:]

	mark := markPast(t, c, latest.Add(2*time.Millisecond))
	refused, err := c.Transfer(ctx, "poor", "B", 1)
	require.ErrorIs(t, err, twopc.ErrInsufficientFunds)
	poor := b.account("poor")
	assert.Equal(t, []bson.ObjectID{twopc.LegFence(refused, 0)}, poor.Fenced)
	assert.Equal(t, lineOf(mark, refused.Created), poor.FencedBefore)

	resendAll(t, b.db, earlier)
	b.checkSettled(map[string]int64{"poor": 0, "A": 100, "B": 0})
	_, err = c.Balance(ctx, "ghost")
	require.ErrorIs(t, err, twopc.ErrAccountNotFound, "still a tombstone")
	assert.Len(t, b.account("ghost").Fenced, 1, "the late writes added nothing")
	rep, err := c.Audit(ctx)
	require.NoError(t, err)
	assert.Equal(t, 3, rep.Accounts[""], "the tombstone is not an account")
	assert.Equal(t, 1, rep.Tombstones[""])
}

// TestMarkHeldBackByAStalledTransfer: a transfer stalled before its legs
// apply holds the mark back, so the lines other transfers move on its
// accounts stay below its time, and it completes (or, canceled meanwhile,
// rolls back) as it would have; once it is final the mark passes it and
// the next apply drops its fences.
func TestMarkHeldBackByAStalledTransfer(t *testing.T) {
	for _, cancel := range []bool{false, true} {
		name := map[bool]string{false: "finishes", true: "canceled"}[cancel]
		t.Run(name, func(t *testing.T) {
			ctx := testCtx(t)
			s := newStall(twopc.StepApply)
			b := newBank(t, twopc.WithStepHook(s.hook), twopc.WithSyncSettle(), twopc.WithApplication("app"))
			b.open(map[string]int64{"A": 100, "B": 100, "hot": 0})
			res := stalledTransfer(t, b, s, "A", "hot", 10)
			stalled := b.txns()[0]
			c := markCoordinator(b, nil)
			for i := 0; i < 3; i++ {
				_, err := c.Transfer(ctx, "B", "hot", 1)
				require.NoError(t, err)
			}
			mark, err := twopc.ReadMark(ctx, c)
			require.NoError(t, err)
			require.True(t, mark.Before(stalled.Created), "the mark %v stays before the stalled transfer's time %v", mark, stalled.Created)
			_, err = c.Transfer(ctx, "B", "hot", 1)
			require.NoError(t, err)
			require.True(t, b.account("hot").FencedBefore.Before(stalled.Created), "the line stays before it")

			want := map[string]int64{"A": 90, "B": 96, "hot": 14}
			if cancel {
				b.backdate(stalled.ID, time.Hour) // another Coordinator's canceler takes over only a stale transaction
				_, err := twopc.NewCanceler(b.coordinator(twopc.WithApplication("app"))).Cancel(ctx, stalled.ID)
				require.NoError(t, err)
				want = map[string]int64{"A": 100, "B": 96, "hot": 4}
			}
			close(s.release)
			got := <-res
			if cancel {
				require.ErrorIs(t, got.err, twopc.ErrCanceled)
			} else {
				require.NoError(t, got.err, "not refused by a line")
				require.Equal(t, twopc.StateDone, b.txn(stalled.ID).State)
			}
			b.checkSettled(map[string]int64{"A": 100, "B": 100, "hot": 0})
			for id, bal := range want {
				assert.Equalf(t, bal, b.balance(id), "balance of %s", id)
			}

			var latest time.Time
			for _, d := range b.txns() {
				if d.Created.After(latest) {
					latest = d.Created
				}
			}
			markPast(t, c, latest.Add(2*time.Millisecond))
			last, err := c.Transfer(ctx, "B", "hot", 1)
			require.NoError(t, err)
			assert.Equal(t, []bson.ObjectID{twopc.LegFence(last, 1)}, b.account("hot").Fenced)
		})
	}
}

// TestMarkLegAppliedOnOneAccountOnly: a transfer whose owner died with its
// credit applied and its debit not holds the mark back; lines moved on
// the debit's account meanwhile stay below its time, and recovery, once
// it is stale, rolls it forward: not refused, not rolled back.
func TestMarkLegAppliedOnOneAccountOnly(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithStepHook(crashAt(twopc.StepApply)))
	b.open(map[string]int64{"A": 100, "B": 0, "C": 100})
	txn := b.diedAfterCredit("A", "B", 60)
	c := markCoordinator(b, nil)
	_, err := c.Transfer(ctx, "C", "A", 1)
	require.NoError(t, err)
	mark, err := twopc.ReadMark(ctx, c)
	require.NoError(t, err)
	require.True(t, mark.Before(txn.Created))
	_, err = c.Transfer(ctx, "C", "A", 1) // moves A's line up to the mark
	require.NoError(t, err)
	require.False(t, b.account("A").FencedBefore.IsZero())
	require.True(t, b.account("A").FencedBefore.Before(txn.Created))

	b.backdate(txn.ID, time.Hour)
	rep := b.recoverAll()
	assert.Equal(t, 1, rep.RolledForward)
	assert.Zero(t, rep.RolledBack)
	assert.Equal(t, twopc.StateDone, b.txn(txn.ID).State)
	b.checkSettled(map[string]int64{"A": 100, "B": 0, "C": 100})
	assert.Equal(t, int64(42), b.balance("A"))
}

// TestMarkHostClockAheadOrBehind: a coordinator stamps transaction times
// by its host's clock corrected to the server's, so a host whose clock is
// two hours ahead does not carry its transactions into the future, and
// one two hours behind does not create them behind lines that other
// transfers moved.
func TestMarkHostClockAheadOrBehind(t *testing.T) {
	for _, skew := range []time.Duration{2 * time.Hour, -2 * time.Hour} {
		t.Run(skew.String(), func(t *testing.T) {
			ctx := testCtx(t)
			b := newBank(t, twopc.WithSyncSettle())
			b.open(map[string]int64{"A": 100, "B": 0})
			first, err := b.c.Transfer(ctx, "A", "B", 1)
			require.NoError(t, err)
			b.moveLine(first.Created, "A", "B") // the accounts are busy: lines close behind
			skewed := b.coordinator(twopc.WithHostClock(func() time.Time { return time.Now().Add(skew) }), twopc.WithSyncSettle())
			txn, err := skewed.Transfer(ctx, "A", "B", 10)
			require.NoError(t, err, "not refused by the lines")
			written := b.txn(txn.ID).LastModified
			assert.WithinDuration(t, written, txn.Created, time.Second, "stamped by the server's clock, not the host's")
			b.checkSettled(map[string]int64{"A": 100, "B": 0})
			assert.Equal(t, int64(89), b.balance("A"))
		})
	}
}

// TestMarkHoldsHeldLong: holds held while lines pass their time (their
// legs are applied, their markers pending, and capture and void are
// guarded by those markers, not by lines): one is captured in part, the
// other voided, as if no line had moved.
func TestMarkHoldsHeldLong(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	b.open(map[string]int64{"A": 1000, "B": 0, "C": 100})
	h1, err := b.c.Hold(ctx, "A", "B", 300)
	require.NoError(t, err)
	h2, err := b.c.Hold(ctx, "A", "B", 200)
	require.NoError(t, err)
	c := markCoordinator(b, nil)
	markPast(t, c, h2.Created)
	for _, dst := range []string{"A", "B"} {
		_, err := c.Transfer(ctx, "C", dst, 1)
		require.NoError(t, err)
		assert.False(t, b.account(dst).FencedBefore.Before(h2.Created), "the line of %s passed the holds", dst)
	}
	_, err = b.c.Capture(ctx, h1.ID, 100)
	require.NoError(t, err)
	_, err = b.c.Void(ctx, h2.ID)
	require.NoError(t, err)
	require.NoError(t, b.c.Settle(ctx))
	assert.Equal(t, twopc.StateDone, b.txn(h1.ID).State)
	assert.Equal(t, twopc.StateCanceled, b.txn(h2.ID).State)
	b.checkSettled(map[string]int64{"A": 1000, "B": 0, "C": 100})
	assert.Equal(t, int64(901), b.balance("A"))
	assert.Equal(t, int64(101), b.balance("B"))
}

// TestMarkMissingAccountThenCreated: a transfer to an account deleted
// after the coordinator saw it rolls back and leaves a tombstone. An account inserted there by hand is
// refused (the tombstone holds the id: duplicate key); one opened with
// OpenAccount adopts the tombstone's fence and line. The transfer's
// writes, delivered again before and after the line passes it, move
// nothing.
func TestMarkMissingAccountThenCreated(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	b.open(map[string]int64{"A": 100, "C": 100})
	rec := &writeRecorder{}
	c := markCoordinator(b, rec.database(b))
	b.seenThenDeleted(c, "ghost")
	opened := len(rec.recorded()) // its opening is not a write to deliver again
	txn, err := c.Transfer(ctx, "A", "ghost", 10)
	require.ErrorIs(t, err, twopc.ErrAccountNotFound)
	writes := rec.recorded()[opened:]

	_, err = b.db.Collection("accounts").InsertOne(ctx, bson.D{{Key: "_id", Value: "ghost"}, {Key: "balance", Value: int64(0)}, {Key: "pendingTransactions", Value: bson.A{}}})
	require.True(t, mongo.IsDuplicateKeyError(err), "inserted by hand over the tombstone: %v", err)
	resendAll(t, b.db, writes)
	_, err = c.Balance(ctx, "ghost")
	require.ErrorIs(t, err, twopc.ErrAccountNotFound)

	require.NoError(t, c.OpenAccount(ctx, "ghost", 0))
	assert.Equal(t, []bson.ObjectID{twopc.LegFence(txn, 1)}, b.account("ghost").Fenced, "adopted")
	resendAll(t, b.db, writes)
	b.checkSettled(map[string]int64{"A": 100, "C": 100, "ghost": 0})
	assert.Equal(t, int64(100), b.balance("A"))

	markPast(t, c, txn.Created)
	_, err = c.Transfer(ctx, "C", "ghost", 5)
	require.NoError(t, err)
	assert.False(t, b.account("ghost").FencedBefore.Before(txn.Created), "the line passed it")
	resendAll(t, b.db, writes)
	b.checkSettled(map[string]int64{"A": 100, "C": 100, "ghost": 0})
	assert.Equal(t, int64(5), b.balance("ghost"))
}

// TestMarkHandInsertedAccounts: accounts inserted by hand as the tutorial
// does ({_id, balance, pendingTransactions: []}) work with no migration:
// their first apply gives them a line, a transfer's writes delivered
// again after it settled apply nothing, and the line passes it.
func TestMarkHandInsertedAccounts(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	rec := &writeRecorder{}
	c := markCoordinator(b, rec.database(b))
	for id, bal := range map[string]int64{"h1": 100, "h2": 0} {
		_, err := b.db.Collection("accounts").InsertOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: "balance", Value: bal}, {Key: "pendingTransactions", Value: bson.A{}}})
		require.NoError(t, err)
	}
	old, err := c.Transfer(ctx, "h1", "h2", 10)
	require.NoError(t, err)
	writes := rec.recorded()
	require.NoError(t, c.Settle(ctx))
	resendAll(t, b.db, writes)
	b.checkSettled(map[string]int64{"h1": 100, "h2": 0})
	assert.Equal(t, int64(10), b.balance("h2"))

	markPast(t, c, old.Created)
	_, err = c.Transfer(ctx, "h1", "h2", 5)
	require.NoError(t, err)
	h2 := b.account("h2")
	assert.False(t, h2.FencedBefore.Before(old.Created))
	assert.Len(t, h2.Fenced, 1)
	b.checkSettled(map[string]int64{"h1": 100, "h2": 0})
	assert.Equal(t, int64(15), b.balance("h2"))
}

// TestAccountStaysBoundedWithoutARecoverer runs transfers into and out of
// one hot account from several workers, with no Recoverer: the hot
// account's fences are always newer than its line, its line stays within
// seconds of the server's clock, and its document stays far under the
// bound doc.go states (16 KB at this rate).
func TestAccountStaysBoundedWithoutARecoverer(t *testing.T) {
	n := *historyTransfers
	if testing.Short() {
		n = min(n, 400)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute+time.Duration(n)*60*time.Millisecond)
	defer cancel()
	b := newBank(t)
	others := []string{"a", "b", "c", "d", "e", "f", "g"}
	opening := map[string]int64{"hot": int64(n) * 10}
	for _, id := range others {
		opening[id] = int64(n)
	}
	b.open(opening)
	const workers, batch = 4, 100
	largest, fences := 0, 0
	var lag time.Duration
	for done := 0; done < n; done += batch {
		var wg sync.WaitGroup
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				for i := done + w; i < min(done+batch, n); i += workers {
					other := others[i%len(others)]
					src, dst := "hot", other
					if i%3 == 0 {
						src, dst = other, "hot"
					}
					_, err := b.c.Transfer(ctx, src, dst, 1)
					assert.NoError(t, err)
				}
			}(w)
		}
		wg.Wait()
		raw, err := b.db.Collection("accounts").FindOne(ctx, bson.D{{Key: "_id", Value: "hot"}}).Raw()
		require.NoError(t, err)
		now, err := schema.ServerNow(ctx, b.db)
		require.NoError(t, err)
		hot := b.account("hot")
		for _, f := range hot.Fenced {
			require.Truef(t, schema.FenceTime(f).After(hot.FencedBefore), "a fence at %v, the line at %v", schema.FenceTime(f), hot.FencedBefore)
		}
		if done > 0 {
			lag = max(lag, now.Sub(hot.FencedBefore))
		}
		largest = max(largest, len(raw))
		fences = max(fences, len(hot.Fenced))
	}
	require.NoError(t, b.c.Settle(ctx))
	t.Logf("%d transfers, no Recoverer: the hot account at most %d bytes, %d fences; its line at most %v behind the server's clock", n, largest, fences, lag)
	assert.Less(t, lag, 10*time.Second, "the line keeps up")
	assert.LessOrEqual(t, largest, 16<<10)
	b.checkSettled(opening)
}

// A document in the log that no recovery would ever finish (an _id that is
// not an ObjectID: another program's) holds the mark back for nothing, so
// the mark ignores it; one of this library's that has been unfinished for
// longer than twice StaleAfter holds the mark back, and is logged with its
// id, since until it is finished every account keeps its fences.
func TestMarkIgnoresForeignTransactionsAndWarnsOfAStuckOne(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	b.open(map[string]int64{"A": 100})
	now, err := schema.ServerNow(ctx, b.db)
	require.NoError(t, err)
	old := now.Add(-time.Hour).Truncate(time.Millisecond)
	_, err = b.db.Collection("transactions").InsertOne(ctx, bson.D{
		{Key: "_id", Value: "another program's"}, {Key: "state", Value: "pending"}, {Key: "created", Value: old}, {Key: "lastModified", Value: old},
	})
	require.NoError(t, err)
	records := make(chan slog.Record, 16)
	c := markCoordinator(b, nil, twopc.WithStaleAfter(time.Minute), twopc.WithLogger(slog.New(recordHandler(records))))
	mark, err := twopc.ReadMark(ctx, c)
	require.NoError(t, err)
	require.False(t, mark.Before(now), "the mark %v is held back by a document no recovery finishes (server at %v)", mark, now)

	stuck := bson.NewObjectID()
	_, err = b.db.Collection("transactions").InsertOne(ctx, bson.D{
		{Key: "_id", Value: stuck}, {Key: "state", Value: "pending"}, {Key: "created", Value: old}, {Key: "lastModified", Value: old},
	})
	require.NoError(t, err)
	mark, err = twopc.ReadMark(ctx, c)
	require.NoError(t, err)
	require.Equal(t, old.Add(-time.Millisecond), mark, "held back by this library's unfinished transaction")
	var warned []slog.Record
	for len(records) > 0 {
		if r := <-records; r.Level == slog.LevelWarn {
			warned = append(warned, r)
		}
	}
	require.Len(t, warned, 1, "one warning")
	var id any
	warned[0].Attrs(func(a slog.Attr) bool {
		if a.Key == "txn" {
			id = a.Value.Any()
		}
		return true
	})
	assert.Equal(t, stuck, id, "it names the transaction")
	_, err = twopc.ReadMark(ctx, c)
	require.NoError(t, err)
	for len(records) > 0 {
		assert.NotEqual(t, slog.LevelWarn, (<-records).Level, "not again until StaleAfter×2 has passed")
	}
}
