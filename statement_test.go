package twopc_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/twopc/twopc"
)

// statementCoordinator is a coordinator whose statements list entries as
// soon as they are committed (no horizon), settling before each call
// returns.
func statementCoordinator(b *bank, opts ...twopc.Option) *twopc.Coordinator {
	return b.coordinator(append([]twopc.Option{twopc.WithStatementHorizon(0), twopc.WithSyncSettle()}, opts...)...)
}

// fullStatement is every entry of account, in one page.
func fullStatement(t *testing.T, c *twopc.Coordinator, account any, reverse bool) []twopc.Entry {
	t.Helper()
	p, err := c.Statement(testCtx(t), "", account, twopc.StatementQuery{Limit: twopc.MaxStatementLimit, Reverse: reverse})
	require.NoError(t, err)
	return p.Entries
}

// paged is every entry of account in q's window, page after page of size.
func paged(t *testing.T, c *twopc.Coordinator, account any, q twopc.StatementQuery) []twopc.Entry {
	t.Helper()
	var all []twopc.Entry
	for range 1000 {
		p, err := c.Statement(testCtx(t), "", account, q)
		require.NoError(t, err)
		all = append(all, p.Entries...)
		if p.Next == "" {
			return all
		}
		q.After = p.Next
	}
	t.Fatal("pages never ended")
	return nil
}

// checkStatement checks account's statement against the account: running
// balances from its opening, order, pages of every size, Reverse, a
// partition by time, and BalanceAt at every entry and now. The account
// must be quiet (nothing in flight but held holds).
func checkStatement(t *testing.T, c *twopc.Coordinator, account any, opening int64, sizes ...int) []twopc.Entry {
	t.Helper()
	ctx := testCtx(t)
	all := fullStatement(t, c, account, false)
	sum := opening
	for i, e := range all {
		sum += e.Amount
		require.Equalf(t, sum, e.Balance, "%v: entry %d's running balance", account, i)
		if i > 0 {
			require.Falsef(t, e.At.Before(all[i-1].At), "%v: entry %d is out of order", account, i)
		}
		assert.Equal(t, account, e.Account)
	}
	a, err := c.Account(ctx, account)
	require.NoError(t, err)
	now, err := c.BalanceAt(ctx, "", account, time.Now().Add(time.Hour))
	require.NoError(t, err)
	assert.Equalf(t, a.Balance+a.Held, now, "%v: BalanceAt(now) is Balance + Held at a quiet moment", account)
	assert.Equalf(t, sum, now, "%v: the last entry's balance is BalanceAt(now)", account)

	if len(sizes) == 0 {
		sizes = []int{1, 2, 3, 7}
	}
	for _, size := range sizes {
		assert.Equalf(t, all, paged(t, c, account, twopc.StatementQuery{Limit: size}), "%v: pages of %d", account, size)
		back := paged(t, c, account, twopc.StatementQuery{Limit: size, Reverse: true})
		slices.Reverse(back)
		assert.Equalf(t, all, back, "%v: Reverse pages of %d", account, size)
	}
	if len(all) > 1 {
		split := all[len(all)/2].At
		before := paged(t, c, account, twopc.StatementQuery{Until: split, Limit: sizes[len(sizes)-1]})
		after := paged(t, c, account, twopc.StatementQuery{Since: split, Limit: sizes[len(sizes)-1]})
		assert.Equalf(t, all, append(before, after...), "%v: Since and Until partition it", account)
	}
	for i, e := range all {
		if len(all) > 20 && i%(len(all)/10) != 0 {
			continue // a tenth of a long statement's entries
		}
		at, err := c.BalanceAt(ctx, "", account, e.At)
		require.NoError(t, err)
		want := e.Balance
		for _, later := range all[i+1:] {
			if later.At.Equal(e.At) {
				want = later.Balance // the last entry at that millisecond
			}
		}
		assert.Equalf(t, want, at, "%v: BalanceAt entry %d", account, i)
	}
	if len(all) > 0 {
		if at, ok := balanceBeforeFirst(t, c, account, all[0]); ok {
			assert.Equalf(t, opening, at, "%v: before the first entry, the opening balance", account)
		}
	}
	return all
}

