package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/examples/devserver"
	"github.com/twopc/twopc/internal/native"
	"github.com/twopc/twopc/internal/statements"
	"github.com/twopc/twopc/internal/tutorial"
)

// The implementations compared.
const (
	implTwopc    = "twopc"
	implTutorial = "tutorial"
	// implTutorialIndexed is the tutorial's protocol on a log with the
	// one index its recovery's query needs ({state, lastModified}), as a
	// service running it would deploy it; implTutorial's log has none.
	implTutorialIndexed = "tutorial-indexed"
	// implNative is MongoDB's multi-document transactions
	// (internal/native); it runs only where the server has them.
	implNative = "native"
)

// dataCommands are the commands that read or write documents; the
// handshake, hello, endSessions and the like are not counted.
var dataCommands = map[string]bool{
	"insert": true, "update": true, "delete": true, "findAndModify": true,
	"find": true, "aggregate": true, "getMore": true, "bulkWrite": true, "count": true,
}

// markComment is the comment the library puts on the low-water mark's
// read of the log (mark.go in the library).
const markComment = "twopc: low-water mark"

// callerKey marks the context of a caller's transfer, so that the command
// monitor can tell the commands a caller waits for from background ones.
type callerKey struct{}

// counter counts data commands: all, and those sent for a caller; and the
// statements they carry (see internal/statements), in all and by shape
// (the command's name and collection).
type counter struct {
	caller, total, statements atomic.Int64
	// mark counts the low-water mark's reads of the log: each coordinator
	// sends about four a second whatever its traffic, so they are not a
	// transfer's commands and are kept out of total.
	mark atomic.Int64

	mu      sync.Mutex
	byShape map[string]int64
	// writes counts the documents written, by collection, from the
	// replies.
	writes docWrites
}

func (c *counter) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(ctx context.Context, e *event.CommandStartedEvent) {
		if !dataCommands[e.CommandName] {
			return
		}
		if statements.Count(e.CommandName, e.Command) > 0 {
			coll, _ := e.Command.Lookup(e.CommandName).StringValueOK()
			c.writes.Start(e.RequestID, coll)
		}
		if comment, _ := e.Command.Lookup("comment").StringValueOK(); comment == markComment {
			c.mark.Add(1)
			return
		}
		c.total.Add(1)
		n := int64(statements.Count(e.CommandName, e.Command))
		c.statements.Add(n)
		if n > 0 {
			coll, _ := e.Command.Lookup(e.CommandName).StringValueOK()
			c.mu.Lock()
			if c.byShape == nil {
				c.byShape = map[string]int64{}
			}
			c.byShape[e.CommandName+" "+coll] += n
			c.mu.Unlock()
		}
		if ctx.Value(callerKey{}) != nil {
			c.caller.Add(1)
		}
	}, Succeeded: func(_ context.Context, e *event.CommandSucceededEvent) {
		c.writes.Succeeded(e.RequestID, e.CommandName, e.Reply)
	}, Failed: func(_ context.Context, e *event.CommandFailedEvent) {
		c.writes.Failed(e.RequestID)
	}}
}

// reset starts counting again.
func (c *counter) reset() {
	c.caller.Store(0)
	c.total.Store(0)
	c.mark.Store(0)
	c.statements.Store(0)
	c.mu.Lock()
	c.byShape = nil
	c.mu.Unlock()
	c.writes.Reset()
}

// shapes returns the statements per transfer of n by shape, the largest
// first: "update accounts 2.00, findAndModify transactions 1.03, …".
func (c *counter) shapes(n int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	keys := make([]string, 0, len(c.byShape))
	for k := range c.byShape {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return cmp.Compare(c.byShape[b], c.byShape[a]) })
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %.2f", k, float64(c.byShape[k])/float64(n))
	}
	return strings.Join(parts, ", ")
}

