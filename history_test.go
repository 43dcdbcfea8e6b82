package twopc_test

import (
	"context"
	"flag"
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

// historyTransfers is TestHistoryStaysBounded's size: 600 in make test
// (three batches of 200, the bound reached after each and held across the
// passes), 20,000 in make soak.
var historyTransfers = flag.Int("history.transfers", 600, "transfers TestHistoryStaysBounded pushes through (-short: 400; make soak: 20,000)")

// countIn counts the documents of coll matching filter.
func countIn(t *testing.T, coll *mongo.Collection, filter bson.D) int {
	t.Helper()
	n, err := coll.CountDocuments(testCtx(t), filter)
	require.NoError(t, err)
	return int(n)
}

// WithHistory keeps the transactions collection bounded: -history.transfers
// transfers (600 by default, 20,000 in make soak; four workers, every one through one hot account) with a recovery pass
// after every batch of 200, and the collection never holds more than the
// batch since the last pass; every account document stays small; the
// archive holds every
// transaction, so the checker still finds every balance right, and the
// audit passes with the total stated.
func TestHistoryStaysBounded(t *testing.T) {
	n := *historyTransfers
	if testing.Short() {
		n = min(n, 400)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute+time.Duration(n)*60*time.Millisecond)
	defer cancel()
	b := newBank(t)
	archive := b.db.Collection("archive")
	c := b.coordinator(twopc.WithHistory(time.Millisecond, archive))
	others := []string{"a", "b", "c", "d", "e", "f", "g"}
	opening := map[string]int64{"hot": int64(n) * 10}
	for _, id := range others {
		opening[id] = int64(n)
	}
	b.open(opening)
	const workers, batch = 4, 200
	r := twopc.NewRecoverer(b.coordinator(twopc.WithApplication("recoverer"), twopc.WithHistory(time.Millisecond, archive)))
	pass := func() twopc.RecoveryReport {
		ageFinalIn(t, b.db)
		rep, err := r.RecoverOnce(ctx)
		require.NoError(t, err)
		return rep
	}
	most, after, largest, removed := 0, 0, 0, 0
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
					_, err := c.Transfer(ctx, src, dst, 1)
					assert.NoError(t, err)
				}
			}(w)
		}
		wg.Wait()
		require.NoError(t, c.Settle(ctx))
		most = max(most, countIn(t, b.db.Collection("transactions"), bson.D{}))
		removed += pass().Removed // unfences this batch and removes it
		after = max(after, countIn(t, b.db.Collection("transactions"), bson.D{}))
		for _, id := range append([]string{"hot"}, others...) {
			raw, err := b.db.Collection("accounts").FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Raw()
			require.NoError(t, err)
			largest = max(largest, len(raw))
		}
	}
	removed += pass().Removed
	removed += pass().Removed
	t.Logf("%d transfers: at most %d transactions in the collection before a pass and %d after, account documents at most %d bytes; %d moved to the archive",
		n, most, after, largest, removed)
	assert.LessOrEqual(t, most, batch, "the collection holds at most the batch since the last pass")
	assert.Zero(t, after, "a pass moves every finished transaction out")
	assert.LessOrEqual(t, largest, 200+batch*20, "an account holds at most one batch of fences")
	assert.Zero(t, countIn(t, b.db.Collection("transactions"), bson.D{}), "everything archived at the end")
	assert.Equal(t, n, removed)
	assert.Equal(t, n, countIn(t, archive, bson.D{{Key: "state", Value: "done"}}))

	// The checker, over the archive: every balance its opening balance
	// plus the net of its done transfers.
	want := map[string]int64{}
	for id, bal := range opening {
		want[id] = bal
	}
	cur, err := archive.Find(ctx, bson.D{})
	require.NoError(t, err)
	for cur.Next(ctx) {
		var d twopc.Txn
		require.NoError(t, cur.Decode(&d))
		require.Equal(t, twopc.StateDone, d.State)
		for _, l := range d.AllLegs() {
			want[l.Account.(string)] += l.Amount
		}
	}
	require.NoError(t, cur.Err())
	var total int64
	for id, bal := range want {
		a := b.account(id)
		assert.Equalf(t, bal, a.Balance, "balance of %s", id)
		assert.Empty(t, a.Pending)
		for _, f := range a.Fenced {
			assert.Truef(t, schema.FenceTime(f).After(a.FencedBefore), "a fence of %v at or before its line %v", schema.FenceTime(f), a.FencedBefore)
		}
		total += bal
	}
	rep, err := c.Audit(ctx, twopc.WithExpectedTotal("", total))
	require.NoError(t, err)
	require.True(t, rep.OK(), "%v", rep.Violations)
}

