package twopc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twopc/twopc/internal/schema"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/topology"
)

// The pure parts of the protocol, tested without a server (as mgo/txn
// tests its graph algorithm): go test -run Unit ./... runs them in seconds
// (TestMain starts no server for that pattern).

// account builds an account document as the server would return it.
func unitAccount(t *testing.T, fields bson.D) *account {
	t.Helper()
	raw, err := bson.Marshal(append(bson.D{{Key: "_id", Value: "A"}}, fields...))
	require.NoError(t, err)
	var a account
	require.NoError(t, bson.Unmarshal(raw, &a))
	return &a
}

// absent, as a field's value in adoptedAccount, leaves the field out.
type absent struct{}

// adoptedAccount is fields with what adoption sets where fields do not
// say (fencedLegs [], a date line at 1970), less the fields set to absent.
func adoptedAccount(fields bson.D) bson.D {
	out := bson.D{}
	has := map[string]bool{}
	for _, e := range fields {
		has[e.Key] = true
		if _, skip := e.Value.(absent); !skip {
			out = append(out, e)
		}
	}
	if !has["fencedLegs"] {
		out = append(out, bson.E{Key: "fencedLegs", Value: bson.A{}})
	}
	if !has["fencedBefore"] {
		out = append(out, bson.E{Key: "fencedBefore", Value: time.UnixMilli(0).UTC()})
	}
	return out
}

