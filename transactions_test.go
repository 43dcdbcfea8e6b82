package twopc_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
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

// pagedTxns is every transaction of account q selects, page after page,
// as the ids listed, checking each page's size.
func pagedTxns(t *testing.T, c *twopc.Coordinator, account any, q twopc.TransactionQuery) []bson.ObjectID {
	t.Helper()
	var all []bson.ObjectID
	for range 1000 {
		p, err := c.Transactions(testCtx(t), "", account, q)
		require.NoError(t, err)
		limit := q.Limit
		if limit == 0 {
			limit = twopc.DefaultTransactionLimit
		}
		require.LessOrEqual(t, len(p.Txns), limit, "a page's size")
		for _, txn := range p.Txns {
			all = append(all, txn.ID)
		}
		if p.Next == "" || len(p.Txns) == 0 {
			return all
		}
		q.After = p.Next
	}
	t.Fatal("pages never ended")
	return nil
}

// txnOrder orders transactions as Transactions lists them, oldest first.
func txnOrder(a, b *twopc.Txn) int {
	if c := a.Created.Compare(b.Created); c != 0 {
		return c
	}
	return bytes.Compare(a.ID[:], b.ID[:])
}

// wantTxns is what q should list of all (every transaction on the
// account, as Get reads it), in order.
func wantTxns(all []*twopc.Txn, q twopc.TransactionQuery) []bson.ObjectID {
	var out []*twopc.Txn
	for _, txn := range all {
		switch {
		case len(q.States) > 0 && !slices.Contains(q.States, txn.State),
			!q.From.IsZero() && txn.Created.Before(q.From),
			!q.To.IsZero() && !txn.Created.Before(q.To),
			q.Key != "" && txn.Key != q.Key:
			continue
		}
		match := true
		for k, v := range q.Metadata {
			if got, ok := txn.Metadata[k]; !ok || got != v {
				match = false
			}
		}
		if match {
			out = append(out, txn)
		}
	}
	slices.SortFunc(out, txnOrder)
	if q.Reverse {
		slices.Reverse(out)
	}
	var ids []bson.ObjectID
	for _, txn := range out {
		ids = append(ids, txn.ID)
	}
	return ids
}