// result is one run: one implementation at one concurrency level.
type result struct {
	impl       string
	workers    int
	processes  int
	offered    int
	ok         int
	errors     int
	firstErr   string
	elapsed    time.Duration // from the first transfer's start until every transfer is finished (done)
	latencies  []time.Duration
	callerRTs  float64   // data commands on the caller's path per transfer
	commands   float64   // data commands per finished transfer
	statements float64   // write statements per finished transfer
	shapes     string    // statements per finished transfer by command and collection
	writes     writesPer // documents written per finished transfer, by collection
	markReads  int64     // the low-water mark's reads of the log, not in commands
	// On the in-process dev server, from its front's clock (see
	// devserver.Front.Work): the server's busy time per finished transfer,
	// the share of elapsed it was busy, and its time by command and
	// collection per finished transfer. Zero elsewhere.
	serverTime time.Duration
	serverBusy float64
	serverBy   string
	// serverPerStmt is the server's time per statement by command and
	// collection ("update accounts"), from the same clock.
	serverPerStmt map[string]time.Duration
	check         string // why the final state is wrong; "" if right
	// With -hot: the throughput of the first and the last third of the
	// transfers, by the time each returned, and the hot account's document
	// size at the end.
	firstRate, lastRate float64
	hotBytes            int
}

// serverWork sets the server's time from the front's work since the run
// started: per finished transfer, as a share of elapsed, and by kind.
func (r *result) serverWork(work []devserver.Work) {
	if r.ok == 0 {
		return
	}
	var busy time.Duration
	var by []string
	r.serverPerStmt = map[string]time.Duration{}
	for _, w := range work {
		busy += w.Busy
		r.serverPerStmt[w.Command+" "+w.Collection] = w.Busy / time.Duration(max(w.Statements, 1))
		per := w.Busy / time.Duration(r.ok)
		if per >= 10*time.Microsecond {
			by = append(by, fmt.Sprintf("%s %s %s (%v a statement)", w.Command, w.Collection, fmtDur(per),
				(w.Busy/time.Duration(max(w.Statements, 1))).Round(time.Microsecond)))
		}
	}
	r.serverTime = busy / time.Duration(r.ok)
	if r.elapsed > 0 {
		r.serverBusy = float64(busy) / float64(r.elapsed)
	}
	r.serverBy = strings.Join(by, ", ")
}

func (r *result) throughput() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.ok) / r.elapsed.Seconds()
}

// percentile returns the p-th percentile (nearest rank) of sorted.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(p/100*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(rank, 0), len(sorted)-1)]
}

func (r *result) pct(p float64) time.Duration { return percentile(r.latencies, p) }

// bench holds what every run shares.
type bench struct {
	cfg     *config
	log     io.Writer
	admin   *mongo.Client
	server  string
	clock   workClock // the dev server front's clock of its work; nil on another server
	runID   string
	warming bool // the runs are the warm-up's
}

func newBench(ctx context.Context, cfg *config, log io.Writer) (*bench, error) {
	admin, err := mongo.Connect(options.Client().ApplyURI(cfg.uri))
	if err != nil {
		return nil, err
	}
	if err := admin.Ping(ctx, nil); err != nil {
		_ = admin.Disconnect(context.Background())
		return nil, fmt.Errorf("ping %s: %w", redact(cfg.uri), err)
	}
	return &bench{cfg: cfg, log: log, admin: admin, runID: bson.NewObjectID().Hex()[18:]}, nil
}

func (b *bench) close() { _ = b.admin.Disconnect(context.Background()) }

// serverVersion names the server: MongoDB's version, or FerretDB's.
func (b *bench) serverVersion(ctx context.Context) string {
	var info struct {
		Version         string `bson:"version"`
		FerretDBVersion string `bson:"ferretdbVersion"`
	}
	if err := b.admin.Database("admin").RunCommand(ctx, bson.D{{Key: "buildInfo", Value: 1}}).Decode(&info); err != nil {
		return "version unknown"
	}
	if info.FerretDBVersion != "" {
		v := info.FerretDBVersion
		if bi, ok := debug.ReadBuildInfo(); ok && v == "unknown" { // embedded: the module's version
			for _, m := range bi.Deps {
				if m.Path == "github.com/FerretDB/FerretDB" {
					v = m.Version
				}
			}
		}
		return "FerretDB " + v
	}
	return "MongoDB " + info.Version
}

// system is one process's view of an implementation.
type system interface {
	transfer(ctx context.Context, src, dst string, value int64) error
	// settle waits until the process's transfers are all done.
	settle(ctx context.Context) error
	close(ctx context.Context) error
}

type lib struct{ c *twopc.Coordinator }

func (l lib) transfer(ctx context.Context, src, dst string, value int64) error {
	_, err := l.c.Transfer(ctx, src, dst, value)
	return err
}

