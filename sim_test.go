package twopc_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/internal/mongotest"
)

// The simulation's flags. `make soak` sets them for a longer run.
var (
	simSeed      = flag.Uint64("sim.seed", 0, "run the simulation with this seed only (0: the fixed seeds and one random seed)")
	simTransfers = flag.Int("sim.transfers", 160, "transfers per simulation run (make soak: 1,500)")
	simApps      = flag.Int("sim.apps", 3, "coordinators, each an application with its own client")
	simWorkers   = flag.Int("sim.workers", 4, "workers per coordinator")
	simAccounts  = flag.Int("sim.accounts", 12, "accounts")
	simTimeout   = flag.Duration("sim.timeout", 10*time.Minute, "how long one simulation run may take")
	simStale     = flag.Duration("sim.staleafter", 2*time.Second, "the coordinators' StaleAfter (stalls last 1 to 2 times as long)")
	simProfile   = flag.Bool("sim.profile", false, "log where the server's time went: commands by shape, their count and total time")
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
	// holds makes one call in four a hold (Hold or HoldLegs, half of them
	// with an expiry of one to two StaleAfter), which two resolvers of
	// random applications then try to capture or void, racing each other,
	// the expiry and the recoverers.
	holds bool
}

func defaultSimConfig(seed uint64) simConfig {
	return simConfig{
		seed: seed, apps: *simApps, workers: *simWorkers,
		accounts: *simAccounts, hot: 3, transfers: *simTransfers,
		crash: 0.01, stall: 0.004,
		staleAfter: *simStale, // well above a write's latency on a loaded dev server
		holds:      true,
	}
}

// simStats counts what a run did and injected.
type simStats struct {
	calls, committed, legErrors, canceled, inProgress, crashed, otherErrors atomic.Int64
	crashes, stalls, cancels, keyedRetries                                  atomic.Int64
	recovered                                                               atomic.Int64
	events                                                                  int // the feed's, after the run
	holds, captures, voids, resolveRefused                                  atomic.Int64
	done, canceledTxns                                                      int
	heldAtEnd, captured, expired                                            int
	faults                                                                  mongotest.FaultStats

	mu      sync.Mutex
	samples []string      // the first few unexpected errors
	failed  chan struct{} // a token per call that failed with another error, as long as there is room
}

func (s *simStats) sample(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples = append(s.samples, err.Error())
}

func (s *simStats) String() string {
	return fmt.Sprintf("%d calls: %d committed, %d leg errors, %d canceled, %d in progress, %d crashed, %d other errors; "+
		"holds: %d held, %d captures and %d voids answered ok, %d refused (resolved by another); "+
		"injected %d crashes, %d stalls, %d cancels, %d keyed retries, front faults %+v; recovered %d; final: %d done (%d captured holds), %d canceled (%d expired holds), %d holds still held at the end; the feed: %d events, each once; other errors such as %q",
		s.calls.Load(), s.committed.Load(), s.legErrors.Load(), s.canceled.Load(), s.inProgress.Load(), s.crashed.Load(), s.otherErrors.Load(),
		s.holds.Load(), s.captures.Load(), s.voids.Load(), s.resolveRefused.Load(),
		s.crashes.Load(), s.stalls.Load(), s.cancels.Load(), s.keyedRetries.Load(), s.faults, s.recovered.Load(), s.done, s.captured, s.canceledTxns, s.expired, s.heldAtEnd, s.events, s.samples)
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
			// Every other seed with assets and limits (see simAccount).
			stats := runSimulation(t, &simBank{bank: newBank(t), assets: seed%2 == 0}, cfg)
			t.Logf("seed %d: %s", seed, stats)
		})
	}
}

// TestSimulationAcrossDeployments is TestSimulation across two
// deployments, the two banks of two-phase commit's classic example:
// accounts in both, transfers between them
// two- and three-legged, crashes, stalls, cancels racing owners and
// recoverers throughout, and the bank of Beijing's deployment stopped
// (SIGTERM) halfway through and started again on the same data once three
// calls have failed; the checker sums across both deployments.
func TestSimulationAcrossDeployments(t *testing.T) {
	ownServers(t)
	for _, seed := range simSeeds()[:1] {
		cfg := defaultSimConfig(seed)
		// With assets and limits: exchanges across both deployments while
		// one is restarted.
		stats := runSimulation(t, &simBanks{banks: newBanks(t), assets: true}, cfg)
		t.Logf("seed %d: %s", seed, stats)
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
		stats := runSimulation(t, &simBank{bank: newFaultBank(t)}, cfg)
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

// simRand is a worker's random source. The worker draws from r between
// calls; the step hook draws under mu, since a step may run once per
// ledger at the same time.
type simRand struct {
	mu sync.Mutex
	r  *rand.Rand
}

func (s *simRand) float64() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.r.Float64()
}

func (s *simRand) int64N(n int64) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.r.Int64N(n)
}

