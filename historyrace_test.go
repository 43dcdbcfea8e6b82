package twopc_test

// Reads while history leaves the log: another process's pass
// (archiving, removing) run right before each of the reader's commands in
// turn, as an ordinary interleaving of two processes.

import (
	"context"
	"errors"
	"flag"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/internal/mongotest"
)

// interleaver runs another process's step right before the k-th command a
// client sends (counting from 0), once; with k < 0 it only counts.
type interleaver struct {
	mu    sync.Mutex
	k, n  int // the data command to run other before, and those sent so far
	other func()
}

// dataCommand reports whether a command the reader sends reads or writes
// data: those the points number. The others (a handshake, the indexes'
// check, a cursor's end) come or not by timing (a connection opened, a
// cursor read to its end or killed), and so do not shift the points from
// one run to the next.
func dataCommand(name string) bool {
	switch name {
	case "hello", "isMaster", "listIndexes", "killCursors", "endSessions":
		return false
	}
	return true
}

func (il *interleaver) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if !dataCommand(e.CommandName) || background(e) {
			return
		}
		il.mu.Lock()
		n := il.n
		il.n++
		il.mu.Unlock()
		if n == il.k && il.other != nil {
			il.other()
		}
	}}
}

// sent is how many data commands the client sent.
func (il *interleaver) sent() int {
	il.mu.Lock()
	defer il.mu.Unlock()
	return il.n
}

// interleaveEvery is how many of the commands that read or write data
// the interleaving tests run the other process's step before: every one
// in make soak, every third (a third of the points, each run) in make
// test.
var interleaveEvery = flag.Int("interleave.every", 3, "run the other process before every n-th data command of the reader (make soak: 1)")

// points are the data commands to run the other process's step before,
// by their number (every interleaveEvery-th of them): a step run before a
// command that is not one (hello, listIndexes, killCursors) runs, as far
// as the data is concerned, before the next data command.
func (il *interleaver) points() []int {
	il.mu.Lock()
	defer il.mu.Unlock()
	var ks []int
	for k := 0; k < il.n; k += max(*interleaveEvery, 1) {
		ks = append(ks, k)
	}
	return ks
}

// historyCase is a database with account A inserted by hand (1000, as the
// tutorial inserts it: its opening is derived) and B opened with 0, three
// transfers from A to B (10, 20, 10) done and aged so that a pass of the
// Recoverer mover (archiving to archive, or removing if it is nil) moves
// them, and a reader coordinator whose client runs il.
type historyCase struct {
	b       *bank
	mover   *twopc.Recoverer
	reader  *twopc.Coordinator
	archive *mongo.Collection
	entries []twopc.Entry // A's entries before anything moved
	// mayRefuse says an answer may be ErrHistoryRemoved: the mover
	// removes, or the reader does not read the mover's archive.
	mayRefuse bool
}

// newHistoryCase is newHistoryCaseOf with the mover archiving to
// "archive" (archived) or removing, and the reader reading what it moves.
func newHistoryCase(t *testing.T, archived bool, il *interleaver) *historyCase {
	t.Helper()
	name := ""
	if archived {
		name = "archive"
	}
	return newHistoryCaseOf(t, name, name, il)
}