// transferBatch makes the transfers of jobs in one TransferBatch call.
func (l lib) transferBatch(ctx context.Context, pairs [][2]string, jobs []job, value int64) []error {
	reqs := make([]twopc.TransferRequest, len(jobs))
	for k, j := range jobs {
		reqs[k] = twopc.TransferRequest{Source: pairs[j.i][0], Destination: pairs[j.i][1], Value: value}
	}
	errs := make([]error, len(jobs))
	res, err := l.c.TransferBatch(ctx, reqs)
	for k := range errs {
		if err != nil {
			errs[k] = err
		} else {
			errs[k] = res[k].Err
		}
	}
	return errs
}

func (l lib) settle(ctx context.Context) error { return l.c.Settle(ctx) }
func (l lib) close(ctx context.Context) error  { return l.c.Close(ctx) }

type tut struct{ b *tutorial.Bank }

func (t tut) transfer(ctx context.Context, src, dst string, value int64) error {
	_, err := t.b.Transfer(ctx, src, dst, value)
	return err
}
func (tut) settle(context.Context) error { return nil }
func (tut) close(context.Context) error  { return nil }

type nat struct{ b *native.Bank }

func (n nat) transfer(ctx context.Context, src, dst string, value int64) error {
	_, err := n.b.Transfer(ctx, src, dst, value)
	return err
}
func (nat) settle(context.Context) error { return nil }
func (nat) close(context.Context) error  { return nil }

// job is one transfer of a run: its index in the run's pairs, and its
// scheduled start (zero in a closed loop).
type job struct {
	i  int
	at time.Time
}

// process is one simulated client process.
type process struct {
	client *mongo.Client
	sys    system
}

// pairs returns the account pairs of a run: the same for every
// implementation at a level.
func (b *bench) pairs(level int) [][2]string {
	rng := rand.New(rand.NewPCG(b.cfg.seed, uint64(level)))
	out := make([][2]string, b.cfg.total())
	for i := range out {
		src := rng.IntN(b.cfg.accounts)
		dst := rng.IntN(b.cfg.accounts - 1)
		if dst >= src {
			dst++
		}
		if b.cfg.hot { // everyone pays account 0
			src, dst = 1+rng.IntN(b.cfg.accounts-1), 0
		}
		out[i] = [2]string{accountID(src), accountID(dst)}
	}
	return out
}

func accountID(i int) string { return fmt.Sprintf("acct%05d", i) }

