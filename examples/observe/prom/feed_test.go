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

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/examples/internal/observetest"
	"github.com/twopc/twopc/examples/observe/prom"
)

// TestFeedLagExported: a feed with two published events and a group
// whose handler took none: a scrape shows the published batch, the group
// two events behind, the oldest waiting, not truncated; a feed name that
// cannot be read counts a scrape error.
func TestFeedLagExported(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db := observetest.Database(ctx, t, "twopc_promfeed")
	c, err := twopc.NewCoordinator(db, twopc.WithApplication("app"), twopc.WithSyncSettle())
	require.NoError(t, err)
	defer c.Close(context.Background())
	require.NoError(t, c.OpenAccount(ctx, "A", 100))
	require.NoError(t, c.OpenAccount(ctx, "B", 0))

	f := c.Feed("orders", twopc.WithFeedPoll(5*time.Millisecond))
	rctx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- f.Run(rctx) }()
	defer func() { stop(); <-ran }()
	for { // the feed began: the transfers below are its
		st, err := f.Status(ctx)
		require.NoError(t, err)
		if !st.Since.IsZero() {
			break
		}
	}
	for range 2 {
		_, err := c.Transfer(ctx, "A", "B", 10)
		require.NoError(t, err)
	}
	seen := 0
	for _, err := range f.All(ctx, "") {
		require.NoError(t, err)
		if seen++; seen == 2 {
			break
		}
	}
	refused := errors.New("not now")
	require.ErrorIs(t, f.Subscribe(ctx, "hooks", func(context.Context, []twopc.Event) error { return refused }), refused)

	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(prom.NewFeedCollector(c, 10*time.Second, "orders", "Bad-Name")))
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	got := observetest.Scrape(t, srv.URL)
	assert.GreaterOrEqual(t, got[`twopc_feed_published_batch{feed="orders"}`], 1.0)
	assert.Equal(t, 2.0, got[`twopc_feed_group_behind{feed="orders",group="hooks"}`])
	assert.Greater(t, got[`twopc_feed_group_oldest_seconds{feed="orders",group="hooks"}`], 0.0)
	assert.Equal(t, 0.0, got[`twopc_feed_group_truncated{feed="orders",group="hooks"}`])
	assert.Equal(t, 1.0, got[`twopc_feed_scrape_errors_total{feed="Bad-Name"}`], "a feed that cannot be read")
}
