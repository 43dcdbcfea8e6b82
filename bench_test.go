package twopc_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/internal/mongotest"
	"github.com/twopc/twopc/internal/statements"
	"github.com/twopc/twopc/internal/tutorial"
)

// The benchmarks compare Transfer with the tutorial's protocol
// (internal/tutorial) on the server the harness picks. Besides ns/op and
// allocs/op they report, counted with a driver CommandMonitor:
//
//   - caller-rts/op: data commands sent on the caller's path, from the call
//     of Transfer to its return (the round trips a caller waits for);
//   - cmds/op: data commands per finished transfer, background settling
//     included: the run ends only once every transfer is done;
//   - stmts/op: the statements those commands carry (internal/statements);
//   - acct-writes/op, txn-writes/op, other-writes/op: the documents those
//     commands wrote per finished transfer, in the accounts, in the
//     transactions and in any other collection, from their replies (an
//     update's nModified and upserts, an insert's n, a findAndModify's n).
//
// On the dev server they also report, from its front's own clock (its
// /work API): srv-ms/op, the server's busy time per finished transfer;
// srv-busy, the share of the run the server was busy; and
// srv-us/acct-stmt, its time per account update statement. The front lets
// one request through at a time, so a run whose srv-busy is near 1 is
// bound by the server's time per statement, and one well below 1 by
// something else (the client, or waiting). With -sim.profile they also
// print that time by command and collection.
//
// Run them with
//
//	go test -run '^$' -bench . -count 6 . | tee bench.txt && benchstat -col /impl bench.txt
//
// On the dev server only the ratios between the two implementations and
// the counts mean anything; see BENCHMARKS.md.

const (
	benchAccounts = 64
	benchOpening  = int64(1_000_000_000_000)
	// benchWorkers is the fixed concurrency of the parallel benchmarks, the
	// one the project's goals are stated at.
	benchWorkers = 32
)

// callerKey marks the context of the caller's own calls, so that the
// monitor can tell their commands from background settling's.
type callerKey struct{}

// benchCounter counts data commands: all of them, and those sent under a
// caller's context; and the statements they carry (see
// internal/statements).
type benchCounter struct {
	caller, total, statements atomic.Int64
	// writes counts the documents written, by collection class.
	writes statements.Writes
	// faults reads the dev server's busy time; nil on other servers.
	faults *mongotest.Faults
	// cpu is the dev server's CPU time at reset, if known.
	cpu time.Duration
}

func (bc *benchCounter) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(ctx context.Context, e *event.CommandStartedEvent) {
		if !dataCommands[e.CommandName] {
			return
		}
		bc.total.Add(1)
		n := int64(statements.Count(e.CommandName, e.Command))
		bc.statements.Add(n)
		if n > 0 {
			coll, _ := e.Command.Lookup(e.CommandName).StringValueOK()
			bc.writes.Start(e.RequestID, coll)
		}
		if ctx.Value(callerKey{}) != nil {
			bc.caller.Add(1)
		}
	}, Succeeded: func(_ context.Context, e *event.CommandSucceededEvent) {
		bc.writes.Succeeded(e.RequestID, e.CommandName, e.Reply)
	}, Failed: func(_ context.Context, e *event.CommandFailedEvent) {
		bc.writes.Failed(e.RequestID)
	}}
}

func (bc *benchCounter) reset(b *testing.B) {
	bc.caller.Store(0)
	bc.total.Store(0)
	bc.statements.Store(0)
	bc.writes.Reset()
	if bc.faults != nil {
		if err := bc.faults.ResetWork(benchCtx(b)); err != nil {
			b.Fatal(err)
		}
		bc.cpu, _ = bc.faults.CPU()
	}
}

// report reports the counts per transfer of n transfers: caller-rts/op,
// cmds/op and stmts/op; and on the dev server srv-ms/op and srv-busy.
func (bc *benchCounter) report(b *testing.B, n int) {
	b.ReportMetric(float64(bc.caller.Load())/float64(n), "caller-rts/op")
	b.ReportMetric(float64(bc.total.Load())/float64(n), "cmds/op")
	b.ReportMetric(float64(bc.statements.Load())/float64(n), "stmts/op")
	b.ReportMetric(float64(bc.writes.Get(statements.Accounts))/float64(n), "acct-writes/op")
	b.ReportMetric(float64(bc.writes.Get(statements.Transactions))/float64(n), "txn-writes/op")
	b.ReportMetric(float64(bc.writes.Get(statements.Others))/float64(n), "other-writes/op")
	bc.reportServer(b, n)
}

