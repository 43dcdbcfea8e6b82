package twopc_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/internal/mongotest"
)

// The simulation's flags. `make soak` sets them for a longer run.
var (
	simSeed      = flag.Uint64("sim.seed", 0, "run the simulation with this seed only (0: the fixed seeds and one random seed)")
	simTransfers = flag.Int("sim.transfers", 240, "transfers per simulation run")
	simApps      = flag.Int("sim.apps", 3, "coordinators, each an application with its own client")
	simWorkers   = flag.Int("sim.workers", 4, "workers per coordinator")
	simAccounts  = flag.Int("sim.accounts", 12, "accounts")
	simTimeout   = flag.Duration("sim.timeout", 10*time.Minute, "how long one simulation run may take")
	simStale     = flag.Duration("sim.staleafter", 2*time.Second, "the coordinators' StaleAfter (stalls last 1 to 2 times as long)")
)

// simFixedSeeds are run on every `go test`, with one random seed besides.
var simFixedSeeds = []uint64{1, 2, 3}

// simConfig is one simulation run.
type simConfig struct {
	seed          uint64
	apps, workers int
	accounts, hot int
	transfers     int
	crash, stall  float64 // per step hook call
	staleAfter    time.Duration
	faults        []mongotest.Fault // injected by the server's front during the load
	clientTimeout time.Duration     // the driver's operation timeout, 0: none
	allowNegative bool
	recorder      *writeRecorder // if set, records every write command the run's clients send
}

func defaultSimConfig(seed uint64) simConfig {
	return simConfig{
		seed: seed, apps: *simApps, workers: *simWorkers,
		accounts: *simAccounts, hot: 3, transfers: *simTransfers,
		crash: 0.01, stall: 0.004,
		staleAfter: *simStale, // well above a write's latency on a loaded dev server
	}
}

// simStats counts what a run did and injected.
type simStats struct {
	calls, committed, legErrors, canceled, inProgress, crashed, otherErrors atomic.Int64
	crashes, stalls, cancels, keyedRetries                                  atomic.Int64
	recovered                                                               atomic.Int64
	done, canceledTxns                                                      int
	faults                                                                  mongotest.FaultStats

	mu      sync.Mutex
	samples []string // the first few unexpected errors
}

func (s *simStats) sample(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples = append(s.samples, err.Error())
}

func (s *simStats) String() string {
	return fmt.Sprintf("%d calls: %d committed, %d leg errors, %d canceled, %d in progress, %d crashed, %d other errors; "+
		"injected %d crashes, %d stalls, %d cancels, %d keyed retries, front faults %+v; recovered %d; final: %d done, %d canceled; other errors such as %q",
		s.calls.Load(), s.committed.Load(), s.legErrors.Load(), s.canceled.Load(), s.inProgress.Load(), s.crashed.Load(), s.otherErrors.Load(),
		s.crashes.Load(), s.stalls.Load(), s.cancels.Load(), s.keyedRetries.Load(), s.faults, s.recovered.Load(), s.done, s.canceledTxns, s.samples)
}

// TestSimulation runs random transfers from several applications at once,
// with crashes and stalls injected at random steps, cancels racing the
// owners, and recoverers of other applications running throughout; then a
// final recovery and the checker: every transaction done or canceled, every
// balance its opening balance plus the net of its done transactions, no
// negative balance, no pending marker. The seed fixes every random choice;
// the interleaving is the scheduler's.
func TestSimulation(t *testing.T) {
	for _, seed := range simSeeds() {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			cfg := defaultSimConfig(seed)
			stats := runSimulation(t, newBank(t), cfg)
			t.Logf("seed %d: %s", seed, stats)
		})
	}
}

// TestSimulationLostReplies runs the simulation through the dev server's
// fault front: replies lost after the write applied, connections reset
// before it, replies slower than the client's timeout; with the driver's
// retryable writes off, so that every lost reply reaches the library.
func TestSimulationLostReplies(t *testing.T) {
	for _, seed := range simSeeds()[:1] {
		cfg := defaultSimConfig(seed)
		cfg.transfers = 120
		cfg.clientTimeout = 2 * time.Second
		cfg.faults = []mongotest.Fault{
			{Kind: mongotest.DropAfterForward, Probability: 0.01, Seed: int64(seed)},
			{Kind: mongotest.DropBeforeForward, Probability: 0.01, Seed: int64(seed) + 1},
			{Command: "update", Kind: mongotest.Delay, Delay: 3 * time.Second, Probability: 0.005, Seed: int64(seed) + 2},
		}
		stats := runSimulation(t, newFaultBank(t), cfg)
		t.Logf("seed %d: %s", seed, stats)
		require.Positive(t, stats.faults.DropAfterForward+stats.faults.DropBeforeForward, "faults were injected")
	}
}

