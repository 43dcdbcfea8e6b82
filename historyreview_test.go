package twopc_test

// Review: interleavings and token reuses that the statement and
// transaction reads claim to survive.

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc"
)

// insertLateCommit inserts a committed copy of transaction of (a new _id)
// stamped at, as a commit stamped then and visible only now.
func insertLateCommit(t *testing.T, b *bank, of bson.ObjectID, at time.Time) bson.ObjectID {
	t.Helper()
	ctx := testCtx(t)
	var doc bson.D
	require.NoError(t, b.db.Collection("transactions").FindOne(ctx, bson.D{{Key: "_id", Value: of}}).Decode(&doc))
	late := bson.NewObjectID()
	for i := range doc {
		switch doc[i].Key {
		case "_id":
			doc[i].Value = late
		case "committedAt":
			doc[i].Value = at
		}
	}
	_, err := b.db.Collection("transactions").InsertOne(ctx, doc)
	require.NoError(t, err)
	return late
}

// TestReviewStatementTokenKeepsItsSkips: page 1 (oldest first, limit 2)
// ends within the horizon, so its token resumes from the horizon and
// skips the two entries it showed. A commit stamped a millisecond before
// them becomes visible after page 1 was read (as the horizon allows). The
// next page is read once that commit is older than the horizon (a token
// used a second later, here a reader whose horizon is 0: as a page read
// more than a horizon after the stamps): it shows the late commit (limit
// 1), which lies before the horizon, so its token is a keyset position
// after it -- and the skip set is dropped. The page after it lists page
// 1's two entries again.
func TestReviewStatementTokenKeepsItsSkips(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	c := b.coordinator(twopc.WithSyncSettle())
	b.open(map[string]int64{"A": 100, "B": 0})
	var ids []bson.ObjectID
	for range 3 {
		txn, err := c.Transfer(ctx, "A", "B", 10)
		require.NoError(t, err)
		ids = append(ids, txn.ID)
	}
	// Page 1, read while the entries are within the horizon.
	soon := b.coordinator(twopc.WithStatementHorizon(time.Hour))
	p, err := soon.Statement(ctx, "", "A", twopc.StatementQuery{Limit: 2})
	require.NoError(t, err)
	require.Len(t, p.Entries, 2)
	require.NotEmpty(t, p.Next)
	listed := []bson.ObjectID{p.Entries[0].Txn, p.Entries[1].Txn}

	// The late commit: stamped before the first entry shown, visible now.
	late := insertLateCommit(t, b, ids[1], p.Entries[0].At.Add(-time.Millisecond))

	// The next pages, read when every stamp is older than the horizon.
	later := b.coordinator(twopc.WithStatementHorizon(0))
	q := twopc.StatementQuery{Limit: 1, After: p.Next}
	for range 10 {
		p, err := later.Statement(ctx, "", "A", q)
		require.NoError(t, err)
		for _, e := range p.Entries {
			listed = append(listed, e.Txn)
		}
		if p.Next == "" {
			break
		}
		q.After = p.Next
	}
	assert.ElementsMatch(t, hexes(append(ids, late)), hexes(listed), "every entry once, the late one included")
}

func hexes(ids []bson.ObjectID) []string {
	var out []string
	for _, id := range ids {
		out = append(out, id.Hex())
	}
	return out
}

// interleaveReview interleaves a mover archiving to moverArchive (""
// removes) with a reader of readerArchive ("": none): every answer is the
// truth or ErrHistoryRemoved, and every number recorded is the truth.
func interleaveReview(t *testing.T, moverArchive, readerArchive string) {
	mk := func(t *testing.T, il *interleaver) *historyCase {
		return newHistoryCaseOf(t, moverArchive, readerArchive, il)
	}
	eachInterleaving(t, mk, (*historyCase).read, (*historyCase).move, (*historyCase).checkRecorded)
}

func TestReviewArchivedReaderWithout(t *testing.T)    { interleaveReview(t, "archive", "") }
func TestReviewArchivedReaderOther(t *testing.T)      { interleaveReview(t, "archive", "other") }
func TestReviewRemovedReaderWithArchive(t *testing.T) { interleaveReview(t, "", "archive") }