// reportServer reports, on the dev server, srv-ms/op and srv-busy for n
// ops (see the benchmarks' documentation above), and srv-cpu-ms/op, the
// server process's CPU time per op since reset (Linux only), which a
// shared machine's load inflates less than srv-ms/op; nothing elsewhere.
func (bc *benchCounter) reportServer(b *testing.B, n int) {
	if bc.faults == nil {
		return
	}
	work, err := bc.faults.Work(benchCtx(b))
	if err != nil {
		b.Fatal(err)
	}
	var busy time.Duration
	for _, w := range work {
		busy += w.Busy
		if w.Command == "update" && w.Collection == "accounts" && w.Statements > 0 {
			b.ReportMetric(float64(w.Busy)/float64(time.Microsecond)/float64(w.Statements), "srv-us/acct-stmt")
		}
	}
	b.ReportMetric(float64(busy)/float64(time.Millisecond)/float64(n), "srv-ms/op")
	if cpu, ok := bc.faults.CPU(); ok && bc.cpu > 0 {
		b.ReportMetric(float64(cpu-bc.cpu)/float64(time.Millisecond)/float64(n), "srv-cpu-ms/op")
	}
	if elapsed := b.Elapsed(); elapsed > 0 {
		b.ReportMetric(float64(busy)/float64(elapsed), "srv-busy")
	}
	if *simProfile {
		var sb strings.Builder
		for _, w := range work {
			fmt.Fprintf(&sb, "%8d %8d %10v %8v/stmt  %s %s\n", w.Requests, w.Statements, w.Busy.Round(time.Millisecond),
				(w.Busy / time.Duration(max(w.Statements, 1))).Round(time.Microsecond), w.Command, w.Collection)
		}
		fmt.Fprintf(os.Stderr, "%s: the server's own time (requests, statements, busy, per statement):\n%s", b.Name(), sb.String())
	}
}

// transferer is one implementation under test.
type transferer interface {
	transfer(ctx context.Context, src, dst string, value int64) error
	// finish waits until every transfer made so far is done.
	finish(ctx context.Context) error
}

type libImpl struct{ c *twopc.Coordinator }

func (l libImpl) transfer(ctx context.Context, src, dst string, value int64) error {
	_, err := l.c.Transfer(ctx, src, dst, value)
	return err
}

func (l libImpl) finish(ctx context.Context) error { return l.c.Settle(ctx) }

type tutorialImpl struct{ b *tutorial.Bank }

func (t tutorialImpl) transfer(ctx context.Context, src, dst string, value int64) error {
	_, err := t.b.Transfer(ctx, src, dst, value)
	return err
}

func (tutorialImpl) finish(context.Context) error { return nil }

var benchImpls = []struct {
	name string
	open func(b *testing.B, db *mongo.Database) transferer
}{
	{"twopc", func(b *testing.B, db *mongo.Database) transferer {
		c, err := twopc.NewCoordinator(db)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = c.Close(context.Background()) })
		// No EnsureIndexes: the coordinator makes the indexes it reads
		// by itself, the default path a user takes.
		return libImpl{c}
	}},
	{"tutorial", func(_ *testing.B, db *mongo.Database) transferer {
		return tutorialImpl{tutorial.New(db)}
	}},
}

func benchCtx(b *testing.B) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	b.Cleanup(cancel)
	return ctx
}

// accountID names account i; pair returns the accounts of transfer i,
// spread over all pairs.
func accountID(i int) string { return fmt.Sprintf("acct%03d", i) }

func pair(i int) (string, string) {
	src := i % benchAccounts
	dst := (src + 1 + (i/benchAccounts)%(benchAccounts-1)) % benchAccounts
	return accountID(src), accountID(dst)
}

