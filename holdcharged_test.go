package twopc_test

// What a hold charged is always shown (issue 48, item 6): a hold ended by
// its captures, by Void or by expiry records what its captures credited
// (Captured) and what it returned (Released), and a statement's entries of
// its captures name it.

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc"
)

// TestHoldEndShowsWhatItCharged: a hold of 100 captured 60 and voided is
// canceled (voided) with Captured 60 and Released 40; one captured 30 and
// expired, Captured 30 and Released 70; one of 10 captured 6 then 2 (final),
// done with Captured 8 and Released 2; one voided with no capture,
// Released 100 and nothing captured. Get and the statement agree: the
// destination's entries are the captures', each naming its hold.
func TestHoldEndShowsWhatItCharged(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle(), twopc.WithStatementHorizon(0))
	b.open(map[string]int64{"A": 1000, "B": 0})
	hold := func(value int64, opts ...twopc.TransferOption) bson.ObjectID {
		h, err := b.c.Hold(ctx, "A", "B", value, opts...)
		require.NoError(t, err)
		return h.ID
	}
	capture := func(id bson.ObjectID, amount int64, final bool) {
		_, err := b.c.Capture(ctx, id, amount, twopc.WithFinalCapture(final))
		require.NoError(t, err)
	}

	voided := hold(100)
	capture(voided, 60, false)
	v, err := b.c.Void(ctx, voided)
	require.NoError(t, err)
	assert.Equal(t, twopc.StateCanceled, v.State)
	assert.Equal(t, "voided", v.Reason)
	assert.Equal(t, int64(60), v.Captured, "what its capture charged")
	assert.Equal(t, int64(40), v.Released)

	expired := hold(100, twopc.WithExpiry(time.Hour))
	capture(expired, 30, false)
	b.backdate(expired, 2*time.Hour)
	_, err = b.c.Capture(ctx, expired, 10)
	require.ErrorIs(t, err, twopc.ErrHoldExpired)

	parts := hold(10)
	capture(parts, 6, false)
	capture(parts, 2, true)

	untouched := hold(100)
	_, err = b.c.Void(ctx, untouched)
	require.NoError(t, err)

	for _, c := range []struct {
		name               string
		id                 bson.ObjectID
		state              twopc.State
		reason             string
		captured, released int64
	}{
		{"voided after a capture", voided, twopc.StateCanceled, "voided", 60, 40},
		{"expired after a capture", expired, twopc.StateCanceled, "expired", 30, 70},
		{"captured in two parts", parts, twopc.StateDone, "", 8, 2},
		{"voided with no capture", untouched, twopc.StateCanceled, "voided", 0, 100},
	} {
		got, err := b.c.Get(ctx, c.id)
		require.NoError(t, err, c.name)
		assert.Equal(t, c.state, got.State, c.name)
		assert.Equal(t, c.reason, got.Reason, c.name)
		assert.Equal(t, c.captured, got.Captured, "%s: captured", c.name)
		assert.Equal(t, c.released, got.Released, "%s: released", c.name)
	}
	b.checkSettled(map[string]int64{"A": 1000, "B": 0})
	assert.Equal(t, int64(1000-60-30-8), b.balance("A"))

	page, err := b.c.Statement(ctx, "", "B", twopc.StatementQuery{})
	require.NoError(t, err)
	charged := map[bson.ObjectID]int64{}
	for _, e := range page.Entries {
		require.False(t, e.CaptureOf.IsZero(), "entry %+v names its hold", e)
		charged[e.CaptureOf] += e.Amount
	}
	assert.Equal(t, map[bson.ObjectID]int64{voided: 60, expired: 30, parts: 8}, charged)
}
