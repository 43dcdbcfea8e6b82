package main

// The change feed's scenario (-feed): how long an event takes from its
// commit to a subscriber's handler, with transfers running, one
// sequencer and one subscriber group.

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/internal/feeddelay"
)

// feedResult is what the feed's scenario measured.
type feedResult struct {
	workers      int
	transfers    int
	baseline     float64         // transfers/s with no feed (closed loop)
	offered      float64         // transfers/s offered with the feed
	events       float64         // events/s handled: from the first handler call to the last
	delays       []time.Duration // sorted: each event's, from its Transfer's return to its handler's call
	tagStmts     float64         // the sequencer's statements updating the log, per event
	feedWrites   float64         // its writes of the feeds' collection (renewals, publications), per event
	takenOver    int             // the sequencer's takeovers (Status)
	publishedBat int64           // batches published
}

// runFeed runs the feed's scenario: first -transfers transfers from
// -feed.workers goroutines, closed loop, with no feed (the rate the
// server reaches); then -feed.transfers transfers offered at half that
// rate (or -feed.rate) from as many goroutines, each started at its time,
// with a sequencer (Feed.Run at its defaults, a client of its own) and a
// subscriber group (Feed.Subscribe at its defaults) running; each
// committed event's delay runs from its Transfer's return to the handler
// call handed it.
func (b *bench) runFeed(ctx context.Context) (*feedResult, error) {
	cfg := b.cfg
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	res := &feedResult{workers: cfg.feedWorkers, transfers: cfg.feedTransfers}
	fresh := func(name string) (*mongo.Database, *twopc.Coordinator, func(), error) {
		db := b.admin.Database(fmt.Sprintf("bench_%s_feed_%s", b.runID, name))
		if err := b.openAccounts(ctx, db); err != nil {
			return nil, nil, nil, err
		}
		c, err := twopc.NewCoordinator(db, twopc.WithApplication("bench"))
		if err != nil {
			return nil, nil, nil, err
		}
		return db, c, func() { _ = c.Close(context.Background()); _ = db.Drop(context.Background()) }, nil
	}
	pairs := b.pairs(cfg.feedWorkers)
	pick := func(i int) (string, string) { p := pairs[i%len(pairs)]; return p[0], p[1] }

	_, c, done, err := fresh("off")
	if err != nil {
		return nil, err
	}
	began := time.Now()
	if err := feeddelay.Offer(ctx, cfg.feedWorkers, cfg.transfers, 0, func(ctx context.Context, i int) error {
		src, dst := pick(i)
		_, err := c.Transfer(ctx, src, dst, cfg.value)
		return err
	}); err != nil {
		done()
		return nil, err
	}
	res.baseline = float64(cfg.transfers) / time.Since(began).Seconds()
	done()
	rate := cfg.feedRate
	if rate <= 0 {
		rate = res.baseline / 2
	}

	db, c, done, err := fresh("on")
	if err != nil {
		return nil, err
	}
	defer done()
	var w feeddelay.Writes
	sclient, err := mongo.Connect(options.Client().ApplyURI(cfg.uri).SetMonitor(w.Monitor()))
	if err != nil {
		return nil, err
	}
	defer func() { _ = sclient.Disconnect(context.Background()) }()
	sc, err := twopc.NewCoordinator(sclient.Database(db.Name()), twopc.WithApplication("sequencer"))
	if err != nil {
		return nil, err
	}
	defer func() { _ = sc.Close(context.Background()) }()
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop()
	ran, subscribed := make(chan error, 1), make(chan error, 1)
	wg.Add(2)
	go func() { defer wg.Done(); ran <- sc.Feed("bench").Run(rctx) }()
	for { // until its first round: every transfer next is the feed's
		st, err := c.Feed("bench").Status(ctx)
		if err != nil {
			return nil, err
		}
		if st.Epoch > 0 && !st.Since.IsZero() {
			var now struct {
				LocalTime time.Time `bson:"localTime"`
			}
			if err := b.admin.Database("admin").RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Decode(&now); err != nil {
				return nil, err
			}
			if now.LocalTime.After(st.Since) {
				break
			}
		}
		select {
		case err := <-ran:
			return nil, fmt.Errorf("Run: %w", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	probe := feeddelay.NewProbe(cfg.feedTransfers)
	go func() {
		defer wg.Done()
		subscribed <- c.Feed("bench").Subscribe(rctx, "bench", probe.Handle)
	}()
	began = time.Now()
	if err := feeddelay.Offer(ctx, cfg.feedWorkers, cfg.feedTransfers, rate, func(ctx context.Context, i int) error {
		src, dst := pick(i)
		t, err := c.Transfer(ctx, src, dst, cfg.value)
		if err == nil {
			probe.Returned(t.ID)
		}
		return err
	}); err != nil {
		return nil, err
	}
	res.offered = float64(cfg.feedTransfers) / time.Since(began).Seconds()
	select {
	case <-probe.All():
	case err := <-subscribed:
		return nil, fmt.Errorf("Subscribe: %w", err)
	case err := <-ran:
		return nil, fmt.Errorf("Run: %w", err)
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for the events: %w", ctx.Err())
	}
	if res.delays, res.events, err = probe.Delays(); err != nil {
		return nil, err
	}
	res.tagStmts = float64(w.Tags()) / float64(cfg.feedTransfers)
	res.feedWrites = float64(w.Feeds()) / float64(cfg.feedTransfers)
	st, err := c.Feed("bench").Status(ctx)
	if err != nil {
		return nil, err
	}
	res.takenOver, res.publishedBat = st.Takeovers, st.Published
	return res, nil
}

// markdown is the feed scenario's report.
func (r *feedResult) markdown(w io.Writer, server string) {
	p := func(q float64) time.Duration { return percentile(r.delays, q) }
	fmt.Fprintf(w, "## Change feed: from commit to handler\n\n%s; %d transfers from %d goroutines, offered at %.0f/s (%.0f/s with no feed, closed loop); "+
		"one sequencer and one subscriber group at their defaults. An event's delay runs from its Transfer's return to the handler's call; "+
		"events/s from the first handler call to the last.\n\n",
		server, r.transfers, r.workers, r.offered, r.baseline)
	fmt.Fprintln(w, "| events/s | delay p50 | p99 | max | tag statements/event | feed-document writes/event | batches | takeovers |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|---:|---:|")
	fmt.Fprintf(w, "| %.1f | %s | %s | %s | %.3f | %.3f | %d | %d |\n\n", r.events, fmtDur(p(50)), fmtDur(p(99)), fmtDur(p(100)),
		r.tagStmts, r.feedWrites, r.publishedBat, r.takenOver)
	fmt.Fprintf(w, "Goals (issue 50, at half the rate with no feed, 8 goroutines): median ≤ 1 s: %s; p99 ≤ 3 s: %s; events/s at least the rate offered: %s.\n",
		yes(p(50) <= time.Second), yes(p(99) <= 3*time.Second), yes(r.events >= r.offered*0.98))
}