func newHistoryCaseOf(t *testing.T, moverArchive, readerArchive string, il *interleaver) *historyCase {
	t.Helper()
	ctx := testCtx(t)
	b := newBank(t)
	var archive *mongo.Collection
	if moverArchive != "" {
		archive = b.db.Collection(moverArchive)
	}
	keep := twopc.WithHistory(time.Millisecond, archive)
	_, err := b.db.Collection("accounts").InsertOne(ctx, bson.D{{Key: "_id", Value: "A"}, {Key: "balance", Value: 1000.0}, {Key: "pendingTransactions", Value: bson.A{}}})
	require.NoError(t, err)
	w := b.coordinator(keep, twopc.WithSyncSettle())
	require.NoError(t, w.OpenAccount(ctx, "B", 0))
	for _, v := range []int64{10, 20, 10} {
		_, err := w.Transfer(ctx, "A", "B", v)
		require.NoError(t, err)
	}
	h := &historyCase{b: b, archive: archive, mayRefuse: moverArchive == "" || readerArchive != moverArchive,
		mover: twopc.NewRecoverer(b.coordinator(twopc.WithApplication("mover"), keep, twopc.WithCheckpoints(1000, 0)))}
	// The entries, read before anything moved, by a coordinator that
	// records nothing (no checkpoint: every 10^6 entries).
	h.entries = fullStatement(t, b.coordinator(twopc.WithStatementHorizon(0), twopc.WithCheckpoints(1_000_000, time.Hour)), "A", false)
	require.Len(t, h.entries, 3)
	require.Equal(t, int64(960), h.entries[2].Balance)
	_, err = b.db.Collection("accounts").UpdateOne(ctx, bson.D{{Key: "_id", Value: "A"}}, bson.D{{Key: "$unset", Value: bson.D{{Key: "opening", Value: ""}}}})
	require.NoError(t, err)
	ageFinalIn(t, b.db)
	db := mongotest.ConnectURI(t, b.server.URI, options.Client().SetMonitor(il.monitor())).Database(b.db.Name())
	readerKeep := twopc.WithHistory(time.Millisecond, nil)
	if readerArchive != "" {
		readerKeep = twopc.WithHistory(time.Millisecond, db.Collection(readerArchive)) // read through the reader's client
	}
	h.reader, err = twopc.NewCoordinator(db, readerKeep, twopc.WithStatementHorizon(0), twopc.WithCheckpoints(1, 0))
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.reader.Close(context.Background()) })
	return h
}

// move runs the mover's pass, which moves all three.
func (h *historyCase) move(t *testing.T) {
	t.Helper()
	rep, err := h.mover.RecoverOnce(testCtx(t))
	assert.NoError(t, err)
	assert.Equal(t, 3, rep.Removed, "the pass moved the three transfers")
}

// read is the reader's part: a balance now, a whole statement, pages of
// one, a balance at the second entry. Each answer is the truth, or for a time
// whose entries a removal took, ErrHistoryRemoved.
func (h *historyCase) read(t *testing.T) {
	ctx := testCtx(t)
	removed := func(err error) bool { return h.mayRefuse && errors.Is(err, twopc.ErrHistoryRemoved) }
	now, err := h.reader.BalanceAt(ctx, "", "A", time.Now().Add(time.Hour))
	if !removed(err) || h.archive == nil { // after a removal, a balance now is always answered
		require.NoError(t, err)
		assert.Equal(t, int64(960), now, "BalanceAt now")
	}
	p, err := h.reader.Statement(ctx, "", "A", twopc.StatementQuery{})
	if !removed(err) {
		require.NoError(t, err)
		assert.Equal(t, h.entries, p.Entries, "the whole statement")
	}
	var pages []twopc.Entry
	q := twopc.StatementQuery{Limit: 1}
	for range 5 {
		p, err := h.reader.Statement(ctx, "", "A", q)
		if removed(err) {
			pages = nil
			break
		}
		require.NoError(t, err)
		pages = append(pages, p.Entries...)
		if q.After = p.Next; q.After == "" {
			break
		}
	}
	if pages != nil {
		assert.Equal(t, h.entries, pages, "pages of one")
	}
	mid := h.entries[1]
	at, err := h.reader.BalanceAt(ctx, "", "A", mid.At)
	if !removed(err) {
		require.NoError(t, err)
		assert.Equal(t, mid.Balance, at, "BalanceAt an entry")
	}
}

// checkRecorded asserts that every checkpoint and the opening recorded
// equal what they claim.
func (h *historyCase) checkRecorded(t *testing.T) {
	checkRecordedSums(t, h.b.db, "A", 1000, func(at time.Time) int64 {
		want := int64(1000)
		for _, e := range h.entries {
			if !e.At.After(at) {
				want = e.Balance
			}
		}
		return want
	})
}

