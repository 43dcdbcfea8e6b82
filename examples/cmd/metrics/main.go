// Command metrics runs transfers through the twopc library in a loop and
// serves their Prometheus metrics (package examples/observe/prom) on
// /metrics: transitions by state and outcome, the time each write takes,
// and recovery actions. Some transfers overdraw their account (they roll
// back: pending → canceling → canceled), and at every -crash-every'th
// commit the transfer "dies" just before its commit point, left pending
// for a Recoverer of another application to take over and roll forward
// once it is stale (-stale-after).
//
// It connects to MONGODB_URI if set; otherwise it starts the dev server
// (FerretDB behind a serializing front) in-process, on a free port, with
// its data in a temporary directory. It runs until interrupted (or, with
// -n, for that many transfers, then serves /metrics until interrupted);
// SIGINT or SIGTERM shuts it down cleanly, with exit status 0.
//
//	go run ./cmd/metrics -addr 127.0.0.1:2112
//	curl -s 127.0.0.1:2112/metrics | grep ^twopc_
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/examples/devserver"
	"github.com/twopc/twopc/examples/observe/prom"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:2112", "address to serve /metrics on")
	n := flag.Int("n", 0, "transfers to run (0: until interrupted)")
	pause := flag.Duration("pause", 20*time.Millisecond, "pause between transfers")
	crashEvery := flag.Int("crash-every", 20, "every this many commits, the transfer dies just before its commit point (0: none)")
	staleAfter := flag.Duration("stale-after", 3*time.Second, "StaleAfter of every coordinator: how long a dead transfer waits for recovery")
	flag.Parse()
	// SIGINT or SIGTERM ends the run: run shuts down (the recoverer, the
	// HTTP server, the database, the dev server if it started one) and the
	// command exits 0. A second signal kills it.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() { <-ctx.Done(); stop() }()
	if err := run(ctx, os.Stdout, *addr, *n, *pause, *crashEvery, *staleAfter); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "metrics:", err)
		os.Exit(1)
	}
}

// run starts the server (or uses MONGODB_URI), serves /metrics on addr and
// runs n transfers (0: until ctx ends), then serves until ctx ends.
func run(ctx context.Context, out io.Writer, addr string, n int, pause time.Duration, crashEvery int, staleAfter time.Duration) error {
	uri, started, stop, err := devserver.URIOrStart(ctx)
	if err != nil {
		return err
	}
	defer stop()
	if started {
		fmt.Fprintln(out, "server: dev server (FerretDB behind a serializing front) at", uri)
	}
	client, err := mongo.Connect(options.Client().ApplyURI(uri))
	if err != nil {
		return err
	}
	defer client.Disconnect(context.Background())
	db := client.Database(fmt.Sprintf("twopc_metrics_%d", time.Now().UnixNano()))
	defer db.Drop(context.Background())

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	b, err := newBank(ctx, db, reg, staleAfter, crashEvery)
	if err != nil {
		return err
	}
	defer b.close()

	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", b.metrics)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	defer hs.Close()
	fmt.Fprintf(out, "metrics: http://%s/metrics\n", ln.Addr())

	rctx, stopRecovery := context.WithCancel(ctx)
	recovering := make(chan struct{})
	go func() {
		defer close(recovering)
		_ = twopc.NewRecoverer(b.recovery, twopc.WithInterval(staleAfter/2)).Run(rctx)
	}()
	defer func() { stopRecovery(); <-recovering }()
	for i := 0; n == 0 || i < n; i++ {
		if err := b.transfer(ctx); err != nil {
			if ctx.Err() != nil {
				return ctx.Err() // interrupted mid-transfer
			}
			return err
		}
		if i%100 == 99 {
			fmt.Fprintf(out, "%d transfers\n", i+1)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
		}
	}
	fmt.Fprintf(out, "%d transfers done; serving /metrics until interrupted\n", n)
	<-ctx.Done()
	return ctx.Err()
}

// accounts are the bank's accounts, each opened with 1000.
var accounts = []string{"A", "B", "C", "D"}

// bank is the example's accounts, a coordinator whose every crashEvery'th
// commit "dies", a coordinator for recovery, both observed, and the
// handler of their metrics.
type bank struct {
	c, recovery *twopc.Coordinator
	metrics     http.Handler
	rnd         *rand.Rand
}

func newBank(ctx context.Context, db *mongo.Database, reg *prometheus.Registry, staleAfter time.Duration, crashEvery int) (*bank, error) {
	observer, err := prom.NewObserver(reg)
	if err != nil {
		return nil, err
	}
	b := &bank{metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), rnd: rand.New(rand.NewPCG(1, 2))}
	var commits atomic.Int64
	dies := func(_ context.Context, s twopc.Step, _ *twopc.Txn) error {
		if s == twopc.StepCommit && crashEvery > 0 && commits.Add(1)%int64(crashEvery) == 0 {
			return errDied
		}
		return nil
	}
	b.c, err = twopc.NewCoordinator(db, twopc.WithApplication("metrics"), twopc.WithStaleAfter(staleAfter),
		twopc.WithObserver(observer), twopc.WithStepHook(dies))
	if err != nil {
		return nil, err
	}
	b.recovery, err = twopc.NewCoordinator(db, twopc.WithApplication("metrics-recovery"), twopc.WithStaleAfter(staleAfter),
		twopc.WithObserver(observer))
	if err != nil {
		return nil, err
	}
	if err := b.c.EnsureIndexes(ctx); err != nil {
		return nil, err
	}
	for _, id := range accounts {
		if err := b.c.OpenAccount(ctx, id, 1000); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// errDied is what the step hook returns for a transfer that "dies".
var errDied = errors.New("the process died")

// transfer moves a random amount between two random accounts: an overdraft
// rolls back, a transfer that "dies" is left to recovery, and both are
// expected outcomes.
func (b *bank) transfer(ctx context.Context) error {
	i := b.rnd.IntN(len(accounts))
	j := (i + 1 + b.rnd.IntN(len(accounts)-1)) % len(accounts)
	_, err := b.c.Transfer(ctx, accounts[i], accounts[j], 1+b.rnd.Int64N(500))
	if err == nil || errors.Is(err, twopc.ErrInsufficientFunds) || errors.Is(err, errDied) {
		return nil
	}
	return err
}

func (b *bank) close() {
	_ = b.c.Close(context.Background())
	_ = b.recovery.Close(context.Background())
}
