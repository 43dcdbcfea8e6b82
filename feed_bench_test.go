package twopc_test

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/internal/feeddelay"
	"github.com/twopc/twopc/internal/mongotest"
)

// BenchmarkFeed runs transfers, one at a time and from benchWorkers
// goroutines, with no feed (feed=off), with a feed's indexes on the log
// and no sequencer running (feed=indexes: what the indexes alone cost the
// transfers' own writes), and with a feed's sequencer running beside them
// on a client of its own (feed=on, at its defaults), and
// reports, with the sequencer on, the writes it sent per event once it
// caught up: tag-stmts/event (its single-document updates of the log) and
// feed-writes/event (its lease renewals and publications), and batches.
// The cost of the feed on the transfers is the ratio of ns/op, on and
// off, measured in one run:
//
//	go test -run '^$' -bench 'Feed$' -benchtime 300x -count 2 .
func BenchmarkFeed(b *testing.B) {
	for _, workers := range []int{1, benchWorkers} {
		for _, mode := range []string{"off", "indexes", "on"} {
			on := mode == "on"
			b.Run(fmt.Sprintf("workers=%d/feed=%s", workers, mode), func(b *testing.B) {
				var bc benchCounter
				db := benchBank(b, &bc)
				c, err := twopc.NewCoordinator(db)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = c.Close(context.Background()) })
				var w feeddelay.Writes
				var f *twopc.Feed
				stop := func() {}
				if mode != "off" {
					fdb := mongotest.ConnectURI(b, mongotest.Shared(b).URI, options.Client().SetMonitor(w.Monitor())).Database(db.Name())
					fc, err := twopc.NewCoordinator(fdb, twopc.WithApplication("sequencer"))
					if err != nil {
						b.Fatal(err)
					}
					b.Cleanup(func() { _ = fc.Close(context.Background()) })
					f = fc.Feed("bench")
					ctx, cancel := context.WithCancel(benchCtx(b))
					done := make(chan error, 1)
					go func() { done <- f.Run(ctx) }()
					var once sync.Once
					stop = func() { once.Do(func() { cancel(); <-done }) }
					b.Cleanup(stop)
					waitFeed(b, benchCtx(b), db, "bench")
					for !on { // until it took its lease, its indexes made: then stopped
						st, err := f.Status(benchCtx(b))
						if err != nil {
							b.Fatal(err)
						}
						if st.Epoch > 0 {
							stop()
							break
						}
						runtime.Gosched()
					}
				}
				runTransfers(b, &bc, libImpl{c}, workers, pair)
				checkBank(b, db, b.N)
				if !on {
					return
				}
				var st *twopc.FeedStatus
				for {
					st, err = f.Status(benchCtx(b))
					if err != nil {
						b.Fatal(err)
					}
					if st.Waiting == 0 && st.Unpublished == 0 && st.Orphaned == 0 {
						break
					}
					runtime.Gosched()
				}
				stop()
				n, err := db.Collection("transactions").CountDocuments(benchCtx(b), bson.D{{Key: "fx_bench", Value: bson.D{{Key: "$exists", Value: true}}}})
				if err != nil {
					b.Fatal(err)
				}
				if int(n) != b.N {
					b.Fatalf("%d transactions numbered, want %d", n, b.N)
				}
				b.ReportMetric(float64(w.Tags())/float64(b.N), "tag-stmts/event")
				b.ReportMetric(float64(w.Feeds())/float64(b.N), "feed-writes/event")
				b.ReportMetric(float64(st.Published), "batches")
			})
		}
	}
}

// feedDelayTakeover, if not 0, makes BenchmarkFeedDelay run a standby
// sequencer beside the first and stall the holder that often, after it
// tagged a batch, until the standby took the lease over (a lease, 10 s,
// after its last renewal).
var feedDelayTakeover = flag.Duration("feeddelay.takeover", 0, "BenchmarkFeedDelay: stall the sequencer holding the lease this often until a standby takes it over (0: one sequencer, none)")