func TestUnitJudge(t *testing.T) {
	id := newTxnID()
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := &record{Txn: Txn{ID: id, Created: created}}
	debit := leg{account: "A", delta: -10, marker: schema.Marker(id, 0), fenceID: schema.Fence(created, schema.Marker(id, 0))}
	credit := leg{account: "A", delta: 10, marker: schema.Marker(id, 1), fenceID: schema.Fence(created, schema.Marker(id, 1))}
	other := schema.Marker(newTxnID(), 0)
	for _, tc := range []struct {
		name    string
		fields  bson.D // nil: the account is missing
		l       leg
		neg     bool
		verdict legVerdict
		err     error
	}{
		{"debit applies", bson.D{{Key: "balance", Value: int64(10)}}, debit, false, legRetry, nil},
		{"debit overdraws", bson.D{{Key: "balance", Value: int64(9)}}, debit, false, legBlocked, ErrInsufficientFunds},
		{"debit overdraws, allowed", bson.D{{Key: "balance", Value: int64(9)}}, debit, true, legRetry, nil},
		{"debit past int64", bson.D{{Key: "balance", Value: int64(math.MinInt64 + 5)}}, debit, true, legBlocked, ErrBalanceOverflow},
		{"applied", bson.D{{Key: "balance", Value: int64(0)}, {Key: "pendingTransactions", Value: bson.A{debit.marker}}}, debit, false, legApplied, nil},
		{"another leg pending is not this one", bson.D{{Key: "balance", Value: int64(10)}, {Key: "pendingTransactions", Value: bson.A{other}}}, debit, false, legRetry, nil},
		{"fenced", bson.D{{Key: "balance", Value: int64(10)}, {Key: "fencedLegs", Value: bson.A{debit.fenceID}}}, debit, false, legFenced, nil},
		{"fenced tombstone", bson.D{{Key: "tombstone", Value: true}, {Key: "fencedLegs", Value: bson.A{credit.fenceID}}}, credit, false, legFenced, nil},
		{"another leg's fence is not this one's", bson.D{{Key: "balance", Value: int64(10)}, {Key: "fencedLegs", Value: bson.A{credit.fenceID}}}, debit, false, legRetry, nil},
		{"past the fence line", bson.D{{Key: "balance", Value: int64(10)}, {Key: "fencedBefore", Value: created}}, debit, false, legBlocked, ErrTooLate},
		{"before the fence line", bson.D{{Key: "balance", Value: int64(10)}, {Key: "fencedBefore", Value: created.Add(-time.Millisecond)}}, debit, false, legRetry, nil},
		{"missing", nil, credit, false, legBlocked, ErrAccountNotFound},
		{"tombstone", bson.D{{Key: "tombstone", Value: true}}, credit, false, legBlocked, ErrAccountNotFound},
		{"balance a string", bson.D{{Key: "balance", Value: "10"}}, credit, false, legBlocked, ErrInvalidAccount},
		{"balance int32", bson.D{{Key: "balance", Value: int32(10)}}, debit, false, legRetry, nil},
		{"fencedLegs not an array", bson.D{{Key: "balance", Value: int64(10)}, {Key: "fencedLegs", Value: "x"}}, debit, false, legBlocked, ErrInvalidAccount},
		{"fence line null: not adopted", bson.D{{Key: "balance", Value: int64(10)}, {Key: "fencedBefore", Value: nil}}, debit, false, legAdopt, nil},
		{"inserted by hand: not adopted", bson.D{{Key: "balance", Value: int64(10)}, {Key: "fencedBefore", Value: absent{}}, {Key: "fencedLegs", Value: absent{}}}, debit, false, legAdopt, nil},
		{"a whole double, not adopted", bson.D{{Key: "balance", Value: 10.0}, {Key: "fencedBefore", Value: absent{}}, {Key: "fencedLegs", Value: absent{}}}, debit, false, legAdopt, nil},
		{"a fractional double, not adopted", bson.D{{Key: "balance", Value: 10.5}, {Key: "fencedBefore", Value: absent{}}}, debit, false, legBlocked, ErrInvalidAccount},
		{"a double past int64, not adopted", bson.D{{Key: "balance", Value: 1e19}, {Key: "fencedBefore", Value: absent{}}}, debit, false, legBlocked, ErrInvalidAccount},
		{"a double on an adopted account", bson.D{{Key: "balance", Value: 10.0}}, debit, false, legBlocked, ErrInvalidAccount},
		{"a line and no fences: edited by hand", bson.D{{Key: "balance", Value: int64(10)}, {Key: "fencedLegs", Value: absent{}}}, debit, false, legBlocked, ErrInvalidAccount},
		{"fence line an array", bson.D{{Key: "balance", Value: int64(10)}, {Key: "fencedBefore", Value: bson.A{created.Add(-time.Hour)}}}, debit, false, legBlocked, ErrInvalidAccount},
		{"fence line a timestamp", bson.D{{Key: "balance", Value: int64(10)}, {Key: "fencedBefore", Value: bson.Timestamp{T: 1}}}, debit, false, legBlocked, ErrInvalidAccount},
		{"fence line MaxKey", bson.D{{Key: "balance", Value: int64(10)}, {Key: "fencedBefore", Value: bson.MaxKey{}}}, debit, false, legBlocked, ErrInvalidAccount},
		{"fence line a string", bson.D{{Key: "balance", Value: int64(10)}, {Key: "fencedBefore", Value: "2026"}}, debit, false, legBlocked, ErrInvalidAccount},
		{"credit idle, fits", bson.D{{Key: "balance", Value: int64(math.MaxInt64 - 10)}}, credit, false, legRetry, nil},
		{"credit idle, past int64", bson.D{{Key: "balance", Value: int64(math.MaxInt64 - 9)}}, credit, false, legBlocked, ErrBalanceOverflow},
		{"credit busy, within quarters", bson.D{{Key: "balance", Value: int64(creditQuarter)}, {Key: "pendingTransactions", Value: bson.A{other}}}, credit, false, legRetry, nil},
		{"credit busy, balance past a quarter", bson.D{{Key: "balance", Value: int64(creditQuarter + 1)}, {Key: "pendingTransactions", Value: bson.A{other}}}, credit, false, legBlocked, ErrBalanceOverflow},
		{"credit busy, pending credit at the bound", bson.D{{Key: "balance", Value: int64(0)}, {Key: "pendingCredit", Value: int64(2*creditQuarter - 10)}, {Key: "pendingTransactions", Value: bson.A{other}}}, credit, false, legRetry, nil},
		{"credit busy, pending credit past the bound", bson.D{{Key: "balance", Value: int64(0)}, {Key: "pendingCredit", Value: int64(2*creditQuarter - 9)}, {Key: "pendingTransactions", Value: bson.A{other}}}, credit, false, legBlocked, ErrBalanceOverflow},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var a *account
			if tc.fields != nil {
				a = unitAccount(t, adoptedAccount(tc.fields))
			}
			rec := *r
			rec.AllowNegative = tc.neg
			verdict, err := judge(a, &rec, tc.l)
			assert.Equal(t, tc.verdict, verdict)
			if tc.err == nil {
				assert.NoError(t, err)
			} else {
				assert.ErrorIs(t, err, tc.err)
			}
		})
	}
}

func TestUnitStateMoves(t *testing.T) {
	allowed := map[[2]State]bool{
		{StateInitial, StateInitial}: true, {StateInitial, StatePending}: true, {StateInitial, StateCanceling}: true,
		{StatePending, StatePending}: true, {StatePending, StateApplied}: true, {StatePending, StateCanceling}: true,
		{StateApplied, StateDone}:        true,
		{StateCanceling, StateCanceling}: true, {StateCanceling, StateCanceled}: true,
	}
	all := []State{StateInitial, StatePending, StateApplied, StateDone, StateCanceling, StateCanceled, "bogus"}
	for _, from := range all {
		for _, to := range all {
			assert.Equalf(t, allowed[[2]State{from, to}], canMove(from, to), "%s → %s", from, to)
		}
	}
	for _, s := range all {
		assert.Equalf(t, s == StateDone || s == StateCanceled, s.Final(), "%s final", s)
		assert.Equalf(t, s == StateApplied || s == StateDone, s.Committed(), "%s committed", s)
	}
	// No move leaves a final state, and none reaches applied but from pending:
	// the commit point is one guarded move.
	for pair := range allowed {
		assert.False(t, pair[0].Final(), "a move from final %s", pair[0])
		if pair[1] == StateApplied {
			assert.Equal(t, StatePending, pair[0])
		}
	}
}