// benchBank is a fresh database with benchAccounts accounts, reached
// through a client whose commands bc counts.
func benchBank(b *testing.B, bc *benchCounter) *mongo.Database {
	b.Helper()
	monitor := bc.monitor()
	if *simProfile {
		// -sim.profile: where the server's time went, by command shape.
		p := &commandProfile{started: map[int64]profileStart{}, total: map[string]*profileEntry{}}
		pm, count := p.monitor(), monitor.Started
		succeeded, failed := monitor.Succeeded, monitor.Failed
		monitor = &event.CommandMonitor{
			Started: func(ctx context.Context, e *event.CommandStartedEvent) {
				count(ctx, e)
				pm.Started(ctx, e)
			},
			Succeeded: func(ctx context.Context, e *event.CommandSucceededEvent) {
				succeeded(ctx, e)
				pm.Succeeded(ctx, e)
			},
			Failed: func(ctx context.Context, e *event.CommandFailedEvent) {
				failed(ctx, e)
				pm.Failed(ctx, e)
			},
		}
		b.Cleanup(func() { fmt.Fprintf(os.Stderr, "%s: where the server's time went:\n%s", b.Name(), p) })
	}
	bc.faults = mongotest.Shared(b).Faults
	db := mongotest.NewDatabase(b, options.Client().SetMonitor(monitor))
	docs := make([]any, benchAccounts)
	for i := range docs {
		docs[i] = bson.D{{Key: "_id", Value: accountID(i)}, {Key: "balance", Value: benchOpening}, {Key: "pendingTransactions", Value: bson.A{}}}
	}
	if _, err := db.Collection("accounts").InsertMany(benchCtx(b), docs); err != nil {
		b.Fatal(err)
	}
	return db
}

// checkBank fails the benchmark unless n transfers are done, none is left
// unfinished, and the money is all there.
func checkBank(b *testing.B, db *mongo.Database, n int) {
	b.Helper()
	checkLedgers(b, []*mongo.Database{db}, n)
}

// runBench runs b.N transfers with the given number of workers (1:
// sequential) on a fresh bank and reports the counts.
func runBench(b *testing.B, open func(*testing.B, *mongo.Database) transferer, workers int, pick func(int) (string, string)) {
	var bc benchCounter
	db := benchBank(b, &bc)
	runTransfers(b, &bc, open(b, db), workers, pick)
	checkBank(b, db, b.N)
}

// runTransfers runs b.N transfers of 1 through impl from workers
// goroutines, waits until every one is done, and reports the commands bc
// counted: caller-rts/op and cmds/op.
func runTransfers(b *testing.B, bc *benchCounter, impl transferer, workers int, pick func(int) (string, string)) {
	runTransfersObserved(b, bc, impl, workers, pick, nil)
}

// runTransfersObserved is runTransfers, calling returned (if not nil) as
// each transfer returns.
func runTransfersObserved(b *testing.B, bc *benchCounter, impl transferer, workers int, pick func(int) (string, string), returned func()) {
	ctx := context.WithValue(benchCtx(b), callerKey{}, true)
	bg := benchCtx(b)
	bc.reset(b)
	b.ReportAllocs()
	b.ResetTimer()

	var next atomic.Int64
	var failed atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= b.N {
					return
				}
				src, dst := pick(i)
				if err := impl.transfer(ctx, src, dst, 1); err != nil {
					if failed.Add(1) == 1 {
						b.Errorf("transfer %d: %v", i, err)
					}
				}
				if returned != nil {
					returned()
				}
			}
		}()
	}
	wg.Wait()
	if err := impl.finish(bg); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	if failed.Load() > 0 {
		b.Fatalf("%d of %d transfers failed", failed.Load(), b.N)
	}
	bc.report(b, b.N)
}

// BenchmarkTransfer runs transfers one after another: the latency of one
// transfer, with the library's settling in the background.
func BenchmarkTransfer(b *testing.B) {
	for _, impl := range benchImpls {
		b.Run("impl="+impl.name, func(b *testing.B) { runBench(b, impl.open, 1, pair) })
	}
}

// BenchmarkTransferParallel runs transfers from benchWorkers goroutines at
// once over benchAccounts accounts: ns/op is the inverse of throughput.
func BenchmarkTransferParallel(b *testing.B) {
	for _, impl := range benchImpls {
		b.Run(fmt.Sprintf("impl=%s/workers=%d", impl.name, benchWorkers), func(b *testing.B) {
			runBench(b, impl.open, benchWorkers, pair)
		})
	}
}

// hotAccount is the account every transfer of BenchmarkTransferHotAccount
// pays into, from the benchAccounts others.
const hotAccount = "hot"

// hot returns the accounts of transfer i when everyone pays hotAccount.
func hot(i int) (string, string) { return accountID(i % benchAccounts), hotAccount }

