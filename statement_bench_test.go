package twopc_test

import (
	"fmt"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

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
				{Key: "legFences", Value: true}, {Key: "accounts", Value: bson.A{ks, kd}},
			})
		}
		if _, err := db.Collection("transactions").InsertMany(ctx, docs); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStatementPage reads a page of 100 entries of an account with
// 100, while the log holds 1,000 or 20,000 transfers of other accounts:
// on MongoDB the {accounts, committedAt} index makes the two cost the
// same; on the dev server, whose FerretDB cannot index an array's
// elements, every transaction is read (DIFFERENCES.md), and the cost grows
// with the log. Compare the two ns/op of one run.
func BenchmarkStatementPage(b *testing.B) {
	for _, others := range []int{1000, 20000} {
		b.Run(fmt.Sprintf("others=%d", others), func(b *testing.B) {
			ctx := benchCtx(b)
			db := mongotest.NewDatabase(b)
			c, err := twopc.NewCoordinator(db)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close(ctx)
			if err := c.EnsureIndexes(ctx); err != nil {
				b.Fatal(err)
			}
			for _, id := range []string{"mine", "peer", "x", "y"} {
				if err := c.OpenAccount(ctx, id, 1_000_000); err != nil {
					b.Fatal(err)
				}
			}
			start := time.Now().Add(-48 * time.Hour)
			fillLog(b, db, 100, start, func(int) string { return "mine" }, func(int) string { return "peer" })
			fillLog(b, db, others, start.Add(time.Hour), func(int) string { return "x" }, func(int) string { return "y" })
			b.ResetTimer()
			for range b.N {
				p, err := c.Statement(ctx, "", "mine", twopc.StatementQuery{Limit: 100})
				if err != nil || len(p.Entries) != 100 {
					b.Fatalf("%d entries, %v", len(p.Entries), err)
				}
			}
		})
	}
}

// BenchmarkBalanceAt answers the balance of an account with 100 entries
// and of one with 20,000: it sums the account's entries from its opening
// (no checkpoints yet), so its cost grows with the account's history.
func BenchmarkBalanceAt(b *testing.B) {
	for _, entries := range []int{100, 20000} {
		b.Run(fmt.Sprintf("entries=%d", entries), func(b *testing.B) {
			ctx := benchCtx(b)
			db := mongotest.NewDatabase(b)
			c, err := twopc.NewCoordinator(db)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close(ctx)
			if err := c.EnsureIndexes(ctx); err != nil {
				b.Fatal(err)
			}
			for _, id := range []string{"mine", "peer"} {
				if err := c.OpenAccount(ctx, id, 1_000_000); err != nil {
					b.Fatal(err)
				}
			}
			start := time.Now().Add(-10 * 24 * time.Hour)
			fillLog(b, db, entries, start, func(int) string { return "mine" }, func(int) string { return "peer" })
			b.ResetTimer()
			for range b.N {
				got, err := c.BalanceAt(ctx, "", "mine", time.Now())
				if err != nil || got != 1_000_000-int64(entries) {
					b.Fatalf("%d, %v", got, err)
				}
			}
		})
	}
}