// A transaction removed by WithHistory cannot come back to move money:
// every write command of its transfer, delivered again after the removal
// (its insert among them), is refused by the fence lines or acts on a copy
// with no leg applied. Placeholders (Cancel of an unknown id) and keyed
// transactions, with the reversals Reverse keys, are never removed: a key
// is honoured for good, and Reverse never reverses twice.
func TestHistoryRemovedTransactionCannotReturn(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	rec := &writeRecorder{}
	c, err := twopc.NewCoordinator(rec.database(b), twopc.WithHistory(time.Millisecond, nil), twopc.WithSyncSettle())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	b.open(map[string]int64{"A": 100, "B": 0})
	_, err = c.Transfer(ctx, "A", "B", 30)
	require.NoError(t, err)
	_, err = c.Transfer(ctx, "A", "B", 500) // refused: canceled, fenced
	require.ErrorIs(t, err, twopc.ErrInsufficientFunds)
	keyed, err := c.Transfer(ctx, "A", "B", 5, twopc.WithKey("order-1"))
	require.NoError(t, err)
	reversal, err := c.Reverse(ctx, keyed.ID)
	require.NoError(t, err)
	placeholder := bson.NewObjectID()
	_, err = twopc.NewCanceler(c).Cancel(ctx, placeholder)
	require.NoError(t, err)

	r := twopc.NewRecoverer(b.coordinator(twopc.WithApplication("recoverer"), twopc.WithCheckpoints(1000, 0)))
	removed := 0
	for i := 0; i < 3; i++ {
		b.ageFinal()
		rep, err := r.RecoverOnce(ctx)
		require.NoError(t, err)
		removed += rep.Removed
	}
	require.Equal(t, 2, removed, "the keyless done and canceled transfers")
	kept := map[bson.ObjectID]bool{}
	for _, d := range b.txns() {
		kept[d.ID] = true
	}
	assert.Equal(t, map[bson.ObjectID]bool{placeholder: true, keyed.ID: true, reversal.ID: true}, kept,
		"the placeholder, the keyed transfer and its reversal are kept")

	before := b.accountStates()
	resendAll(t, b.db, rec.recorded())
	b.recoverAll()
	assert.Equal(t, before, b.accountStates(), "a write of a removed transaction moved money")
	// The replayed inserts brought the removed documents back, and the
	// replayed commit and done moved the done one's copy along (WithHistory
	// says so): final, none of their legs applied, and removed again.
	for _, d := range b.txns() {
		assert.Truef(t, d.State.Final(), "%s is %s", d.ID.Hex(), d.State)
	}
	assert.Equal(t, int64(70), b.balance("A"))
	assert.Equal(t, int64(30), b.balance("B"))
	for i := 0; i < 2; i++ {
		b.ageFinal()
		b.recoverAll()
	}
	require.Len(t, b.txns(), 3, "the copies removed again")

	// The key and the reversal hold for good.
	again, err := c.Transfer(ctx, "A", "B", 5, twopc.WithKey("order-1"))
	require.NoError(t, err)
	assert.Equal(t, keyed.ID, again.ID)
	twice, err := c.Reverse(ctx, keyed.ID)
	require.NoError(t, err)
	assert.Equal(t, reversal.ID, twice.ID)
	assert.Equal(t, int64(70), b.balance("A"), "nothing moved twice")
}