// TestTransactionsPages: an account's transactions in every state, some
// in the log and some archived by a Recoverer pass (interleaved in time),
// with a late copy in the log of an archived one, are listed by pages of
// every size, in both orders, with a filter of each kind, each
// transaction exactly once and in order, by readers whose margin puts
// none, the newest or all of them within the hold-back; the iterator
// lists the same.
func TestTransactionsPages(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	archive := b.db.Collection("archive")
	history := twopc.WithHistory(time.Millisecond, archive)
	w := b.coordinator(twopc.WithSyncSettle(), history)
	b.open(map[string]int64{"A": 1000, "B": 100, "C": 0})
	recoverer := twopc.NewRecoverer(b.coordinator(twopc.WithApplication("recoverer"), history))
	archiveFinal := func(want int) {
		ageFinalIn(t, b.db)
		rep, err := recoverer.RecoverOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, want, rep.Removed)
	}
	var ids []bson.ObjectID
	made := func(txn *twopc.Txn, err error) *twopc.Txn {
		t.Helper()
		require.NotNil(t, txn, "%v", err)
		ids = append(ids, txn.ID)
		return txn
	}
	made(w.Transfer(ctx, "A", "B", 10, twopc.WithMetadata(map[string]string{"order": "o-1"})))
	copied := made(w.Transfer(ctx, "A", "C", 20))
	canceled := made(w.Transfer(ctx, "A", "B", 5000))
	require.Equal(t, twopc.StateCanceled, canceled.State)
	_, err := w.Transfer(ctx, "B", "C", 1) // not A's
	require.NoError(t, err)
	archiveFinal(4)
	keyed := made(w.Transfer(ctx, "A", "B", 30, twopc.WithKey("k-4"), twopc.WithMetadata(map[string]string{"order": "o-4"})))
	made(w.Hold(ctx, "A", "C", 40, twopc.WithExpiry(time.Hour)))
	made(w.Transfer(ctx, "B", "A", 15))
	made(w.TransferLegs(ctx, []twopc.Leg{{Account: "A", Amount: -5}, {Account: "B", Amount: 3}, {Account: "C", Amount: 2}},
		twopc.WithKey("legs"), twopc.WithMetadata(map[string]string{"order": "o-1", "memo": "split"})))
	archiveFinal(1) // B→A 15; the keyed ones and the hold stay in the log
	made(w.Transfer(ctx, "A", "C", 1))

	// A late copy in the log of an archived transaction, canceled: the
	// archive's record (done) is the one listed, and only where it matches.
	var doc bson.D
	require.NoError(t, archive.FindOne(ctx, bson.D{{Key: "_id", Value: copied.ID}}).Decode(&doc))
	for i := range doc {
		if doc[i].Key == "state" {
			doc[i].Value = "canceled"
		}
	}
	_, err = b.db.Collection("transactions").InsertOne(ctx, doc)
	require.NoError(t, err)

	reader := b.coordinator(history)
	var all []*twopc.Txn
	for _, id := range ids {
		txn, err := reader.Get(ctx, id)
		require.NoError(t, err)
		all = append(all, txn)
	}
	byCreated := slices.Clone(all)
	slices.SortFunc(byCreated, txnOrder)
	inLog, inArchive := 0, 0
	for _, txn := range all {
		if n, _ := archive.CountDocuments(ctx, bson.D{{Key: "_id", Value: txn.ID}}); n == 1 {
			inArchive++
		} else {
			inLog++
		}
	}
	require.Equal(t, 4, inArchive)
	require.Equal(t, 4, inLog)

	queries := map[string]twopc.TransactionQuery{
		"all":            {},
		"done":           {States: []twopc.State{twopc.StateDone}},
		"canceled, held": {States: []twopc.State{twopc.StateCanceled, twopc.StateHeld}},
		"time range":     {From: byCreated[2].Created, To: byCreated[6].Created},
		"metadata":       {Metadata: map[string]string{"order": "o-1"}},
		"two metadata":   {Metadata: map[string]string{"order": "o-1", "memo": "split"}},
		"key":            {Key: keyed.Key},
		"no such key":    {Key: "nobody's"},
	}
	readers := map[string]*twopc.Coordinator{
		"margin 0":       b.coordinator(history, twopc.WithMarkMargin(0)),
		"margin 500ms":   reader,
		"margin an hour": b.coordinator(history, twopc.WithMarkMargin(time.Hour)),
	}
	for rname, c := range readers {
		for qname, q := range queries {
			for _, reverse := range []bool{false, true} {
				q.Reverse = reverse
				want := wantTxns(all, q)
				if qname == "all" {
					require.Len(t, want, len(ids))
				}
				for _, limit := range []int{1, 2, 3, 0} {
					q.Limit = limit
					assert.Equal(t, want, pagedTxns(t, c, "A", q), "%s, %s, reverse %v, limit %d", rname, qname, reverse, limit)
				}
				var iterated []bson.ObjectID
				for txn, err := range c.Txns(ctx, "", "A", twopc.TransactionQuery{States: q.States, From: q.From, To: q.To,
					Metadata: q.Metadata, Key: q.Key, Reverse: reverse, Limit: 2}) {
					require.NoError(t, err)
					iterated = append(iterated, txn.ID)
				}
				assert.Equal(t, want, iterated, "Txns: %s, %s, reverse %v", rname, qname, reverse)
			}
		}
	}
	p, err := reader.Transactions(ctx, "", "A", twopc.TransactionQuery{States: []twopc.State{twopc.StateDone}})
	require.NoError(t, err)
	for _, txn := range p.Txns {
		if txn.ID == copied.ID {
			assert.Equal(t, twopc.StateDone, txn.State, "the archive's record, not the log's copy")
		}
	}

	// The end of an ascending listing with no To keeps a token, from which
	// a later page lists what arrived since; Reverse's last page has none.
	q := twopc.TransactionQuery{Limit: 100}
	p, err = reader.Transactions(ctx, "", "A", q)
	require.NoError(t, err)
	require.Len(t, p.Txns, len(ids))
	require.NotEmpty(t, p.Next, "open at the end")
	again, err := reader.Transactions(ctx, "", "A", twopc.TransactionQuery{After: p.Next})
	require.NoError(t, err)
	assert.Empty(t, again.Txns)
	assert.Empty(t, again.Next)
	later := made(w.Transfer(ctx, "C", "A", 1))
	again, err = reader.Transactions(ctx, "", "A", twopc.TransactionQuery{After: p.Next})
	require.NoError(t, err)
	require.Len(t, again.Txns, 1)
	assert.Equal(t, later.ID, again.Txns[0].ID)
	p, err = reader.Transactions(ctx, "", "A", twopc.TransactionQuery{Reverse: true, Limit: 100})
	require.NoError(t, err)
	assert.Len(t, p.Txns, len(ids))
	assert.Empty(t, p.Next)
}