// simHook injects crashes and stalls with the random source of the worker
// whose call reached the step; calls from background work (no worker) are
// left alone.
func simHook(cfg simConfig, stats *simStats) func(context.Context, twopc.Step, *twopc.Txn) error {
	return func(ctx context.Context, step twopc.Step, _ *twopc.Txn) error {
		rng, _ := ctx.Value(simKey{}).(*simRand)
		if rng == nil {
			return nil
		}
		switch r := rng.float64(); {
		case r < cfg.crash:
			stats.crashes.Add(1)
			return errCrash
		case r < cfg.crash+cfg.stall:
			// A pause past StaleAfter, like a long GC or a partition: the
			// transaction may be taken over or canceled meanwhile.
			stats.stalls.Add(1)
			pause := cfg.staleAfter + time.Duration(rng.int64N(int64(cfg.staleAfter)))
			select {
			case <-time.After(pause):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}
}

// simWorld is where a simulation runs: one deployment (simBank) or two
// (simBanks), seen by runSimulation through the same few calls.
type simWorld interface {
	// openAccounts opens n accounts with opening balances drawn from setup
	// and returns them, each as a leg of no amount.
	openAccounts(setup *rand.Rand, n int) []twopc.Leg
	// app is a coordinator for application name on clients of its own,
	// made with clientOpts.
	app(name string, clientOpts *options.ClientOptions, opts ...twopc.Option) *twopc.Coordinator
	// log is the transactions' database.
	log() *mongo.Database
	// faults is the fault front of the deployment, nil if it has none.
	faults() *mongotest.Faults
	// stopDeployment is called once, on the test's goroutine, when half
	// the transfers have been started: it stops a deployment and reports
	// whether it did. startDeployment starts it again, on the same data,
	// once three calls have failed or the load has ended.
	stopDeployment() bool
	startDeployment()
	// finish runs the final recovery, checks and resolves the holds still
	// held (see finishHolds), and runs the checker, every balance non-
	// negative too unless allowNegative; it counts the transactions it
	// finished and the final ones by state.
	finish(allowNegative bool, stats *simStats) (recovered, done, canceled int)
}

// simBank is the simulation on one deployment, every account in the
// default ledger.
type simBank struct {
	*bank
	opening map[string]int64
	// assets gives the accounts two assets and some of them limits (see
	// simAccount).
	assets bool
}

// simAssets are the assets of a run with assets.
var simAssets = [2]string{"USD/2", "EUR/2"}

// simAccount is account i's asset and limits in a run with assets: two
// assets, every ledger holding both (accounts alternate between the
// ledgers of a run across deployments); one account in four has a floor
// of -300 (an overdraft), one in five a ceiling of 1500; the rest have no
// limits. Without assets, none of them.
func simAccount(assets bool, i int) (asset string, opts []twopc.AccountOption) {
	if !assets {
		return "", nil
	}
	asset = simAssets[(i/2)%2]
	opts = append(opts, twopc.AccountAsset(asset))
	if i%4 == 1 {
		opts = append(opts, twopc.AccountFloor(-300))
	}
	if i%5 == 3 {
		opts = append(opts, twopc.AccountCeiling(1500))
	}
	return asset, opts
}

func (b *simBank) openAccounts(setup *rand.Rand, n int) []twopc.Leg {
	b.opening = map[string]int64{}
	accounts := make([]twopc.Leg, n)
	for i := range accounts {
		id := fmt.Sprintf("acct-%03d", i)
		b.opening[id] = setup.Int64N(1000)
		asset, opts := simAccount(b.assets, i)
		require.NoError(b.t, b.c.OpenAccount(testCtx(b.t), id, b.opening[id], opts...))
		accounts[i] = twopc.Leg{Account: id, Asset: asset}
	}
	return accounts
}

func (b *simBank) app(name string, clientOpts *options.ClientOptions, opts ...twopc.Option) *twopc.Coordinator {
	db := mongotest.ConnectURI(b.t, b.server.URI, clientOpts).Database(b.db.Name())
	c, err := twopc.NewCoordinator(db, append([]twopc.Option{twopc.WithApplication(name)}, opts...)...)
	require.NoError(b.t, err)
	return c
}

func (b *simBank) log() *mongo.Database      { return b.db }
func (b *simBank) faults() *mongotest.Faults { return b.server.Faults }
func (b *simBank) stopDeployment() bool      { return false }
func (b *simBank) startDeployment()          {}

func (b *simBank) finish(allowNegative bool, stats *simStats) (recovered, done, canceled int) {
	ageReservations(b.t, b.db)
	rep := b.recoverAll()
	if finishHolds(b.t, b.db, b.coordinator(twopc.WithApplication("final")), map[string]*mongo.Collection{"": b.db.Collection("accounts")}, stats) {
		rep.RolledBack += b.recoverAll().Finished() // counted in Finished
	}
	b.checkSettled(b.opening)
	for id := range b.opening {
		a, err := b.c.Account(testCtx(b.t), id)
		require.NoError(b.t, err)
		checkLimits(b.t, id, a, allowNegative)
		if a.Limited {
			b.roomsHold(id)
		}
	}
	done, canceled = countFinal(b.t, b.db)
	return rep.Finished(), done, canceled
}

// simBanks is the simulation across two deployments, the two banks of
// two-phase commit's classic example:
// accounts alternate between the two ledgers, the log is at the first
// deployment, and the second is stopped (SIGTERM) halfway through and
// started again on the same data once three calls have failed.
type simBanks struct {
	*banks
	opening map[string]map[string]int64
	down    time.Time // when the deployment was stopped
	assets  bool      // as simBank's
}

func (bk *simBanks) openAccounts(setup *rand.Rand, n int) []twopc.Leg {
	bk.opening = map[string]map[string]int64{bankNames[0]: {}, bankNames[1]: {}}
	accounts := make([]twopc.Leg, n)
	for i := range accounts {
		ledger, id := bankNames[i%2], fmt.Sprintf("acct-%03d", i)
		bk.opening[ledger][id] = setup.Int64N(1000)
		asset, opts := simAccount(bk.assets, i)
		l, err := bk.c.Ledger(ledger)
		require.NoError(bk.t, err)
		require.NoError(bk.t, l.OpenAccount(testCtx(bk.t), id, bk.opening[ledger][id], opts...))
		accounts[i] = twopc.Leg{Ledger: ledger, Account: id, Asset: asset}
	}
	return accounts
}

func (bk *simBanks) app(name string, clientOpts *options.ClientOptions, opts ...twopc.Option) *twopc.Coordinator {
	var dbs [2]*mongo.Database
	for i := range dbs {
		dbs[i] = bk.database(i, clientOpts)
	}
	all := append([]twopc.Option{
		twopc.WithApplication(name),
		twopc.WithLedger(bankNames[0], dbs[0].Collection("accounts")),
		twopc.WithLedger(bankNames[1], dbs[1].Collection("accounts")),
	}, opts...)
	c, err := twopc.NewCoordinator(dbs[0], all...)
	require.NoError(bk.t, err)
	return c
}

func (bk *simBanks) log() *mongo.Database      { return bk.banks.log }
func (bk *simBanks) faults() *mongotest.Faults { return nil }
func (bk *simBanks) stopDeployment() bool {
	bk.stop(1)
	bk.down = time.Now()
	return true
}

func (bk *simBanks) startDeployment() {
	bk.start(1)
	bk.t.Logf("the bank of %s's deployment was down (SIGTERM, then restarted on the same data) for %v, mid-run",
		bankNames[1], time.Since(bk.down).Round(time.Millisecond))
}

func (bk *simBanks) finish(allowNegative bool, stats *simStats) (recovered, done, canceled int) {
	ageReservations(bk.t, bk.banks.log)
	rep := bk.recoverAll()
	accounts := map[string]*mongo.Collection{}
	for i, name := range bankNames {
		accounts[name] = bk.database(i).Collection("accounts")
	}
	if finishHolds(bk.t, bk.banks.log, bk.coordinator(twopc.WithApplication("final")), accounts, stats) {
		rep.RolledBack += bk.recoverAll().Finished() // counted in Finished
	}
	bk.check(bk.opening)
	for ledger, accts := range bk.opening {
		l, err := bk.c.Ledger(ledger)
		require.NoError(bk.t, err)
		for id := range accts {
			a, err := l.Account(testCtx(bk.t), id)
			require.NoError(bk.t, err)
			checkLimits(bk.t, ledger+"/"+id, a, allowNegative)
			if a.Limited {
				roomsHoldIn(bk.t, bk.database(slices.Index(bankNames[:], ledger)).Collection("accounts"), id)
			}
		}
	}
	done, canceled = countFinal(bk.t, bk.banks.log)
	cur, err := bk.banks.log.Collection("transactions").Find(testCtx(bk.t), bson.D{{Key: "state", Value: twopc.StateDone}})
	require.NoError(bk.t, err)
	var txns []twopc.Txn
	require.NoError(bk.t, cur.All(testCtx(bk.t), &txns))
	cross := 0
	for _, d := range txns {
		ledgers := map[string]bool{}
		for _, l := range d.AllLegs() {
			ledgers[l.Ledger] = true
		}
		if len(ledgers) == 2 {
			cross++
		}
	}
	require.Positive(bk.t, cross, "transfers done across both deployments")
	return rep.Finished(), done, canceled
}

// countFinal counts the transactions in db done and canceled.
func countFinal(t *testing.T, db *mongo.Database) (done, canceled int) {
	t.Helper()
	for state, n := range map[twopc.State]*int{twopc.StateDone: &done, twopc.StateCanceled: &canceled} {
		c, err := db.Collection("transactions").CountDocuments(testCtx(t), bson.D{{Key: "state", Value: state}})
		require.NoError(t, err)
		*n = int(c)
	}
	return done, canceled
}

func runSimulation(t *testing.T, w simWorld, cfg simConfig) *simStats {
	t.Helper()
	t.Logf("simulation seed %d: %d apps × %d workers, %d accounts (%d hot), %d transfers; reproduce with -run '%s' -sim.seed=%d",
		cfg.seed, cfg.apps, cfg.workers, cfg.accounts, cfg.hot, cfg.transfers, t.Name(), cfg.seed)
	ctx, cancel := context.WithTimeout(context.Background(), *simTimeout)
	defer cancel()
	accounts := w.openAccounts(rand.New(rand.NewPCG(cfg.seed, 0)), cfg.accounts)
	stats := &simStats{failed: make(chan struct{}, cfg.transfers)}

	clientOpts := options.Client().SetRetryWrites(false)
	if cfg.clientTimeout > 0 {
		clientOpts.SetTimeout(cfg.clientTimeout)
	}
	if cfg.recorder != nil {
		clientOpts.SetMonitor(cfg.recorder.monitor())
	}
	if *simProfile {
		p := &commandProfile{started: map[int64]profileStart{}, total: map[string]*profileEntry{}}
		clientOpts.SetMonitor(p.monitor())
		defer func() { t.Logf("where the server's time went:\n%s", p) }()
	}
	newApp := func(name string, hook func(context.Context, twopc.Step, *twopc.Txn) error) *twopc.Coordinator {
		opts := []twopc.Option{
			twopc.WithStaleAfter(cfg.staleAfter), twopc.WithStepHook(hook),
		}
		if cfg.allowNegative {
			opts = append(opts, twopc.WithAllowNegative())
		}
		return w.app(name, clientOpts, opts...)
	}

	// Recoverers of other applications run during the load.
	loadCtx, stopLoad := context.WithCancel(ctx)
	// The feed's two sequencers too, racing for its lease, under the
	// same faults: every event is checked at the end.
	waitFeed := startSimFeed(t, loadCtx, w.log(), func(name string) *twopc.Coordinator { return newApp(name, nil) }, cfg.staleAfter)
	var background sync.WaitGroup
	for i := 0; i < 2; i++ {
		r := twopc.NewRecoverer(newApp(fmt.Sprintf("recoverer-%d", i), nil), twopc.WithInterval(cfg.staleAfter/2))
		background.Add(1)
		go func() {
			defer background.Done()
			_ = r.Run(loadCtx)
		}()
	}

	faults := w.faults()
	if len(cfg.faults) > 0 {
		require.NotNil(t, faults, "faults need a fault front")
		for _, f := range cfg.faults {
			require.NoError(t, faults.Add(ctx, f))
		}
	}
	var next atomic.Int64
	half := make(chan struct{})
	var workers, resolvers sync.WaitGroup
	apps := make([]*twopc.Coordinator, cfg.apps)
	holds := make(chan simHeld, 2*cfg.transfers)
	for a := range apps {
		apps[a] = newApp(fmt.Sprintf("app-%d", a), simHook(cfg, stats))
		if cfg.holds {
			// Two resolvers per application take holds any application
			// made, and capture or void them, with crashes and stalls.
			for r := 0; r < 2; r++ {
				rng := &simRand{r: rand.New(rand.NewPCG(cfg.seed, uint64(a*1000+500+r)))}
				resolvers.Add(1)
				go func(c *twopc.Coordinator) {
					defer resolvers.Done()
					simResolve(context.WithValue(ctx, simKey{}, rng), c, rng, holds, stats)
				}(apps[a])
			}
		}
		// A canceler of the same application races the owners: it may
		// cancel their live transactions at any step.
		canceler := twopc.NewCanceler(newApp(fmt.Sprintf("app-%d", a), nil))
		background.Add(1)
		go func(a int) {
			defer background.Done()
			simCancel(loadCtx, w.log(), canceler, fmt.Sprintf("app-%d", a), cfg, stats)
		}(a)
		for wk := 0; wk < cfg.workers; wk++ {
			rng := &simRand{r: rand.New(rand.NewPCG(cfg.seed, uint64(a*1000+wk+1)))}
			workers.Add(1)
			go func(c *twopc.Coordinator) {
				defer workers.Done()
				wctx := context.WithValue(ctx, simKey{}, rng)
				for n := next.Add(1); n <= int64(cfg.transfers); n = next.Add(1) {
					if n == int64(cfg.transfers+1)/2 {
						close(half)
					}
					simTransfer(wctx, c, rng.r, accounts, cfg, n, stats, holds)
				}
			}(apps[a])
		}
	}
	loadDone := make(chan struct{})
	go func() {
		workers.Wait()
		close(loadDone)
	}()
	<-half
	if w.stopDeployment() {
		for failed := 0; failed < 3; failed++ {
			select {
			case <-stats.failed:
			case <-loadDone:
				failed = 3
			}
		}
		w.startDeployment()
	}
	<-loadDone
	close(holds)
	resolvers.Wait()
	stopLoad()
	background.Wait()
	waitFeed()
	for _, c := range apps {
		require.NoError(t, c.Close(ctx))
	}
	if len(cfg.faults) > 0 {
		fs, err := faults.Stats(ctx)
		require.NoError(t, err)
		stats.faults = fs
		require.NoError(t, faults.Clear(ctx))
	}

	// Every process has stopped: a final recovery finishes what is left.
	recovered, done, canceled := w.finish(cfg.allowNegative, stats)
	stats.recovered.Add(int64(recovered))
	stats.done, stats.canceledTxns = done, canceled
	stats.events = checkSimFeed(t, w.app("feed-check", options.Client()), w.log())
	require.Positive(t, stats.committed.Load(), "some transfers committed")
	return stats
}

// simTransfer makes transfer n: random accounts (hot ones half the time),
// a random amount, and one time in four a third leg (the source pays two
// accounts); half of them with an idempotency key, retried with the same
// key after a crash or a database error. A two-leg transfer within the
// default ledger goes through Transfer, any other through TransferLegs.
func simTransfer(ctx context.Context, c *twopc.Coordinator, rng *rand.Rand, accounts []twopc.Leg, cfg simConfig, n int64, stats *simStats, holds chan<- simHeld) {
	pick := func() twopc.Leg {
		if rng.IntN(2) == 0 {
			return accounts[rng.IntN(cfg.hot)]
		}
		return accounts[rng.IntN(len(accounts))]
	}
	src, dst := pick(), pick()
	// With assets, nine destinations in ten hold the source's asset; the
	// tenth is a leg the server must refuse (ErrAssetMismatch).
	for tries := 0; dst == src || (src.Asset != dst.Asset && rng.IntN(10) != 0 && tries < 100); tries++ {
		dst = accounts[rng.IntN(len(accounts))]
	}
	value := 1 + rng.Int64N(200)
	legs := []twopc.Leg{src, dst}
	legs[0].Amount, legs[1].Amount = -value, value
	legs[1].Asset = src.Asset // the source's asset, whatever the destination holds
	exchange := src.Asset != "" && dst.Asset == src.Asset && rng.IntN(8) == 0
	if exchange {
		// An exchange: two more legs, of the other asset, one transfer.
		var other []twopc.Leg
		for _, a := range accounts {
			if a.Asset != src.Asset {
				other = append(other, a)
			}
		}
		x, y := other[rng.IntN(len(other))], other[rng.IntN(len(other))]
		for y == x {
			y = other[rng.IntN(len(other))]
		}
		rate := 1 + rng.Int64N(value)
		x.Amount, y.Amount = -rate, rate
		legs = append(legs, x, y)
	} else if rng.IntN(4) == 0 && len(accounts) > 2 && value >= 3 {
		third := accounts[rng.IntN(len(accounts))]
		for tries := 0; third == src || third == dst || (third.Asset != src.Asset && tries < 100); tries++ {
			third = accounts[rng.IntN(len(accounts))]
		}
		if third != src && third != dst && third.Asset == src.Asset {
			third.Amount = value / 3
			legs[1].Amount -= value / 3
			legs = append(legs, third)
		}
	}
	var opts []twopc.TransferOption
	if src.Asset != "" && len(legs) == 2 {
		opts = append(opts, twopc.WithAsset(src.Asset))
	}
	keyed := rng.IntN(2) == 0
	if keyed {
		opts = append(opts, twopc.WithKey(fmt.Sprintf("sim-%d", n)))
	}
	hold := cfg.holds && rng.IntN(4) == 0
	if hold && rng.IntN(2) == 0 {
		opts = append(opts, twopc.WithExpiry(cfg.staleAfter+time.Duration(rng.Int64N(int64(cfg.staleAfter)))))
	}
	for attempt := 0; ; attempt++ {
		stats.calls.Add(1)
		var err error
		var txn *twopc.Txn
		switch {
		case hold && len(legs) == 2 && src.Ledger == "" && dst.Ledger == "":
			txn, err = c.Hold(ctx, src.Account, dst.Account, value, opts...)
		case hold:
			txn, err = c.HoldLegs(ctx, legs, opts...)
		case len(legs) == 2 && src.Ledger == "" && dst.Ledger == "":
			_, err = c.Transfer(ctx, src.Account, dst.Account, value, opts...)
		default:
			_, err = c.TransferLegs(ctx, legs, opts...)
		}
		if hold && err == nil && txn.State == twopc.StateHeld {
			stats.holds.Add(1)
			// Two resolutions, by resolvers of any application: they race.
			holds <- simHeld{id: txn.ID, value: value, legs: len(legs)}
			holds <- simHeld{id: txn.ID, value: value, legs: len(legs)}
		}
		switch {
		case err == nil:
			stats.committed.Add(1)
		case errors.Is(err, twopc.ErrInsufficientFunds), errors.Is(err, twopc.ErrAccountNotFound),
			errors.Is(err, twopc.ErrBalanceOverflow), errors.Is(err, twopc.ErrInvalidAccount),
			errors.Is(err, twopc.ErrAssetMismatch), errors.Is(err, twopc.ErrLimitExceeded):
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
			select {
			case stats.failed <- struct{}{}:
			default:
			}
		}
		settled := err == nil || errors.Is(err, twopc.ErrCanceled) || errors.Is(err, twopc.ErrInsufficientFunds) ||
			errors.Is(err, twopc.ErrAccountNotFound) || errors.Is(err, twopc.ErrBalanceOverflow) || errors.Is(err, twopc.ErrInvalidAccount) ||
			errors.Is(err, twopc.ErrAssetMismatch) || errors.Is(err, twopc.ErrLimitExceeded)
		retry := keyed && attempt < 2 && !settled
		if !retry {
			return
		}
		stats.keyedRetries.Add(1)
	}
}

// commandProfile sums, by command shape (name, collection and the fields
// of its first filter), how many commands the clients sent and how long
// they waited for them: on the serializing dev server, where its time
// goes. Only for diagnosis (-sim.profile).
type commandProfile struct {
	mu      sync.Mutex
	started map[int64]profileStart
	total   map[string]*profileEntry
}

type profileStart struct {
	shape string
	at    time.Time
}

type profileEntry struct {
	n    int
	time time.Duration
}

func (p *commandProfile) monitor() *event.CommandMonitor {
	end := func(id int64) {
		p.mu.Lock()
		defer p.mu.Unlock()
		s, ok := p.started[id]
		if !ok {
			return
		}
		delete(p.started, id)
		e := p.total[s.shape]
		if e == nil {
			e = &profileEntry{}
			p.total[s.shape] = e
		}
		e.n++
		e.time += time.Since(s.at)
	}
	return &event.CommandMonitor{
		Started: func(_ context.Context, e *event.CommandStartedEvent) {
			if !dataCommands[e.CommandName] || background(e) {
				return
			}
			shape := e.CommandName + " " + fmt.Sprint(e.Command.Lookup(e.CommandName))
			filter := e.Command.Lookup("filter")
			if e.CommandName == "findAndModify" {
				filter = e.Command.Lookup("query")
				if up, _ := e.Command.Lookup("upsert").BooleanOK(); up {
					shape += " upsert"
				}
			}
			if u, ok := e.Command.Lookup("updates").ArrayOK(); ok {
				if first, err := u.IndexErr(0); err == nil {
					if d, ok := first.DocumentOK(); ok {
						filter = d.Lookup("q")
					}
				}
			}
			if f, ok := filter.DocumentOK(); ok {
				elems, _ := f.Elements()
				for _, el := range elems {
					shape += " " + el.Key()
				}
			}
			p.mu.Lock()
			defer p.mu.Unlock()
			p.started[e.RequestID] = profileStart{shape: shape, at: time.Now()}
		},
		Succeeded: func(_ context.Context, e *event.CommandSucceededEvent) { end(e.RequestID) },
		Failed:    func(_ context.Context, e *event.CommandFailedEvent) { end(e.RequestID) },
	}
}

func (p *commandProfile) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	shapes := make([]string, 0, len(p.total))
	for s := range p.total {
		shapes = append(shapes, s)
	}
	sort.Slice(shapes, func(i, j int) bool { return p.total[shapes[i]].time > p.total[shapes[j]].time })
	var b strings.Builder
	for _, s := range shapes {
		e := p.total[s]
		fmt.Fprintf(&b, "%8d %10v %8v/cmd  %s\n", e.n, e.time.Round(time.Millisecond), (e.time / time.Duration(e.n)).Round(time.Microsecond), s)
	}
	return b.String()
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

// simHoldDoc is a hold as stored, with its book's captures.
type simHoldDoc struct {
	twopc.Txn `bson:",inline"`
	Captures  []struct {
		ID      bson.ObjectID `bson:"id"`
		Amounts []int64       `bson:"amounts"`
	} `bson:"captures"`
}

// simHeld is a hold a worker made, for the resolvers.
type simHeld struct {
	id    bson.ObjectID
	value int64
	legs  int
}

// simResolve captures (for a random part of a hold of two legs, the whole
// of a larger one) or voids the holds it is handed, or leaves one alone
// (for its expiry, or the end of the run), until the channel closes. Each
// call's error must be one a resolution may give.
func simResolve(ctx context.Context, c *twopc.Coordinator, rng *simRand, holds <-chan simHeld, stats *simStats) {
	for h := range holds {
		var err error
		switch r := rng.int64N(10); {
		case r < 2 && h.legs == 2 && h.value > 1:
			// In parts: a first capture that keeps the rest held, then the
			// rest's capture (in part), or a void of it.
			first := 1 + rng.int64N(h.value-1)
			if _, err = c.Capture(ctx, h.id, first, twopc.WithFinalCapture(false)); err == nil {
				stats.captures.Add(1)
				if rng.int64N(2) == 0 {
					if _, err = c.Capture(ctx, h.id, 1+rng.int64N(h.value-first)); err == nil {
						stats.captures.Add(1)
					}
				} else if _, err = c.Void(ctx, h.id); err == nil {
					stats.voids.Add(1)
				}
			}
		case r < 4:
			amount := h.value
			if h.legs == 2 {
				amount = 1 + rng.int64N(h.value)
			}
			if _, err = c.Capture(ctx, h.id, amount); err == nil {
				stats.captures.Add(1)
			}
		case r < 8:
			if _, err = c.Void(ctx, h.id); err == nil {
				stats.voids.Add(1)
			}
		default:
			continue
		}
		switch {
		case err == nil:
		case errors.Is(err, twopc.ErrHoldCaptured), errors.Is(err, twopc.ErrHoldVoided), errors.Is(err, twopc.ErrHoldExpired),
			errors.Is(err, twopc.ErrCaptureExceeded):
			stats.resolveRefused.Add(1)
		case errors.Is(err, errCrash):
			stats.crashed.Add(1)
		case errors.Is(err, twopc.ErrInProgress):
			stats.inProgress.Add(1)
		default:
			if stats.otherErrors.Add(1) <= 3 {
				stats.sample(err)
			}
		}
	}
}

// ageReservations backdates by an hour every capture reserved in the book
// of a held hold in log, once every process stopped: time passes for them
// as for the transactions the final recovery finishes (backdated), so a
// capture whose process died between its reservation and its insert is
// given back by that recovery, which then ends a hold whose final capture
// committed after it (see endHolds).
func ageReservations(t *testing.T, log *mongo.Database) {
	t.Helper()
	ctx := testCtx(t)
	cur, err := log.Collection("transactions").Find(ctx, bson.D{{Key: "state", Value: twopc.StateHeld}})
	require.NoError(t, err)
	var held []simHoldDoc
	require.NoError(t, cur.All(ctx, &held))
	for _, h := range held {
		for i := range h.Captures {
			_, err := log.Collection("transactions").UpdateOne(ctx, bson.D{{Key: "_id", Value: h.ID}},
				bson.D{{Key: "$set", Value: bson.D{{Key: fmt.Sprintf("captures.%d.at", i), Value: time.Now().Add(-time.Hour)}}}})
			require.NoError(t, err)
		}
	}
}

// finishHolds is the checker's part for holds, once every process stopped
// and recovery finished everything else: every hold still held has each
// leg applied, and the accounts hold exactly the held amounts (each
// account's pendingDebit the sum of its held debits, pendingCredit of its
// held credits, pendingTransactions the markers of its held legs); then c
// captures half of them (the first, whole) and voids the rest. It reports
// whether any hold was still held, and counts the final holds in stats.
func finishHolds(t *testing.T, log *mongo.Database, c *twopc.Coordinator, accounts map[string]*mongo.Collection, stats *simStats) bool {
	t.Helper()
	ctx := testCtx(t)
	cur, err := log.Collection("transactions").Find(ctx, bson.D{{Key: "state", Value: twopc.StateHeld}})
	require.NoError(t, err)
	var held []simHoldDoc
	require.NoError(t, cur.All(ctx, &held))
	// What each hold's committed captures took of each leg: out of the
	// accounts' pending fields once they closed, which recovery did. A
	// capture whose process died between its reservation and its insert
	// is given back by the Capture or Void below: its lease has run out
	// (ageReservations, before the final recovery).
	taken := map[bson.ObjectID][]int64{}
	for _, h := range held {
		taken[h.ID] = make([]int64, len(h.AllLegs()))
		for _, e := range h.Captures {
			var capture twopc.Txn
			err := log.Collection("transactions").FindOne(ctx, bson.D{{Key: "_id", Value: e.ID}}).Decode(&capture)
			if err != nil || !capture.State.Committed() {
				continue // never made, or canceled: nothing moved
			}
			require.Equal(t, twopc.StateDone, capture.State, "capture %s of hold %s, after recovery", e.ID.Hex(), h.ID.Hex())
			for i, a := range e.Amounts {
				taken[h.ID][i] += max(a, -a)
			}
		}
	}
	type sums struct {
		debit, credit int64
		markers       map[bson.ObjectID]bool
	}
	want := map[string]*sums{}
	at := func(ledger string, id any) *sums {
		key := ledger + "/" + fmt.Sprint(id)
		if want[key] == nil {
			want[key] = &sums{markers: map[bson.ObjectID]bool{}}
		}
		return want[key]
	}
	for _, h := range held {
		for i, l := range h.AllLegs() {
			s := at(l.Ledger, l.Account)
			rest := max(l.Amount, -l.Amount) - taken[h.ID][i]
			if l.Amount < 0 {
				s.debit += rest
			} else {
				s.credit += rest
			}
			s.markers[twopc.LegMarker(h.ID, i)] = true
		}
	}
	for ledger, coll := range accounts {
		cur, err := coll.Find(ctx, bson.D{})
		require.NoError(t, err)
		var docs []accountDoc
		require.NoError(t, cur.All(ctx, &docs))
		for _, a := range docs {
			s := at(ledger, a.ID)
			require.Equalf(t, s.debit, a.Debit, "account %s/%v: pendingDebit against its held debits", ledger, a.ID)
			require.Equalf(t, s.credit, a.Credit, "account %s/%v: pendingCredit against its held credits", ledger, a.ID)
			require.Lenf(t, a.Pending, len(s.markers), "account %s/%v: markers against its held legs", ledger, a.ID)
			for _, m := range a.Pending {
				require.Truef(t, s.markers[m], "account %s/%v: marker %s of no held leg", ledger, a.ID, m.Hex())
			}
		}
	}
	stats.heldAtEnd = len(held)
	before := map[bson.ObjectID]bson.Raw{}
	for _, h := range held {
		before[h.ID], _ = log.Collection("transactions").FindOne(ctx, bson.D{{Key: "_id", Value: h.ID}}).Raw()
	}
	for i, h := range held {
		if i%2 == 0 {
			// What is left of it, whole: a part of a hold of two legs
			// may have been captured.
			rest := h.Value
			if len(h.Legs) == 0 {
				rest -= taken[h.ID][1]
			}
			parts := make([]int64, len(h.AllLegs()))
			for j, l := range h.AllLegs() {
				parts[j] = l.Amount
				if l.Amount < 0 {
					parts[j] = -(max(-l.Amount, 0) - taken[h.ID][j])
				} else {
					parts[j] = l.Amount - taken[h.ID][j]
				}
			}
			if len(h.Legs) == 0 {
				_, err = c.Capture(ctx, h.ID, rest)
			} else {
				_, err = c.CaptureLegs(ctx, h.ID, parts)
			}
			if h.ExpiryMs > 0 && errors.Is(err, twopc.ErrHoldExpired) {
				// Its expiry passed since it was read: it is voided
				// instead, and the recovery after this finishes it.
				err = nil
			}
		} else {
			_, err = c.Void(ctx, h.ID)
			if h.ExpiryMs > 0 && errors.Is(err, twopc.ErrHoldExpired) {
				err = nil // expired since it was read: the same end
			}
		}
		require.NoError(t, err, "resolving hold %s at the end, as it stood before: %s", h.ID.Hex(), holdStory(ctx, log, h.ID, before[h.ID]))
	}
	require.NoError(t, c.Settle(ctx))
	for _, q := range []struct {
		filter bson.D
		n      *int
	}{
		{bson.D{{Key: "hold", Value: true}, {Key: "state", Value: twopc.StateDone}}, &stats.captured},
		{bson.D{{Key: "hold", Value: true}, {Key: "reason", Value: "expired"}}, &stats.expired},
	} {
		n, err := log.Collection("transactions").CountDocuments(ctx, q.filter)
		require.NoError(t, err)
		*q.n = int(n)
	}
	return len(held) > 0
}

// holdStory is what a failure to resolve hold id at the end shows: the
// hold as read before (was) and now, and each capture its book names,
// from the log or history.
func holdStory(ctx context.Context, log *mongo.Database, id bson.ObjectID, was bson.Raw) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nbefore: %s", was)
	now, _ := log.Collection("transactions").FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Raw()
	fmt.Fprintf(&b, "\nnow: %s", now)
	var h simHoldDoc
	if bson.Unmarshal(now, &h) == nil {
		for _, e := range h.Captures {
			for _, coll := range []string{"transactions"} {
				if d, err := log.Collection(coll).FindOne(ctx, bson.D{{Key: "_id", Value: e.ID}}).Raw(); err == nil {
					fmt.Fprintf(&b, "\ncapture %s in %s: %s", e.ID.Hex(), coll, d)
				}
			}
		}
	}
	return b.String()
}

// checkLimits asserts account a, read after a run, is within what bounds
// it: its own floor and ceiling if it has limits (with its rooms in step),
// else zero unless the run allowed negative balances.
func checkLimits(t *testing.T, name string, a *twopc.Account, allowNegative bool) {
	t.Helper()
	switch {
	case a.Limited:
		require.GreaterOrEqualf(t, a.Balance, a.Floor, "balance of %s, floor %d", name, a.Floor)
		require.LessOrEqualf(t, a.Balance, a.Ceiling, "balance of %s, ceiling %d", name, a.Ceiling)
	case !allowNegative:
		require.GreaterOrEqualf(t, a.Balance, int64(0), "balance of %s", name)
	}
}