// With an archive, the archive keeps a transaction's first record: a copy
// that its own replayed writes brought back after it was archived is
// removed without replacing it.
func TestHistoryArchiveKeepsTheFirstRecord(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	archive := b.db.Collection("archive")
	rec := &writeRecorder{}
	c, err := twopc.NewCoordinator(rec.database(b), twopc.WithHistory(time.Millisecond, archive), twopc.WithSyncSettle())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	b.open(map[string]int64{"A": 100, "B": 0})
	txn, err := c.Transfer(ctx, "A", "B", 30)
	require.NoError(t, err)
	var mu sync.Mutex
	removes := map[twopc.Outcome]int{}
	observer := twopc.Observer{Recovery: func(_ context.Context, e twopc.RecoveryEvent) {
		if e.Action == twopc.RecoveryRemove {
			mu.Lock()
			removes[e.Outcome]++
			mu.Unlock()
		}
	}}
	r := twopc.NewRecoverer(b.coordinator(twopc.WithApplication("recoverer"), twopc.WithHistory(time.Millisecond, archive), twopc.WithObserver(observer)))
	prune := func() int {
		removed := 0
		for i := 0; i < 3; i++ {
			b.backdateAll(time.Hour)
			b.ageFinal()
			rep, err := r.RecoverOnce(ctx)
			require.NoError(t, err)
			removed += rep.Removed
		}
		return removed
	}
	// A recoverer without the archive leaves the transaction: it is
	// recorded for that archive.
	for i := 0; i < 2; i++ {
		b.ageFinal()
		rep, err := twopc.NewRecoverer(b.coordinator(twopc.WithApplication("no-archive"))).RecoverOnce(ctx)
		require.NoError(t, err)
		require.Zero(t, rep.Removed)
	}
	require.Len(t, b.txns(), 1)
	require.Equal(t, 1, prune())
	mu.Lock()
	assert.Equal(t, map[twopc.Outcome]int{twopc.OutcomeMoved: 1}, removes, "the observer is told")
	mu.Unlock()
	var first bson.Raw
	require.NoError(t, archive.FindOne(ctx, bson.D{{Key: "_id", Value: txn.ID}}).Decode(&first))

	resendAll(t, b.db, rec.recorded()) // the insert brings a copy back
	require.Len(t, b.txns(), 1, "a copy came back")
	require.Equal(t, 1, prune(), "the copy is removed")
	assert.Empty(t, b.txns())
	var kept bson.Raw
	require.NoError(t, archive.FindOne(ctx, bson.D{{Key: "_id", Value: txn.ID}}).Decode(&kept))
	assert.Equal(t, first, kept, "the archive kept the first record")
	assert.Equal(t, 1, countIn(t, archive, bson.D{}))
	assert.Equal(t, int64(70), b.balance("A"))
	assert.Equal(t, int64(30), b.balance("B"))
}

// A keyed Transfer whose insert finds the key's _id taken, and whose read
// then finds nothing (the document deleted meanwhile, here by hand once its
// fences were removed), does not say the transaction does not exist: its
// outcome is unknown.
func TestHistoryKeyRemovedMidTransfer(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	b.open(map[string]int64{"A": 100, "B": 0})
	first, err := b.c.Transfer(ctx, "A", "B", 10, twopc.WithKey("k"))
	require.NoError(t, err)
	b.ageFinal()
	b.recoverAll()
	var once sync.Once
	c := b.coordinator(twopc.WithSyncSettle(), twopc.WithStepHook(func(ctx context.Context, s twopc.Step, _ *twopc.Txn) error {
		if s == twopc.StepRead {
			once.Do(func() { // as a Recoverer with WithHistory would
				_, err := b.db.Collection("transactions").DeleteOne(ctx, bson.D{{Key: "_id", Value: first.ID}})
				require.NoError(t, err)
			})
		}
		return nil
	}))
	_, err = c.Transfer(ctx, "A", "B", 10, twopc.WithKey("k"))
	require.Error(t, err)
	assert.NotErrorIs(t, err, twopc.ErrTxnNotFound, "the outcome is unknown, not known to be nothing")
	again, err := c.Transfer(ctx, "A", "B", 10, twopc.WithKey("k"))
	require.NoError(t, err)
	assert.Equal(t, twopc.StateDone, again.State)
	assert.Equal(t, int64(80), b.balance("A"))
}