// TestStatementOfEveryKindOfTransfer: transfers, several legs, a hold
// captured in part, one voided, a reversal and a canceled transfer make
// the entries they should, with their keys and metadata, and the
// statement agrees with the accounts.
func TestStatementOfEveryKindOfTransfer(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	c := statementCoordinator(b)
	b.open(map[string]int64{"A": 1000, "B": 0, "C": 0})

	t1, err := c.Transfer(ctx, "A", "B", 100, twopc.WithKey("t1"), twopc.WithMetadata(map[string]string{"order": "1"}))
	require.NoError(t, err)
	t2, err := c.Transfer(ctx, "B", "C", 30)
	require.NoError(t, err)
	t3, err := c.TransferLegs(ctx, []twopc.Leg{{Account: "A", Amount: -20}, {Account: "B", Amount: 10}, {Account: "C", Amount: 10}})
	require.NoError(t, err)
	h1, err := c.Hold(ctx, "A", "B", 40)
	require.NoError(t, err)
	c1, err := c.Capture(ctx, h1.ID, 25)
	require.NoError(t, err)
	h2, err := c.Hold(ctx, "A", "C", 10)
	require.NoError(t, err)
	_, err = c.Void(ctx, h2.ID)
	require.NoError(t, err)
	rev, err := c.Reverse(ctx, t3.ID)
	require.NoError(t, err)
	_, err = c.Transfer(ctx, "C", "A", 10_000)
	require.ErrorIs(t, err, twopc.ErrInsufficientFunds)
	held, err := c.Hold(ctx, "A", "C", 7) // still held: not an entry, in Held
	require.NoError(t, err)

	type row struct {
		txn    bson.ObjectID
		amount int64
	}
	rows := func(es []twopc.Entry) []row {
		out := make([]row, len(es))
		for i, e := range es {
			out[i] = row{e.Txn, e.Amount}
		}
		return out
	}
	a := checkStatement(t, c, "A", 1000)
	assert.Equal(t, []row{{t1.ID, -100}, {t3.ID, -20}, {c1.ID, -25}, {rev.ID, 20}}, rows(a), "a capture's entries are its own")
	assert.Equal(t, "t1", a[0].Key)
	assert.Equal(t, map[string]string{"order": "1"}, a[0].Metadata)
	assert.Equal(t, int64(1000-100-20-25+20), a[len(a)-1].Balance)
	bs := checkStatement(t, c, "B", 0)
	assert.Equal(t, []row{{t1.ID, 100}, {t2.ID, -30}, {t3.ID, 10}, {c1.ID, 25}, {rev.ID, -10}}, rows(bs))
	cs := checkStatement(t, c, "C", 0)
	assert.Equal(t, []row{{t2.ID, 30}, {t3.ID, 10}, {rev.ID, -10}}, rows(cs))
	for _, es := range [][]twopc.Entry{a, bs, cs} {
		for _, e := range es {
			assert.NotEqual(t, held.ID, e.Txn, "a hold still held is not an entry")
			assert.NotEqual(t, h2.ID, e.Txn, "a voided hold is not an entry")
		}
	}
}

// TestStatementConcurrentTransfers: transfers racing between accounts
// with no overdraft leave statements whose running balances never go
// below zero and end at each account's balance.
func TestStatementConcurrentTransfers(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	c := statementCoordinator(b)
	opening := map[string]int64{}
	var ids []string
	for i := range 6 {
		id := fmt.Sprintf("acct-%d", i)
		ids = append(ids, id)
		opening[id] = int64(100 * i)
	}
	b.open(opening)
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for range 20 {
				from, to := ids[rng.IntN(len(ids))], ids[rng.IntN(len(ids))]
				if from == to {
					continue
				}
				_, _ = c.Transfer(ctx, from, to, 1+rng.Int64N(150))
			}
		}()
	}
	wg.Wait()
	require.NoError(t, c.Settle(ctx))
	var total int64
	for _, id := range ids {
		es := checkStatement(t, c, id, opening[id], 5, 13)
		for i, e := range es {
			require.GreaterOrEqualf(t, e.Balance, int64(0), "%s: entry %d shows a balance the account never had", id, i)
		}
		total += b.balance(id)
	}
	assert.Equal(t, int64(1500), total)
}

// TestStatementBadQueries: each bad query gets a clear error.
func TestStatementBadQueries(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	c := statementCoordinator(b)
	b.open(map[string]int64{"A": 100, "B": 0})
	for range 3 {
		_, err := c.Transfer(ctx, "A", "B", 1)
		require.NoError(t, err)
	}
	p, err := c.Statement(ctx, "", "A", twopc.StatementQuery{Limit: 1})
	require.NoError(t, err)
	require.NotEmpty(t, p.Next)
	now := time.Now()
	for name, q := range map[string]twopc.StatementQuery{
		"negative limit":          {Limit: -1},
		"limit past the most":     {Limit: twopc.MaxStatementLimit + 1},
		"since after until":       {Since: now, Until: now.Add(-time.Second)},
		"a token that is garbage": {After: "not a token"},
		"a token of base64 junk":  {After: "eyJrIjo"},
		"the other direction":     {After: p.Next, Reverse: true},
	} {
		_, err := c.Statement(ctx, "", "A", q)
		assert.ErrorIsf(t, err, twopc.ErrInvalidQuery, "%s", name)
	}
	_, err = c.Statement(ctx, "", "B", twopc.StatementQuery{After: p.Next})
	assert.ErrorIs(t, err, twopc.ErrInvalidQuery, "a token of another account")
	_, err = c.Statement(ctx, "nowhere", "A", twopc.StatementQuery{})
	assert.ErrorIs(t, err, twopc.ErrUnknownLedger)
	_, err = c.Statement(ctx, "", nil, twopc.StatementQuery{})
	assert.ErrorIs(t, err, twopc.ErrInvalidAccountID)
	_, err = c.Statement(ctx, "", "nobody", twopc.StatementQuery{})
	assert.ErrorIs(t, err, twopc.ErrAccountNotFound)
	_, err = c.BalanceAt(ctx, "", "nobody", now)
	assert.ErrorIs(t, err, twopc.ErrAccountNotFound)
	p, err = c.Statement(ctx, "", "A", twopc.StatementQuery{Since: now.Add(time.Hour)})
	require.NoError(t, err)
	assert.Empty(t, p.Entries)
	assert.Empty(t, p.Next)
}

