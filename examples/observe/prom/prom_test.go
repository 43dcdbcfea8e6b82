package prom_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/examples/internal/observetest"
	"github.com/twopc/twopc/examples/observe/prom"
)

// TestMetricsGoUp runs transfers with the observer and scrapes the
// handler: each transfer, rollback and recovery shows in the counters,
// and the histograms count the writes.
func TestMetricsGoUp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db := observetest.Database(ctx, t, "twopc_prom")
	reg := prometheus.NewRegistry()
	observer, err := prom.NewObserver(reg)
	require.NoError(t, err)
	_, err = prom.NewObserver(reg)
	require.Error(t, err, "registering twice with one registry")
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()

	died := errors.New("died")
	c, err := twopc.NewCoordinator(db, twopc.WithApplication("app"), twopc.WithSyncSettle(), twopc.WithObserver(observer),
		twopc.WithStepHook(func(_ context.Context, s twopc.Step, t *twopc.Txn) error {
			if s == twopc.StepCommit && t.Value == 7 {
				return died
			}
			return nil
		}))
	require.NoError(t, err)
	defer c.Close(context.Background())
	require.NoError(t, c.OpenAccount(ctx, "A", 100))
	require.NoError(t, c.OpenAccount(ctx, "B", 0))

	before := observetest.Scrape(t, srv.URL)
	assert.Zero(t, before[`twopc_transitions_total{from="pending",outcome="moved",to="applied"}`])

	for range 3 {
		_, err := c.Transfer(ctx, "A", "B", 10)
		require.NoError(t, err)
	}
	mid := observetest.Scrape(t, srv.URL)
	assert.Equal(t, 3.0, mid[`twopc_transitions_total{from="none",outcome="moved",to="pending"}`])
	assert.Equal(t, 3.0, mid[`twopc_transitions_total{from="pending",outcome="moved",to="applied"}`])
	assert.Equal(t, 3.0, mid[`twopc_transitions_total{from="applied",outcome="moved",to="done"}`])
	assert.Equal(t, 3.0, mid[`twopc_transition_seconds_count{from="pending",to="applied"}`])
	assert.Positive(t, mid[`twopc_transition_seconds_sum{from="pending",to="applied"}`])

	_, err = c.Transfer(ctx, "A", "B", 1000)
	require.ErrorIs(t, err, twopc.ErrInsufficientFunds)
	stopped, err := c.Transfer(ctx, "A", "B", 7)
	require.ErrorIs(t, err, died)
	// Make it look stale, as it would be after StaleAfter, and recover it.
	_, err = db.Collection(twopc.DefaultTransactions).UpdateOne(ctx, bson.D{{Key: "_id", Value: stopped.ID}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "lastModified", Value: time.Now().Add(-time.Hour)}}}})
	require.NoError(t, err)
	rc, err := twopc.NewCoordinator(db, twopc.WithApplication("recoverer"), twopc.WithObserver(observer))
	require.NoError(t, err)
	defer rc.Close(context.Background())
	rep, err := twopc.NewRecoverer(rc).RecoverOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, rep.RolledForward)

	after := observetest.Scrape(t, srv.URL)
	for metric, more := range map[string]float64{
		`twopc_transitions_total{from="none",outcome="moved",to="pending"}`:         2,
		`twopc_transitions_total{from="pending",outcome="moved",to="applied"}`:      1, // by the recoverer
		`twopc_transitions_total{from="applied",outcome="moved",to="done"}`:         1,
		`twopc_transitions_total{from="pending",outcome="moved",to="canceling"}`:    1,
		`twopc_transitions_total{from="canceling",outcome="moved",to="canceled"}`:   1,
		`twopc_transitions_total{from="pending",outcome="moved",to="pending"}`:      1, // the takeover
		`twopc_recovery_actions_total{action="takeover",outcome="moved"}`:           1,
		`twopc_recovery_actions_total{action="roll_forward",outcome="moved"}`:       1,
		`twopc_recovery_seconds_count{action="roll_forward"}`:                       1,
		`twopc_transition_seconds_count{from="canceling",to="canceled"}`:            1,
		`twopc_transition_seconds_bucket{from="canceling",to="canceled",le="+Inf"}`: 1,
	} {
		assert.Equalf(t, mid[metric]+more, after[metric], "%s went from %v", metric, mid[metric])
	}
}

// TestHoldsCounted: a hold made, captured, voided and expired each count
// once under their event.
func TestHoldsCounted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db := observetest.Database(ctx, t, "twopc_prom_holds")
	reg := prometheus.NewRegistry()
	observer, err := prom.NewObserver(reg)
	require.NoError(t, err)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	c, err := twopc.NewCoordinator(db, twopc.WithSyncSettle(), twopc.WithObserver(observer))
	require.NoError(t, err)
	defer c.Close(context.Background())
	require.NoError(t, c.OpenAccount(ctx, "A", 100))
	require.NoError(t, c.OpenAccount(ctx, "B", 0))
	observetest.HoldEvents(ctx, t, db, c)
	got := observetest.Scrape(t, srv.URL)
	for ev, want := range map[string]float64{"hold": 3, "capture": 1, "void": 1, "expire": 1} {
		assert.Equal(t, want, got[`twopc_holds_total{event="`+ev+`"}`], ev)
	}
}