// With an archive, Get, Cancel and Reverse of a transaction moved out of
// the log answer from the archive: a done transfer is done (Cancel says
// ErrNotCancelable and writes no placeholder; Reverse moves the money
// back once), a canceled one canceled.
func TestHistoryArchiveAnswersGetCancelReverse(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	archive := b.db.Collection("archive")
	c := b.coordinator(twopc.WithHistory(time.Millisecond, archive), twopc.WithSyncSettle())
	b.open(map[string]int64{"A": 100, "B": 0})
	done, err := c.Transfer(ctx, "A", "B", 30)
	require.NoError(t, err)
	canceled, err := c.Transfer(ctx, "A", "B", 500)
	require.ErrorIs(t, err, twopc.ErrInsufficientFunds)
	r := twopc.NewRecoverer(b.coordinator(twopc.WithApplication("recoverer"), twopc.WithHistory(time.Millisecond, archive)))
	removed := 0
	for i := 0; i < 3; i++ {
		b.ageFinal()
		rep, err := r.RecoverOnce(ctx)
		require.NoError(t, err)
		removed += rep.Removed
	}
	require.Equal(t, 2, removed)
	require.Empty(t, b.txns())

	got, err := c.Get(ctx, done.ID)
	require.NoError(t, err)
	assert.Equal(t, twopc.StateDone, got.State)
	k := twopc.NewCanceler(c)
	_, err = k.Cancel(ctx, done.ID)
	require.ErrorIs(t, err, twopc.ErrNotCancelable)
	got, err = k.Cancel(ctx, canceled.ID)
	require.NoError(t, err)
	assert.Equal(t, twopc.StateCanceled, got.State)
	require.Empty(t, b.txns(), "no placeholder written for an archived id")

	rev, err := c.Reverse(ctx, done.ID)
	require.NoError(t, err)
	again, err := c.Reverse(ctx, done.ID)
	require.NoError(t, err)
	assert.Equal(t, rev.ID, again.ID)
	assert.Equal(t, int64(100), b.balance("A"), "reversed once")
	assert.Equal(t, int64(0), b.balance("B"))
}

// Every lookup of a transaction (Get, Cancel, Reverse, Capture, Void)
// finds one that a recovery pass moves from the log to the archive between
// its read of the archive and its read of the log: the pass runs there, in
// the step hook of the lookup's read of the log. Before the fix, Get said
// ErrTxnNotFound and Cancel wrote a placeholder and answered canceled for
// a done transfer, whose money had moved.
func TestHistoryLookupFollowsAMoveToTheArchive(t *testing.T) {
	for _, op := range []string{"get", "cancel", "reverse", "capture", "void"} {
		t.Run(op, func(t *testing.T) {
			ctx := testCtx(t)
			b := newBank(t)
			archive := b.db.Collection("archive")
			b.open(map[string]int64{"A": 100, "B": 0})
			maker := b.coordinator(twopc.WithHistory(time.Millisecond, archive), twopc.WithSyncSettle())
			var txn *twopc.Txn
			var err error
			kept := 0
			if op == "capture" || op == "void" {
				txn, err = maker.Hold(ctx, "A", "B", 30)
				require.NoError(t, err)
				_, err = maker.Capture(ctx, txn.ID, 30, twopc.WithKey("captured"))
				require.NoError(t, err)
				txn, err = maker.Get(ctx, txn.ID) // the hold, ended by its capture
				kept = 1                          // the capture: keyed, kept for good
			} else {
				txn, err = maker.Transfer(ctx, "A", "B", 30)
			}
			require.NoError(t, err)
			require.Equal(t, twopc.StateDone, txn.State)
			b.unfenceAll() // a recoverer with no archive: unfenced, still in the log
			require.Len(t, b.txns(), 1+kept)

			archiver := twopc.NewRecoverer(b.coordinator(twopc.WithApplication("archiver"), twopc.WithHistory(time.Millisecond, archive)))
			reads := 0
			c := b.coordinator(twopc.WithHistory(time.Millisecond, archive), twopc.WithSyncSettle(),
				twopc.WithStepHook(func(_ context.Context, s twopc.Step, tx *twopc.Txn) error {
					if s != twopc.StepRead || tx == nil || tx.ID != txn.ID {
						return nil
					}
					if reads++; reads == 2 { // the read of the log, after the archive's
						b.ageFinal()
						rep, err := archiver.RecoverOnce(context.Background())
						require.NoError(t, err)
						require.Equal(t, 1, rep.Removed, "moved to the archive between the two reads")
					}
					return nil
				}))
			switch op {
			case "get":
				got, err := c.Get(ctx, txn.ID)
				require.NoError(t, err)
				assert.Equal(t, twopc.StateDone, got.State)
			case "cancel":
				got, err := twopc.NewCanceler(c).Cancel(ctx, txn.ID)
				require.ErrorIs(t, err, twopc.ErrNotCancelable, "a done transfer is not canceled")
				assert.Equal(t, twopc.StateDone, got.State)
				assert.Empty(t, b.txns(), "no placeholder written")
			case "reverse":
				_, err := c.Reverse(ctx, txn.ID)
				require.NoError(t, err)
				assert.Equal(t, int64(100), b.balance("A"), "reversed")
			case "capture": // again, by its key: the capture it made
				got, err := c.Capture(ctx, txn.ID, 30, twopc.WithKey("captured"))
				require.NoError(t, err)
				assert.Equal(t, twopc.StateDone, got.State)
				assert.Equal(t, txn.ID, got.CaptureOf)
			case "void":
				_, err := c.Void(ctx, txn.ID)
				require.ErrorIs(t, err, twopc.ErrHoldCaptured)
			}
			require.GreaterOrEqual(t, reads, 2)
			if op != "reverse" {
				assert.Equal(t, int64(70), b.balance("A"))
				assert.Equal(t, int64(30), b.balance("B"))
			}
		})
	}
}