// TestStatementHandInsertedAccount: an account inserted by hand has no
// recorded opening; it is derived (balance, legs in flight, entries), a
// hold held on it counted, and the statement agrees with the account.
func TestStatementHandInsertedAccount(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	c := statementCoordinator(b)
	_, err := b.db.Collection("accounts").InsertMany(ctx, []any{
		bson.D{{Key: "_id", Value: "hand"}, {Key: "balance", Value: int64(500)}, {Key: "pendingTransactions", Value: bson.A{}}},
		bson.D{{Key: "_id", Value: "other"}, {Key: "balance", Value: int64(500)}, {Key: "pendingTransactions", Value: bson.A{}}},
	})
	require.NoError(t, err)
	_, err = c.Transfer(ctx, "hand", "other", 120)
	require.NoError(t, err)
	_, err = c.Transfer(ctx, "other", "hand", 20)
	require.NoError(t, err)
	_, err = c.Hold(ctx, "hand", "other", 50) // held: out of the balance, in no entry
	require.NoError(t, err)
	h, err := c.Hold(ctx, "other", "hand", 30)
	require.NoError(t, err)
	_, err = c.Capture(ctx, h.ID, 10)
	require.NoError(t, err)
	es := checkStatement(t, c, "hand", 500)
	require.Len(t, es, 3)
	checkStatement(t, c, "other", 500)
}

// TestStatementWithArchive: statements read the archive as well as the
// log, answer the same before and after pruning, and count once a
// transaction whose late copy the log holds again.
func TestStatementWithArchive(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	archive := b.db.Collection("archive")
	c := statementCoordinator(b, twopc.WithHistory(time.Millisecond, archive))
	b.open(map[string]int64{"A": 300, "B": 0})
	var first bson.ObjectID
	for i := range 5 {
		txn, err := c.Transfer(ctx, "A", "B", int64(10+i))
		require.NoError(t, err)
		if i == 0 {
			first = txn.ID
		}
	}
	beforeA, beforeB := checkStatement(t, c, "A", 300), checkStatement(t, c, "B", 0)
	ageFinalIn(t, b.db)
	r := twopc.NewRecoverer(b.coordinator(twopc.WithApplication("recoverer"), twopc.WithHistory(time.Millisecond, archive)))
	rep, err := r.RecoverOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 5, rep.Removed)
	require.Empty(t, b.txns())
	assert.Equal(t, beforeA, checkStatement(t, c, "A", 300), "the same from the archive")
	assert.Equal(t, beforeB, checkStatement(t, c, "B", 0))

	// A late copy of the first in the log, as its insert delivered again
	// leaves it: pending, never committed (its commit delivered again is
	// refused: TestStatementNeverListsALateCopy).
	_, err = b.db.Collection("transactions").InsertOne(ctx, lateCopy(t, archive, first))
	require.NoError(t, err)
	assert.Equal(t, beforeA, checkStatement(t, c, "A", 300), "a copy is not an entry")
}

// lateCopy is the document a late insert of archived transaction id
// brings back to the log: the archived one as first inserted, pending, with
// no commit time.
func lateCopy(t *testing.T, archive *mongo.Collection, id bson.ObjectID) bson.D {
	t.Helper()
	var doc, out bson.D
	require.NoError(t, archive.FindOne(testCtx(t), bson.D{{Key: "_id", Value: id}}).Decode(&doc))
	for _, e := range doc {
		switch e.Key {
		case "committedAt":
			continue
		case "state":
			e.Value = "pending"
		case "lastModified":
			e.Value = time.Now().UTC()
		}
		out = append(out, e)
	}
	return out
}

// TestStatementShowsWhatJustHappened: a page read right after a call
// returned, by another coordinator, lists that call's entry, with the
// default horizon; a page that reached the last entry has no Next, and
// pages of one list every entry once; BalanceAt counts every entry.
func TestStatementShowsWhatJustHappened(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	c := b.coordinator(twopc.WithSyncSettle())
	reader := b.coordinator()
	b.open(map[string]int64{"A": 100, "B": 0})
	var ids []bson.ObjectID
	for i := range 3 {
		txn, err := c.Transfer(ctx, "A", "B", 10)
		require.NoError(t, err)
		ids = append(ids, txn.ID)
		p, err := reader.Statement(ctx, "", "A", twopc.StatementQuery{})
		require.NoError(t, err)
		require.Len(t, p.Entries, i+1, "the transfer just made is listed")
		assert.Equal(t, txn.ID, p.Entries[i].Txn)
		assert.Equal(t, int64(90-10*i), p.Entries[i].Balance)
		assert.Empty(t, p.Next, "the page reached the last entry")
	}
	var listed []bson.ObjectID
	for _, e := range paged(t, reader, "A", twopc.StatementQuery{Limit: 1}) {
		listed = append(listed, e.Txn)
	}
	assert.Equal(t, ids, listed, "pages of one, within the horizon: every entry once")
	at, err := reader.BalanceAt(ctx, "", "A", time.Now().Add(time.Minute))
	require.NoError(t, err)
	assert.Equal(t, int64(70), at)
	ctxDone, cancel := context.WithCancel(ctx)
	cancel()
	_, err = c.Statement(ctxDone, "", "A", twopc.StatementQuery{})
	assert.ErrorIs(t, err, context.Canceled)
}