func simSeeds() []uint64 {
	if *simSeed != 0 {
		return []uint64{*simSeed}
	}
	return append(append([]uint64{}, simFixedSeeds...), rand.Uint64()%1_000_000+1000)
}

// simKey carries a worker's random source to the step hook.
type simKey struct{}

// simHook injects crashes and stalls with the random source of the worker
// whose call reached the step; calls from background work (no worker) are
// left alone.
func simHook(cfg simConfig, stats *simStats) func(context.Context, twopc.Step, *twopc.Txn) error {
	return func(ctx context.Context, step twopc.Step, _ *twopc.Txn) error {
		rng, _ := ctx.Value(simKey{}).(*rand.Rand)
		if rng == nil {
			return nil
		}
		switch r := rng.Float64(); {
		case r < cfg.crash:
			stats.crashes.Add(1)
			return errCrash
		case r < cfg.crash+cfg.stall:
			// A pause past StaleAfter, like a long GC or a partition: the
			// transaction may be taken over or canceled meanwhile.
			stats.stalls.Add(1)
			pause := cfg.staleAfter + time.Duration(rng.Int64N(int64(cfg.staleAfter)))
			select {
			case <-time.After(pause):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}
}

func runSimulation(t *testing.T, b *bank, cfg simConfig) *simStats {
	t.Helper()
	t.Logf("simulation seed %d: %d apps × %d workers, %d accounts (%d hot), %d transfers; reproduce with -run 'TestSimulation' -sim.seed=%d",
		cfg.seed, cfg.apps, cfg.workers, cfg.accounts, cfg.hot, cfg.transfers, cfg.seed)
	ctx, cancel := context.WithTimeout(context.Background(), *simTimeout)
	defer cancel()
	setup := rand.New(rand.NewPCG(cfg.seed, 0))
	opening := map[string]int64{}
	ids := make([]string, cfg.accounts)
	for i := range ids {
		ids[i] = fmt.Sprintf("acct-%03d", i)
		opening[ids[i]] = setup.Int64N(1000)
	}
	b.open(opening)
	stats := &simStats{}

	clientOpts := options.Client().SetRetryWrites(false)
	if cfg.clientTimeout > 0 {
		clientOpts.SetTimeout(cfg.clientTimeout)
	}
	if cfg.recorder != nil {
		clientOpts.SetMonitor(cfg.recorder.monitor())
	}
	newApp := func(name string, hook func(context.Context, twopc.Step, *twopc.Txn) error) *twopc.Coordinator {
		db := mongotest.ConnectURI(t, b.server.URI, clientOpts).Database(b.db.Name())
		opts := []twopc.Option{
			twopc.WithApplication(name), twopc.WithStaleAfter(cfg.staleAfter),
			twopc.WithFenceRetention(10 * cfg.staleAfter), twopc.WithStepHook(hook),
		}
		if cfg.allowNegative {
			opts = append(opts, twopc.WithAllowNegative())
		}
		c, err := twopc.NewCoordinator(db, opts...)
		require.NoError(t, err)
		return c
	}

	// Recoverers of other applications run during the load.
	loadCtx, stopLoad := context.WithCancel(ctx)
	var background sync.WaitGroup
	for i := 0; i < 2; i++ {
		r := twopc.NewRecoverer(newApp(fmt.Sprintf("recoverer-%d", i), nil), twopc.WithInterval(cfg.staleAfter/2))
		background.Add(1)
		go func() {
			defer background.Done()
			_ = r.Run(loadCtx)
		}()
	}

	if len(cfg.faults) > 0 {
		for _, f := range cfg.faults {
			require.NoError(t, b.server.Faults.Add(ctx, f))
		}
	}
	var next atomic.Int64
	var workers sync.WaitGroup
	apps := make([]*twopc.Coordinator, cfg.apps)
	for a := range apps {
		apps[a] = newApp(fmt.Sprintf("app-%d", a), simHook(cfg, stats))
		// A canceler of the same application races the owners: it may
		// cancel their live transactions at any step.
		canceler := twopc.NewCanceler(newApp(fmt.Sprintf("app-%d", a), nil))
		background.Add(1)
		go func(a int) {
			defer background.Done()
			simCancel(loadCtx, b.db, canceler, fmt.Sprintf("app-%d", a), cfg, stats)
		}(a)
		for w := 0; w < cfg.workers; w++ {
			rng := rand.New(rand.NewPCG(cfg.seed, uint64(a*1000+w+1)))
			workers.Add(1)
			go func(c *twopc.Coordinator) {
				defer workers.Done()
				wctx := context.WithValue(ctx, simKey{}, rng)
				for n := next.Add(1); n <= int64(cfg.transfers); n = next.Add(1) {
					simTransfer(wctx, c, rng, ids, cfg, n, stats)
				}
			}(apps[a])
		}
	}
	workers.Wait()
	stopLoad()
	background.Wait()
	for _, c := range apps {
		require.NoError(t, c.Close(ctx))
	}
	if len(cfg.faults) > 0 {
		fs, err := b.server.Faults.Stats(ctx)
		require.NoError(t, err)
		stats.faults = fs
		require.NoError(t, b.server.Faults.Clear(ctx))
	}

	// Every process has stopped: a final recovery finishes what is left.
	rep := b.recoverAll()
	stats.recovered.Add(int64(rep.Finished()))
	b.checkSettled(opening)
	for _, d := range b.txns() {
		if d.State == twopc.StateDone {
			stats.done++
		} else {
			stats.canceledTxns++
		}
	}
	if !cfg.allowNegative {
		for _, id := range ids {
			require.GreaterOrEqualf(t, b.balance(id), int64(0), "balance of %s", id)
		}
	}
	require.Positive(t, stats.committed.Load(), "some transfers committed")
	return stats
}

// simTransfer makes transfer n: random accounts (hot ones half the time),
// a random amount, and one time in four a third leg (the source pays two
// accounts); half of them with an idempotency key, retried with the same
// key after a crash or a database error.
func simTransfer(ctx context.Context, c *twopc.Coordinator, rng *rand.Rand, ids []string, cfg simConfig, n int64, stats *simStats) {
	pick := func() string {
		if rng.IntN(2) == 0 {
			return ids[rng.IntN(cfg.hot)]
		}
		return ids[rng.IntN(len(ids))]
	}
	src, dst := pick(), pick()
	for dst == src {
		dst = ids[rng.IntN(len(ids))]
	}
	value := 1 + rng.Int64N(200)
	var third string
	if rng.IntN(4) == 0 && len(ids) > 2 && value >= 3 {
		third = ids[rng.IntN(len(ids))]
		for third == src || third == dst {
			third = ids[rng.IntN(len(ids))]
		}
	}
	var opts []twopc.TransferOption
	keyed := rng.IntN(2) == 0
	if keyed {
		opts = append(opts, twopc.WithKey(fmt.Sprintf("sim-%d", n)))
	}
	for attempt := 0; ; attempt++ {
		stats.calls.Add(1)
		var err error
		if third == "" {
			_, err = c.Transfer(ctx, src, dst, value, opts...)
		} else {
			_, err = c.TransferLegs(ctx, []twopc.Leg{{Account: src, Amount: -value}, {Account: dst, Amount: value - value/3}, {Account: third, Amount: value / 3}}, opts...)
		}
		switch {
		case err == nil:
			stats.committed.Add(1)
		case errors.Is(err, twopc.ErrInsufficientFunds), errors.Is(err, twopc.ErrAccountNotFound),
			errors.Is(err, twopc.ErrBalanceOverflow), errors.Is(err, twopc.ErrInvalidAccount):
			stats.legErrors.Add(1)
		case errors.Is(err, twopc.ErrCanceled):
			stats.canceled.Add(1)
		case errors.Is(err, twopc.ErrInProgress):
			stats.inProgress.Add(1)
		case errors.Is(err, errCrash):
			stats.crashed.Add(1)
		default:
			if stats.otherErrors.Add(1) <= 3 {
				stats.sample(err)
			}
		}
		settled := err == nil || errors.Is(err, twopc.ErrCanceled) || errors.Is(err, twopc.ErrInsufficientFunds) ||
			errors.Is(err, twopc.ErrAccountNotFound) || errors.Is(err, twopc.ErrBalanceOverflow) || errors.Is(err, twopc.ErrInvalidAccount)
		retry := keyed && attempt < 2 && !settled
		if !retry {
			return
		}
		stats.keyedRetries.Add(1)
	}
}

// simCancel cancels, now and then, a pending transaction of its own
// application, racing the owner.
func simCancel(ctx context.Context, db *mongo.Database, k *twopc.Canceler, app string, cfg simConfig, stats *simStats) {
	tick := time.NewTicker(cfg.staleAfter / 3)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		var t struct {
			ID bson.ObjectID `bson:"_id"`
		}
		err := db.Collection("transactions").FindOne(ctx, bson.D{{Key: "state", Value: "pending"}, {Key: "application", Value: app}}).Decode(&t)
		if err != nil {
			continue
		}
		if _, err := k.Cancel(ctx, t.ID); err == nil {
			stats.cancels.Add(1)
		}
	}
}