// TestTransactionsHeldBack: a transaction that reaches the log after an
// ascending page, with a Created older than that page's transactions
// (stamped, then inserted late, within the margin), is listed by the next
// page; a reader with no margin passes over it. Every transaction is
// listed once.
func TestTransactionsHeldBack(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	b.open(map[string]int64{"A": 1000, "B": 0})
	w := b.coordinator(twopc.WithSyncSettle(), twopc.WithFrozenMark()) // moves no fence line
	var first []bson.ObjectID
	for range 3 {
		txn, err := w.Transfer(ctx, "A", "B", 1)
		require.NoError(t, err)
		first = append(first, txn.ID)
	}
	// A coordinator whose clock falls 10 s behind after it read the
	// server's: its next transfer is stamped 10 s before the others.
	var behind sync.Mutex
	shift := time.Duration(0)
	slow := b.coordinator(twopc.WithSyncSettle(), twopc.WithFrozenMark(), twopc.WithHostClock(func() time.Time {
		behind.Lock()
		defer behind.Unlock()
		return time.Now().Add(shift)
	}))
	require.NoError(t, twopc.SyncClock(ctx, slow))
	behind.Lock()
	shift = -10 * time.Second
	behind.Unlock()

	held := b.coordinator(twopc.WithMarkMargin(time.Minute))
	bare := b.coordinator(twopc.WithMarkMargin(0))
	q := twopc.TransactionQuery{Limit: 2}
	pHeld, err := held.Transactions(ctx, "", "A", q)
	require.NoError(t, err)
	pBare, err := bare.Transactions(ctx, "", "A", q)
	require.NoError(t, err)
	require.Len(t, pHeld.Txns, 2)
	require.Len(t, pBare.Txns, 2)

	late, err := slow.Transfer(ctx, "A", "B", 1)
	require.NoError(t, err)
	require.Equal(t, twopc.StateDone, late.State)
	firstTxn, err := held.Get(ctx, first[0])
	require.NoError(t, err)
	require.True(t, late.Created.Before(firstTxn.Created), "stamped before the first")

	rest := func(c *twopc.Coordinator, p twopc.TransactionPage) []bson.ObjectID {
		var ids []bson.ObjectID
		for _, txn := range p.Txns {
			ids = append(ids, txn.ID)
		}
		return append(ids, pagedTxns(t, c, "A", twopc.TransactionQuery{Limit: 2, After: p.Next})...)
	}
	assert.Equal(t, []bson.ObjectID{first[0], first[1], late.ID, first[2]}, rest(held, pHeld), "the late one on the next page")
	assert.Equal(t, []bson.ObjectID{first[0], first[1], first[2]}, rest(bare, pBare), "no margin: passed over")
	assert.Equal(t, []bson.ObjectID{late.ID, first[0], first[1], first[2]}, pagedTxns(t, held, "A", twopc.TransactionQuery{Limit: 3}))
}

