package twopc

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twopc/twopc/internal/mongotest"
	"github.com/twopc/twopc/internal/schema"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// permutations lists the orders of 0..n-1.
func permutations(n int) [][]int {
	if n == 1 {
		return [][]int{{0}}
	}
	var out [][]int
	for _, p := range permutations(n - 1) {
		for i := 0; i <= len(p); i++ {
			q := append(append(append([]int{}, p[:i]...), n-1), p[i:]...)
			out = append(out, q)
		}
	}
	return out
}

// TestMergedApplyMatchesSerialOrder sends, on the server, random merged
// applies (two or three legs on one account, of either kind, debits and
// credits, overdraft policies, holds, lines) and every serial order of
// their legs alone: the merged statement may match only where some serial
// order applies every leg, and then leaves the account as that order does.
func TestMergedApplyMatchesSerialOrder(t *testing.T) {
	db := mongotest.NewDatabase(t)
	coll := db.Collection("accts")
	ctx := context.Background()
	rng := rand.New(rand.NewSource(36))
	q := int64(creditQuarter)
	balances := []int64{0, 20, 50, 100, q - 30, q + 10, math.MaxInt64 - 40, -30, math.MinInt64 + 40}
	ins := []int64{0, 10, q, 2*q - 25}
	amts := []int64{5, 10, 30, 60}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	mism := 0    // merged statements that matched where no serial order does
	matched := 0 // merged statements that matched
	for sc := 0; sc < 400; sc++ {
		limited := rng.Intn(3) == 0
		bal := balances[rng.Intn(len(balances))]
		if limited {
			bal = balances[rng.Intn(4)]
		}
		doc := bson.D{{Key: "balance", Value: bal}}
		pend := bson.A{}
		for i := rng.Intn(3); i > 0; i-- {
			pend = append(pend, bson.NewObjectID())
		}
		doc = append(doc, bson.E{Key: "pendingTransactions", Value: pend},
			bson.E{Key: "pendingCredit", Value: ins[rng.Intn(len(ins))]},
			bson.E{Key: "pendingDebit", Value: ins[rng.Intn(len(ins))]})
		if limited {
			doc = append(doc, bson.E{Key: "floorRoom", Value: amts[rng.Intn(len(amts))] * int64(rng.Intn(4))},
				bson.E{Key: "ceilingRoom", Value: amts[rng.Intn(len(amts))] * int64(rng.Intn(4))})
		}
		// Adopted (see adoptModel): fences, and a date line, at times past
		// some of the legs' transaction times.
		line := t0.Add(-time.Millisecond)
		if rng.Intn(3) == 0 {
			line = t0.Add(time.Duration(rng.Intn(4)) * time.Millisecond)
		}
		doc = append(doc, bson.E{Key: "fencedLegs", Value: bson.A{}}, bson.E{Key: "fencedBefore", Value: line})
		k := 2 + rng.Intn(2)
		recs := make([]*record, k)
		legs := make([]leg, k)
		for i := range legs {
			id := newTxnID()
			r := &record{Txn: Txn{ID: id, Created: t0.Add(time.Duration(1+rng.Intn(4)) * time.Millisecond)}}
			r.AllowNegative = rng.Intn(3) == 0
			r.Hold = rng.Intn(6) == 0
			m := schema.Marker(id, 0)
			d := amts[rng.Intn(len(amts))]
			if rng.Intn(2) == 0 {
				d = -d
			}
			recs[i] = r
			legs[i] = leg{account: "X", delta: d, marker: m, fenceID: schema.Fence(r.Created, m), limited: limited}
		}
		reset := func() {
			_, err := coll.ReplaceOne(ctx, bson.D{{Key: "_id", Value: "X"}}, append(bson.D{{Key: "_id", Value: "X"}}, doc...), options.Replace().SetUpsert(true))
			require.NoError(t, err)
		}
		read := func() bson.M {
			var m bson.M
			require.NoError(t, coll.FindOne(ctx, bson.D{{Key: "_id", Value: "X"}}).Decode(&m))
			delete(m, "pendingTransactions")
			return bson.M{"s": fmt.Sprint(m["balance"], m["pendingCredit"], m["pendingDebit"], m["floorRoom"], m["ceilingRoom"], m["fencedBefore"])}
		}
		model, ok := applyAllModel(recs, legs, time.Time{})
		merged := false
		var mergedDoc bson.M
		if ok {
			reset()
			res, err := coll.BulkWrite(ctx, []mongo.WriteModel{model})
			require.NoError(t, err)
			merged = res.ModifiedCount == 1
			mergedDoc = read()
			if merged {
				matched++
			}
		}
		serial := false
		var serialDoc bson.M
		for _, p := range permutations(k) {
			reset()
			all := true
			for _, i := range p {
				res, err := coll.BulkWrite(ctx, []mongo.WriteModel{applyModel(recs[i], legs[i], time.Time{})})
				require.NoError(t, err)
				if res.ModifiedCount != 1 {
					all = false
					break
				}
			}
			if all {
				serial = true
				serialDoc = read()
				break
			}
		}
		if merged && !serial {
			mism++
			t.Errorf("scenario %d: merged matched, no serial order does: doc %v legs %s", sc, doc, descr(recs, legs))
		}
		if merged && serial && fmt.Sprint(mergedDoc) != fmt.Sprint(serialDoc) {
			t.Errorf("scenario %d: merged %v serial %v", sc, mergedDoc, serialDoc)
		}
	}
	require.Zero(t, mism)
	require.Greater(t, matched, 100, "the scenarios must exercise merged statements that match")
}

// descr describes legs, of transactions recs, for a failure message.
func descr(recs []*record, legs []leg) string {
	s := ""
	for i, l := range legs {
		s += fmt.Sprintf("[%d neg=%v hold=%v created=%v] ", l.delta, recs[i].AllowNegative, recs[i].Hold, recs[i].Created.Format("05.000"))
	}
	return s
}
