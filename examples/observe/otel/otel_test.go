package otel_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/examples/internal/observetest"
	"github.com/twopc/twopc/examples/observe/otel"
)

// TestInstrumentsRecord runs transfers with the observer on an SDK meter
// with a manual reader: the counters go up with each transfer and
// rollback, and the histograms count the writes.
func TestInstrumentsRecord(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, c, reader := observed(ctx, t, "twopc_otel")

	_, err := c.Transfer(ctx, "A", "B", 10)
	require.NoError(t, err)
	first := collect(ctx, t, reader)
	commits := attribute.NewSet(attribute.String("from", "pending"), attribute.String("to", "applied"))
	assert.Equal(t, int64(1), first.count("twopc.transitions", attribute.NewSet(
		attribute.String("from", "pending"), attribute.String("to", "applied"), attribute.String("outcome", "moved"))))
	assert.Equal(t, uint64(1), first.histogramCount("twopc.transition.duration", commits))

	_, err = c.Transfer(ctx, "A", "B", 20)
	require.NoError(t, err)
	_, err = c.Transfer(ctx, "A", "B", 1000)
	require.ErrorIs(t, err, twopc.ErrInsufficientFunds)
	then := collect(ctx, t, reader)
	assert.Equal(t, int64(3), then.count("twopc.transitions", attribute.NewSet(
		attribute.String("from", "none"), attribute.String("to", "pending"), attribute.String("outcome", "moved"))))
	assert.Equal(t, int64(2), then.count("twopc.transitions", attribute.NewSet(
		attribute.String("from", "applied"), attribute.String("to", "done"), attribute.String("outcome", "moved"))))
	assert.Equal(t, int64(1), then.count("twopc.transitions", attribute.NewSet(
		attribute.String("from", "canceling"), attribute.String("to", "canceled"), attribute.String("outcome", "moved"))))
	assert.Equal(t, uint64(2), then.histogramCount("twopc.transition.duration", commits))
}

// observed returns a fresh database named from prefix, a coordinator on
// it that settles before Transfer returns, with the observer on an SDK
// meter, accounts A (100) and B (0) open, and the meter's manual reader;
// all closed when the test ends.
func observed(ctx context.Context, t *testing.T, prefix string) (*mongo.Database, *twopc.Coordinator, *sdkmetric.ManualReader) {
	t.Helper()
	db := observetest.Database(ctx, t, prefix)
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = provider.Shutdown(context.Background()) })
	observer, err := otel.NewObserver(provider.Meter("github.com/twopc/twopc"))
	require.NoError(t, err)
	c, err := twopc.NewCoordinator(db, twopc.WithSyncSettle(), twopc.WithObserver(observer))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	require.NoError(t, c.OpenAccount(ctx, "A", 100))
	require.NoError(t, c.OpenAccount(ctx, "B", 0))
	return db, c, reader
}

// metrics is what one collection read, by instrument name.
type metrics map[string]metricdata.Aggregation

func collect(ctx context.Context, t *testing.T, r sdkmetric.Reader) metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, r.Collect(ctx, &rm))
	out := metrics{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m.Data
		}
	}
	return out
}

// count is the value of counter name at attrs.
func (m metrics) count(name string, attrs attribute.Set) int64 {
	sum, _ := m[name].(metricdata.Sum[int64])
	for _, p := range sum.DataPoints {
		if p.Attributes.Equals(&attrs) {
			return p.Value
		}
	}
	return 0
}

// histogramCount is how many values histogram name recorded at attrs.
func (m metrics) histogramCount(name string, attrs attribute.Set) uint64 {
	h, _ := m[name].(metricdata.Histogram[float64])
	for _, p := range h.DataPoints {
		if p.Attributes.Equals(&attrs) {
			return p.Count
		}
	}
	return 0
}

// TestHoldsCounted: a hold made, captured, voided and expired each count
// once under their event.
func TestHoldsCounted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db, c, reader := observed(ctx, t, "twopc_otel_holds")
	observetest.HoldEvents(ctx, t, db, c)
	got := collect(ctx, t, reader)
	for ev, want := range map[string]int64{"hold": 3, "capture": 1, "void": 1, "expire": 1} {
		assert.Equal(t, want, got.count("twopc.holds", attribute.NewSet(attribute.String("event", ev))), ev)
	}
}
