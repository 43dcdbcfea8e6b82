// Package otel exports the twopc library's events as OpenTelemetry
// metrics: NewObserver returns a twopc.Observer (give it to
// twopc.WithObserver) that records every state transition and every
// recovery action on instruments of a metric.Meter.
//
//	instrument                  kind       unit  attributes
//	twopc.transitions           counter    1     from, to, outcome
//	twopc.transition.duration   histogram  s     from, to
//	twopc.recovery.actions      counter    1     action, outcome
//	twopc.recovery.duration     histogram  s     action
//	twopc.holds                 counter    1     event
//
// The attributes are those of package prom's labels, with the same
// values: event is hold, capture, void or expire (a hold made, captured,
// voided, voided by its expiry); from is "none" for the write that creates a transaction;
// outcome is moved, not_moved or error; action is takeover, roll_forward,
// settle, roll_back, cancel_initial or unfence (see twopc.Observer). The
// Meter comes from whatever MeterProvider the program sets up: the SDK
// with an OTLP, stdout or Prometheus exporter, or a manual reader, as in
// this package's test and example.
package otel

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/twopc/twopc"
)

// Buckets are the histograms' bucket boundaries, in seconds: from half a
// millisecond to about 16 seconds, doubling.
var Buckets = []float64{
	0.0005, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064,
	0.128, 0.256, 0.512, 1.024, 2.048, 4.096, 8.192, 16.384,
}

// NewObserver creates the five instruments on m and returns an Observer
// that records on them. Give the same Observer to every Coordinator of the
// process (their Cancelers and Recoverers use it too).
func NewObserver(m metric.Meter) (twopc.Observer, error) {
	transitions, err := m.Int64Counter("twopc.transitions",
		metric.WithDescription("State transitions written by this process, by from state, to state and outcome (moved, not_moved, error)."),
		metric.WithUnit("1"))
	if err != nil {
		return twopc.Observer{}, err
	}
	transitionDuration, err := m.Float64Histogram("twopc.transition.duration",
		metric.WithDescription("Time the write of a state transition took, retries included."),
		metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(Buckets...))
	if err != nil {
		return twopc.Observer{}, err
	}
	recoveries, err := m.Int64Counter("twopc.recovery.actions",
		metric.WithDescription("Recovery actions on transactions, by action and outcome (moved, not_moved, error)."),
		metric.WithUnit("1"))
	if err != nil {
		return twopc.Observer{}, err
	}
	recoveryDuration, err := m.Float64Histogram("twopc.recovery.duration",
		metric.WithDescription("Time a recovery action took."),
		metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(Buckets...))
	if err != nil {
		return twopc.Observer{}, err
	}
	holds, err := m.Int64Counter("twopc.holds",
		metric.WithDescription("Holds made, captured, voided and expired by this process, by event (hold, capture, void, expire)."),
		metric.WithUnit("1"))
	if err != nil {
		return twopc.Observer{}, err
	}
	return twopc.Observer{
		Transition: func(ctx context.Context, e twopc.TransitionEvent) {
			from, to := attribute.String("from", stateLabel(e.From)), attribute.String("to", stateLabel(e.To))
			transitions.Add(ctx, 1, metric.WithAttributes(from, to, attribute.String("outcome", e.Outcome.String())))
			transitionDuration.Record(ctx, e.Duration.Seconds(), metric.WithAttributes(from, to))
			if ev := e.HoldEvent(); ev != "" {
				holds.Add(ctx, 1, metric.WithAttributes(attribute.String("event", ev)))
			}
		},
		Recovery: func(ctx context.Context, e twopc.RecoveryEvent) {
			action := attribute.String("action", e.Action.String())
			recoveries.Add(ctx, 1, metric.WithAttributes(action, attribute.String("outcome", e.Outcome.String())))
			recoveryDuration.Record(ctx, e.Duration.Seconds(), metric.WithAttributes(action))
		},
	}, nil
}

// stateLabel is the attribute value of state s: "none" for no state.
func stateLabel(s twopc.State) string {
	if s == "" {
		return "none"
	}
	return s.String()
}