// TestReviewTransactionsReverseArchivedDuringTheRead:
// TestTransactionsArchivedDuringTheRead for Reverse pages and pages of two.
func TestReviewTransactionsReverseArchivedDuringTheRead(t *testing.T) {
	read := func(h *historyCase, t *testing.T) {
		var want []bson.ObjectID
		for _, e := range h.entries {
			want = append(want, e.Txn)
		}
		for _, q := range []twopc.TransactionQuery{{Reverse: true}, {Reverse: true, Limit: 1}, {Limit: 2}, {Reverse: true, Limit: 2, States: []twopc.State{twopc.StateDone}}} {
			var got []bson.ObjectID
			for txn, err := range h.reader.Txns(testCtx(t), "", "A", q) {
				require.NoError(t, err)
				got = append(got, txn.ID)
			}
			w := want
			if q.Reverse {
				w = slices.Clone(want)
				slices.Reverse(w)
			}
			assert.Equal(t, hexes(w), hexes(got), "query %+v", q)
		}
	}
	eachInterleaving(t, historyCaseOf(true), read, (*historyCase).move, func(*historyCase, *testing.T) {})
}

// TestReviewNewAccountAfterAMove: once any coordinator archived any
// transfer, a coordinator that does not read that archive still answers
// for an account opened (OpenAccount) after the move, none of whose
// entries moved: BalanceAt and a first page. (Before, both were
// ErrHistoryRemoved for every account.)
func TestReviewNewAccountAfterAMove(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	store := twopc.WithHistory(time.Millisecond, b.db.Collection("archive"))
	w := b.coordinator(store, twopc.WithSyncSettle())
	require.NoError(t, w.OpenAccount(ctx, "A", 100))
	require.NoError(t, w.OpenAccount(ctx, "B", 0))
	_, err := w.Transfer(ctx, "A", "B", 10)
	require.NoError(t, err)
	ageFinalIn(t, b.db)
	rep, err := twopc.NewRecoverer(b.coordinator(twopc.WithApplication("archiver"), store)).RecoverOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, rep.Removed)
	// The move an hour ago: its marker, more than the mark's margin before
	// the accounts opened below (an account opened within the margin of a
	// move is taken as possibly moved, and refused).
	_, err = b.db.Collection("transactions_checkpoints").UpdateMany(ctx, bson.D{{Key: "key", Value: "|moved"}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "at", Value: time.Now().Add(-time.Hour)}}}})
	require.NoError(t, err)

	// Accounts opened after the move, and a transfer between them.
	plain := b.coordinator(twopc.WithStatementHorizon(0), twopc.WithSyncSettle())
	require.NoError(t, plain.OpenAccount(ctx, "C", 50))
	require.NoError(t, plain.OpenAccount(ctx, "D", 0))
	_, err = plain.Transfer(ctx, "C", "D", 5)
	require.NoError(t, err)
	now, err := plain.BalanceAt(ctx, "", "C", time.Now().Add(time.Hour))
	require.NoError(t, err, "no entry of C moved anywhere")
	assert.Equal(t, int64(45), now)
	p, err := plain.Statement(ctx, "", "C", twopc.StatementQuery{})
	require.NoError(t, err, "no entry of C moved anywhere")
	assert.Len(t, p.Entries, 1)
}

// TestReviewReversePageAfterRemoval: entries removed (a removal
// checkpoint through them), then a new transfer: a Reverse page of one,
// which starts at the newest entry, after the removal, is refused.
func TestReviewReversePageAfterRemoval(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	remove := twopc.WithHistory(time.Millisecond, nil)
	w := b.coordinator(remove, twopc.WithSyncSettle())
	require.NoError(t, w.OpenAccount(ctx, "A", 100))
	require.NoError(t, w.OpenAccount(ctx, "B", 0))
	_, err := w.Transfer(ctx, "A", "B", 10)
	require.NoError(t, err)
	ageFinalIn(t, b.db)
	rep, err := twopc.NewRecoverer(b.coordinator(twopc.WithApplication("remover"), remove, twopc.WithCheckpoints(1000, 0))).RecoverOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, rep.Removed)
	txn, err := w.Transfer(ctx, "A", "B", 5)
	require.NoError(t, err)
	reader := b.coordinator(twopc.WithStatementHorizon(0))
	p, err := reader.Statement(ctx, "", "A", twopc.StatementQuery{Reverse: true, Limit: 1})
	require.NoError(t, err, "a page that starts after the removal")
	require.Len(t, p.Entries, 1)
	assert.Equal(t, txn.ID, p.Entries[0].Txn)
	assert.Equal(t, int64(85), p.Entries[0].Balance)
}

