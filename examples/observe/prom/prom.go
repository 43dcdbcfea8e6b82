// Package prom exports the twopc library's events as Prometheus metrics:
// NewObserver returns a twopc.Observer (give it to twopc.WithObserver)
// that counts and times every state transition and every recovery action.
//
//	metric                        type       labels
//	twopc_transitions_total       counter    from, to, outcome
//	twopc_transition_seconds      histogram  from, to
//	twopc_recovery_actions_total  counter    action, outcome
//	twopc_recovery_seconds        histogram  action
//	twopc_holds_total             counter    event
//
// from and to are states (pending, applied, done, canceling, canceled,
// initial); from is "none" for the write that creates a transaction
// (Transfer's insert, Cancel's placeholder), and a claim renewed or taken
// over counts as a move from a state to itself. outcome is moved,
// not_moved (another process moved it first) or error; action is
// takeover, roll_forward, settle, roll_back, cancel_initial or unfence
// (see twopc.Observer). Durations are those of the write (transitions)
// or of the action (recovery).
// event is hold, capture, void or expire: a hold made, captured, voided,
// or voided by its expiry (twopc.TransitionEvent.HoldEvent), counted when
// the write moved it.
// Worth an alert: twopc_transitions_total{outcome="error"} rising (the
// database is failing writes), and twopc_recovery_actions_total with
// action roll_forward or roll_back rising (processes die mid-transfer).
//
// NewFeedCollector exports the change feeds' lag, read at each scrape:
// each subscriber group's events not acknowledged and how long the oldest
// has waited (see FeedCollector).
package prom

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/twopc/twopc"
)

// Buckets are the histograms' buckets, in seconds: from half a millisecond
// to about 16 seconds, doubling.
var Buckets = prometheus.ExponentialBuckets(0.0005, 2, 16)

// NewObserver registers the five metrics with reg and returns an Observer
// that updates them. Give the same Observer to every Coordinator of the
// process (their Cancelers and Recoverers use it too); registering twice
// with one reg fails.
func NewObserver(reg prometheus.Registerer) (twopc.Observer, error) {
	transitions := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "twopc_transitions_total",
		Help: "State transitions written by this process, by from state, to state and outcome (moved, not_moved, error).",
	}, []string{"from", "to", "outcome"})
	transitionSeconds := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "twopc_transition_seconds",
		Help:    "Time the write of a state transition took, retries included.",
		Buckets: Buckets,
	}, []string{"from", "to"})
	recoveries := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "twopc_recovery_actions_total",
		Help: "Recovery actions on transactions, by action and outcome (moved, not_moved, error).",
	}, []string{"action", "outcome"})
	recoverySeconds := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "twopc_recovery_seconds",
		Help:    "Time a recovery action took.",
		Buckets: Buckets,
	}, []string{"action"})
	holds := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "twopc_holds_total",
		Help: "Holds made, captured, voided and expired by this process, by event (hold, capture, void, expire).",
	}, []string{"event"})
	for _, c := range []prometheus.Collector{transitions, transitionSeconds, recoveries, recoverySeconds, holds} {
		if err := reg.Register(c); err != nil {
			return twopc.Observer{}, err
		}
	}
	return twopc.Observer{
		Transition: func(_ context.Context, e twopc.TransitionEvent) {
			from, to := stateLabel(e.From), stateLabel(e.To)
			transitions.WithLabelValues(from, to, e.Outcome.String()).Inc()
			transitionSeconds.WithLabelValues(from, to).Observe(e.Duration.Seconds())
			if ev := e.HoldEvent(); ev != "" {
				holds.WithLabelValues(ev).Inc()
			}
		},
		Recovery: func(_ context.Context, e twopc.RecoveryEvent) {
			recoveries.WithLabelValues(e.Action.String(), e.Outcome.String()).Inc()
			recoverySeconds.WithLabelValues(e.Action.String()).Observe(e.Duration.Seconds())
		},
	}, nil
}

// stateLabel is the label of state s: "none" for no state.
func stateLabel(s twopc.State) string {
	if s == "" {
		return "none"
	}
	return s.String()
}
