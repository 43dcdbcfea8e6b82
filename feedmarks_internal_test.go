package twopc

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestUnitFeedMarksBoundPublication: batches published at random
// intervals over a long life (seconds to hours apart), the marks recorded
// as publish records them: the marks never exceed maxMarks, keep the
// first and the last, and publishedBy(b) is never before batch b's real
// publication (history never moves an event sooner than its time to keep
// from its publication), nor later than the next mark's.
func TestUnitFeedMarksBoundPublication(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	d := &feedDoc{}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var pub []time.Time // pub[b-1]: batch b's publication
	for b := int64(1); b <= 5000; b++ {
		if marks := d.marksAfter(); marks != nil {
			d.Marks = marks
		}
		switch rng.IntN(3) {
		case 0:
			at = at.Add(time.Duration(rng.IntN(1000)) * time.Millisecond)
		case 1:
			at = at.Add(time.Duration(rng.IntN(60)) * time.Second)
		default:
			at = at.Add(time.Duration(rng.IntN(3)) * time.Hour)
		}
		d.Published, d.PublishedAt = b, at
		pub = append(pub, at)
		require.LessOrEqual(t, len(d.Marks), maxMarks)
	}
	require.Len(t, d.Marks, maxMarks, "thinned, not cut")
	assert.Equal(t, int64(1), d.Marks[0].B, "the first mark kept")
	for b := int64(1); b <= d.Published; b++ {
		by := d.publishedBy(b)
		assert.False(t, by.Before(pub[b-1]), "batch %d: bound %v before its publication %v", b, by, pub[b-1])
	}
	assert.True(t, d.publishedBy(0).IsZero())
	assert.True(t, d.publishedBy(d.Published+1).IsZero(), "not published")
	for i := 1; i < len(d.Marks); i++ {
		assert.Less(t, d.Marks[i-1].B, d.Marks[i].B, "in batch order")
	}
}