// TestStatementPagesListALateCommitOnce: a commit stamped before the entry
// a page (oldest first) showed last, and visible only after that page was
// read (a commit is stamped before it is written), is listed by the next
// page, and every entry once: the token of a page ending within the
// horizon resumes from the horizon, skipping what the page showed.
func TestStatementPagesListALateCommitOnce(t *testing.T) {
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
	p, err := c.Statement(ctx, "", "A", twopc.StatementQuery{Limit: 1})
	require.NoError(t, err)
	require.Len(t, p.Entries, 1)
	require.NotEmpty(t, p.Next)
	first := p.Entries[0]

	// The late one: a committed transfer stamped a millisecond before the
	// entry shown, made visible now.
	late := insertLateCommit(t, b, ids[1], first.At.Add(-time.Millisecond))

	listed := []bson.ObjectID{first.Txn}
	q := twopc.StatementQuery{Limit: 1, After: p.Next}
	for range 10 {
		p, err := c.Statement(ctx, "", "A", q)
		require.NoError(t, err)
		for _, e := range p.Entries {
			listed = append(listed, e.Txn)
		}
		if p.Next == "" {
			break
		}
		q.After = p.Next
	}
	assert.ElementsMatch(t, append(ids, late), listed, "every entry once, the late one included")
	assert.Equal(t, ids[0], listed[0])
}

// TestStatementReadsByTheIndex: on MongoDB a statement's read of the log
// is served by the {accounts, committedAt} index (a multikey index scan,
// no collection scan and no in-memory sort); on the dev server, whose
// FerretDB keeps a side table of each array's elements for such an index
// (DIFFERENCES.md item 14), by that table's search on the element and the
// committedAt range, then the _id index, with the same answer (it sorts
// in Go).
func TestStatementReadsByTheIndex(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t) // EnsureIndexes
	c := statementCoordinator(b)
	b.open(map[string]int64{"A": 100, "B": 0})
	_, err := c.Transfer(ctx, "A", "B", 10)
	require.NoError(t, err)
	key, err := twopc.EntryKey("", "A")
	require.NoError(t, err)
	var plan bson.M
	require.NoError(t, b.db.RunCommand(ctx, bson.D{{Key: "explain", Value: bson.D{
		{Key: "find", Value: "transactions"},
		{Key: "filter", Value: bson.D{{Key: "accounts", Value: key}, {Key: "committedAt", Value: bson.D{{Key: "$type", Value: "date"}}}}},
		{Key: "sort", Value: bson.D{{Key: "committedAt", Value: 1}}},
	}}}).Decode(&plan))
	text := fmt.Sprint(plan["queryPlanner"])
	if isFerretDB(t, b.db) {
		assert.Regexp(t, `SEARCH _ferretdb_elements_transactions_\S+ USING COVERING INDEX \S+ \(e=\?`, text, "by the element")
		assert.NotRegexp(t, `SCAN transactions_\S+\b`, text, "no scan of the log")
	} else {
		assert.Contains(t, text, "accounts_1_committedAt_1")
		assert.Contains(t, text, "IXSCAN")
		assert.NotContains(t, text, "COLLSCAN")
		assert.NotContains(t, text, "stage:SORT")
	}
	assert.Len(t, fullStatement(t, c, "A", false), 1)
}