// BenchmarkTransferHotAccount runs transfers from benchWorkers goroutines
// at once, every one paying into the same account from one of
// benchAccounts payers (64); the library's coordinator has a Recoverer at
// its defaults running beside it (twopc.NewRecoverer(c).Run), as a user
// would run one, and makes its indexes itself (no EnsureIndexes). Besides
// the counts of every benchmark it reports the throughput of the first
// and the last third of the transfers, by the time each returned
// (first-tx/s, last-tx/s, and last/first: 1 when a transfer costs the
// same at the end as at the start), and the hot account's document size
// at the end (hot-doc-bytes). The goals (issue 36) are stated at 4,800
// transfers:
//
//	go test -run '^$' -bench 'TransferHotAccount$' -benchtime 4800x .
func BenchmarkTransferHotAccount(b *testing.B) {
	for _, impl := range benchImpls {
		b.Run(fmt.Sprintf("impl=%s/workers=%d", impl.name, benchWorkers), func(b *testing.B) {
			var bc benchCounter
			db := benchBank(b, &bc)
			if _, err := db.Collection("accounts").InsertOne(benchCtx(b), bson.D{
				{Key: "_id", Value: hotAccount}, {Key: "balance", Value: benchOpening}, {Key: "pendingTransactions", Value: bson.A{}},
			}); err != nil {
				b.Fatal(err)
			}
			sys := impl.open(b, db)
			if l, ok := sys.(libImpl); ok { // a Recoverer at its defaults, as a user runs one
				ctx, cancel := context.WithCancel(benchCtx(b))
				var recovering sync.WaitGroup
				recovering.Add(1)
				go func() {
					defer recovering.Done()
					_ = twopc.NewRecoverer(l.c).Run(ctx)
				}()
				b.Cleanup(func() { cancel(); recovering.Wait() })
			}
			var mu sync.Mutex
			ends := make([]time.Time, 0, b.N)
			start := time.Now()
			runTransfersObserved(b, &bc, sys, benchWorkers, hot, func() {
				mu.Lock()
				ends = append(ends, time.Now())
				mu.Unlock()
			})
			checkBank(b, db, b.N)
			raw, err := db.Collection("accounts").FindOne(benchCtx(b), bson.D{{Key: "_id", Value: hotAccount}}).Raw()
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(len(raw)), "hot-doc-bytes")
			if third := len(ends) / 3; third > 0 {
				rate := func(from, to time.Time) float64 { return float64(third) / to.Sub(from).Seconds() }
				first := rate(start, ends[third-1])
				last := rate(ends[len(ends)-third-1], ends[len(ends)-1])
				b.ReportMetric(first, "first-tx/s")
				b.ReportMetric(last, "last-tx/s")
				b.ReportMetric(last/first, "last/first")
			}
		})
	}
}

// batchSize is the transfers of one TransferBatch call in
// BenchmarkTransferBatch.
const batchSize = 100

// BenchmarkTransferBatch makes transfers in TransferBatch calls of
// batchSize, one call at a time: an op is one transfer, so cmds/op is the
// data commands per transfer, and caller-rts/op the round trips a call
// waits for, per transfer.
func BenchmarkTransferBatch(b *testing.B) {
	var bc benchCounter
	db := benchBank(b, &bc)
	c, err := twopc.NewCoordinator(db)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close(context.Background()) })
	ctx := context.WithValue(benchCtx(b), callerKey{}, true)
	bc.reset(b)
	b.ReportAllocs()
	b.ResetTimer()
	for from := 0; from < b.N; from += batchSize {
		reqs := make([]twopc.TransferRequest, min(batchSize, b.N-from))
		for k := range reqs {
			src, dst := pair(from + k)
			reqs[k] = twopc.TransferRequest{Source: src, Destination: dst, Value: 1}
		}
		res, err := c.TransferBatch(ctx, reqs)
		if err != nil {
			b.Fatal(err)
		}
		for k, r := range res {
			if r.Err != nil {
				b.Fatalf("transfer %d: %v", from+k, r.Err)
			}
		}
	}
	if err := c.Settle(benchCtx(b)); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	bc.report(b, b.N)
	checkBank(b, db, b.N)
}

// ledgerImpl makes each transfer with TransferLegs: from the default
// ledger's account to the same id in the default ledger (within one
// deployment) or in ledger "beijing" (across two).
type ledgerImpl struct {
	c  *twopc.Coordinator
	to string
}