// TestTransactionsArchivedBetweenReads: transactions a Recoverer pass
// archives after a page read the log and before it reads the archive
// (the pass runs from a command monitor on the reader's client, right
// before the reader's archive read) are listed once each, from the
// archive.
func TestTransactionsArchivedBetweenReads(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	archive := b.db.Collection("archive")
	history := twopc.WithHistory(time.Millisecond, archive)
	w := b.coordinator(twopc.WithSyncSettle(), history)
	b.open(map[string]int64{"A": 1000, "B": 0})
	var ids []bson.ObjectID
	for i := range 5 {
		opts := []twopc.TransferOption{}
		if i == 2 {
			opts = append(opts, twopc.WithKey("kept")) // never archived
		}
		txn, err := w.Transfer(ctx, "A", "B", int64(i+1), opts...)
		require.NoError(t, err)
		ids = append(ids, txn.ID)
	}
	ageFinalIn(t, b.db)
	recoverer := twopc.NewRecoverer(b.coordinator(twopc.WithApplication("recoverer"), history))

	// The pass runs between the page's two reads, right before the
	// second: the archive's, if the log is read first (as it must be).
	var once sync.Once
	var moved int
	var reads []string
	monitor := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if e.CommandName != "find" || !strings.Contains(e.Command.Lookup("filter").String(), `"accounts"`) {
			return
		}
		reads = append(reads, e.Command.Lookup("find").StringValue())
		if len(reads) == 2 {
			once.Do(func() {
				rep, err := recoverer.RecoverOnce(context.Background())
				if err == nil {
					moved = rep.Removed
				}
			})
		}
	}}
	db := mongotest.ConnectURI(t, b.server.URI, options.Client().SetMonitor(monitor)).Database(b.db.Name())
	// Its archive through its own client too.
	reader, err := twopc.NewCoordinator(db, twopc.WithHistory(time.Millisecond, db.Collection("archive")))
	require.NoError(t, err)
	t.Cleanup(func() { _ = reader.Close(context.Background()) })

	p, err := reader.Transactions(ctx, "", "A", twopc.TransactionQuery{})
	require.NoError(t, err)
	require.Equal(t, []string{"transactions", "archive"}, reads, "the log, then the archive")
	require.Equal(t, 4, moved, "archived between the two reads")
	n, err := b.db.Collection("transactions").CountDocuments(ctx, bson.D{})
	require.NoError(t, err)
	require.Equal(t, int64(1), n, "only the keyed one left in the log")
	var got []bson.ObjectID
	for _, txn := range p.Txns {
		got = append(got, txn.ID)
	}
	assert.Equal(t, ids, got, "each once, in order")
}

// TestTransactionsReadByTheIndex: a page's reads of the log and the
// archive, with a filter of each kind and a token, are served by the
// {accounts, created, _id} index the coordinator makes on both: on
// MongoDB an index scan that gives the order (no collection scan, no
// in-memory sort); on the dev server, a search of that index's elements
// table by the account and the created range (or, in the archive, whose
// accounts never held an array here, of an index on its accounts key
// column).
func TestTransactionsReadByTheIndex(t *testing.T) {
	ctx := testCtx(t)
	s := mongotest.Shared(t)
	plain := mongotest.NewDatabaseOn(t, s)
	rec := &findRecorder{}
	db := mongotest.ConnectURI(t, s.URI, options.Client().SetMonitor(rec.monitor())).Database(plain.Name())
	archive := db.Collection("archive")
	c, err := twopc.NewCoordinator(db, twopc.WithSyncSettle(), twopc.WithHistory(time.Hour, archive)) // no EnsureIndexes
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	require.NoError(t, c.OpenAccount(ctx, "A", 100))
	require.NoError(t, c.OpenAccount(ctx, "B", 0))
	for range 3 {
		_, err := c.Transfer(ctx, "A", "B", 1, twopc.WithMetadata(map[string]string{"order": "o-1"}))
		require.NoError(t, err)
	}
	q := twopc.TransactionQuery{Limit: 1, States: []twopc.State{twopc.StateDone}, Metadata: map[string]string{"order": "o-1"},
		From: time.Now().Add(-time.Hour)}
	p, err := c.Transactions(ctx, "", "A", q)
	require.NoError(t, err)
	require.Len(t, p.Txns, 1)
	q.After = p.Next
	_, err = c.Transactions(ctx, "", "A", q)
	require.NoError(t, err)
	_, err = c.Transactions(ctx, "", "A", twopc.TransactionQuery{Reverse: true, Key: "k", Limit: 1})
	require.NoError(t, err)

	ferret := isFerretDB(t, db)
	reads := 0
	for _, cmd := range rec.recorded() {
		if !strings.Contains(cmd.Lookup("filter").String(), `"accounts"`) {
			continue
		}
		reads++
		text, scans := planScans(t, db, cmd)
		assert.False(t, scans, "a collection scan for %s:\n%s", cmd, text)
		if ferret {
			elements := `SEARCH _ferretdb_elements_\S+_accounts_1_created_1__id_1_\S+ USING (COVERING )?INDEX \S+ \(e=\? AND k>\? AND k<\?\)`
			if coll, _ := cmd.Lookup("find").StringValueOK(); coll == "archive" {
				// A collection whose accounts never held an array (the
				// archive, empty here) has no elements table yet: an
				// index on its accounts key column is searched, for the
				// value and for arrays.
				elements += `|SEARCH \S+ USING (COVERING )?INDEX \S+_accounts_1_\S+ \(_ferretdb_key_accounts_\S+=\?\)`
			}
			assert.Regexp(t, elements, text, "by the elements of {accounts, created, _id}, in the created range: %s", cmd)
		} else {
			assert.Contains(t, text, "accounts_1_created_1__id_1")
			assert.Contains(t, text, "IXSCAN")
			assert.NotContains(t, text, "stage:SORT")
		}
	}
	assert.Equal(t, 6, reads, "three pages, each reading the log and the archive")
	for _, coll := range []*mongo.Collection{db.Collection("transactions"), archive} {
		assert.Contains(t, indexNames(t, coll), "accounts_1_created_1__id_1", coll.Name())
	}
}

