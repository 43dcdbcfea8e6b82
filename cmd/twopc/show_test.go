package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc/internal/schema"
)

// TestUnitLegState: what show says of a leg, from its account document; a
// tombstone whose fence a line dropped still closes the leg.
func TestUnitLegState(t *testing.T) {
	created := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	m := bson.NewObjectID()
	doc := func(fields ...bson.E) bson.Raw {
		raw, err := bson.Marshal(append(bson.D{{Key: "_id", Value: "A"}}, fields...))
		require.NoError(t, err)
		return raw
	}
	for _, tc := range []struct {
		name string
		acct bson.Raw
		want string
	}{
		{"not applied", doc(bson.E{Key: "balance", Value: int64(1)}), legNotApplied},
		{"applied", doc(bson.E{Key: "pendingTransactions", Value: bson.A{m}}), legApplied},
		{"fenced", doc(bson.E{Key: schema.FencedLegs, Value: bson.A{schema.Fence(created, m)}}), legClosed},
		{"behind the line", doc(bson.E{Key: schema.FencedBefore, Value: created}), legClosed},
		{"before the line", doc(bson.E{Key: schema.FencedBefore, Value: created.Add(-time.Millisecond)}), legNotApplied},
		{"tombstone", doc(bson.E{Key: schema.Tombstone, Value: true}), legNoAccount},
		{"tombstone fenced", doc(bson.E{Key: schema.Tombstone, Value: true}, bson.E{Key: schema.FencedLegs, Value: bson.A{schema.Fence(created, m)}}), legClosed},
		{"tombstone whose fence the line dropped", doc(bson.E{Key: schema.Tombstone, Value: true}, bson.E{Key: schema.FencedBefore, Value: created}), legClosed},
	} {
		assert.Equal(t, tc.want, legState(tc.acct, m, created), tc.name)
	}
}
