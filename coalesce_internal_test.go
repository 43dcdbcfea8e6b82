package twopc

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twopc/twopc/internal/schema"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// unitLeg is leg i of a fresh transaction created at created, on account
// acct, moving delta.
func unitLeg(acct any, delta int64, created time.Time, opts ...func(*record)) (*record, leg) {
	id := newTxnID()
	r := &record{Txn: Txn{ID: id, Created: created}}
	for _, o := range opts {
		o(r)
	}
	m := schema.Marker(id, 0)
	return r, leg{account: acct, delta: delta, marker: m, fenceID: schema.Fence(created, m)}
}

func allowNegative(r *record) { r.AllowNegative = true }
func asHold(r *record)        { r.Hold = true }

// TestUnitApplyAllModel checks the merged apply's guard against the
// serial guards of its legs.
func TestUnitApplyAllModel(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r1, d1 := unitLeg("A", -30, t0.Add(2*time.Millisecond))
	r2, d2 := unitLeg("A", -20, t0, allowNegative)
	r3, c3 := unitLeg("A", 50, t0.Add(time.Millisecond))
	m, ok := applyAllModel([]*record{r1, r2, r3}, []leg{d1, d2, c3}, t0.Add(time.Second))
	require.True(t, ok)
	f, u, upsert := updateOf(t, m)
	assert.False(t, upsert)
	assert.Equal(t, "A", f["_id"])
	assert.Equal(t, bson.M{"$nin": bson.A{d1.marker, d2.marker, c3.marker}}, f[fieldPending], "no leg applied yet")
	assert.Equal(t, bson.M{"$type": "array", "$nin": bson.A{d1.fenceID, d2.fenceID, c3.fenceID}}, f[fieldFencedLegs], "no leg closed")
	assert.Equal(t, bson.M{"$lt": bson.DateTime(t0.UnixMilli()), "$not": bson.M{"$type": "array"}}, f[fieldFencedBefore], "a date line before the earliest time")
	assert.Equal(t, bson.M{"$gte": int64(30), "$type": bson.A{"int", "long"}}, f[fieldBalance], "the strict debits' sum: the overdraft one may go below")
	assert.Contains(t, f, "$or", "the credit's int64 bound")
	assert.Equal(t, bson.M{fieldBalance: int64(-50), fieldPendingDebit: int64(50), fieldPendingCredit: int64(50)}, u["$inc"])
	assert.Equal(t, bson.M{fieldPending: bson.M{"$each": bson.A{d1.marker, d2.marker, c3.marker}}}, u["$push"])
	assert.Equal(t, bson.M{fieldFencedBefore: bson.DateTime(t0.Add(-time.Millisecond).UnixMilli())}, u["$max"], "the line stops short of the earliest transaction")

	// Debits that all allow a negative balance: only int64's floor.
	m, ok = applyAllModel([]*record{r2, r2}, []leg{d2, d2}, time.Time{})
	require.True(t, ok)
	f, _, _ = updateOf(t, m)
	assert.Equal(t, bson.M{"$gte": int64(math.MinInt64 + 40), "$type": bson.A{"int", "long"}}, f[fieldBalance])

	// Sums past int64: no merged statement.
	rb, big := unitLeg("A", math.MaxInt64, t0)
	_, ok = applyAllModel([]*record{rb, rb}, []leg{big, big}, time.Time{})
	assert.False(t, ok, "credits overflowing")
	rn, neg := unitLeg("A", -math.MaxInt64, t0, allowNegative)
	_, ok = applyAllModel([]*record{rn, rn}, []leg{neg, neg}, time.Time{})
	assert.False(t, ok, "debits overflowing")

	// Holds: room for every one of the k markers.
	rh, h := unitLeg("A", -5, t0, asHold)
	m, ok = applyAllModel([]*record{rh, r1}, []leg{h, d1}, time.Time{})
	require.True(t, ok)
	f, _, _ = updateOf(t, m)
	assert.Equal(t, bson.M{"$exists": false}, f["pendingTransactions.498"], "MaxHolds−k")
	recs, legs := make([]*record, MaxHolds+1), make([]leg, MaxHolds+1)
	for i := range legs {
		recs[i], legs[i] = rh, h
	}
	_, ok = applyAllModel(recs, legs, time.Time{})
	assert.False(t, ok, "more legs than MaxHolds leaves room for")

	// Limits: the rooms on the sums, moved with the money.
	ld1, ld2, lc3 := d1, d2, c3
	ld1.limited, ld2.limited, lc3.limited = true, true, true
	m, ok = applyAllModel([]*record{r1, r2, r3}, []leg{ld1, ld2, lc3}, time.Time{})
	require.True(t, ok)
	f, u, _ = updateOf(t, m)
	assert.Equal(t, bson.M{"$gte": int64(50), "$type": bson.A{"int", "long"}}, f[fieldFloorRoom], "every debit, whatever its policy")
	assert.Equal(t, bson.M{"$gte": int64(50), "$type": bson.A{"int", "long"}}, f[fieldCeilingRoom])
	assert.Equal(t, bson.M{fieldBalance: int64(-50), fieldPendingDebit: int64(50), fieldPendingCredit: int64(50),
		fieldFloorRoom: int64(-50), fieldCeilingRoom: int64(-50)}, u["$inc"])
}

// TestUnitCoalesce plans one statement per account, kind and asset, in
// the order of first legs, and sends alone a leg named twice.
func TestUnitCoalesce(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ra, a1 := unitLeg("A", 1, t0)
	rb, b1 := unitLeg("B", -1, t0)
	rc, a2 := unitLeg(int64(7), 1, t0)
	rd, a3 := unitLeg(int32(7), 2, t0) // one _id to the server: int32(7) and int64(7)
	re, a4 := unitLeg("A", 3, t0)
	a4.asset = "EUR/2"
	rf, a5 := unitLeg("A", 4, t0)
	recs := []*record{ra, rb, rc, rd, re, rf, ra}
	legs := []leg{a1, b1, a2, a3, a4, a5, a1}
	assert.Equal(t, []applyStmt{{0, 5}, {1}, {2, 3}, {4}, {6}}, coalesce(recs, legs))
}
