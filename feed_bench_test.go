package twopc_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/internal/mongotest"
)

// feedWrites counts the writes a sequencer's client sends: statements of
// the log's updates (its tags) and writes of the feeds' collection (its
// leases and publications).
type feedWrites struct {
	mu         sync.Mutex
	tagStmts   int
	feedWrites int
}

func (w *feedWrites) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		coll := ""
		if v, err := e.Command.LookupErr(e.CommandName); err == nil {
			coll, _ = v.StringValueOK()
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		switch {
		case e.CommandName == "update" && coll == "transactions":
			vals, _ := e.Command.Lookup("updates").Array().Values()
			w.tagStmts += len(vals)
		case (e.CommandName == "update" || e.CommandName == "findAndModify") && coll == "transactions_feeds":
			w.feedWrites++
		}
	}}
}

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
				var w feedWrites
				var f *twopc.Feed
				stop := func() {}
				if mode != "off" {
					fdb := mongotest.ConnectURI(b, mongotest.Shared(b).URI, options.Client().SetMonitor(w.monitor())).Database(db.Name())
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
				w.mu.Lock()
				defer w.mu.Unlock()
				b.ReportMetric(float64(w.tagStmts)/float64(b.N), "tag-stmts/event")
				b.ReportMetric(float64(w.feedWrites)/float64(b.N), "feed-writes/event")
				b.ReportMetric(float64(st.Published), "batches")
			})
		}
	}
}
