// Command banks runs the classic two-banks example of two-phase commit (as
// in X/Open DTP's XA model), each bank its own deployment: a transfer from
// an account at the bank of Shanghai to one at the bank of Beijing, with
// the coordinator's log at Shanghai. It prints every protocol step and each
// bank's balances, then stops the bank of Beijing in the middle of a
// transfer, starts it again on the same data, and lets a Recoverer finish
// the transfer from the log.
//
// It starts two dev servers (FerretDB behind a serializing front)
// in-process, each on a free port with its data in a temporary directory,
// and stops them when it ends. With -serve it keeps both banks up after the
// run, until interrupted (then exits 0), and prints the twopc command lines
// that operate them (the log at Shanghai, ledger beijing given by its
// connection string).
//
//	go run ./cmd/banks [-serve]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/examples/devserver"
	"github.com/twopc/twopc/examples/internal/steps"
)

func main() {
	serve := flag.Bool("serve", false, "keep both banks up after the run, until interrupted, to operate them with twopc")
	flag.Parse()
	var hold func()
	if *serve {
		hold = func() {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			fmt.Println("\nboth banks stay up until interrupted (Ctrl-C)")
			<-ctx.Done()
		}
	}
	if err := run(context.Background(), os.Stdout, hold); err != nil {
		fmt.Fprintln(os.Stderr, "banks:", err)
		os.Exit(1)
	}
}

// bank is one bank's deployment.
type bank struct {
	name   string
	dir    string
	addr   string
	srv    *devserver.Server
	client *mongo.Client
}

