// Command bench runs the account-transfer scenario of mongodb-schema-simulator
// ("Successfully transfer between accounts", the one MongoDB's tutorial
// "Perform Two Phase Commits" reports) against the twopc library and against
// the tutorial's own protocol (eight sequential commands per transfer, in
// internal/tutorial), on the same server in the same run, over a sweep of
// concurrency levels. The tutorial runs twice: on a log with no index, as
// the tutorial leaves it (tutorial), and with the one index its
// recovery's query needs, {state, lastModified}, as a service running it
// would deploy it (tutorial-indexed); the library's ratios to both are
// printed side by side.
//
// The scenario offers transfers at a fixed rate, spread evenly over each
// tick of -resolution ("slicetime"), for -iterations ticks, to -processes
// client processes sharing -workers transfers in flight (the simulator's
// connection pools). Each transfer moves -value between two accounts
// picked at random among -accounts. Latency runs from a transfer's
// scheduled start, so it includes waiting for a free worker, as the
// simulator's does. With -rate 0 the load is closed instead: -transfers
// transfers, each worker starting the next as soon as its last returns.
//
// The full-size scenario, as the simulator ran it (MongoDB 3.0,
// WiredTiger: runtime 46.6 s, mean 8,655 ms, p99 29,972 ms), is
//
//	go run ./cmd/bench -processes 4 -workers 200 -rate 1000 -iterations 25 -accounts 10000 -balance 100000 -value 100
//
// The defaults are a scaled-down version that finishes in a few minutes on
// the dev server. Every run uses a fresh database, dropped afterwards. The
// command connects to MONGODB_URI (or -uri) if set; otherwise it starts the
// dev server (FerretDB behind a serializing front) in-process.
//
// For each run it reports throughput, latency p50/p95/p99/max, the data
// commands a caller waits for per transfer (round trips on the caller's
// path) and the data commands per finished transfer, counted with a driver
// CommandMonitor; the documents written per transfer by collection; on
// the dev server its own time per transfer and per statement by command
// and collection; then the library's ratios to each tutorial run, and the
// project's goals. It prints progress to standard error, the Markdown
// report to standard output, and with -update rewrites the part of a file
// between the markers <!-- bench:begin --> and <!-- bench:end -->; with
// -chart it draws throughput and p99 against concurrency as a PNG.
//
// With -feed it runs the change feed's scenario instead (feed.go): the
// delay from a transfer's commit to a subscriber's handler, at half the
// rate -feed.workers goroutines reach with no feed, with one sequencer and
// one subscriber group, and the sequencer's writes per event.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/examples/devserver"
	"github.com/twopc/twopc/internal/native"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// config is the scenario and what to do with its results.
type config struct {
	uri        string
	impls      []string
	levels     []int
	processes  int
	rate       float64
	iterations int
	resolution time.Duration
	transfers  int
	accounts   int
	balance    int64
	value      int64
	seed       uint64
	update     string
	chart      string
	progress   time.Duration
	timeout    time.Duration
	warmup     int
	hot        bool
	recoverer  bool
	pool       int
	warn       bool
	control    string
	batch      int
	rtt        time.Duration
	args       []string
	// The change feed's scenario (-feed, feed.go).
	feed          bool
	feedWorkers   int
	feedTransfers int
	feedRate      float64
}

// total is the number of transfers a run offers.
func (c *config) total() int {
	if c.rate <= 0 {
		return c.transfers
	}
	return c.perTick() * c.iterations
}