// run runs impl at one concurrency level on a fresh database.
func (b *bench) run(ctx context.Context, impl string, workers int) (result, error) {
	cfg := b.cfg
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	procs := min(cfg.processes, workers)
	res := result{impl: impl, workers: workers, processes: procs, offered: cfg.total()}
	dbName := fmt.Sprintf("bench_%s_%s_w%d", b.runID, impl, workers)
	db := b.admin.Database(dbName)
	defer func() { _ = db.Drop(context.Background()) }()
	if err := b.openAccounts(ctx, db); err != nil {
		return res, err
	}
	if impl == implTutorialIndexed {
		if err := tutorial.New(db).EnsureRecoveryIndex(ctx); err != nil {
			return res, err
		}
	}

	var cnt counter
	// Each process's pool holds its share of the workers (the simulator's
	// shape) and one connection more: a twopc coordinator settles and reads
	// its mark in the background, and with only its callers' share that
	// work would wait for a caller's connection, one round trip behind
	// another, instead of overlapping the callers' waits (one worker at
	// 1 ms a round trip: 1.31 times the indexed tutorial before, 1.46 to
	// 1.79 times in four runs after; BENCHMARKS.md).
	// The tutorial's workers use one connection each and leave it idle.
	pool := uint64((workers+procs-1)/procs + 1)
	if cfg.pool > 0 {
		pool = uint64(cfg.pool)
	}
	ps := make([]process, procs)
	// The Recoverers of a twopc run (-recoverer), stopped once the run
	// has settled, before its check.
	recoverCtx, stopRecovering := context.WithCancel(ctx)
	var recovering sync.WaitGroup
	stopRecoverers := func() { stopRecovering(); recovering.Wait() }
	defer stopRecoverers()
	defer func() {
		for _, p := range ps {
			if p.sys != nil {
				_ = p.sys.close(context.Background())
			}
			if p.client != nil {
				_ = p.client.Disconnect(context.Background())
			}
		}
	}()
	for i := range ps {
		opts := options.Client().ApplyURI(cfg.uri).SetMaxPoolSize(pool).SetMonitor(cnt.monitor())
		if cfg.rtt > 0 {
			opts.SetDialer(delayDialer{delay: cfg.rtt})
		}
		client, err := mongo.Connect(opts)
		if err != nil {
			return res, err
		}
		ps[i].client = client
		pdb := client.Database(dbName)
		switch impl {
		case implTwopc:
			opts := []twopc.Option{twopc.WithApplication(fmt.Sprintf("bench-%d", i))}
			if cfg.warn {
				opts = append(opts, twopc.WithLogger(slog.New(slog.NewTextHandler(b.log, &slog.HandlerOptions{Level: slog.LevelWarn}))))
			}
			c, err := twopc.NewCoordinator(pdb, opts...)
			if err != nil {
				return res, err
			}
			ps[i].sys = lib{c}
			// No EnsureIndexes: the coordinator makes the indexes it
			// reads by itself, the default path a user takes.
			if cfg.recoverer { // as a user runs one: at its defaults, beside the coordinator
				recovering.Add(1)
				go func() {
					defer recovering.Done()
					_ = twopc.NewRecoverer(c).Run(recoverCtx)
				}()
			}
		case implTutorial, implTutorialIndexed:
			ps[i].sys = tut{tutorial.New(pdb)}
		case implNative:
			nb, err := native.New(ctx, pdb)
			if err != nil {
				return res, err
			}
			ps[i].sys = nat{nb}
		}
	}
	cnt.reset()

	pairs := b.pairs(workers)
	lat := make([]time.Duration, len(pairs))
	ends := make([]time.Time, len(pairs)) // when each returned
	failed := make([]bool, len(pairs))
	var finished atomic.Int64
	var errMu sync.Mutex
	jobs := make(chan job, len(pairs))
	if b.clock != nil {
		if err := b.clock.resetWork(ctx); err != nil {
			return res, fmt.Errorf("the dev server's clock: %w", err)
		}
	}
	start := time.Now()
	go func() { // the load: offered at the rate, sliced evenly over each tick
		defer close(jobs)
		per := cfg.perTick()
		for i := range pairs {
			if cfg.rate <= 0 {
				jobs <- job{i: i}
				continue
			}
			at := start.Add(time.Duration(i/per)*cfg.resolution + time.Duration(i%per)*cfg.resolution/time.Duration(per))
			if d := time.Until(at); d > 0 {
				t := time.NewTimer(d)
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
					return
				}
			}
			jobs <- job{i: i, at: at}
		}
	}()
	stopProgress := b.progress(impl, workers, len(pairs), start, &finished)
	callerCtx := context.WithValue(ctx, callerKey{}, true)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		sys := ps[w%procs].sys
		wg.Add(1)
		go func() {
			defer wg.Done()
			batcher, batching := sys.(lib)
			batching = batching && cfg.batch > 1
			for j := range jobs {
				todo := []job{j}
				for batching && len(todo) < cfg.batch {
					select { // the transfers already waiting join this call
					case more, ok := <-jobs:
						if ok {
							todo = append(todo, more)
							continue
						}
					default:
					}
					break
				}
				taken := time.Now()
				var errs []error
				if batching {
					errs = batcher.transferBatch(callerCtx, pairs, todo, cfg.value)
				} else {
					errs = []error{sys.transfer(callerCtx, pairs[j.i][0], pairs[j.i][1], cfg.value)}
				}
				for k, j := range todo {
					t0 := j.at
					if t0.IsZero() {
						t0 = taken
					}
					lat[j.i] = time.Since(t0)
					ends[j.i] = time.Now()
					finished.Add(1)
					if err := errs[k]; err != nil {
						failed[j.i] = true
						errMu.Lock()
						if res.firstErr == "" {
							res.firstErr = err.Error()
						}
						errMu.Unlock()
					}
				}
			}
		}()
	}
	wg.Wait()
	for _, p := range ps {
		if err := p.sys.settle(ctx); err != nil {
			stopProgress()
			return res, fmt.Errorf("settle: %w", err)
		}
	}
	res.elapsed = time.Since(start)
	stopProgress()
	stopRecoverers()
	var work []devserver.Work
	if b.clock != nil {
		var err error
		if work, err = b.clock.work(ctx); err != nil {
			return res, fmt.Errorf("the dev server's clock: %w", err)
		}
	}
	if err := ctx.Err(); err != nil {
		return res, err
	}

	for i, d := range lat {
		if failed[i] {
			res.errors++
			continue
		}
		res.ok++
		res.latencies = append(res.latencies, d)
	}
	slices.Sort(res.latencies)
	if res.ok > 0 {
		res.callerRTs = float64(cnt.caller.Load()) / float64(len(pairs))
		res.commands = float64(cnt.total.Load()) / float64(res.ok)
		res.statements = float64(cnt.statements.Load()) / float64(res.ok)
		res.shapes = cnt.shapes(res.ok)
		res.writes = cnt.writes.perTransfer(res.ok)
		res.markReads = cnt.mark.Load()
		res.serverWork(work)
	}
	if cfg.hot {
		res.firstRate, res.lastRate = thirds(start, ends)
		raw, err := db.Collection("accounts").FindOne(ctx, bson.D{{Key: "_id", Value: accountID(0)}}).Raw()
		if err != nil {
			return res, fmt.Errorf("read the hot account: %w", err)
		}
		res.hotBytes = len(raw)
		fmt.Fprintf(b.log, "bench: %s: the hot account's document at the end: %s\n", impl, describeDoc(raw))
	}
	if raw, err := db.Collection("transactions").FindOne(ctx, bson.D{}).Raw(); err == nil {
		fmt.Fprintf(b.log, "bench: %s: a transaction's document at the end: %s\n", impl, describeDoc(raw))
	}
	res.check = b.verify(ctx, db, res.ok)
	if res.errors > 0 && res.check == "" {
		res.check = fmt.Sprintf("%d transfers failed, the first with: %s", res.errors, res.firstErr)
	}
	label := "bench:"
	if b.warming {
		label = "bench: warm-up:"
	}
	server := ""
	if res.serverTime > 0 {
		server = fmt.Sprintf(", server %s a transfer (busy %.2f)", fmtDur(res.serverTime), res.serverBusy)
	}
	fmt.Fprintf(b.log, "%s %-8s %3d workers: %d transfers in %v: %.1f/s, p50 %v, p99 %v, %.2f caller round trips, %.2f commands and %.2f statements per transfer, document writes %v%s%s\n",
		label, impl, workers, res.ok, res.elapsed.Round(time.Millisecond), res.throughput(),
		res.pct(50).Round(time.Millisecond), res.pct(99).Round(time.Millisecond), res.callerRTs, res.commands, res.statements, res.writes, server, checkNote(res.check))
	return res, nil
}