// TestReviewRemovalOutOfCommitOrder: a pass removes in lastModified order
// (batches), and writes each account's removal checkpoint through the
// latest commit of the batch. T1 committed before T2 but settled after it
// (background settling, recovery): T2's batch records a removal
// checkpoint past T1's commit, and from then on T1's own checkpoint is
// refused (ErrHistoryRemoved: its time is before the latest removal), so
// T1 is kept, pass after pass, though final and past its time to keep
// (WithHistory: "a Recoverer's pass ... removes it").
func TestReviewRemovalOutOfCommitOrder(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	remove := twopc.WithHistory(time.Millisecond, nil)
	w := b.coordinator(remove, twopc.WithSyncSettle())
	require.NoError(t, w.OpenAccount(ctx, "A", 100))
	require.NoError(t, w.OpenAccount(ctx, "B", 0))
	t1, err := w.Transfer(ctx, "A", "B", 10)
	require.NoError(t, err)
	t2, err := w.Transfer(ctx, "A", "B", 20)
	require.NoError(t, err)
	// T2 was last modified (settled) before T1.
	for id, ago := range map[bson.ObjectID]time.Duration{t2.ID: 3 * time.Hour, t1.ID: 2 * time.Hour} {
		_, err := b.db.Collection("transactions").UpdateOne(ctx, bson.D{{Key: "_id", Value: id}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "lastModified", Value: time.Now().Add(-ago)}}}})
		require.NoError(t, err)
	}
	r := twopc.NewRecoverer(b.coordinator(twopc.WithApplication("remover"), remove, twopc.WithCheckpoints(1000, 0)), twopc.WithBatch(1))
	removed := 0
	for range 3 {
		rep, _ := r.RecoverOnce(ctx)
		removed += rep.Removed
	}
	n, err := b.db.Collection("transactions").CountDocuments(ctx, bson.D{{Key: "_id", Value: t1.ID}})
	require.NoError(t, err)
	assert.Equal(t, 2, removed, "both final transfers past their keep removed")
	assert.Zero(t, n, "T1 is still in the log after three passes")
}

// TestReviewStatementBalanceAcrossSkips: as
// TestStatementPagesListALateCommitOnce (a commit stamped before page 1's
// entries, visible after page 1 was read), with a next page of more than
// one entry: it shows the late commit and the entry after page 1's, and
// page 1's entries, which it skips, lie between them in the order. The
// running balance goes from the late commit to the next shown entry by
// that entry's amount alone, leaving out the two skipped: a wrong
// Balance.
func TestReviewStatementBalanceAcrossSkips(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	c := b.coordinator(twopc.WithSyncSettle(), twopc.WithStatementHorizon(time.Hour))
	b.open(map[string]int64{"A": 100, "B": 0})
	var ids []bson.ObjectID
	for range 3 {
		txn, err := c.Transfer(ctx, "A", "B", 10)
		require.NoError(t, err)
		ids = append(ids, txn.ID)
	}
	p, err := c.Statement(ctx, "", "A", twopc.StatementQuery{Limit: 2})
	require.NoError(t, err)
	require.Len(t, p.Entries, 2)
	require.NotEmpty(t, p.Next)
	late := insertLateCommit(t, b, ids[1], p.Entries[0].At.Add(-time.Millisecond))

	// The truth: every entry, in order, with its balance.
	truth := map[bson.ObjectID]int64{}
	for _, e := range fullStatement(t, b.coordinator(twopc.WithStatementHorizon(0)), "A", false) {
		truth[e.Txn] = e.Balance
	}
	require.Len(t, truth, 4)
	require.Equal(t, int64(60), truth[ids[2]])

	p2, err := c.Statement(ctx, "", "A", twopc.StatementQuery{Limit: 10, After: p.Next})
	require.NoError(t, err)
	require.Len(t, p2.Entries, 2, "the late commit and the third transfer")
	assert.Equal(t, late, p2.Entries[0].Txn)
	for _, e := range p2.Entries {
		assert.Equalf(t, truth[e.Txn], e.Balance, "balance after %s", e.Txn.Hex())
	}
}