func (l ledgerImpl) transfer(ctx context.Context, src, dst string, value int64) error {
	_, err := l.c.TransferLegs(ctx, []twopc.Leg{{Account: src, Amount: -value}, {Ledger: l.to, Account: dst, Amount: value}})
	return err
}

func (l ledgerImpl) finish(ctx context.Context) error { return l.c.Settle(ctx) }

// BenchmarkTransferAcrossDeployments runs the same transfers within one
// deployment and across two, the two banks of two-phase commit's classic
// example: two dev servers of the
// benchmark's own (whatever the harness's backend), the log and the
// default ledger at the first, ledger "beijing" at the second. Each leg
// command of a cross-deployment transfer goes to its own deployment at the
// same time as the other (TestLedgersLegsInParallel), so caller-rts/op
// counts one command more than the round trips a caller waits for.
func BenchmarkTransferAcrossDeployments(b *testing.B) {
	var servers [2]*mongotest.DevServer
	for i := range servers {
		s, err := mongotest.StartDevServer(benchCtx(b), "", "")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Stop() })
		servers[i] = s
	}
	for _, workers := range []int{1, benchWorkers} {
		for _, deployments := range []int{1, 2} {
			b.Run(fmt.Sprintf("workers=%d/deployments=%d", workers, deployments), func(b *testing.B) {
				var bc benchCounter
				name := mongotest.DatabaseName(b)
				var ledgers [2]*mongo.Database
				for i := range ledgers {
					ledgers[i] = mongotest.ConnectURI(b, servers[i].URI, options.Client().SetMonitor(bc.monitor())).Database(name)
					b.Cleanup(func() { _ = ledgers[i].Drop(context.Background()) })
				}
				c, err := twopc.NewCoordinator(ledgers[0], twopc.WithLedger("beijing", ledgers[1].Collection("accounts")))
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = c.Close(context.Background()) })
				names := []string{"", "beijing"}[:deployments]
				for _, name := range names {
					l, err := c.Ledger(name)
					if err != nil {
						b.Fatal(err)
					}
					for i := 0; i < benchAccounts; i++ {
						if err := l.OpenAccount(benchCtx(b), accountID(i), benchOpening); err != nil {
							b.Fatal(err)
						}
					}
				}
				to := names[deployments-1]
				runTransfers(b, &bc, ledgerImpl{c: c, to: to}, workers, pair)
				checkLedgers(b, ledgers[:deployments], b.N)
			})
		}
	}
}

// checkLedgers fails the benchmark unless the log (at the first database)
// holds n done transactions and nothing else, and the accounts of all the
// databases hold, in all, what they were opened with.
func checkLedgers(b *testing.B, dbs []*mongo.Database, n int) {
	b.Helper()
	ctx := benchCtx(b)
	done, err := dbs[0].Collection("transactions").CountDocuments(ctx, bson.D{{Key: "state", Value: "done"}})
	if err != nil {
		b.Fatal(err)
	}
	all, err := dbs[0].Collection("transactions").CountDocuments(ctx, bson.D{})
	if err != nil {
		b.Fatal(err)
	}
	if done != int64(n) || all != int64(n) {
		b.Fatalf("%d transactions, %d done; want %d done", all, done, n)
	}
	var sum, accounts int64
	for _, db := range dbs {
		cur, err := db.Collection("accounts").Find(ctx, bson.D{})
		if err != nil {
			b.Fatal(err)
		}
		var accts []struct {
			Balance int64 `bson:"balance"`
		}
		if err := cur.All(ctx, &accts); err != nil {
			b.Fatal(err)
		}
		for _, a := range accts {
			sum += a.Balance
			accounts++
		}
	}
	if want := benchOpening * accounts; sum != want {
		b.Fatalf("%d accounts hold %d in all, want %d", accounts, sum, want)
	}
}