func TestUnitSameID(t *testing.T) {
	for _, tc := range []struct {
		a, b any
		same bool
	}{
		{int32(1), int64(1), true},
		{int64(1), 1.0, true},
		{int32(1), 2, false},
		{"a", "a", true},
		{"a", "A", false},
		{"1", 1, false},
		{bson.D{{Key: "n", Value: int32(1)}}, bson.D{{Key: "n", Value: int64(1)}}, true},
		{bson.D{{Key: "x", Value: 1}, {Key: "y", Value: 2}}, bson.D{{Key: "y", Value: 2}, {Key: "x", Value: 1}}, false},
	} {
		assert.Equalf(t, tc.same, schema.SameID(tc.a, tc.b), "%v and %v", tc.a, tc.b)
	}
}

// updateOf returns the filter and update of a single-document update model.
func updateOf(t *testing.T, m mongo.WriteModel) (filter, update bson.M, upsert bool) {
	t.Helper()
	u, ok := m.(*mongo.UpdateOneModel)
	require.True(t, ok, "a single-document update, got %T", m)
	re := func(v any) bson.M {
		raw, err := bson.Marshal(v)
		require.NoError(t, err)
		dec := bson.NewDecoder(bson.NewDocumentReader(bytes.NewReader(raw)))
		dec.DefaultDocumentM()
		var out bson.M
		require.NoError(t, dec.Decode(&out))
		return out
	}
	return re(u.Filter), re(u.Update), u.Upsert != nil && *u.Upsert
}