// TestTransactionsBadInput: bad input gives its named error and reads
// nothing; a done context likewise; a token is bound to its account,
// query and direction.
func TestTransactionsBadInput(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	cc := &commandCounter{}
	db := mongotest.ConnectURI(t, b.server.URI, options.Client().SetMonitor(cc.monitor())).Database(b.db.Name())
	c, err := twopc.NewCoordinator(db, twopc.WithFrozenMark())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	b.open(map[string]int64{"A": 100, "B": 0})
	for range 3 {
		_, err := b.c.Transfer(ctx, "A", "B", 1)
		require.NoError(t, err)
	}
	other := b.coordinator(twopc.WithMarkMargin(0))
	p, err := other.Transactions(ctx, "", "A", twopc.TransactionQuery{Limit: 1})
	require.NoError(t, err)
	require.NotEmpty(t, p.Next)
	now := time.Now()
	done, cancel := context.WithCancel(ctx)
	cancel()
	for _, tc := range []struct {
		name    string
		ctx     context.Context
		ledger  string
		account any
		q       twopc.TransactionQuery
		want    error
	}{
		{"unknown ledger", ctx, "nowhere", "A", twopc.TransactionQuery{}, twopc.ErrUnknownLedger},
		{"nil account", ctx, "", nil, twopc.TransactionQuery{}, twopc.ErrInvalidAccountID},
		{"array account", ctx, "", bson.A{"A"}, twopc.TransactionQuery{}, twopc.ErrInvalidAccountID},
		{"negative limit", ctx, "", "A", twopc.TransactionQuery{Limit: -1}, twopc.ErrInvalidQuery},
		{"limit too large", ctx, "", "A", twopc.TransactionQuery{Limit: twopc.MaxTransactionLimit + 1}, twopc.ErrInvalidQuery},
		{"from after to", ctx, "", "A", twopc.TransactionQuery{From: now, To: now.Add(-time.Second)}, twopc.ErrInvalidQuery},
		{"unknown state", ctx, "", "A", twopc.TransactionQuery{States: []twopc.State{"lost"}}, twopc.ErrInvalidQuery},
		{"operator metadata key", ctx, "", "A", twopc.TransactionQuery{Metadata: map[string]string{"$gt": ""}}, twopc.ErrInvalidQuery},
		{"dotted metadata key", ctx, "", "A", twopc.TransactionQuery{Metadata: map[string]string{"a.b": "x"}}, twopc.ErrInvalidQuery},
		{"empty metadata key", ctx, "", "A", twopc.TransactionQuery{Metadata: map[string]string{"": "x"}}, twopc.ErrInvalidQuery},
		{"metadata not UTF-8", ctx, "", "A", twopc.TransactionQuery{Metadata: map[string]string{"k": "\xff"}}, twopc.ErrInvalidQuery},
		{"key too long", ctx, "", "A", twopc.TransactionQuery{Key: strings.Repeat("k", twopc.MaxKeyLen+1)}, twopc.ErrInvalidQuery},
		{"key not UTF-8", ctx, "", "A", twopc.TransactionQuery{Key: "\xff"}, twopc.ErrInvalidQuery},
		{"garbled token", ctx, "", "A", twopc.TransactionQuery{After: "%%%"}, twopc.ErrInvalidQuery},
		{"another account's token", ctx, "", "B", twopc.TransactionQuery{After: p.Next}, twopc.ErrInvalidQuery},
		{"another query's token", ctx, "", "A", twopc.TransactionQuery{After: p.Next, Key: "k"}, twopc.ErrInvalidQuery},
		{"another direction's token", ctx, "", "A", twopc.TransactionQuery{After: p.Next, Reverse: true}, twopc.ErrInvalidQuery},
		{"done context", done, "", "A", twopc.TransactionQuery{}, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := cc.total()
			var err error
			require.NotPanics(t, func() { _, err = c.Transactions(tc.ctx, tc.ledger, tc.account, tc.q) })
			require.ErrorIs(t, err, tc.want)
			var iterErr error
			for txn, err := range c.Txns(tc.ctx, tc.ledger, tc.account, tc.q) {
				assert.Nil(t, txn)
				iterErr = err
			}
			require.ErrorIs(t, iterErr, tc.want, "Txns")
			assert.Equal(t, before, cc.total(), "read nothing")
			if !errors.Is(tc.want, context.Canceled) {
				assert.Regexp(t, `^twopc: `, err.Error())
			}
		})
	}
	// The same token with a smaller Limit is the same query.
	p2, err := other.Transactions(ctx, "", "A", twopc.TransactionQuery{After: p.Next, Limit: 5})
	require.NoError(t, err)
	assert.Len(t, p2.Txns, 2)
	// An iterator stopped early stops reading.
	n := 0
	for range c.Txns(ctx, "", "A", twopc.TransactionQuery{Limit: 1}) {
		n++
		break
	}
	assert.Equal(t, 1, n)
}