func (b *bank) start(ctx context.Context) error {
	srv, err := devserver.Start(ctx, devserver.Config{Addr: b.addr, Dir: b.dir, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return fmt.Errorf("start the bank of %s: %w", b.name, err)
	}
	b.srv = srv
	if b.addr == "" {
		b.addr = srv.Front().Addr().String()
	}
	if b.client == nil {
		b.client, err = mongo.Connect(options.Client().ApplyURI(srv.URI()).
			SetServerSelectionTimeout(2 * time.Second).SetTimeout(10 * time.Second))
	}
	return err
}

// lockedWriter serializes writes: the step hook runs once per ledger at the
// same time.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// run runs the example, printing to w; hold, if not nil, is called at the
// end while both banks are still up, after the twopc command lines that
// operate them are printed. Without hold, run says how to keep them up
// instead.
func run(ctx context.Context, w io.Writer, hold func()) error {
	out := &lockedWriter{w: w}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	root, err := os.MkdirTemp("", "twopc-banks-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	banks := []*bank{{name: "shanghai", dir: root + "/shanghai"}, {name: "beijing", dir: root + "/beijing"}}
	for _, b := range banks {
		if err := b.start(ctx); err != nil {
			return err
		}
		defer func() { _ = b.srv.Close() }()
		defer b.client.Disconnect(context.Background())
		fmt.Fprintf(out, "bank of %s: its own dev server at %s\n", b.name, b.srv.URI())
	}
	shanghai, beijing := banks[0], banks[1]

	// The step hook is called before each protocol step; steps prints each
	// with the state it left the transaction in.
	steps := steps.NewPrinter(out)
	hook := func(_ context.Context, s twopc.Step, t *twopc.Txn) error {
		steps.Before(s, t)
		return nil
	}
	opts := func(app string, more ...twopc.Option) []twopc.Option {
		return append([]twopc.Option{
			twopc.WithApplication(app), twopc.WithSyncSettle(),
			twopc.WithLedger("shanghai", shanghai.client.Database("bank").Collection("accounts")),
			twopc.WithLedger("beijing", beijing.client.Database("bank").Collection("accounts")),
		}, more...)
	}
	// The coordinator keeps its log (the transactions collection) at the
	// bank of Shanghai; the accounts are each at their own bank.
	logDB := shanghai.client.Database("coordinator")
	c, err := twopc.NewCoordinator(logDB, opts("coordinator", twopc.WithStepHook(hook))...)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	sh, _ := c.Ledger("shanghai")
	bj, _ := c.Ledger("beijing")
	if err := sh.OpenAccount(ctx, "A", 1000); err != nil {
		return err
	}
	if err := bj.OpenAccount(ctx, "B", 0); err != nil {
		return err
	}
	balances := func() {
		a, errA := sh.Account(ctx, "A")
		b, errB := bj.Account(ctx, "B")
		switch {
		case errA != nil:
			fmt.Fprintf(out, "  shanghai/A: %v\n", errA)
		case errB != nil:
			fmt.Fprintf(out, "  shanghai/A=%d; beijing/B: unreachable\n", a.Balance)
		default:
			fmt.Fprintf(out, "  balances: shanghai/A=%d beijing/B=%d\n", a.Balance, b.Balance)
		}
	}
	legs := func(v int64) []twopc.Leg {
		return []twopc.Leg{{Ledger: "shanghai", Account: "A", Amount: -v}, {Ledger: "beijing", Account: "B", Amount: v}}
	}
	fmt.Fprintln(out, "\nopened shanghai/A with 1000 and beijing/B with 0:")
	balances()

	fmt.Fprintln(out, "\n1. transfer 100 from shanghai/A to beijing/B (both legs sent at once):")
	txn, err := c.TransferLegs(ctx, legs(100))
	if err != nil {
		return err
	}
	steps.Returned(txn)
	fmt.Fprintf(out, "  transaction %s is %s\n", txn.ID.Hex(), txn.State)
	balances()

	fmt.Fprintln(out, "\n2. transfer 5000 (more than A has):")
	txn, err = c.TransferLegs(ctx, legs(5000))
	if !errors.Is(err, twopc.ErrInsufficientFunds) {
		return fmt.Errorf("want insufficient funds, got %v", err)
	}
	steps.Returned(txn)
	fmt.Fprintf(out, "  transaction %s is %s (%s): no leg remains at either bank\n", txn.ID.Hex(), txn.State, txn.Reason)
	balances()

	fmt.Fprintln(out, "\n3. transfer 250; the bank of Beijing's server stops just before the legs are sent:")
	stop, err := twopc.NewCoordinator(logDB, opts("coordinator", twopc.WithStepHook(func(ctx context.Context, s twopc.Step, t *twopc.Txn) error {
		err := hook(ctx, s, t)
		if s == twopc.StepApply {
			fmt.Fprintln(out, "    (the bank of Beijing's server stops)")
			_ = beijing.srv.Close()
		}
		return err
	}), twopc.WithRetries(1))...)
	if err != nil {
		return err
	}
	defer stop.Close(context.Background())
	txn, err = stop.TransferLegs(ctx, legs(250))
	if txn == nil {
		return fmt.Errorf("no transaction returned: %w", err)
	}
	steps.Returned(txn)
	fmt.Fprintf(out, "  TransferLegs returned: %v\n", err)
	now, err := c.Get(ctx, txn.ID)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "  the log says transaction %s is %s: the Shanghai leg applied, its 250 held\n", now.ID.Hex(), now.State)
	balances()

	fmt.Fprintln(out, "\n   the bank of Beijing's server starts again on the same data;")
	fmt.Fprintln(out, "   a Recoverer finishes the transfer from the log (made stale here, as after StaleAfter):")
	if err := beijing.start(ctx); err != nil {
		return err
	}
	defer func() { _ = beijing.srv.Close() }()
	_, err = logDB.Collection("transactions").UpdateOne(ctx, bson.D{{Key: "_id", Value: txn.ID}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "lastModified", Value: time.Now().Add(-time.Hour)}}}})
	if err != nil {
		return err
	}
	rc, err := twopc.NewCoordinator(logDB, opts("recoverer", twopc.WithStepHook(hook))...)
	if err != nil {
		return err
	}
	defer rc.Close(context.Background())
	if err := beijing.client.Ping(ctx, nil); err != nil { // the driver finds the server again
		return err
	}
	rep, err := twopc.NewRecoverer(rc).RecoverOnce(ctx)
	if err != nil {
		return err
	}
	now, err = c.Get(ctx, txn.ID)
	if err != nil {
		return err
	}
	steps.Returned(now)
	fmt.Fprintf(out, "  recovery: %d rolled forward, %d rolled back\n", rep.RolledForward, rep.RolledBack)
	fmt.Fprintf(out, "  transaction %s is %s\n", now.ID.Hex(), now.State)
	balances()

	if hold == nil {
		fmt.Fprintln(out, "\nboth banks' servers stop with the run. To operate them with the operators' tool (cmd/twopc),")
		fmt.Fprintln(out, "run make banks ARGS=-serve: it keeps them up until interrupted and prints the command lines.")
		return nil
	}
	at := func(b *bank, ns string) string { return strings.TrimSuffix(b.srv.URI(), "/") + "/" + ns }
	ledgers := fmt.Sprintf("--ledger shanghai=%s --ledger beijing=%s", at(shanghai, "bank.accounts"), at(beijing, "bank.accounts"))
	fmt.Fprintf(out, "\nthe same banks with the operators' tool (from the repository's root, while they are up):\n")
	fmt.Fprintf(out, "  go run ./cmd/twopc status --uri %s\n", at(shanghai, "coordinator"))
	fmt.Fprintf(out, "  go run ./cmd/twopc show --uri %s %s %s\n", at(shanghai, "coordinator"), ledgers, txn.ID.Hex())
	fmt.Fprintf(out, "  go run ./cmd/twopc recover --uri %s %s\n", at(shanghai, "coordinator"), ledgers)
	fmt.Fprintf(out, "  go run ./cmd/twopc audit --uri %s %s --total shanghai=650 --total beijing=350\n", at(shanghai, "coordinator"), ledgers)
	hold()
	return nil
}