// TestUnitLegWrites checks the guard of each of the five leg writes: what
// makes it take effect at most once.
func TestUnitLegWrites(t *testing.T) {
	id := newTxnID()
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := &record{Txn: Txn{ID: id, Created: created}}
	l := leg{account: "A", delta: -10, marker: schema.Marker(id, 0), fenceID: schema.Fence(created, schema.Marker(id, 0))}

	f, u, upsert := updateOf(t, applyModel(r, l, time.Time{}))
	assert.False(t, upsert)
	assert.Equal(t, "A", f["_id"])
	assert.Equal(t, bson.M{"$ne": l.marker}, f[fieldPending], "not applied yet")
	assert.Equal(t, bson.M{"$type": "array", "$ne": l.fenceID}, f[fieldFencedLegs], "not closed, and fences an array")
	assert.NotContains(t, u, "$max", "no mark read yet: the line stays")
	assert.NotContains(t, u, "$pull")
	assert.Equal(t, bson.M{"$lt": bson.DateTime(created.UnixMilli()), "$not": bson.M{"$type": "array"}}, f[fieldFencedBefore], "a date line before the transaction time")
	assert.Len(t, f, 7, "the marker, the fence, the line, the asset, the kind, the funds: no more")
	assert.Contains(t, f, fieldBalance)
	assert.Equal(t, bson.M{"$gte": int64(10), "$type": bson.A{"int", "long"}}, f[fieldBalance], "no overdraft")
	assert.Equal(t, bson.M{fieldPending: l.marker}, u["$push"])
	assert.Equal(t, bson.M{fieldBalance: int64(-10), fieldPendingDebit: int64(10)}, u["$inc"])
	assert.Equal(t, bson.M{"$exists": false}, f[fieldFloorRoom], "only on an account without limits")
	assert.Contains(t, f, fieldAsset)
	assert.Nil(t, f[fieldAsset], "a leg of no asset: only on an account with none")

	// Written for an account with limits: its rooms are the guard, and
	// move with the money; the asset is the leg's.
	lim := l
	lim.limited, lim.asset = true, "USD/2"
	f, u, _ = updateOf(t, applyModel(r, lim, time.Time{}))
	assert.Equal(t, "USD/2", f[fieldAsset])
	assert.Equal(t, bson.M{"$gte": int64(10), "$type": bson.A{"int", "long"}}, f[fieldFloorRoom], "the floor, whatever the policy")
	assert.Equal(t, bson.M{"$type": bson.A{"int", "long"}}, f[fieldBalance])
	assert.Equal(t, bson.M{fieldBalance: int64(-10), fieldPendingDebit: int64(10), fieldFloorRoom: int64(-10)}, u["$inc"])
	credit := lim
	credit.delta = 10
	f, u, _ = updateOf(t, applyModel(r, credit, time.Time{}))
	assert.Equal(t, bson.M{"$gte": int64(10), "$type": bson.A{"int", "long"}}, f[fieldCeilingRoom], "the ceiling, counting what is in flight")
	assert.NotContains(t, f, "$or", "no int64 guard: the rooms bound it")
	assert.Equal(t, bson.M{fieldPendingCredit: int64(10), fieldCeilingRoom: int64(-10)}, u["$inc"])
	f, u, _ = updateOf(t, closeModel(credit))
	assert.Equal(t, bson.M{"$exists": true}, f[fieldFloorRoom])
	assert.Equal(t, bson.M{fieldBalance: int64(10), fieldPendingCredit: int64(-10), fieldFloorRoom: int64(10)}, u["$inc"])
	_, u, _ = updateOf(t, closeModel(lim))
	assert.Equal(t, bson.M{fieldPendingDebit: int64(-10), fieldCeilingRoom: int64(10)}, u["$inc"])
	_, u, _ = updateOf(t, undoModel(lim))
	assert.Equal(t, bson.M{fieldBalance: int64(10), fieldPendingDebit: int64(-10), fieldFloorRoom: int64(10)}, u["$inc"])
	_, u, _ = updateOf(t, undoModel(credit))
	assert.Equal(t, bson.M{fieldPendingCredit: int64(-10), fieldCeilingRoom: int64(10)}, u["$inc"])
	held := lim
	held.hold, held.taken = true, 4 // a hold of 10 whose captures took 4: its end releases 6
	_, u, _ = updateOf(t, closeModel(held))
	assert.Equal(t, bson.M{fieldBalance: int64(6), fieldPendingDebit: int64(-6), fieldFloorRoom: int64(6)}, u["$inc"])
	_, u, _ = updateOf(t, undoModel(held))
	assert.Equal(t, bson.M{fieldBalance: int64(6), fieldPendingDebit: int64(-6), fieldFloorRoom: int64(6)}, u["$inc"], "a void releases the same")
	heldCredit := credit
	heldCredit.hold, heldCredit.taken = true, 10 // captured whole: nothing to release
	_, u, _ = updateOf(t, closeModel(heldCredit))
	assert.NotContains(t, u, "$inc")
	// A capture's leg: its apply moves nothing and needs the hold's leg
	// there; its close moves its part; its undo only pulls its marker.
	take := lim
	take.delta, take.holdMarker = -4, schema.Marker(bson.NewObjectID(), 0)
	f, u, _ = updateOf(t, applyModel(r, take, time.Time{}))
	assert.NotContains(t, u, "$inc")
	assert.Equal(t, bson.M{"$ne": take.marker, "$all": bson.A{take.holdMarker}}, f[fieldPending])
	assert.Equal(t, bson.M{"$gte": int64(4), "$type": bson.A{"int", "long"}}, f[fieldPendingDebit])
	_, u, _ = updateOf(t, closeModel(take))
	assert.Equal(t, bson.M{fieldPendingDebit: int64(-4), fieldCeilingRoom: int64(4)}, u["$inc"])
	_, u, _ = updateOf(t, undoModel(take))
	assert.NotContains(t, u, "$inc")
	takeCredit := credit
	takeCredit.delta, takeCredit.holdMarker = 4, schema.Marker(bson.NewObjectID(), 1)
	_, u, _ = updateOf(t, closeModel(takeCredit))
	assert.Equal(t, bson.M{fieldBalance: int64(4), fieldPendingCredit: int64(-4), fieldFloorRoom: int64(4)}, u["$inc"])
	f, u, _ = updateOf(t, applyModel(r, l, time.Time{}))

	// With a mark, the apply moves the line up to it and drops the fences
	// below it; never up to its own transaction's time.
	mark := created.Add(-time.Second)
	_, u, _ = updateOf(t, applyModel(r, l, mark))
	assert.Equal(t, bson.M{fieldFencedBefore: bson.DateTime(mark.UnixMilli())}, u["$max"])
	assert.Equal(t, bson.M{fieldFencedLegs: bson.M{"$lt": schema.FenceFloor(mark.Add(time.Millisecond))}}, u["$pull"])
	_, u, _ = updateOf(t, applyModel(r, l, created.Add(time.Hour)))
	assert.Equal(t, bson.M{fieldFencedBefore: bson.DateTime(created.Add(-time.Millisecond).UnixMilli())}, u["$max"], "a line stops short of its own transaction")

	f, u, upsert = updateOf(t, closeModel(l))
	assert.False(t, upsert)
	assert.Equal(t, bson.M{"_id": "A", fieldPending: l.marker, fieldFloorRoom: bson.M{"$exists": false}}, f, "only while pending")
	assert.Equal(t, bson.M{fieldPending: l.marker}, u["$pull"])
	assert.Equal(t, bson.M{fieldFencedLegs: l.fenceID}, u["$addToSet"])

	f, u, upsert = updateOf(t, fenceModel(r, l))
	assert.True(t, upsert, "a tombstone where the account is missing")
	assert.Equal(t, bson.M{"$not": bson.M{"$gte": bson.DateTime(created.UnixMilli())}}, f[fieldFencedBefore], "never past the fence line")
	assert.Equal(t, bson.M{fieldFencedLegs: l.fenceID}, u["$addToSet"])
	assert.Equal(t, bson.M{fieldTombstone: true}, u["$setOnInsert"])

	assert.Nil(t, lineModel(l, time.Time{}))
	f, u, upsert = updateOf(t, lineModel(l, mark))
	assert.False(t, upsert)
	assert.Equal(t, "A", f["_id"])
	assert.Contains(t, f, "$and", "only where a fence can go")
	assert.Equal(t, bson.M{fieldFencedBefore: bson.DateTime(mark.UnixMilli())}, u["$max"])
	assert.Equal(t, bson.M{fieldFencedLegs: bson.M{"$lt": schema.FenceFloor(mark.Add(time.Millisecond))}}, u["$pull"])

	f, u, upsert = updateOf(t, fenceModel(r, l))
	assert.Equal(t, bson.M{fieldTombstone: true}, u["$setOnInsert"])

	f, u, upsert = updateOf(t, undoModel(l))
	assert.False(t, upsert)
	assert.Equal(t, bson.M{"_id": "A", fieldPending: l.marker, fieldFloorRoom: bson.M{"$exists": false}}, f, "only while pending")
	assert.Equal(t, bson.M{fieldBalance: int64(10), fieldPendingDebit: int64(-10)}, u["$inc"])

	// A credit is held in pendingCredit until it settles, and a debit
	// leaves the balance when it applies.
	c := leg{account: "B", delta: 10, marker: schema.Marker(id, 1)}
	assert.Equal(t, bson.D{{Key: fieldPendingCredit, Value: int64(10)}}, c.applyInc())
	assert.Equal(t, bson.D{{Key: fieldBalance, Value: int64(10)}, {Key: fieldPendingCredit, Value: int64(-10)}}, c.settleInc())
	assert.Equal(t, bson.D{{Key: fieldPendingCredit, Value: int64(-10)}}, c.undoInc())
}