// thirds returns the throughput of the first and the last third of the
// transfers, by the times they returned (ends), the run started at start.
func thirds(start time.Time, ends []time.Time) (first, last float64) {
	sorted := slices.Clone(ends)
	slices.SortFunc(sorted, func(a, b time.Time) int { return a.Compare(b) })
	third := len(sorted) / 3
	if third == 0 {
		return 0, 0
	}
	first = float64(third) / sorted[third-1].Sub(start).Seconds()
	last = float64(third) / sorted[len(sorted)-1].Sub(sorted[len(sorted)-third-1]).Seconds()
	return first, last
}

// delayDialer dials TCP and delays every write by delay: each request
// reaches the server delay later, as over a network (-rtt).
type delayDialer struct{ delay time.Duration }

func (d delayDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	var nd net.Dialer
	c, err := nd.DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	return delayConn{Conn: c, delay: d.delay}, nil
}

// delayConn is a connection whose writes wait delay first.
type delayConn struct {
	net.Conn
	delay time.Duration
}

func (c delayConn) Write(p []byte) (int, error) {
	time.Sleep(c.delay)
	return c.Conn.Write(p)
}

func checkNote(check string) string {
	if check == "" {
		return ", checked"
	}
	return ", CHECK FAILED: " + check
}

// warmUp runs each implementation once at a few workers, closed loop,
// unreported.
func (b *bench) warmUp(ctx context.Context) error {
	saved := *b.cfg
	defer func() { *b.cfg, b.warming = saved, false }()
	b.cfg.rate, b.cfg.transfers, b.cfg.progress, b.warming = 0, saved.warmup, 0, true
	for _, impl := range saved.impls {
		r, err := b.run(ctx, impl, min(4, slices.Max(saved.levels)))
		if err != nil {
			return err
		}
		if r.check != "" {
			return fmt.Errorf("%s: %s", impl, r.check)
		}
	}
	return nil
}

