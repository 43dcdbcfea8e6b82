package twopc_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/internal/mongotest"
)

// fillLog inserts n done transfers straight into db's log, one second
// apart in commit time from start, each between from(i) and to(i) in the
// default ledger, as this version writes them.
func fillLog(b *testing.B, db *mongo.Database, n int, start time.Time, from, to func(int) string) {
	b.Helper()
	ctx := benchCtx(b)
	for lo := 0; lo < n; lo += 1000 {
		docs := make([]any, 0, 1000)
		for i := lo; i < min(n, lo+1000); i++ {
			src, dst := from(i), to(i)
			ks, err := twopc.EntryKey("", src)
			if err != nil {
				b.Fatal(err)
			}
			kd, _ := twopc.EntryKey("", dst)
			at := start.Add(time.Duration(i) * time.Second)
			docs = append(docs, bson.D{
				{Key: "_id", Value: bson.NewObjectIDFromTimestamp(at)}, {Key: "source", Value: src}, {Key: "destination", Value: dst},
				{Key: "value", Value: int64(1)}, {Key: "state", Value: "done"}, {Key: "application", Value: "fill"},
				{Key: "created", Value: at}, {Key: "lastModified", Value: at}, {Key: "committedAt", Value: at},
				{Key: "accounts", Value: bson.A{ks, kd}},
			})
		}
		if _, err := db.Collection("transactions").InsertMany(ctx, docs); err != nil {
			b.Fatal(err)
		}
	}
}

// docsRead counts the documents the server returns to finds and getMores:
// exact on any server, where time on the dev server is not MongoDB's.
type docsRead struct{ n atomic.Int64 }

func (d *docsRead) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Succeeded: func(_ context.Context, e *event.CommandSucceededEvent) {
		if e.CommandName != "find" && e.CommandName != "getMore" {
			return
		}
		for _, batch := range []string{"firstBatch", "nextBatch"} {
			if arr, ok := e.Reply.Lookup("cursor", batch).ArrayOK(); ok {
				vals, _ := arr.Values()
				d.n.Add(int64(len(vals)))
			}
		}
	}}
}

// statementBench is a fresh database whose documents returned read
// counts, with its indexes and accounts opened with 1,000,000 each, and a
// coordinator on it, closed when b ends.
func statementBench(b *testing.B, read *docsRead, accounts ...string) (*mongo.Database, *twopc.Coordinator) {
	b.Helper()
	ctx := benchCtx(b)
	db := mongotest.NewDatabase(b, options.Client().SetMonitor(read.monitor()))
	c, err := twopc.NewCoordinator(db)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close(context.Background()) })
	if err := c.EnsureIndexes(ctx); err != nil {
		b.Fatal(err)
	}
	for _, id := range accounts {
		if err := c.OpenAccount(ctx, id, 1_000_000); err != nil {
			b.Fatal(err)
		}
	}
	return db, c
}

// BenchmarkStatementPage reads a page of 100 entries of an account with
// 100, while the log holds 1,000 or 20,000 transfers of other accounts.
// The server returns the same documents for both (docs-returned/op, exact
// anywhere); on MongoDB the {accounts, committedAt} index finds them
// directly, and so does the dev server, whose FerretDB keeps a side table
// of the array's elements for that index (DIFFERENCES.md item 14): there
// too ns/op does not grow with the log.
func BenchmarkStatementPage(b *testing.B) {
	for _, others := range []int{1000, 20000} {
		b.Run(fmt.Sprintf("others=%d", others), func(b *testing.B) {
			ctx := benchCtx(b)
			var read docsRead
			db, c := statementBench(b, &read, "mine", "peer", "x", "y")
			start := time.Now().Add(-48 * time.Hour)
			fillLog(b, db, 100, start, func(int) string { return "mine" }, func(int) string { return "peer" })
			fillLog(b, db, others, start.Add(time.Hour), func(int) string { return "x" }, func(int) string { return "y" })
			b.ResetTimer()
			read.n.Store(0)
			for range b.N {
				p, err := c.Statement(ctx, "", "mine", twopc.StatementQuery{Limit: 100})
				if err != nil || len(p.Entries) != 100 {
					b.Fatalf("%d entries, %v", len(p.Entries), err)
				}
			}
			b.ReportMetric(float64(read.n.Load())/float64(b.N), "docs-returned/op")
		})
	}
}

// BenchmarkBalanceAt answers the balance of an account with 100 entries
// and of one with 20,000, all older than the checkpoint horizon: the
// first read sums them and records a checkpoint, and every read after it
// sums only the entries since, so the two cost about the same (the
// first read is outside the timer).
func BenchmarkBalanceAt(b *testing.B) {
	for _, entries := range []int{100, 20000} {
		b.Run(fmt.Sprintf("entries=%d", entries), func(b *testing.B) {
			ctx := benchCtx(b)
			var read docsRead
			db, c := statementBench(b, &read, "mine", "peer")
			start := time.Now().Add(-10 * 24 * time.Hour)
			fillLog(b, db, entries, start, func(int) string { return "mine" }, func(int) string { return "peer" })
			if _, err := c.BalanceAt(ctx, "", "mine", time.Now()); err != nil { // records the checkpoint
				b.Fatal(err)
			}
			b.ResetTimer()
			read.n.Store(0)
			for range b.N {
				got, err := c.BalanceAt(ctx, "", "mine", time.Now())
				if err != nil || got != 1_000_000-int64(entries) {
					b.Fatalf("%d, %v", got, err)
				}
			}
			b.ReportMetric(float64(read.n.Load())/float64(b.N), "docs-returned/op")
		})
	}
}