func TestUnitLedgerSets(t *testing.T) {
	a, b := leg{ledger: "a"}, leg{ledger: "b"}
	assert.Equal(t, ledgerSet([]leg{a, b}), ledgerSet([]leg{b, a, b}))
	assert.NotEqual(t, ledgerSet([]leg{a}), ledgerSet([]leg{a, b}))
	assert.NotEqual(t, ledgerSet([]leg{{ledger: `a","b`}}), ledgerSet([]leg{a, b}), "names are quoted")
	parts := splitByLedgers([][]leg{{a}, {a, b}, {b, a}, {b}, {a}}, func(ls []leg) []leg { return ls })
	require.Len(t, parts, 3)
	assert.Len(t, parts[0], 2)
	assert.Len(t, parts[1], 2)
	assert.Len(t, parts[2], 1)
}

func TestUnitKeys(t *testing.T) {
	assert.NoError(t, validateKey("k"))
	assert.NoError(t, validateKey(strings.Repeat("é", MaxKeyLen/2)))
	for _, k := range []string{"", "k\xff", strings.Repeat("k", MaxKeyLen+1)} {
		assert.ErrorIs(t, validateKey(k), ErrInvalidTransfer, "%q", k)
	}
	tc, err := transferOptions([]TransferOption{nil, WithKey("k")})
	require.NoError(t, err)
	assert.Equal(t, "k", tc.key)
	_, err = transferOptions([]TransferOption{WithKey("")})
	assert.ErrorIs(t, err, ErrInvalidTransfer, "a key asked for must not be empty")
	assert.NotEqual(t, keyID("k"), keyID("k "))
	assert.Zero(t, keyID("k")[11], "the marker byte is free")
}