// openAccounts inserts the run's accounts in the shape both protocols use.
func (b *bench) openAccounts(ctx context.Context, db *mongo.Database) error {
	const batch = 1000
	for from := 0; from < b.cfg.accounts; from += batch {
		var docs []any
		for i := from; i < min(from+batch, b.cfg.accounts); i++ {
			docs = append(docs, bson.D{
				{Key: "_id", Value: accountID(i)},
				{Key: "balance", Value: b.cfg.balance},
				{Key: "pendingTransactions", Value: bson.A{}},
			})
		}
		if _, err := db.Collection("accounts").InsertMany(ctx, docs); err != nil {
			return fmt.Errorf("open accounts: %w", err)
		}
	}
	return nil
}

// verify checks the end state of a run: ok transactions done and nothing
// else unfinished, no pending marker left, and all the money still there.
func (b *bench) verify(ctx context.Context, db *mongo.Database, ok int) string {
	cur, err := db.Collection("transactions").Find(ctx, bson.D{}, options.Find().SetProjection(bson.D{{Key: "state", Value: 1}}))
	if err != nil {
		return err.Error()
	}
	var txns []struct {
		State string `bson:"state"`
	}
	if err := cur.All(ctx, &txns); err != nil {
		return err.Error()
	}
	states := map[string]int{}
	for _, t := range txns {
		states[t.State]++
	}
	if states["done"] != ok || states["done"]+states["canceled"] != len(txns) {
		return fmt.Sprintf("transactions by state %v, want %d done", states, ok)
	}
	cur, err = db.Collection("accounts").Find(ctx, bson.D{})
	if err != nil {
		return err.Error()
	}
	var accts []struct {
		Balance int64           `bson:"balance"`
		Pending []bson.ObjectID `bson:"pendingTransactions"`
	}
	if err := cur.All(ctx, &accts); err != nil {
		return err.Error()
	}
	var sum int64
	for _, a := range accts {
		sum += a.Balance
		if len(a.Pending) > 0 {
			return "an account still holds pending transactions"
		}
	}
	if want := b.cfg.balance * int64(b.cfg.accounts); sum != want || len(accts) != b.cfg.accounts {
		return fmt.Sprintf("%d accounts hold %d, want %d holding %d", len(accts), sum, b.cfg.accounts, want)
	}
	return ""
}

// progress reports a run's progress on the log until the returned function
// is called.
func (b *bench) progress(impl string, workers, total int, start time.Time, finished *atomic.Int64) (stop func()) {
	if b.cfg.progress <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(b.cfg.progress)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				n := finished.Load()
				el := time.Since(start)
				fmt.Fprintf(b.log, "bench: %-8s %3d workers: %d/%d transfers returned, %.1f/s, %v\n",
					impl, workers, n, total, float64(n)/el.Seconds(), el.Round(time.Second))
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done); wg.Wait() }) }
}

// redact hides a connection string's credentials.
func redact(uri string) string {
	scheme, rest, ok := strings.Cut(uri, "://")
	at := strings.LastIndex(rest, "@")
	if !ok || at < 0 {
		return uri
	}
	return scheme + "://***" + rest[at:]
}

// describeDoc says what a document's bytes are: its size, and each
// field's (with an array's length).
func describeDoc(raw bson.Raw) string {
	elems, err := raw.Elements()
	if err != nil {
		return err.Error()
	}
	parts := make([]string, len(elems))
	for i, e := range elems {
		v := e.Value()
		parts[i] = fmt.Sprintf("%s %d B", e.Key(), len(v.Value))
		if arr, ok := v.ArrayOK(); ok {
			if vals, err := arr.Values(); err == nil {
				parts[i] += fmt.Sprintf(" (%d elements)", len(vals))
			}
		}
	}
	return fmt.Sprintf("%d bytes: %s", len(raw), strings.Join(parts, ", "))
}