// TestStatementAcrossDeployments: legs of one transfer on ledgers of two
// deployments are entries of each account in its own ledger, one
// deployment restarted between transfers; the statements agree with the
// accounts.
func TestStatementAcrossDeployments(t *testing.T) {
	ownServers(t)
	ctx := testCtx(t)
	bk := newBanks(t, twopc.WithStatementHorizon(0), twopc.WithSyncSettle())
	sh, err := bk.c.Ledger(bankNames[0])
	require.NoError(t, err)
	bj, err := bk.c.Ledger(bankNames[1])
	require.NoError(t, err)
	require.NoError(t, sh.OpenAccount(ctx, "A", 1000))
	require.NoError(t, sh.OpenAccount(ctx, "B", 0))
	require.NoError(t, bj.OpenAccount(ctx, "C", 0))
	require.NoError(t, bj.OpenAccount(ctx, "D", 500))

	t1, err := bk.c.TransferLegs(ctx, []twopc.Leg{{Ledger: bankNames[0], Account: "A", Amount: -100}, {Ledger: bankNames[1], Account: "C", Amount: 100}})
	require.NoError(t, err)
	bk.restart(1)
	c := bk.coordinator(twopc.WithStatementHorizon(0), twopc.WithSyncSettle()) // clients of its own after the restart
	t2, err := c.TransferLegs(ctx, []twopc.Leg{{Ledger: bankNames[1], Account: "D", Amount: -50}, {Ledger: bankNames[0], Account: "B", Amount: 30}, {Ledger: bankNames[0], Account: "A", Amount: 20}})
	require.NoError(t, err)

	type row struct {
		txn             bson.ObjectID
		amount, balance int64
	}
	for _, tc := range []struct {
		ledger, account string
		want            []row
	}{
		{bankNames[0], "A", []row{{t1.ID, -100, 900}, {t2.ID, 20, 920}}},
		{bankNames[0], "B", []row{{t2.ID, 30, 30}}},
		{bankNames[1], "C", []row{{t1.ID, 100, 100}}},
		{bankNames[1], "D", []row{{t2.ID, -50, 450}}},
	} {
		p, err := c.Statement(ctx, tc.ledger, tc.account, twopc.StatementQuery{})
		require.NoError(t, err)
		var got []row
		for _, e := range p.Entries {
			assert.Equal(t, tc.ledger, e.Ledger)
			got = append(got, row{e.Txn, e.Amount, e.Balance})
		}
		assert.Equalf(t, tc.want, got, "%s/%s", tc.ledger, tc.account)
		l, err := c.Ledger(tc.ledger)
		require.NoError(t, err)
		a, err := l.Account(ctx, tc.account)
		require.NoError(t, err)
		now, err := c.BalanceAt(ctx, tc.ledger, tc.account, time.Now().Add(time.Hour))
		require.NoError(t, err)
		assert.Equalf(t, a.Balance+a.Held, now, "%s/%s", tc.ledger, tc.account)
	}
	_, err = c.Statement(ctx, bankNames[1], "A", twopc.StatementQuery{})
	assert.ErrorIs(t, err, twopc.ErrAccountNotFound, "A is not in Beijing's ledger")
}

// TestStatementCheckpoints: a read that summed enough entries records a
// checkpoint (the balance through a whole millisecond old enough), and
// later reads start from it: the statement and every balance stay the
// same, and a checkpoint altered by hand shows in them, which proves it
// is read. Entries newer than the checkpoint horizon get none.
func TestStatementCheckpoints(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	b.open(map[string]int64{"A": 1000, "B": 0})
	young := statementCoordinator(b, twopc.WithCheckpoints(5, time.Hour))
	c := statementCoordinator(b, twopc.WithCheckpoints(5, 0))
	for i := range 12 {
		_, err := c.Transfer(ctx, "A", "B", int64(1+i))
		require.NoError(t, err)
	}
	cps := b.db.Collection("transactions_checkpoints")
	checkStatement(t, young, "A", 1000, 4)
	n, err := cps.CountDocuments(ctx, bson.D{})
	require.NoError(t, err)
	require.Zero(t, n, "no checkpoint through entries younger than the horizon")

	first := checkStatement(t, c, "A", 1000, 4)
	n, err = cps.CountDocuments(ctx, bson.D{})
	require.NoError(t, err)
	require.Positive(t, n, "a checkpoint was recorded")
	assert.Equal(t, first, checkStatement(t, c, "A", 1000, 3), "the same from the checkpoint")
	assert.Equal(t, first, checkStatement(t, c, "A", 1000, 5))

	var cp struct {
		ID      string    `bson:"_id"`
		At      time.Time `bson:"at"`
		Balance int64     `bson:"balance"`
	}
	require.NoError(t, cps.FindOne(ctx, bson.D{}).Decode(&cp))
	var want int64 = 1000
	for _, e := range first {
		if !e.At.After(cp.At) {
			want = e.Balance
		}
	}
	assert.Equal(t, want, cp.Balance, "the balance through the checkpoint's millisecond")
	_, err = cps.UpdateMany(ctx, bson.D{}, bson.D{{Key: "$inc", Value: bson.D{{Key: "balance", Value: int64(1_000_000)}}}})
	require.NoError(t, err)
	now, err := c.BalanceAt(ctx, "", "A", time.Now().Add(time.Hour))
	require.NoError(t, err)
	assert.Equal(t, first[len(first)-1].Balance+1_000_000, now, "read from the checkpoint")
	if before, ok := balanceBeforeFirst(t, c, "A", first[0]); ok {
		assert.Equal(t, int64(1000), before, "before the checkpoint: from the opening")
	}
}