// Cancel of an id that no read finds writes a placeholder, then reads the
// archive once more: a transaction that arrived after the reads, finished,
// and was archived and removed from the log before the placeholder landed
// is answered from the archive (its first record), not as canceled. The
// step hook of the placeholder's write puts the archived record back in
// the archive, as that pass would have.
func TestHistoryCancelPlaceholderMeetsTheArchive(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	archive := b.db.Collection("archive")
	b.open(map[string]int64{"A": 100, "B": 0})
	maker := b.coordinator(twopc.WithHistory(time.Millisecond, archive), twopc.WithSyncSettle())
	txn, err := maker.Transfer(ctx, "A", "B", 30)
	require.NoError(t, err)
	b.unfenceAll()
	b.ageFinal()
	rep, err := twopc.NewRecoverer(b.coordinator(twopc.WithApplication("archiver"), twopc.WithHistory(time.Millisecond, archive))).RecoverOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, rep.Removed)
	var first bson.Raw
	require.NoError(t, archive.FindOneAndDelete(ctx, bson.D{{Key: "_id", Value: txn.ID}}).Decode(&first))

	c := b.coordinator(twopc.WithHistory(time.Millisecond, archive), twopc.WithStepHook(func(ctx context.Context, s twopc.Step, tx *twopc.Txn) error {
		if s == twopc.StepCancel && tx != nil && tx.ID == txn.ID {
			_, err := archive.InsertOne(ctx, first)
			require.NoError(t, err)
		}
		return nil
	}))
	got, err := twopc.NewCanceler(c).Cancel(ctx, txn.ID)
	require.ErrorIs(t, err, twopc.ErrNotCancelable)
	assert.Equal(t, twopc.StateDone, got.State)
	g, err := c.Get(ctx, txn.ID)
	require.NoError(t, err)
	assert.Equal(t, twopc.StateDone, g.State, "the archive's record answers, not the placeholder")
}