// sleepFor waits d and reports true, or false if ctx ended first.
func sleepFor(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// feedDelayWorkers is the concurrency of BenchmarkFeedDelay's transfers,
// the one the feed's latency goal is stated at; feedDelayBaseline is how
// many transfers measure the rate the server reaches without a feed.
const (
	feedDelayWorkers  = 8
	feedDelayBaseline = 400
)

// feedRounds times the sequencer's rounds through its hook: the tags'
// writes (FeedScanned to FeedTagged), the publication (to FeedPublished),
// and the time between a publication and the next round's tags (its wait,
// poll or wake, and its reads, with the rounds that found nothing).
type feedRounds struct {
	mu                        sync.Mutex
	rounds                    int
	tag, publish, between     time.Duration
	scanned, tagged, lastDone time.Time
}

func (r *feedRounds) hook(step int) error {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	switch step {
	case twopc.FeedScanned:
		if !r.lastDone.IsZero() {
			r.between += now.Sub(r.lastDone)
		}
		r.scanned = now
	case twopc.FeedTagged:
		r.tag += now.Sub(r.scanned)
		r.tagged = now
	case twopc.FeedPublished:
		r.publish += now.Sub(r.tagged)
		r.rounds++
		r.lastDone = now
	}
	return nil
}

// BenchmarkFeedDelay measures how long an event takes from its commit to
// a subscriber's handler: first the rate feedDelayWorkers goroutines reach
// with no feed (feedDelayBaseline transfers, closed loop:
// nofeed-transfers/s), then b.N transfers offered at half that rate from
// as many goroutines (each started at its time, i/rate from the first),
// with one sequencer (Run, its defaults, a client of its own) and one
// subscriber group (Subscribe, its defaults) running. An event's delay
// runs from its Transfer's return (on the host's clock; the commit is
// before it, by at most the commit's reply) to the handler's call that
// is handed it. It reports delay-p50-ms, delay-p99-ms and delay-max-ms,
// events/s (the events handled over the time from the first handler call
// to the last: whether the feed keeps up) beside offered/s, the sequencer's writes per
// event (tag-stmts/event: its statements updating the log;
// feed-writes/event: its writes of the feeds' collection, renewals and
// publications), and where its rounds' time went: rounds, events/round,
// tag-ms/round (its tag writes), publish-ms/round, between-ms/round (from
// a publication to the next round's tags: its wait, poll or wake, and
// its reads), and takeovers. The goal, on the dev server on a
// quiet machine: a median ≤ 1 s, p99 ≤ 3 s:
//
//	go test -run '^$' -bench 'FeedDelay$' -benchtime 600x .
//
// With -feeddelay.takeover 30s a standby sequencer runs beside the first,
// and every 30 s the holder stalls after tagging a batch until the standby
// took over (the goal: p99 ≤ the lease + 3 s; the run must span a few:
// -benchtime 6000x at 60 transfers/s is about 100 s).
func BenchmarkFeedDelay(b *testing.B) {
	// The rate without a feed.
	var base benchCounter
	bdb := benchBank(b, &base)
	bc, err := twopc.NewCoordinator(bdb)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = bc.Close(context.Background()) })
	ctx := benchCtx(b)
	began := time.Now()
	if err := feeddelay.Offer(ctx, feedDelayWorkers, feedDelayBaseline, 0, func(ctx context.Context, i int) error {
		src, dst := pair(i)
		_, err := bc.Transfer(ctx, src, dst, 1)
		return err
	}); err != nil {
		b.Fatal(err)
	}
	rate := float64(feedDelayBaseline) / time.Since(began).Seconds()

	var counter benchCounter
	db := benchBank(b, &counter)
	c, err := twopc.NewCoordinator(db)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close(context.Background()) })
	var w feeddelay.Writes
	var rounds feedRounds
	fdb := mongotest.ConnectURI(b, mongotest.Shared(b).URI, options.Client().SetMonitor(w.Monitor())).Database(db.Name())
	fc, err := twopc.NewCoordinator(fdb, twopc.WithApplication("sequencer"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = fc.Close(context.Background()) })
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	every := *feedDelayTakeover
	stall := &loadStall{reached: make(chan string), release: make(chan struct{}), quit: rctx.Done()}
	seqs := []*twopc.Coordinator{fc}
	if every > 0 { // a standby, on the same counted client
		fc2, err := twopc.NewCoordinator(fdb, twopc.WithApplication("standby"))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = fc2.Close(context.Background()) })
		seqs = append(seqs, fc2)
	}
	ran := make(chan error, len(seqs))
	for _, sc := range seqs {
		name := sc.Application()
		hook := func(step int) error {
			err := rounds.hook(step)
			if every > 0 {
				_ = stall.hook(name, step)
			}
			return err
		}
		go func() { ran <- sc.Feed("delay", twopc.WithFeedHook(hook)).Run(rctx) }()
	}
	waitFeed(b, ctx, db, "delay")
	if every > 0 {
		// Every so often the holder stalls after tagging a batch, until
		// the standby took the lease over (its lease lapsed).
		go func() {
			for sleepFor(rctx, every) {
				stall.armed.Store(int64(twopc.FeedTagged) + 1)
				var stalled string
				select {
				case stalled = <-stall.reached:
				case <-rctx.Done():
					return
				}
				for sleepFor(rctx, 50*time.Millisecond) {
					st, err := c.Feed("delay").Status(rctx)
					if err == nil && st.Holder != "" && !strings.HasPrefix(st.Holder, stalled+"/") {
						break
					}
				}
				select {
				case stall.release <- struct{}{}:
				case <-rctx.Done():
					return
				}
			}
		}()
	}

	probe := feeddelay.NewProbe(b.N)
	subscribed := make(chan error, 1)
	go func() { subscribed <- c.Feed("delay").Subscribe(rctx, "delay", probe.Handle) }()

	b.ResetTimer()
	began = time.Now()
	if err := feeddelay.Offer(ctx, feedDelayWorkers, b.N, rate/2, func(ctx context.Context, i int) error {
		src, dst := pair(i)
		t, err := c.Transfer(ctx, src, dst, 1)
		if err == nil {
			probe.Returned(t.ID)
		}
		return err
	}); err != nil {
		b.Fatal(err)
	}
	offered := float64(b.N) / time.Since(began).Seconds()
	select {
	case <-probe.All():
	case err := <-subscribed:
		b.Fatalf("Subscribe: %v", err)
	case err := <-ran:
		b.Fatalf("Run: %v", err)
	}
	b.StopTimer()
	stop()
	for range seqs {
		<-ran
	}
	<-subscribed
	st, err := c.Feed("delay").Status(ctx)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(st.Takeovers), "takeovers")

	delays, events, err := probe.Delays()
	if err != nil {
		b.Fatal(err)
	}
	q := func(p float64) float64 {
		return float64(delays[min(len(delays)-1, int(p*float64(len(delays))))]) / float64(time.Millisecond)
	}
	b.ReportMetric(q(0.5), "delay-p50-ms")
	b.ReportMetric(q(0.99), "delay-p99-ms")
	b.ReportMetric(float64(delays[len(delays)-1])/float64(time.Millisecond), "delay-max-ms")
	if events > 0 {
		b.ReportMetric(events, "events/s")
	}
	b.ReportMetric(offered, "offered/s")
	b.ReportMetric(rate, "nofeed-transfers/s")
	b.ReportMetric(float64(w.Tags())/float64(b.N), "tag-stmts/event")
	b.ReportMetric(float64(w.Feeds())/float64(b.N), "feed-writes/event")
	rounds.mu.Lock()
	defer rounds.mu.Unlock()
	if n := rounds.rounds; n > 0 {
		per := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / float64(n) }
		b.ReportMetric(float64(n), "rounds")
		b.ReportMetric(float64(b.N)/float64(n), "events/round")
		b.ReportMetric(per(rounds.tag), "tag-ms/round")
		b.ReportMetric(per(rounds.publish), "publish-ms/round")
		if n > 1 {
			b.ReportMetric(float64(rounds.between)/float64(time.Millisecond)/float64(n-1), "between-ms/round")
		}
	}
}