// checkRecordedSums asserts that every checkpoint of account acct in db is
// through(its time), and that its opening, if recorded, is opening.
func checkRecordedSums(t *testing.T, db *mongo.Database, acct string, opening int64, through func(time.Time) int64) {
	t.Helper()
	ctx := testCtx(t)
	key, err := twopc.EntryKey("", acct)
	require.NoError(t, err)
	cur, err := db.Collection("transactions_checkpoints").Find(ctx, bson.D{{Key: "key", Value: key}})
	require.NoError(t, err)
	var cps []struct {
		At      time.Time `bson:"at"`
		Balance int64     `bson:"balance"`
		Removal bool      `bson:"removal"`
	}
	require.NoError(t, cur.All(ctx, &cps))
	for _, cp := range cps {
		assert.Equalf(t, through(cp.At), cp.Balance, "%s: checkpoint at %v (removal %v)", acct, cp.At, cp.Removal)
	}
	var a struct {
		Opening *struct {
			Balance int64 `bson:"balance"`
		} `bson:"opening"`
	}
	require.NoError(t, db.Collection("accounts").FindOne(ctx, bson.D{{Key: "_id", Value: acct}}).Decode(&a))
	if a.Opening != nil {
		assert.Equalf(t, opening, a.Opening.Balance, "%s: the opening recorded", acct)
	}
}

// eachInterleaving runs read once on a case of its own to learn the
// commands the reader sends, then, for each of them (see points), on a
// fresh case where the mover's pass (other, given the case) runs right
// before that command; then check.
func eachInterleaving(t *testing.T, mk func(*testing.T, *interleaver) *historyCase, read, other, check func(*historyCase, *testing.T)) {
	count := &interleaver{k: -1}
	read(mk(t, count), t)
	ks := count.points()
	require.Greater(t, len(ks)*max(*interleaveEvery, 1), 5)
	for _, k := range ks {
		t.Run("", func(t *testing.T) {
			t.Parallel()
			il := &interleaver{k: k}
			h := mk(t, il)
			il.other = func() { other(h, t) }
			read(h, t)
			require.Greater(t, il.sent(), k, "the pass ran")
			check(h, t)
		})
	}
}

// historyCaseOf makes cases of newHistoryCase.
func historyCaseOf(archived bool) func(*testing.T, *interleaver) *historyCase {
	return func(t *testing.T, il *interleaver) *historyCase { return newHistoryCase(t, archived, il) }
}

// interleaveHistory reads statements with the mover's pass right before
// each of the reader's commands in turn.
func interleaveHistory(t *testing.T, archived bool) {
	eachInterleaving(t, historyCaseOf(archived), (*historyCase).read, (*historyCase).move, (*historyCase).checkRecorded)
}

// TestStatementArchivedDuringTheRead: a Recoverer's pass archives the
// account's transfers right before each of a reader's commands in turn:
// every answer lists each entry once and sums every one, and every
// checkpoint and the derived opening recorded is the truth. (Before, a
// pass between the archive's read and the look-up of the log's records in
// the archive dropped an entry, and the short sum was recorded.)
func TestStatementArchivedDuringTheRead(t *testing.T) { interleaveHistory(t, true) }

// TestStatementRemovedDuringTheRead: the same with a pass removing them
// without an archive: each answer is the truth or ErrHistoryRemoved, and
// every checkpoint recorded is the truth.
func TestStatementRemovedDuringTheRead(t *testing.T) { interleaveHistory(t, false) }

// TestTwoRecoverersRemoving: two Recoverers remove the same transfers, the
// second's pass run while the first's runs right before each of the
// second's commands in turn: every removal checkpoint either records is
// the truth, and the balance read after is.
func TestTwoRecoverersRemoving(t *testing.T) {
	second := func(h *historyCase, t *testing.T) {
		_, err := twopc.NewRecoverer(h.reader).RecoverOnce(testCtx(t))
		require.NoError(t, err)
	}
	first := func(h *historyCase, t *testing.T) {
		_, err := h.mover.RecoverOnce(testCtx(t))
		assert.NoError(t, err)
	}
	eachInterleaving(t, historyCaseOf(false), second, first, func(h *historyCase, t *testing.T) {
		h.checkRecorded(t)
		now, err := h.b.coordinator().BalanceAt(testCtx(t), "", "A", time.Now().Add(time.Hour))
		require.NoError(t, err)
		assert.Equal(t, int64(960), now)
	})
}