// A hold captured, settled, unfenced and moved out of the log, whose
// insert and commit to held are then delivered again (a network that
// duplicates and delays), leaves a copy with no leg on any account: its
// commit to held is refused (it requires the lastModified its sender
// read), so the copy is pending, and recovery cancels it (a leg closed,
// none applied: reason late_copy). A copy held all the same (the commit
// of a hold inserted in a group requires no lastModified: the case is
// made here by moving the copy to held by hand) is found by recovery with
// its legs missing and voided (late_copy). Either way nothing moves, the
// copy is removed in turn, Get still answers from the first record (with
// an archive), and the audit finds nothing wrong. Before the fix, the
// copy stayed held for good. Without an archive, the same.
func TestHistoryHeldCopyEndsCanceled(t *testing.T) {
	for _, tc := range []struct {
		withArchive, held bool
	}{{true, false}, {false, false}, {true, true}, {false, true}} {
		withArchive := tc.withArchive
		name := "removal"
		if withArchive {
			name = "archive"
		}
		if tc.held {
			name += "/held"
		}
		t.Run(name, func(t *testing.T) {
			ctx := testCtx(t)
			b := newBank(t)
			var archive *mongo.Collection
			if withArchive {
				archive = b.db.Collection("archive")
			}
			b.open(map[string]int64{"A": 100, "B": 0})
			rec := &writeRecorder{}
			maker, err := twopc.NewCoordinator(rec.database(b), twopc.WithHistory(time.Millisecond, archive), twopc.WithSyncSettle())
			require.NoError(t, err)
			t.Cleanup(func() { _ = maker.Close(context.Background()) })
			hold, err := maker.Hold(ctx, "A", "B", 30)
			require.NoError(t, err)
			made := rec.recorded() // the insert, the legs, the commit to held
			c := b.coordinator(twopc.WithHistory(time.Millisecond, archive), twopc.WithSyncSettle())
			_, err = c.Capture(ctx, hold.ID, 30)
			require.NoError(t, err)
			r := twopc.NewRecoverer(b.coordinator(twopc.WithApplication("recoverer"), twopc.WithHistory(time.Millisecond, archive), twopc.WithCheckpoints(1000, 0)))
			passes := func() {
				for i := 0; i < 4; i++ {
					b.backdateAll(time.Hour)
					b.ageFinal()
					_, err := r.RecoverOnce(ctx)
					require.NoError(t, err)
				}
			}
			passes()
			require.Len(t, b.txns(), 1, "captured, settled and moved out of the log, but for its capture (keyed: kept for good)")

			resendAll(t, b.db, made)
			require.Len(t, b.txns(), 2)
			// Its move to held, delivered again, finds the copy's
			// lastModified (the late insert's), not the one it was sent
			// with: refused, the copy stays pending.
			require.Equal(t, twopc.StatePending, b.txn(hold.ID).State, "the copy is pending")
			if tc.held {
				_, err := b.db.Collection("transactions").UpdateOne(ctx, bson.D{{Key: "_id", Value: hold.ID}},
					bson.D{{Key: "$set", Value: bson.D{{Key: "state", Value: "held"}, {Key: "heldAt", Value: time.Now()}}}})
				require.NoError(t, err)
			} else {
				b.backdateAll(time.Hour)
			}
			rep, err := r.RecoverOnce(ctx)
			require.NoError(t, err)
			assert.Equal(t, 1, rep.RolledBack, "the copy voided")
			copied := b.txn(hold.ID)
			assert.Equal(t, twopc.StateCanceled, copied.State)
			assert.Equal(t, "late_copy", copied.Reason)
			passes()
			assert.Len(t, b.txns(), 1, "the copy removed in turn; the capture kept")
			if withArchive {
				got, err := c.Get(ctx, hold.ID)
				require.NoError(t, err)
				assert.Equal(t, twopc.StateDone, got.State, "the first record answers")
			}
			audit, err := c.Audit(ctx, twopc.WithExpectedTotal("", 100))
			require.NoError(t, err)
			assert.True(t, audit.OK(), "%v", audit.Violations)
			assert.Equal(t, int64(70), b.balance("A"))
			assert.Equal(t, int64(30), b.balance("B"))
		})
	}
}

// A held hold's legs are on its accounts: recovery marks it so once and
// leaves it held (it reads its accounts once, not every pass).
func TestRecoveryConfirmsAHeldHoldOnce(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	b.open(map[string]int64{"A": 100, "B": 0})
	hold, err := b.c.Hold(ctx, "A", "B", 30)
	require.NoError(t, err)
	inspects := 0
	r := twopc.NewRecoverer(b.coordinator(twopc.WithApplication("recoverer"), twopc.WithStepHook(func(_ context.Context, s twopc.Step, _ *twopc.Txn) error {
		if s == twopc.StepInspect {
			inspects++
		}
		return nil
	})))
	for i := 0; i < 3; i++ {
		b.backdateAll(time.Hour)
		rep, err := r.RecoverOnce(ctx)
		require.NoError(t, err)
		assert.Zero(t, rep.Finished())
	}
	assert.Equal(t, 1, inspects, "its accounts read once")
	assert.Equal(t, twopc.StateHeld, b.txn(hold.ID).State)
	got, err := b.c.Capture(ctx, hold.ID, 30)
	require.NoError(t, err)
	assert.True(t, got.State.Committed())
}