// perTick is the number of transfers offered in each tick.
func (c *config) perTick() int {
	n := int(c.rate*c.resolution.Seconds() + 0.5)
	return max(n, 1)
}

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	c := &config{args: args}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var impls, levels string
	fs.StringVar(&c.uri, "uri", os.Getenv("MONGODB_URI"), "MongoDB connection string (default $MONGODB_URI; empty: start the dev server in-process)")
	fs.StringVar(&impls, "impls", "twopc,tutorial,tutorial-indexed,native", "implementations to run, comma-separated: twopc, tutorial (its log with no index, as the tutorial leaves it), tutorial-indexed (the tutorial with the one index its recovery's query needs, {state, lastModified}, as a service running it would make it), native (MongoDB's multi-document transactions, run only where the server has them)")
	fs.StringVar(&levels, "workers", "1,4,16,32", "concurrency levels to sweep: transfers in flight across all processes, comma-separated")
	fs.IntVar(&c.processes, "processes", 4, "client processes simulated: each has its own client, connection pool and coordinator")
	fs.Float64Var(&c.rate, "rate", 200, "transfers offered per second across all processes (0: closed loop of -transfers)")
	fs.IntVar(&c.iterations, "iterations", 2, "ticks of offered load")
	fs.DurationVar(&c.resolution, "resolution", time.Second, "length of one tick")
	fs.IntVar(&c.transfers, "transfers", 400, "transfers per run with -rate 0")
	fs.IntVar(&c.accounts, "accounts", 100, "accounts the transfers pick from (fewer: more contention)")
	fs.Int64Var(&c.balance, "balance", 100_000, "opening balance of every account")
	fs.Int64Var(&c.value, "value", 100, "value of every transfer")
	fs.Uint64Var(&c.seed, "seed", 1, "seed of the random account pairs (the same pairs for every implementation)")
	fs.StringVar(&c.update, "update", "", "Markdown file whose text between <!-- bench:begin --> and <!-- bench:end --> is replaced by the report")
	fs.StringVar(&c.chart, "chart", "", "PNG file to draw throughput and p99 against concurrency into")
	fs.DurationVar(&c.progress, "progress", 2*time.Second, "how often to report progress on standard error (0: never)")
	fs.IntVar(&c.warmup, "warmup", 50, "transfers of each implementation run first and not reported (0: none)")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Minute, "bound on one run")
	fs.BoolVar(&c.hot, "hot", false, "hot account: every transfer pays into the same account, from one of the others picked at random")
	fs.BoolVar(&c.recoverer, "recoverer", false, "twopc only: run a Recoverer at its defaults (twopc.NewRecoverer(c).Run) beside each process's coordinator, as a user would (default true with -hot)")
	fs.DurationVar(&c.rtt, "rtt", 0, "added to every round trip of the measured clients, for every implementation: each request waits this long before it is written (a network between application and server)")
	fs.IntVar(&c.pool, "pool", 0, "connections in each process's pool (0: its share of -workers, as the simulator's pools, and one more, which a twopc coordinator's background settling and mark reads use while its callers wait)")
	fs.StringVar(&c.control, "control", "", "with -uri naming a dev server out of process: its control API's `URL` (cmd/devserver -control prints it), whose clock of the server's own work the report reads")
	fs.BoolVar(&c.warn, "warn", false, "twopc only: log the library's warnings and errors (its coordinators' and Recoverers' logger, WithLogger) to standard error")
	fs.IntVar(&c.batch, "batch", 1, "twopc only: a worker sends up to this many of the transfers waiting for it in one TransferBatch call")
	fs.BoolVar(&c.feed, "feed", false, "run the change feed's scenario instead: -transfers transfers from -feed.workers goroutines with no feed (the rate reached), then -feed.transfers offered at half that rate with a sequencer and a subscriber group running; reports the delay from commit to handler")
	fs.IntVar(&c.feedWorkers, "feed.workers", 8, "with -feed: goroutines making transfers")
	fs.IntVar(&c.feedTransfers, "feed.transfers", 600, "with -feed: transfers made with the feed running")
	fs.Float64Var(&c.feedRate, "feed.rate", 0, "with -feed: transfers/s offered with the feed running (0: half the rate reached with no feed)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	recovererSet := false
	fs.Visit(func(f *flag.Flag) { recovererSet = recovererSet || f.Name == "recoverer" })
	if !recovererSet {
		c.recoverer = c.hot
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	for _, s := range strings.Split(impls, ",") {
		switch s = strings.TrimSpace(s); s {
		case implTwopc, implTutorial, implTutorialIndexed, implNative:
			c.impls = append(c.impls, s)
		default:
			return nil, fmt.Errorf("-impls: unknown implementation %q", s)
		}
	}
	for _, s := range strings.Split(levels, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-workers: %q is not a positive number", s)
		}
		c.levels = append(c.levels, n)
	}
	switch {
	case c.processes < 1:
		return nil, errors.New("-processes must be at least 1")
	case c.rate < 0:
		return nil, errors.New("-rate must not be negative")
	case c.rate > 0 && (c.iterations < 1 || c.resolution <= 0):
		return nil, errors.New("-iterations and -resolution must be positive")
	case c.rate == 0 && c.transfers < 1:
		return nil, errors.New("-transfers must be positive")
	case c.accounts < 2:
		return nil, errors.New("-accounts must be at least 2")
	case c.value < 1 || c.balance < 0:
		return nil, errors.New("-value must be positive and -balance not negative")
	case c.control != "" && c.uri == "":
		return nil, errors.New("-control needs -uri (or MONGODB_URI): the in-process dev server's clock is read directly")
	case c.pool < 0:
		return nil, errors.New("-pool must not be negative")
	case c.rtt < 0:
		return nil, errors.New("-rtt must not be negative")
	case c.feed && (c.feedWorkers < 1 || c.feedTransfers < 1 || c.feedRate < 0 || c.transfers < 1):
		return nil, errors.New("-feed needs -feed.workers, -feed.transfers and -transfers positive, -feed.rate not negative")
	case c.batch < 1 || c.batch > twopc.MaxBatch:
		return nil, fmt.Errorf("-batch must be between 1 and %d", twopc.MaxBatch)
	}
	return c, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	server := "MONGODB_URI"
	var clock workClock
	if cfg.control != "" {
		clock = newControlClock(cfg.control)
	}
	if cfg.uri == "" {
		srv, err := devserver.Start(ctx, devserver.Config{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			return fmt.Errorf("start dev server: %w", err)
		}
		defer srv.Close()
		cfg.uri = srv.URI()
		clock = frontClock{srv.Front()}
		server = "dev server (in-process)"
	}
	b, err := newBench(ctx, cfg, stderr)
	if err != nil {
		return err
	}
	defer b.close()
	b.clock = clock
	b.server = server + ", " + b.serverVersion(ctx)
	if cfg.feed {
		fmt.Fprintf(stderr, "bench: %s; the change feed's scenario\n", b.server)
		r, err := b.runFeed(ctx)
		if err != nil {
			return fmt.Errorf("feed: %w", err)
		}
		r.markdown(stdout, b.server)
		return nil
	}
	fmt.Fprintf(stderr, "bench: %s; %s\n", b.server, cfg.describe())

	// Native transactions run only where the server has them; elsewhere
	// the report says so instead of a figure.
	var notRun []string
	if i := slices.Index(cfg.impls, implNative); i >= 0 {
		ok, err := native.Supported(ctx, b.admin.Database("admin"))
		if err != nil {
			return err
		}
		if !ok {
			cfg.impls = slices.Delete(slices.Clone(cfg.impls), i, i+1)
			notRun = append(notRun, fmt.Sprintf("%s: not run, %s has no multi-document transactions (they need a replica set or a sharded cluster)", implNative, b.server))
			fmt.Fprintln(stderr, "bench:", notRun[len(notRun)-1])
		}
	}

	// A short run of each implementation first, not reported: the first
	// runs after a server starts are slower than the rest.
	if cfg.warmup > 0 {
		if err := b.warmUp(ctx); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}
	var results []result
	for li, level := range cfg.levels {
		impls := slices.Clone(cfg.impls)
		if li%2 == 1 { // alternate which goes first
			slices.Reverse(impls)
		}
		for _, impl := range impls {
			r, err := b.run(ctx, impl, level)
			if err != nil {
				return fmt.Errorf("%s at %d workers: %w", impl, level, err)
			}
			results = append(results, r)
		}
	}
	rep := &report{cfg: cfg, server: b.server, machine: describeMachine(), results: results, notRun: notRun, when: time.Now().UTC()}
	if cfg.chart != "" {
		if err := drawChart(cfg.chart, results, cfg.impls); err != nil {
			return fmt.Errorf("chart: %w", err)
		}
		rep.chart = cfg.chart
		fmt.Fprintln(stderr, "bench: chart written to", cfg.chart)
	}
	if cfg.update != "" {
		if err := rep.updateFile(cfg.update); err != nil {
			return err
		}
		fmt.Fprintln(stderr, "bench: report written to", cfg.update)
	}
	_, err = io.WriteString(stdout, rep.markdown(""))
	if err != nil {
		return err
	}
	for _, r := range results {
		if r.check != "" {
			return fmt.Errorf("%s at %d workers: check failed: %s", r.impl, r.workers, r.check)
		}
	}
	return nil
}

// describe is the scenario in words.
func (c *config) describe() string {
	load := fmt.Sprintf("closed loop of %d transfers", c.transfers)
	if c.rate > 0 {
		load = fmt.Sprintf("%g transfers/s offered (%d per %v tick, slicetime) for %d ticks: %d transfers",
			c.rate, c.perTick(), c.resolution, c.iterations, c.total())
	}
	s := fmt.Sprintf("%s, %d processes, %d accounts of %d, transfers of %d", load, c.processes, c.accounts, c.balance, c.value)
	if c.hot {
		s += ", every one into the same account"
	}
	if c.recoverer {
		s += ", a Recoverer at its defaults beside each twopc coordinator"
	} else {
		s += ", no Recoverer"
	}
	if c.rtt > 0 {
		s += fmt.Sprintf(", %v added to every round trip", c.rtt)
	}
	if c.pool > 0 {
		s += fmt.Sprintf(", pools of %d connections", c.pool)
	}
	if c.batch > 1 {
		s += fmt.Sprintf(", twopc in TransferBatch calls of up to %d", c.batch)
	}
	return s
}
