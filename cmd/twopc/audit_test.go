package main

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/internal/schema"
)

func TestAudit(t *testing.T) {
	f := newFixture(t)
	f.open(map[string]int64{"alice": 1000, "bob": 0})
	f.done("alice", "bob", 100)

	r := f.run("audit")
	require.Equal(t, exitOK, r.code, r.stdout+r.stderr)
	require.Contains(t, r.stdout, "OK, no violation")
	require.Contains(t, r.stdout, "done 1")

	r = f.run("audit", "--total", "default=1000", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	var rep struct {
		OK     bool `json:"ok"`
		Totals []struct {
			Ledger   string `json:"ledger"`
			Expected int64  `json:"expected"`
			Actual   int64  `json:"actual"`
			OK       bool   `json:"ok"`
		} `json:"totals"`
		Violations []struct {
			Kind string `json:"kind"`
			Txn  string `json:"txn"`
		} `json:"violations"`
	}
	r.decode(t, &rep)
	require.True(t, rep.OK)
	require.Len(t, rep.Totals, 1)
	require.EqualValues(t, 1000, rep.Totals[0].Actual)

	r = f.run("audit", "--total", "=999")
	require.Equal(t, exitFailed, r.code, r.stdout)
	require.Contains(t, r.stdout, "FAILED, 1 violation")
	require.Contains(t, r.stdout, "total of ledger default: 1000, want 999")

	// A marker of a leg in flight whose transaction does not exist.
	bogus := bson.NewObjectID()
	_, err := f.db.Collection(twopc.DefaultAccounts).UpdateOne(f.ctx, bson.D{{Key: "_id", Value: "alice"}},
		bson.D{{Key: "$push", Value: bson.D{{Key: "pendingTransactions", Value: bogus}}}})
	require.NoError(t, err)
	r = f.run("audit", "--json")
	require.Equal(t, exitFailed, r.code, r.stdout)
	r.decode(t, &rep)
	require.False(t, rep.OK)
	require.Len(t, rep.Violations, 1)
	require.Equal(t, twopc.ViolationOrphanMarker, rep.Violations[0].Kind)
	require.Equal(t, schema.Marker(bogus, 0).Hex(), rep.Violations[0].Txn)
	r = f.run("audit")
	require.Equal(t, exitFailed, r.code, r.stdout)
	require.Contains(t, r.stdout, "orphan-marker")
}