// TestTransactionsOfLedgersAndIDs: an account is named by its ledger and
// its id as the server compares ids; another ledger's account of the same
// id has transactions of its own.
func TestTransactionsOfLedgersAndIDs(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	other := b.db.Collection("accounts_other")
	c := b.coordinator(twopc.WithSyncSettle(), twopc.WithLedger("other", other))
	l, err := c.Ledger("other")
	require.NoError(t, err)
	require.NoError(t, c.OpenAccount(ctx, int64(7), 100))
	require.NoError(t, c.OpenAccount(ctx, "B", 0))
	require.NoError(t, l.OpenAccount(ctx, int64(7), 0))
	t1, err := c.Transfer(ctx, int64(7), "B", 5)
	require.NoError(t, err)
	t2, err := c.TransferLegs(ctx, []twopc.Leg{{Account: int64(7), Amount: -3}, {Ledger: "other", Account: int64(7), Amount: 3}})
	require.NoError(t, err)
	ids := func(ledger string, account any) []bson.ObjectID {
		var out []bson.ObjectID
		for txn, err := range c.Txns(ctx, ledger, account, twopc.TransactionQuery{}) {
			require.NoError(t, err)
			out = append(out, txn.ID)
		}
		return out
	}
	assert.Equal(t, []bson.ObjectID{t1.ID, t2.ID}, ids("", int32(7)), "int32(7) is int64(7)")
	assert.Equal(t, []bson.ObjectID{t1.ID, t2.ID}, ids("", 7.0))
	assert.Equal(t, []bson.ObjectID{t2.ID}, ids("other", int64(7)))
	assert.Empty(t, ids("", "nobody"))
}