// TestStatementCheckpointsFoundByEveryReader: checkpoints are the account's,
// whatever history its reader's coordinator reads. Transfers removed
// without an archive leave removal checkpoints that a reader with an
// archive finds (before, it answered 1000 for a time whose entries were
// removed, and an empty statement); transfers moved to an archive are
// answered for, by a reader that does not read it, only from a checkpoint
// after them, never from a sum that misses them.
func TestStatementCheckpointsFoundByEveryReader(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	archive := b.db.Collection("archive")
	remove := twopc.WithHistory(time.Millisecond, nil)
	store := twopc.WithHistory(time.Millisecond, archive)
	w := b.coordinator(remove, twopc.WithSyncSettle())
	require.NoError(t, w.OpenAccount(ctx, "A", 1000))
	require.NoError(t, w.OpenAccount(ctx, "B", 0))
	for _, v := range []int64{10, 20} {
		_, err := w.Transfer(ctx, "A", "B", v)
		require.NoError(t, err)
	}
	first := fullStatement(t, statementCoordinator(b), "A", false)
	require.Len(t, first, 2)
	ageFinalIn(t, b.db)
	rep, err := twopc.NewRecoverer(b.coordinator(twopc.WithApplication("remover"), remove, twopc.WithCheckpoints(1000, 0))).RecoverOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, rep.Removed)

	withArchive := b.coordinator(store, twopc.WithStatementHorizon(0), twopc.WithCheckpoints(1, 0))
	_, err = withArchive.BalanceAt(ctx, "", "A", first[0].At)
	require.ErrorIs(t, err, twopc.ErrHistoryRemoved, "a time whose entries were removed")
	_, err = withArchive.Statement(ctx, "", "A", twopc.StatementQuery{})
	require.ErrorIs(t, err, twopc.ErrHistoryRemoved)
	now, err := withArchive.BalanceAt(ctx, "", "A", time.Now().Add(time.Hour))
	require.NoError(t, err)
	assert.Equal(t, int64(970), now, "from the removal checkpoint")

	// Now archived, by coordinators with an archive.
	w2 := b.coordinator(store, twopc.WithSyncSettle())
	_, err = w2.Transfer(ctx, "A", "B", 5)
	require.NoError(t, err)
	ageFinalIn(t, b.db)
	rep, err = twopc.NewRecoverer(b.coordinator(twopc.WithApplication("archiver"), store)).RecoverOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, rep.Removed)
	without := b.coordinator(twopc.WithStatementHorizon(0))
	_, err = without.BalanceAt(ctx, "", "A", time.Now().Add(time.Hour))
	require.ErrorIs(t, err, twopc.ErrHistoryRemoved, "an entry in an archive it does not read, and no checkpoint after it")
	now, err = withArchive.BalanceAt(ctx, "", "A", time.Now().Add(time.Hour))
	require.NoError(t, err)
	assert.Equal(t, int64(965), now, "the archive's reader counts it (and records a checkpoint)")
	now, err = without.BalanceAt(ctx, "", "A", time.Now().Add(time.Hour))
	require.NoError(t, err)
	assert.Equal(t, int64(965), now, "from the checkpoint after it")
}

// TestTransactionsArchivedDuringTheRead: Coordinator.Transactions, with a
// pass archiving the account's transfers right before each of the
// reader's commands in turn: every page lists each transfer once, in any
// state and with a state asked for. (Before, a pass between the archive's
// read and the look-up of the log's transactions in the archive dropped
// them.)
func TestTransactionsArchivedDuringTheRead(t *testing.T) {
	read := func(h *historyCase, t *testing.T) {
		var want []bson.ObjectID
		for _, e := range h.entries {
			want = append(want, e.Txn)
		}
		for _, q := range []twopc.TransactionQuery{{}, {States: []twopc.State{twopc.StateDone}}, {Limit: 1}} {
			var got []bson.ObjectID
			for txn, err := range h.reader.Txns(testCtx(t), "", "A", q) {
				require.NoError(t, err)
				got = append(got, txn.ID)
			}
			assert.Equal(t, want, got, "query %+v", q)
		}
	}
	eachInterleaving(t, historyCaseOf(true), read, (*historyCase).move, func(*historyCase, *testing.T) {})
}