// TestStatementOpeningStable: the derived opening of an account inserted
// by hand is the same before and after a committed transfer settles; markers of
// another program (a tutorial transfer, whose document has no transaction
// time) and of a transaction the log does not hold are not counted; the
// derived opening is recorded in the account once two readings agree.
func TestStatementOpeningStable(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithStepHook(crashAt(twopc.StepSettle)), twopc.WithSyncSettle())
	c := statementCoordinator(b)
	tut, missing := bson.NewObjectID(), bson.NewObjectID()
	tut[11], missing[11] = 0, 0
	_, err := b.db.Collection("accounts").InsertMany(ctx, []any{
		bson.D{{Key: "_id", Value: "h"}, {Key: "balance", Value: int64(60)}, {Key: "pendingTransactions", Value: bson.A{tut, missing}}},
		bson.D{{Key: "_id", Value: "o"}, {Key: "balance", Value: int64(40)}, {Key: "pendingTransactions", Value: bson.A{tut}}},
	})
	require.NoError(t, err)
	_, err = b.db.Collection("transactions").InsertOne(ctx, bson.D{{Key: "_id", Value: tut}, {Key: "source", Value: "h"},
		{Key: "destination", Value: "o"}, {Key: "value", Value: int64(40)}, {Key: "state", Value: "applied"}, {Key: "lastModified", Value: time.Now()}})
	require.NoError(t, err)
	_, err = b.c.Transfer(ctx, "h", "o", 30)
	require.ErrorIs(t, err, errCrash, "committed, left applied")
	txn := b.txns()[1]

	balances := func() (int64, int64) {
		h, err := c.BalanceAt(ctx, "", "h", time.Now().Add(time.Hour))
		require.NoError(t, err)
		o, err := c.BalanceAt(ctx, "", "o", time.Now().Add(time.Hour))
		require.NoError(t, err)
		return h, o
	}
	h, o := balances()
	assert.Equal(t, int64(30), h, "60 − 30, the transfer an entry")
	assert.Equal(t, int64(70), o)
	var acct struct {
		Opening struct {
			Balance int64 `bson:"balance"`
			Derived bool  `bson:"derived"`
		} `bson:"opening"`
	}
	require.NoError(t, b.db.Collection("accounts").FindOne(ctx, bson.D{{Key: "_id", Value: "h"}}).Decode(&acct))
	assert.Equal(t, int64(60), acct.Opening.Balance, "recorded: the balance before the entry")
	assert.True(t, acct.Opening.Derived)

	// Settled, and derived again from scratch: the same.
	r := twopc.NewRecoverer(b.coordinator(twopc.WithApplication("recoverer")))
	_, err = r.RecoverOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, twopc.StateDone, b.txn(txn.ID).State)
	_, err = b.db.Collection("accounts").UpdateMany(ctx, bson.D{}, bson.D{{Key: "$unset", Value: bson.D{{Key: "opening", Value: ""}}}})
	require.NoError(t, err)
	h, o = balances()
	assert.Equal(t, int64(30), h)
	assert.Equal(t, int64(70), o)
}

// TestStatementPagesPastLateCopies: entries of the archive committed after
// an entry of the log, with late copies of them in the log (pending, as a
// late insert leaves them: never entries), pages of one and two
// concatenate to the whole, each entry once.
func TestStatementPagesPastLateCopies(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	archive := b.db.Collection("archive")
	c := statementCoordinator(b, twopc.WithHistory(time.Millisecond, archive))
	b.open(map[string]int64{"A": 300, "B": 0})
	var archived []bson.ObjectID
	for i := range 2 {
		txn, err := c.Transfer(ctx, "A", "B", int64(10+i))
		require.NoError(t, err)
		archived = append(archived, txn.ID)
	}
	ageFinalIn(t, b.db)
	rep, err := twopc.NewRecoverer(b.coordinator(twopc.WithApplication("recoverer"), twopc.WithHistory(time.Millisecond, archive))).RecoverOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, rep.Removed)
	kept, err := c.Transfer(ctx, "A", "B", 5, twopc.WithKey("kept")) // keyed: never removed
	require.NoError(t, err)
	var k struct {
		At time.Time `bson:"committedAt"`
	}
	require.NoError(t, b.db.Collection("transactions").FindOne(ctx, bson.D{{Key: "_id", Value: kept.ID}}).Decode(&k))
	// The archived ones committed after it, and late copies of them in
	// the log.
	for i, id := range archived {
		_, err := archive.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "committedAt", Value: k.At.Add(time.Duration(i+1) * time.Millisecond)}}}})
		require.NoError(t, err)
		_, err = b.db.Collection("transactions").InsertOne(ctx, lateCopy(t, archive, id))
		require.NoError(t, err)
	}
	all := checkStatement(t, c, "A", 300, 1, 2)
	require.Len(t, all, 3)
	assert.Equal(t, kept.ID, all[0].Txn)
}