// TestUnitStage checks the stage's rules: a call that finds no write in
// flight writes at once, in its own goroutine; calls that come meanwhile
// go together in the next write; a caller that gives up before its items
// are taken is not written; one that gives up after is answered with its
// context's error while the write goes on for the others.
func TestUnitStage(t *testing.T) {
	var mu sync.Mutex
	var writes [][]int
	inFirst := make(chan struct{})
	releaseFirst := make(chan struct{})
	s := &stage[int]{}
	s.write = func(ctx context.Context, items []int) {
		mu.Lock()
		writes = append(writes, append([]int(nil), items...))
		n := len(writes)
		mu.Unlock()
		if n == 1 {
			close(inFirst)
			<-releaseFirst
		}
		require.NoError(t, ctx.Err(), "a group's write runs under a context no caller ends")
	}
	joined := make(chan struct{}, 8)
	s.joined = func() { joined <- struct{}{} }

	first := make(chan error, 1)
	go func() { first <- s.join(context.Background(), 1) }()
	<-inFirst

	gaveUp, cancel := context.WithCancel(context.Background())
	results := make(chan error, 3)
	go func() { results <- s.join(context.Background(), 2, 3) }()
	<-joined
	go func() { results <- s.join(gaveUp, 4) }()
	<-joined
	cancel() // before the next write takes it: never written
	assert.ErrorIs(t, <-results, context.Canceled)
	go func() { results <- s.join(context.Background(), 5) }()
	<-joined

	close(releaseFirst)
	require.NoError(t, <-first)
	require.NoError(t, <-results)
	require.NoError(t, <-results)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, [][]int{{1}, {2, 3, 5}}, writes, "the first alone, then the waiting ones together; the one that gave up is not written")
	require.Eventually(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return !s.busy
	}, 10*time.Second, time.Millisecond, "idle once the queue is empty")
}

var errUnit = errors.New("unit")

// TestUnitParallelKeepsTheFirstError: parallel runs every f and returns
// an error one of them returned.
func TestUnitParallelKeepsTheFirstError(t *testing.T) {
	err := parallel(3, func(i int) error {
		if i == 1 {
			return errUnit
		}
		return nil
	})
	assert.ErrorIs(t, err, errUnit)
	assert.NoError(t, parallel(0, func(int) error { return errUnit }))
}

// unsent tells a command the driver never sent (server selection, the
// pool's wait: on a retry of its own the driver reports those with the
// earlier attempt's error) from one that may have reached the server,
// "operation not sent to server, as Timeout would be exceeded" among them
// (a driver's retry returns it after an attempt that was sent).
// poolClearedForTest stands for the driver's unexported poolClearedError,
// which is known by its Retryable method.
type poolClearedForTest struct{}

func (poolClearedForTest) Error() string   { return "connection pool was cleared" }
func (poolClearedForTest) Retryable() bool { return true }

func TestUnitUnsent(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{topology.ServerSelectionError{Wrapped: context.DeadlineExceeded}, true},
		{fmt.Errorf("wrapped: %w", topology.WaitQueueTimeoutError{Wrapped: context.Canceled}), true},
		{fmt.Errorf("%w: rtt", driver.ErrDeadlineWouldBeExceeded), false},
		{context.Canceled, false},            // may have ended a round trip under way
		{context.DeadlineExceeded, false},    // the same
		{mongo.CommandError{Code: 1}, false}, // the server answered
		{errors.New("connection reset"), false},
		// The driver's checkout error when another operation's network
		// error cleared the pool, wrapped as the driver wraps it: on a
		// retryable write the driver may return it after an attempt of
		// its own that was sent.
		{mongo.CommandError{Wrapped: driver.Error{Message: "pool cleared", Labels: []string{driver.TransientTransactionError}, Wrapped: poolClearedForTest{}}}, false},
	} {
		assert.Equal(t, c.want, unsent(c.err), "%v", c.err)
	}
	assert.True(t, transient(context.Background(), mongo.CommandError{Wrapped: driver.Error{Wrapped: poolClearedForTest{}}}), "a cleared pool is tried again")
	// retrySent: an attempt that may have been sent, then one that was
	// not, leaves sent set.
	cfg := defaultConfig()
	cfg.retries = 3
	attempts := []error{mongo.CommandError{Code: 6, Labels: []string{"NetworkError"}}, topology.ServerSelectionError{Wrapped: context.DeadlineExceeded}}
	n := 0
	sent := false
	err := cfg.retrySent(context.Background(), &sent, func(context.Context) error { n++; return attempts[min(n, len(attempts))-1] })
	require.Error(t, err)
	assert.Equal(t, cfg.retries, n, "a selection timeout is tried again")
	assert.True(t, sent)
	sent = false
	err = cfg.retrySent(context.Background(), &sent, func(context.Context) error { return topology.ServerSelectionError{Wrapped: context.DeadlineExceeded} })
	require.Error(t, err)
	assert.False(t, sent)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = cfg.retrySent(ctx, &sent, func(context.Context) error { panic("sent") })
	assert.ErrorIs(t, err, context.Canceled)
	assert.False(t, sent)
}