// BenchmarkServerFilter measures the cost model of the server under the
// benchmarks: an update whose filter is exactly {_id}, and the same update
// guarded by one more field, as every state move of both protocols is, on
// collections of growing size. FerretDB v1's SQLite backend uses the _id
// index only for the first; the second reads the whole collection.
func BenchmarkServerFilter(b *testing.B) {
	for _, docs := range []int{100, 400} {
		for _, guarded := range []bool{false, true} {
			name := "_id"
			if guarded {
				name = "_id+state"
			}
			b.Run(fmt.Sprintf("docs=%d/filter=%s", docs, name), func(b *testing.B) {
				ctx := benchCtx(b)
				coll := mongotest.NewDatabase(b).Collection("transactions")
				ids := make([]bson.ObjectID, docs)
				for i := range ids {
					ids[i] = bson.NewObjectID()
					_, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: ids[i]}, {Key: "state", Value: "pending"}, {Key: "n", Value: int64(0)}})
					if err != nil {
						b.Fatal(err)
					}
				}
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					filter := bson.D{{Key: "_id", Value: ids[i%docs]}}
					if guarded {
						filter = append(filter, bson.E{Key: "state", Value: "pending"})
					}
					res, err := coll.UpdateOne(ctx, filter, bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: int64(1)}}}})
					modifiedOne(b, res, err)
				}
			})
		}
	}
}

// BenchmarkServerStatements measures what batching saves on the server
// the benchmarks run on: the same guarded update by _id (as a leg's,
// _id plus a condition), sent one statement per command or 32 statements
// per command, as an update of one document or of many (see
// updateByID). An op is one statement; ns/op is the server's cost per
// statement plus, without batching, a round trip per statement.
func BenchmarkServerStatements(b *testing.B) {
	const docs = 100
	for _, c := range []struct {
		per  int
		form string
	}{{1, "one"}, {1, "many"}, {32, "one"}, {32, "many"}} {
		per := c.per
		b.Run(fmt.Sprintf("docs=%d/statements-per-command=%d/form=%s", docs, per, c.form), func(b *testing.B) {
			ctx := benchCtx(b)
			coll := mongotest.NewDatabase(b).Collection("accounts")
			ids := make([]bson.ObjectID, docs)
			for i := range ids {
				ids[i] = bson.NewObjectID()
				_, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: ids[i]}, {Key: "balance", Value: int64(0)}})
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for from := 0; from < b.N; from += per {
				models := make([]mongo.WriteModel, min(per, b.N-from))
				for k := range models {
					filter := bson.D{{Key: "_id", Value: ids[(from+k)%docs]}, {Key: "balance", Value: bson.D{{Key: "$gte", Value: int64(0)}}}}
					update := bson.D{{Key: "$inc", Value: bson.D{{Key: "balance", Value: int64(1)}}}}
					if c.form == "one" {
						models[k] = mongo.NewUpdateOneModel().SetFilter(filter).SetUpdate(update)
					} else {
						models[k] = mongo.NewUpdateManyModel().SetFilter(filter).SetUpdate(update)
					}
				}
				res, err := coll.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false))
				if err != nil {
					b.Fatal(err)
				}
				if res.ModifiedCount != int64(len(models)) {
					b.Fatalf("modified %d, want %d", res.ModifiedCount, len(models))
				}
			}
		})
	}
}

// BenchmarkServerDocumentSize measures what an account's fences cost each
// write to it on the server the benchmarks run on: a leg-like guarded
// update by _id ($inc and a guard on the markers) of an account holding
// fences in fencedLegs. An op is one statement; on the dev
// server srv-ms/op is the server's own time for it.
func BenchmarkServerDocumentSize(b *testing.B) {
	const docs = 64
	for _, fences := range []int{0, 10, 40, 160} {
		b.Run(fmt.Sprintf("fences=%d", fences), func(b *testing.B) {
			ctx := benchCtx(b)
			var bc benchCounter
			bc.faults = mongotest.Shared(b).Faults
			coll := mongotest.NewDatabase(b).Collection("accounts")
			markers := make(bson.A, fences)
			for i := range markers {
				markers[i] = bson.NewObjectID()
			}
			for i := range docs {
				_, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: accountID(i)}, {Key: "balance", Value: benchOpening},
					{Key: "pendingTransactions", Value: bson.A{}}, {Key: "fencedLegs", Value: markers}})
				if err != nil {
					b.Fatal(err)
				}
			}
			bc.reset(b)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				marker := bson.NewObjectID()
				res, err := coll.UpdateOne(ctx,
					bson.D{{Key: "_id", Value: accountID(i % docs)}, {Key: "pendingTransactions", Value: bson.D{{Key: "$ne", Value: marker}}},
						{Key: "fencedLegs", Value: bson.D{{Key: "$ne", Value: marker}}}},
					bson.D{{Key: "$inc", Value: bson.D{{Key: "balance", Value: int64(1)}}}})
				modifiedOne(b, res, err)
			}
			b.StopTimer()
			bc.reportServer(b, b.N)
		})
	}
}