// TestStatementAfterRemoval: WithHistory without an archive removes done
// transfers only after recording, for each of their accounts, a removal
// checkpoint (the balance through them); balances and statements from
// there on are the same as before the removal, and a time before it gets
// ErrHistoryRemoved, never a wrong number. Transfers committed within the
// checkpoint horizon are kept for a later pass.
func TestStatementAfterRemoval(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	c := statementCoordinator(b, twopc.WithHistory(time.Millisecond, nil), twopc.WithCheckpoints(1000, 0))
	b.open(map[string]int64{"A": 500, "B": 0})
	for i := range 4 {
		_, err := c.Transfer(ctx, "A", "B", int64(10+i))
		require.NoError(t, err)
	}
	before := fullStatement(t, c, "A", false)
	require.Len(t, before, 4)
	removal := before[3].At

	young := twopc.NewRecoverer(b.coordinator(twopc.WithApplication("recoverer"), twopc.WithHistory(time.Millisecond, nil),
		twopc.WithCheckpoints(1000, time.Hour)))
	ageFinalIn(t, b.db)
	rep, err := young.RecoverOnce(ctx)
	require.NoError(t, err)
	assert.Zero(t, rep.Removed, "committed within the checkpoint horizon: kept")

	r := twopc.NewRecoverer(b.coordinator(twopc.WithApplication("recoverer"), twopc.WithHistory(time.Millisecond, nil),
		twopc.WithCheckpoints(1000, 0)))
	rep, err = r.RecoverOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 4, rep.Removed)
	require.Empty(t, b.txns())

	now, err := c.BalanceAt(ctx, "", "A", time.Now().Add(time.Hour))
	require.NoError(t, err)
	assert.Equal(t, before[3].Balance, now, "the same after the removal")
	at, err := c.BalanceAt(ctx, "", "A", removal)
	require.NoError(t, err)
	assert.Equal(t, before[3].Balance, at)
	_, err = c.BalanceAt(ctx, "", "A", before[1].At)
	require.ErrorIs(t, err, twopc.ErrHistoryRemoved)
	_, err = c.Statement(ctx, "", "A", twopc.StatementQuery{})
	require.ErrorIs(t, err, twopc.ErrHistoryRemoved)

	later, err := c.Transfer(ctx, "A", "B", 7)
	require.NoError(t, err)
	p, err := c.Statement(ctx, "", "A", twopc.StatementQuery{Since: removal.Add(time.Millisecond)})
	require.NoError(t, err)
	require.Len(t, p.Entries, 1)
	assert.Equal(t, later.ID, p.Entries[0].Txn)
	assert.Equal(t, before[3].Balance-7, p.Entries[0].Balance, "counted from the removal checkpoint")
	a, err := c.Account(ctx, "A")
	require.NoError(t, err)
	assert.Equal(t, a.Balance, p.Entries[0].Balance)
	bal, err := c.BalanceAt(ctx, "", "B", time.Now().Add(time.Hour))
	require.NoError(t, err)
	assert.Equal(t, b.balance("B"), bal)
}

// A transfer removed from the log with no archive (WithHistory) and its
// write commands delivered again afterwards, every one of them, in order:
// the insert brings a copy back, and the copy must never become an entry.
// The commit delivered again is refused (it requires the lastModified its
// sender read, and the copy's is the late insert's), and recovery cancels
// the copy (a leg closed and none applied: reason late_copy) rather than
// roll it forward. A hold captured, and a transfer canceled, the same.
func TestStatementNeverListsALateCopy(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	c, rec := lateCopyCoordinator(t, b)
	done, err := c.Transfer(ctx, "A", "B", 10)
	require.NoError(t, err)
	_, err = c.Transfer(ctx, "A", "B", 1000)
	require.ErrorIs(t, err, twopc.ErrInsufficientFunds)
	hold, err := c.Hold(ctx, "A", "B", 20)
	require.NoError(t, err)
	capture, err := c.Capture(ctx, hold.ID, 15)
	require.NoError(t, err)
	before := fullStatement(t, c, "A", false)
	require.Len(t, before, 2)
	assert.Equal(t, done.ID, before[0].Txn)

	removeFinal(t, b, 3)
	require.Len(t, b.txns(), 1, "the capture, keyed, is kept")
	kept := map[bson.ObjectID]bool{capture.ID: true}
	since := time.Now()
	later, err := c.Transfer(ctx, "A", "B", 7, twopc.WithKey("kept")) // keyed: never removed
	require.NoError(t, err)
	kept[later.ID] = true
	balances := b.accountStates()

	resendAll(t, b.db, rec.recorded()) // every write, the later transfer's and the capture's too
	copies := map[bson.ObjectID]bool{}
	for _, d := range b.txns() {
		if !kept[d.ID] {
			copies[d.ID] = d.State == twopc.StatePending
			assert.Containsf(t, []twopc.State{twopc.StatePending, twopc.StateCanceled}, d.State,
				"copy %s: a late commit, capture or move to held matched it", d.ID.Hex())
		}
	}
	require.Len(t, copies, 3, "the inserts brought copies back")
	var mu sync.Mutex
	rolledBack := map[bson.ObjectID]bool{}
	committed := map[bson.ObjectID]twopc.State{}
	b.recoverAll(twopc.WithObserver(twopc.Observer{
		Transition: func(_ context.Context, e twopc.TransitionEvent) {
			if e.To == twopc.StateApplied || e.To == twopc.StateHeld {
				mu.Lock()
				committed[e.Txn] = e.To
				mu.Unlock()
			}
		},
		Recovery: func(_ context.Context, e twopc.RecoveryEvent) {
			if e.Action == twopc.RecoveryRollBack && e.Outcome == twopc.OutcomeMoved {
				mu.Lock()
				rolledBack[e.Txn] = true
				mu.Unlock()
			}
		},
	}))
	assert.Equal(t, balances, b.accountStates(), "a late write moved money")
	mu.Lock()
	assert.Empty(t, committed, "recovery committed a copy")
	for id, pending := range copies {
		if pending {
			assert.Truef(t, rolledBack[id], "copy %s was not rolled back", id.Hex())
		}
	}
	mu.Unlock()
	for _, d := range b.txns() {
		assert.Falsef(t, d.State.Committed() && !kept[d.ID], "copy %s is %s", d.ID.Hex(), d.State)
	}

	onlyEntrySince(t, b, c, since, later.ID)
}