// Errors carry the package's prefix once, whatever they wrap, and still
// match what they wrap; a Leg prints readably.
func TestUnitErrorPrefixAndLegString(t *testing.T) {
	err := errorf("twopc: transfer %s: %w", "X", ErrInsufficientFunds)
	assert.Equal(t, "twopc: transfer X: insufficient funds", err.Error())
	assert.ErrorIs(t, err, ErrInsufficientFunds)
	err = errorf("twopc: cancel: %w", errorf("%w: leg %d: %w", ErrInvalidTransfer, 1, ErrUnknownLedger))
	assert.Equal(t, "twopc: cancel: invalid transfer: leg 1: unknown ledger", err.Error())
	assert.ErrorIs(t, err, ErrInvalidTransfer)
	assert.ErrorIs(t, err, ErrUnknownLedger)
	assert.Equal(t, "no prefix: x", errorf("no prefix: %s", "x").Error())
	// What is not an error is printed as it is: an account or a key may
	// start with the prefix.
	err = errorf("%w: account %v, key %q", ErrAccountNotFound, "twopc: acme", "twopc: k")
	assert.Equal(t, `twopc: account not found: account twopc: acme, key "twopc: k"`, err.Error())
	err = errorf("twopc: open account %v: %w", "twopc: acme", ErrAccountExists)
	assert.Equal(t, "twopc: open account twopc: acme: account already exists", err.Error())
	assert.ErrorIs(t, err, ErrAccountExists)

	assert.Equal(t, "A -10", Leg{Account: "A", Amount: -10}.String())
	assert.Equal(t, "eu/7 +10", Leg{Ledger: "eu", Account: 7, Amount: 10}.String())
	assert.Equal(t, "[A -10 B +10]", fmt.Sprint((&Txn{Source: "A", Destination: "B", Value: 10}).AllLegs()))
}

// TestUnitFence: a fence carries its transaction's time, to the
// millisecond, ahead of anything else, so that the fences of transactions
// older than a line are exactly those below the line's floor; and two legs
// have different fences.
func TestUnitFence(t *testing.T) {
	at := time.Date(2026, 11, 24, 10, 0, 0, 5_000_000, time.UTC)
	m := schema.Marker(newTxnID(), 0)
	f := schema.Fence(at, m)
	assert.Equal(t, at, schema.FenceTime(f))
	assert.NotEqual(t, f, schema.Fence(at, schema.Marker(m, 1)), "another leg of the same transaction")
	below := func(a, b bson.ObjectID) bool { return bytes.Compare(a[:], b[:]) < 0 }
	assert.False(t, below(f, schema.FenceFloor(at)), "not dropped by a line at its own time")
	assert.True(t, below(f, schema.FenceFloor(at.Add(time.Millisecond))), "dropped by a line past it")
	assert.True(t, below(schema.Fence(at.Add(-time.Millisecond), schema.Marker(newTxnID(), 3)), f), "older first, whatever the digests")
	assert.Equal(t, "000000000000", schema.Fence(time.Date(1960, 1, 1, 0, 0, 0, 0, time.UTC), m).Hex()[:12], "a time before 1970 counts as 1970")
	far := time.Date(10890, 1, 1, 0, 0, 0, 0, time.UTC) // past six bytes of milliseconds
	assert.Equal(t, "ffffffffffff", schema.FenceFloor(far).Hex()[:12], "saturates, never wraps")
	assert.False(t, below(schema.Fence(far, m), f), "a fence of a far future never sorts below one of today")
}

// TestUnitLineFor: a write for transaction r moves a line up to the mark,
// never to r's own time, and not at all before a mark was read.
func TestUnitLineFor(t *testing.T) {
	created := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	r := &record{Txn: Txn{Created: created}}
	assert.True(t, lineFor(time.Time{}, r).IsZero())
	assert.Equal(t, created.Add(-time.Second), lineFor(created.Add(-time.Second), r))
	assert.Equal(t, created.Add(-time.Millisecond), lineFor(created.Add(time.Minute), r))
	assert.True(t, lineFor(created, &record{}).IsZero(), "a transaction with no time moves no line")
}

// levels is a slog.Handler that counts records by level.
type levels struct {
	mu sync.Mutex
	n  map[slog.Level]int
}

func (h *levels) Enabled(context.Context, slog.Level) bool { return true }
func (h *levels) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == nil {
		h.n = map[slog.Level]int{}
	}
	h.n[r.Level]++
	return nil
}
func (h *levels) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *levels) WithGroup(string) slog.Handler      { return h }
func (h *levels) count(l slog.Level) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[l]
}

// unitMark is a low-water mark whose server and log are functions.
func unitMark(server func(context.Context) (time.Time, error), oldest func(context.Context) (time.Time, any, error)) (*lowWater, *levels) {
	h := &levels{}
	return &lowWater{margin: markMargin, hold: time.Minute, host: time.Now, server: server, oldest: oldest, logger: slog.New(h)}, h
}