// BenchmarkServerTransactionUpdate measures what a transaction's state
// move costs on the server the benchmarks run on, by the document's shape
// and the log's indexes: a guarded update by _id ($set state,
// $currentDate lastModified) of a document shaped as the tutorial's
// (six fields) or as the library's (its fields, two entry keys), on a log
// with no index but _id's, with the library's one by state, its two by
// account, or all three; and the tutorial's document on a log with the one
// index its recovery's query needs ({state, lastModified}, as a service
// running the tutorial would make it: indexes=recovery). Each runs twice:
// update=state is the state move, update=claim the same guarded update
// setting claim instead of state ($set claim, $currentDate lastModified),
// which changes no field the library's indexes read. An op is one
// statement; on the dev server srv-ms/op is the server's own time for it.
func BenchmarkServerTransactionUpdate(b *testing.B) {
	const docs = 64
	for _, shape := range []string{"tutorial", "library"} {
		indexSets := []string{"none", "state", "accounts", "all"}
		if shape == "tutorial" {
			indexSets = append(indexSets, "recovery")
		}
		for _, indexed := range indexSets {
			updates := []string{"state", "claim"}
			if shape == "library" {
				updates = append(updates, "commit")
			}
			for _, update := range updates {
				benchServerTransactionUpdate(b, shape, indexed, update, docs)
			}
		}
	}
}

// benchServerTransactionUpdate is one of BenchmarkServerTransactionUpdate's
// runs: update "state" moves the state (an indexed field) and sets
// lastModified; "claim" sets claim and lastModified, fields none of the
// library's indexes reads (the tutorial's recovery index reads
// lastModified); "commit" is the library's commit's update, the state
// move that also stamps committedAt (the second key of its entries index,
// by accounts).
func benchServerTransactionUpdate(b *testing.B, shape, indexed, update string, docs int) {
	b.Run(fmt.Sprintf("doc=%s/indexes=%s/update=%s", shape, indexed, update), func(b *testing.B) {
		ctx := benchCtx(b)
		var bc benchCounter
		bc.faults = mongotest.Shared(b).Faults
		coll := mongotest.NewDatabase(b).Collection("transactions")
		if ixs := logIndexKeysForBench(indexed); len(ixs) > 0 {
			for _, ix := range ixs {
				if _, err := coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: ix}); err != nil {
					b.Fatal(err)
				}
			}
		}
		ids := make([]bson.ObjectID, docs)
		for i := range ids {
			ids[i] = bson.NewObjectID()
			doc := bson.D{{Key: "_id", Value: ids[i]}, {Key: "source", Value: accountID(i)}, {Key: "destination", Value: accountID(i + 1)},
				{Key: "value", Value: int64(100)}, {Key: "state", Value: "pending"}, {Key: "lastModified", Value: time.Now()}}
			if shape == "library" {
				doc = append(doc, bson.E{Key: "application", Value: "bench-p0-w01"}, bson.E{Key: "claim", Value: bson.NewObjectID()},
					bson.E{Key: "created", Value: time.Now()}, bson.E{Key: "leaseMs", Value: int64(30000)},
					bson.E{Key: "accounts", Value: bson.A{entryKeyForBench(b, accountID(i)), entryKeyForBench(b, accountID(i+1))}})
			}
			if _, err := coll.InsertOne(ctx, doc); err != nil {
				b.Fatal(err)
			}
		}
		bc.reset(b)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			state := [2]string{"applied", "pending"}[(i/docs)%2]
			from := [2]string{"pending", "applied"}[(i/docs)%2]
			set := bson.D{{Key: "state", Value: state}}
			if update == "claim" {
				from, set = "pending", bson.D{{Key: "claim", Value: bson.NewObjectID()}}
			}
			stamp := bson.D{{Key: "lastModified", Value: true}}
			if update == "commit" {
				stamp = append(stamp, bson.E{Key: "committedAt", Value: true})
			}
			res, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: ids[i%docs]}, {Key: "state", Value: from}},
				bson.D{{Key: "$set", Value: set}, {Key: "$currentDate", Value: stamp}})
			modifiedOne(b, res, err)
		}
		b.StopTimer()
		bc.reportServer(b, b.N)
	})
}