// The same for transfers inserted in a group (TransferBatch): the grouped
// insert returns no lastModified, so the coordinator reads it back for
// the transactions WithHistory will remove without an archive, and their
// commit requires it too.
func TestStatementNeverListsALateCopyOfABatch(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	c, rec := lateCopyCoordinator(t, b)
	res, err := c.TransferBatch(ctx, []twopc.TransferRequest{
		{Source: "A", Destination: "B", Value: 10}, {Source: "A", Destination: "B", Value: 20}, {Source: "A", Destination: "B", Value: 1000},
	})
	require.NoError(t, err)
	require.NoError(t, res[0].Err)
	require.NoError(t, res[1].Err)
	require.ErrorIs(t, res[2].Err, twopc.ErrInsufficientFunds)
	grouped := 0
	for _, cmd := range rec.recorded() {
		if coll, _ := cmd.Lookup("update").StringValueOK(); coll == "transactions" {
			if u, ok := cmd.Lookup("updates").ArrayOK(); ok {
				if vals, _ := u.Values(); len(vals) == 3 {
					grouped++ // the three inserts in one command
				}
			}
		}
	}
	require.Equal(t, 1, grouped, "the inserts went in one command")

	removeFinal(t, b, 3)
	since := time.Now()
	later, err := c.Transfer(ctx, "A", "B", 7, twopc.WithKey("kept"))
	require.NoError(t, err)
	balances := b.accountStates()

	resendAll(t, b.db, rec.recorded())
	for _, d := range b.txns() {
		if d.ID != later.ID {
			assert.Containsf(t, []twopc.State{twopc.StatePending, twopc.StateCanceled}, d.State,
				"copy %s: a late commit matched it", d.ID.Hex())
		}
	}
	b.recoverAll()
	assert.Equal(t, balances, b.accountStates(), "a late write moved money")
	onlyEntrySince(t, b, c, since, later.ID)
}

// lateCopyCoordinator is a coordinator on b whose writes rec records, with
// statements at once and WithHistory removing without an archive, and
// accounts A (500) and B (0).
func lateCopyCoordinator(t *testing.T, b *bank) (*twopc.Coordinator, *writeRecorder) {
	t.Helper()
	rec := &writeRecorder{}
	c, err := twopc.NewCoordinator(rec.database(b), twopc.WithStatementHorizon(0), twopc.WithSyncSettle(),
		twopc.WithHistory(time.Millisecond, nil))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	b.open(map[string]int64{"A": 500, "B": 0})
	return c, rec
}

// removeFinal removes b's final transactions without an archive (three
// recovery passes), and asserts it removed want.
func removeFinal(t *testing.T, b *bank, want int) {
	t.Helper()
	r := twopc.NewRecoverer(b.coordinator(twopc.WithApplication("remover"), twopc.WithHistory(time.Millisecond, nil),
		twopc.WithCheckpoints(1000, 0)))
	removed := 0
	for range 3 {
		b.ageFinal()
		rep, err := r.RecoverOnce(testCtx(t))
		require.NoError(t, err)
		removed += rep.Removed
	}
	require.Equal(t, want, removed)
}

// onlyEntrySince asserts that the statements of A and B since since list
// transaction id alone, and that BalanceAt now gives each its balance.
func onlyEntrySince(t *testing.T, b *bank, c *twopc.Coordinator, since time.Time, id bson.ObjectID) {
	t.Helper()
	ctx := testCtx(t)
	for _, acct := range []string{"A", "B"} {
		p, err := c.Statement(ctx, "", acct, twopc.StatementQuery{Since: since})
		require.NoError(t, err)
		var ids []bson.ObjectID
		for _, e := range p.Entries {
			ids = append(ids, e.Txn)
		}
		assert.Equalf(t, []bson.ObjectID{id}, ids, "%s: only the transfer made after the removal", acct)
		bal, err := c.BalanceAt(ctx, "", acct, time.Now().Add(time.Hour))
		require.NoError(t, err)
		assert.Equal(t, b.balance(acct), bal, acct)
	}
}