// TestUnitMarkFirstStampReadsTheClockOnce: concurrent first stamps wait
// for one reading of the server's clock and all use it.
func TestUnitMarkFirstStampReadsTheClockOnce(t *testing.T) {
	release := make(chan struct{})
	var calls sync.WaitGroup
	calls.Add(1)
	var n int
	var mu sync.Mutex
	m, _ := unitMark(func(ctx context.Context) (time.Time, error) {
		mu.Lock()
		n++
		first := n == 1
		mu.Unlock()
		if first {
			calls.Done()
			<-release
		}
		return time.Now().Add(time.Hour), nil
	}, func(context.Context) (time.Time, any, error) { return time.Time{}, nil, nil })
	m.frozen = true
	stamps := make(chan time.Time, 8)
	for range 8 {
		go func() { stamps <- m.stamp(context.Background()) }()
	}
	calls.Wait() // one caller is reading; the others wait for it or are about to
	close(release)
	for range 8 {
		s := <-stamps
		assert.True(t, s.After(time.Now().Add(30*time.Minute)), "every stamp uses the server's clock, an hour ahead")
	}
	assert.Equal(t, 1, n, "one reading of the clock")
}

// TestUnitMarkFailedReadings: a failed reading keeps the last mark, waits
// markEvery before the next, warns once until one succeeds, and no reading
// starts once the mark is closed.
func TestUnitMarkFailedReadings(t *testing.T) {
	fail := errors.New("server down")
	var failing bool
	server := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	m, logs := unitMark(func(context.Context) (time.Time, error) {
		if failing {
			return time.Time{}, fail
		}
		return server, nil
	}, func(context.Context) (time.Time, any, error) { return time.Time{}, nil, nil })
	read := func() {
		ctx, cancel := context.WithCancel(context.Background())
		m.mu.Lock()
		m.reading, m.cancel = true, cancel
		m.mu.Unlock()
		m.read(ctx)
	}
	read()
	want := server.Add(-markMargin)
	require.Equal(t, want, m.line())

	failing = true
	read()
	read()
	assert.Equal(t, want, m.line(), "the last mark stays")
	assert.Equal(t, 1, logs.count(slog.LevelWarn), "warned once")
	assert.Equal(t, 1, logs.count(slog.LevelDebug), "then at debug level")
	m.mu.Lock()
	reading := m.reading
	m.mu.Unlock()
	assert.False(t, reading, "a failed reading waits markEvery before the next")

	failing = false
	read()
	failing = true
	read()
	assert.Equal(t, 2, logs.count(slog.LevelWarn), "warned again after a success")

	m.mu.Lock()
	m.readAt = time.Time{}
	m.mu.Unlock()
	m.close()
	m.line()
	m.mu.Lock()
	reading = m.reading
	m.mu.Unlock()
	assert.False(t, reading, "no reading once closed")
}

// TestUnitEntryKey: an account's entry key is one for ids the server takes
// for one document (numbers by value, whatever their type), differs for
// every other pair of ids or ledgers, and is short for the ids accounts
// usually have (a string is written as it is).
func TestUnitEntryKey(t *testing.T) {
	key := func(ledger string, id any) string {
		t.Helper()
		k, err := entryKey(ledger, id)
		require.NoError(t, err)
		return k
	}
	oid := bson.NewObjectID()
	assert.Equal(t, "0::salice", key("", "alice"))
	assert.Equal(t, "5:bank2:salice", key("bank2", "alice"))
	assert.Equal(t, "0::o"+oid.Hex(), key("", oid))
	for _, one := range []any{int32(7), int64(7), 7.0} {
		assert.Equal(t, "0::i7", key("", one), "%T", one)
	}
	assert.Equal(t, key("", int64(0)), key("", math.Copysign(0, -1)), "-0.0 is 0")
	assert.Equal(t, key("", bson.D{{Key: "n", Value: int32(1)}}), key("", bson.D{{Key: "n", Value: 1.0}}))
	distinct := []string{
		key("", "i7"), key("", int64(7)), key("", "7"), key("", 7.5), key("", int64(-7)),
		key("", oid.Hex()), key("", oid), key("a:", "b"), key("a", ":b"), key("", "a:b"),
		key("", bson.D{{Key: "n", Value: int32(1)}}), key("", bson.A{int32(1)}), key("", "x"), key("", ""),
	}
	seen := map[string]int{}
	for i, k := range distinct {
		if j, dup := seen[k]; dup {
			t.Errorf("ids %d and %d share key %q", j, i, k)
		}
		seen[k] = i
	}
}