// BenchmarkServerTransactionInsert measures the server's time for the
// statement that writes a new transaction, on a log with no index but
// _id's, with the library's index by state or its two by accounts alone,
// and with its three: write=upsert is the library's
// (insertWrite's shape: the filter _id alone, the document in
// $setOnInsert, lastModified by $currentDate, so the server's clock
// stamps it), write=insert an insert of the same document with
// lastModified from the client; doc=tutorial is the tutorial's insert
// (no index, or its recovery's). srv-ms/op is the server's time a
// statement.
func BenchmarkServerTransactionInsert(b *testing.B) {
	for _, c := range []struct{ shape, indexed, write string }{
		{"library", "none", "upsert"}, {"library", "none", "insert"},
		{"library", "state", "insert"}, {"library", "accounts", "insert"},
		{"library", "all", "upsert"}, {"library", "all", "insert"},
		{"tutorial", "none", "insert"}, {"tutorial", "recovery", "insert"},
	} {
		b.Run(fmt.Sprintf("doc=%s/indexes=%s/write=%s", c.shape, c.indexed, c.write), func(b *testing.B) {
			ctx := benchCtx(b)
			var bc benchCounter
			bc.faults = mongotest.Shared(b).Faults
			coll := mongotest.NewDatabase(b).Collection("transactions")
			for _, ix := range logIndexKeysForBench(c.indexed) {
				if _, err := coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: ix}); err != nil {
					b.Fatal(err)
				}
			}
			bc.reset(b)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				doc := transactionForBench(b, c.shape, bson.NewObjectID(), i)
				if c.write == "insert" {
					doc = append(doc, bson.E{Key: "lastModified", Value: time.Now()})
					_, err := coll.InsertOne(ctx, doc)
					if err != nil {
						b.Fatal(err)
					}
					continue
				}
				res, err := coll.UpdateOne(ctx, bson.D{doc[0]}, bson.D{
					{Key: "$setOnInsert", Value: doc[1:]},
					{Key: "$currentDate", Value: bson.D{{Key: "lastModified", Value: true}}},
				}, options.UpdateOne().SetUpsert(true))
				if err != nil || res.UpsertedCount != 1 {
					b.Fatalf("upsert: %v, %+v", err, res)
				}
			}
			b.StopTimer()
			bc.reportServer(b, b.N)
		})
	}
}

// transactionForBench is a pending transaction's document between
// accounts i and i+1, _id first, without lastModified: the tutorial's
// fields, or the library's as its insert writes them.
func transactionForBench(b *testing.B, shape string, id bson.ObjectID, i int) bson.D {
	doc := bson.D{{Key: "_id", Value: id}, {Key: "source", Value: accountID(i)}, {Key: "destination", Value: accountID(i + 1)},
		{Key: "value", Value: int64(100)}, {Key: "state", Value: "pending"}}
	if shape == "library" {
		doc = append(doc, bson.E{Key: "application", Value: "bench-p0-w01"}, bson.E{Key: "claim", Value: bson.NewObjectID()},
			bson.E{Key: "created", Value: time.Now()}, bson.E{Key: "leaseMs", Value: int64(30000)}, bson.E{Key: "takeoverMs", Value: int64(30000)},
			bson.E{Key: "accounts", Value: bson.A{entryKeyForBench(b, accountID(i)), entryKeyForBench(b, accountID(i+1))}})
	}
	return doc
}

// entryKeyForBench is the entry key of account id of the coordinator's
// own ledger.
func entryKeyForBench(b *testing.B, id string) string {
	k, err := twopc.EntryKey("", id)
	if err != nil {
		b.Fatal(err)
	}
	return k
}

// logIndexKeysForBench are the keys of the indexes the library makes on
// its log: none, those by state, those by account (multikey), or all; or,
// for "recovery", the tutorial's recovery index.
func logIndexKeysForBench(which string) []bson.D {
	if which == "recovery" {
		return []bson.D{tutorial.RecoveryIndexKeys()}
	}
	var out []bson.D
	for _, k := range twopc.LogIndexKeys() {
		if which == "all" || k[0].Key == which {
			out = append(out, k)
		}
	}
	return out
}

// modifiedOne fails b unless an update statement's reply says it modified
// exactly one document.
func modifiedOne(b *testing.B, res *mongo.UpdateResult, err error) {
	b.Helper()
	if err != nil {
		b.Fatal(err)
	}
	if res.ModifiedCount != 1 {
		b.Fatalf("modified %d, want 1", res.ModifiedCount)
	}
}
