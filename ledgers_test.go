package twopc_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/internal/mongotest"
)

// banks is the setting of two-phase commit's classic two-banks example
// (as in X/Open DTP's XA model): two banks, each its own deployment (a dev
// server of its own), and a coordinator whose log is at the first. Ledger
// "shanghai" is the first deployment's accounts, "beijing" the second's.
type banks struct {
	t       *testing.T
	servers [2]*mongotest.DevServer
	dirs    [2]string
	name    string // the database name, the same on both
	log     *mongo.Database
	c       *twopc.Coordinator
	// recorders, when set before a client is made, record every write
	// command that client sends to deployment i.
	recorders [2]*writeRecorder
}

var bankNames = [2]string{"shanghai", "beijing"}

func newBanks(t *testing.T, opts ...twopc.Option) *banks {
	t.Helper()
	ctx := testCtx(t)
	bk := &banks{t: t, name: mongotest.DatabaseName(t)}
	for i := range bk.servers {
		bk.dirs[i] = t.TempDir()
		s, err := mongotest.StartDevServer(ctx, "", bk.dirs[i])
		require.NoError(t, err)
		bk.servers[i] = s
		t.Cleanup(func() { _ = bk.servers[i].Stop() })
	}
	bk.log = bk.database(0)
	bk.c = bk.coordinator(opts...)
	return bk
}

// newBanksStoppingAt is newBanks with WithSyncSettle, whose second
// deployment (the bank of Beijing) stops at the first call of step.
func newBanksStoppingAt(t *testing.T, step twopc.Step) *banks {
	t.Helper()
	var bk *banks
	var once sync.Once
	bk = newBanks(t, twopc.WithSyncSettle(), twopc.WithStepHook(func(_ context.Context, s twopc.Step, _ *twopc.Txn) error {
		if s == step {
			once.Do(func() { require.NoError(t, bk.servers[1].Stop()) })
		}
		return nil
	}))
	return bk
}

// database is deployment i's database through a new client with short
// timeouts, so that a stopped deployment fails fast; more options, if
// given, are applied after those.
func (bk *banks) database(i int, more ...*options.ClientOptions) *mongo.Database {
	opts := options.Client().SetRetryWrites(false).SetServerSelectionTimeout(2 * time.Second).SetTimeout(10 * time.Second)
	if bk.recorders[i] != nil {
		opts.SetMonitor(bk.recorders[i].monitor())
	}
	return mongotest.ConnectURI(bk.t, bk.servers[i].URI, append([]*options.ClientOptions{opts}, more...)...).Database(bk.name)
}

// states reads every account of both deployments.
func (bk *banks) states() map[string]accountState {
	bk.t.Helper()
	out := map[string]accountState{}
	for i, name := range bankNames {
		accountStatesIn(bk.t, bk.database(i), name+"/", out)
	}
	return out
}

// unfenceAll recovers until every transaction is final, then moves every
// account's fence line on both deployments past the latest of them (see
// bank.unfenceAll).
func (bk *banks) unfenceAll() {
	bk.t.Helper()
	ctx := testCtx(bk.t)
	for i := 0; i < 5; i++ {
		ageFinalIn(bk.t, bk.log)
		bk.recoverAll()
	}
	var latest time.Time
	var txns []struct {
		Created time.Time `bson:"created"`
	}
	cur, err := bk.log.Collection("transactions").Find(ctx, bson.D{})
	require.NoError(bk.t, err)
	require.NoError(bk.t, cur.All(ctx, &txns))
	for _, d := range txns {
		if d.Created.After(latest) {
			latest = d.Created
		}
	}
	c := bk.coordinator() // clients of its own: a deployment may have restarted
	for i, name := range bankNames {
		for _, id := range accountIDs(bk.t, bk.database(i).Collection("accounts")) {
			require.NoError(bk.t, twopc.MoveLine(ctx, c, name, id, latest))
		}
	}
}

// coordinator is a coordinator on the log with both ledgers, each through
// clients of its own.
func (bk *banks) coordinator(opts ...twopc.Option) *twopc.Coordinator {
	bk.t.Helper()
	all := append([]twopc.Option{
		twopc.WithLedger(bankNames[0], bk.database(0).Collection("accounts")),
		twopc.WithLedger(bankNames[1], bk.database(1).Collection("accounts")),
	}, opts...)
	c, err := twopc.NewCoordinator(bk.database(0), all...)
	require.NoError(bk.t, err)
	bk.t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// restart stops deployment i with SIGTERM and starts it again on the same
// address and data.
func (bk *banks) restart(i int) {
	bk.t.Helper()
	bk.stop(i)
	bk.start(i)
}

// stop stops deployment i with SIGTERM.
func (bk *banks) stop(i int) {
	bk.t.Helper()
	if err := bk.servers[i].Stop(); !errors.Is(err, os.ErrProcessDone) {
		require.NoError(bk.t, err)
	}
}

// start starts deployment i, stopped, again on the same address and data.
func (bk *banks) start(i int) {
	bk.t.Helper()
	s, err := mongotest.StartDevServer(testCtx(bk.t), bk.servers[i].Addr(), bk.dirs[i])
	require.NoError(bk.t, err)
	bk.servers[i] = s
}

// open opens accounts: ledger → id → balance.
func (bk *banks) open(opening map[string]map[string]int64) {
	bk.t.Helper()
	for name, accts := range opening {
		l, err := bk.c.Ledger(name)
		require.NoError(bk.t, err)
		for id, bal := range accts {
			require.NoError(bk.t, l.OpenAccount(testCtx(bk.t), id, bal))
		}
	}
}

func (bk *banks) balance(ledger, id string) int64 {
	bk.t.Helper()
	l, err := bk.c.Ledger(ledger)
	require.NoError(bk.t, err)
	b, err := l.Balance(testCtx(bk.t), id)
	require.NoError(bk.t, err)
	return b
}

// recoverAll runs recovery passes, every transaction made stale first,
// until nothing is left to finish.
func (bk *banks) recoverAll() twopc.RecoveryReport {
	bk.t.Helper()
	ctx := testCtx(bk.t)
	r := twopc.NewRecoverer(bk.coordinator(twopc.WithApplication("recoverer")))
	var sum twopc.RecoveryReport
	for i := 0; i < 10; i++ {
		_, err := bk.log.Collection("transactions").UpdateMany(ctx,
			bson.D{{Key: "state", Value: bson.D{{Key: "$in", Value: bson.A{"initial", "pending", "canceling"}}}}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "lastModified", Value: time.Now().Add(-2 * time.Hour)}}}})
		require.NoError(bk.t, err)
		rep, err := r.RecoverOnce(ctx)
		require.NoError(bk.t, err)
		sum.RolledForward += rep.RolledForward
		sum.Settled += rep.Settled
		sum.RolledBack += rep.RolledBack
		if rep.Finished() == 0 {
			return sum
		}
	}
	bk.t.Fatal("recovery did not finish in 10 passes")
	return sum
}

// check is the checker across both deployments: every transaction final,
// every balance its opening balance plus the net of its done transfers'
// legs, no marker, pending credit or held debit on any account.
func (bk *banks) check(opening map[string]map[string]int64) {
	bk.t.Helper()
	ctx := testCtx(bk.t)
	want := map[string]int64{}
	for name, accts := range opening {
		for id, bal := range accts {
			want[name+"/"+id] = bal
		}
	}
	cur, err := bk.log.Collection("transactions").Find(ctx, bson.D{})
	require.NoError(bk.t, err)
	var txns []twopc.Txn
	require.NoError(bk.t, cur.All(ctx, &txns))
	for _, d := range txns {
		require.Truef(bk.t, d.State.Final(), "transaction %s is %s", d.ID.Hex(), d.State)
		if d.State == twopc.StateDone {
			for _, l := range d.SettledLegs() {
				want[l.Ledger+"/"+l.Account.(string)] += l.Amount
			}
		}
	}
	for i, name := range bankNames {
		cur, err := bk.database(i).Collection("accounts").Find(ctx, bson.D{{Key: "tombstone", Value: bson.D{{Key: "$ne", Value: true}}}})
		require.NoError(bk.t, err)
		var docs []struct {
			ID      string          `bson:"_id"`
			Balance int64           `bson:"balance"`
			Pending []bson.ObjectID `bson:"pendingTransactions"`
			Credit  int64           `bson:"pendingCredit"`
			Debit   int64           `bson:"pendingDebit"`
		}
		require.NoError(bk.t, cur.All(ctx, &docs))
		for _, a := range docs {
			key := name + "/" + a.ID
			require.Equalf(bk.t, want[key], a.Balance, "balance of %s", key)
			require.Emptyf(bk.t, a.Pending, "markers on %s", key)
			require.Zerof(bk.t, a.Credit, "pending credit on %s", key)
			require.Zerof(bk.t, a.Debit, "held debit on %s", key)
			delete(want, key)
		}
	}
	for key, bal := range want {
		require.Zerof(bk.t, bal, "account %s is missing", key)
	}
}

var seed004 = map[string]map[string]int64{"shanghai": {"A": 1000}, "beijing": {"B": 0}}

func crossLegs(value int64) []twopc.Leg {
	return []twopc.Leg{{Ledger: "shanghai", Account: "A", Amount: -value}, {Ledger: "beijing", Account: "B", Amount: value}}
}

// The two-banks example's transfer: from an account at the bank of
// Shanghai to one at the bank of Beijing, each bank its own deployment, the
// decision in the coordinator's log.
func TestLedgersAcrossDeployments(t *testing.T) {
	ownServers(t)
	ctx := testCtx(t)
	bk := newBanks(t, twopc.WithSyncSettle())
	bk.open(seed004)
	txn, err := bk.c.TransferLegs(ctx, crossLegs(100))
	require.NoError(t, err)
	assert.Equal(t, twopc.StateDone, txn.State)
	assert.Equal(t, int64(900), bk.balance("shanghai", "A"))
	assert.Equal(t, int64(100), bk.balance("beijing", "B"))
	n, err := bk.database(1).Collection("transactions").CountDocuments(ctx, bson.D{})
	require.NoError(t, err)
	assert.Zero(t, n, "the log is at the coordinator's deployment only")
	bk.check(seed004)

	_, err = bk.c.TransferLegs(ctx, []twopc.Leg{{Ledger: "tokyo", Account: "A", Amount: -1}, {Ledger: "beijing", Account: "B", Amount: 1}})
	require.ErrorIs(t, err, twopc.ErrInvalidTransfer)
	require.ErrorIs(t, err, twopc.ErrUnknownLedger)
	_, err = bk.c.TransferLegs(ctx, []twopc.Leg{{Ledger: "beijing", Account: "B", Amount: -1}, {Ledger: "beijing", Account: "B", Amount: 1}})
	require.ErrorIs(t, err, twopc.ErrInvalidTransfer, "one account twice")
	_, err = bk.c.TransferLegs(ctx, []twopc.Leg{{Ledger: "beijing", Account: "A", Amount: -1}, {Ledger: "shanghai", Account: "A", Amount: 1}})
	require.ErrorIs(t, err, twopc.ErrAccountNotFound, "one id in two ledgers is two accounts (beijing has no A)")
	bk.check(seed004)
}

// A cross-deployment transfer killed before each of its operations is
// finished by recovery: the money moves once across both banks, or not at
// all if no leg applied.
func TestLedgersCrashAtEveryStepThenRecover(t *testing.T) {
	ownServers(t)
	for _, step := range transferSteps {
		t.Run(step.String(), func(t *testing.T) {
			ownServers(t)
			ctx := testCtx(t)
			bk := newBanks(t, twopc.WithStepHook(crashAt(step)), twopc.WithSyncSettle())
			bk.open(seed004)
			_, err := bk.c.TransferLegs(ctx, crossLegs(100))
			require.ErrorIs(t, err, errCrash)
			bk.recoverAll()
			bk.check(seed004)
			moved := step != twopc.StepInsert && step != twopc.StepApply
			assert.Equal(t, map[bool]int64{true: 100, false: 0}[moved], bk.balance("beijing", "B"))
		})
	}
}

// One bank's deployment stops (SIGTERM) in the middle of a transfer: the
// transfer fails or waits, nothing is lost, and once the deployment is back
// on the same data, recovery finishes it from the log.
func TestLedgersDeploymentDownMidTransfer(t *testing.T) {
	ownServers(t)
	for _, step := range []twopc.Step{twopc.StepApply, twopc.StepCommit, twopc.StepSettle} {
		t.Run(step.String(), func(t *testing.T) {
			ownServers(t)
			ctx := testCtx(t)
			bk := newBanksStoppingAt(t, step)
			bk.open(seed004)
			_, err := bk.c.TransferLegs(ctx, crossLegs(100))
			if step != twopc.StepCommit {
				require.Error(t, err, "beijing is down")
			}
			bk.restart(1)
			bk.recoverAll()
			bk.check(seed004)
		})
	}
}

// Transfers between both banks, two- and three-legged, from several
// workers with crashes injected, while the bank of Beijing's deployment is
// stopped and started again on the same data; then recovery and the
// checker across both deployments.
func TestLedgersSimulationWithRestart(t *testing.T) {
	ownServers(t)
	ctx := testCtx(t)
	rng := rand.New(rand.NewPCG(1, 2))
	var mu sync.Mutex
	crash := func(_ context.Context, s twopc.Step, _ *twopc.Txn) error {
		mu.Lock()
		defer mu.Unlock()
		if rng.Float64() < 0.02 {
			return errCrash
		}
		return nil
	}
	bk := newBanks(t)
	bk.recorders = [2]*writeRecorder{{}, {}}
	c := bk.coordinator(twopc.WithStepHook(crash), twopc.WithStaleAfter(2*time.Second))
	opening := map[string]map[string]int64{"shanghai": {}, "beijing": {}}
	var accounts []twopc.Leg
	for _, name := range bankNames {
		for i := 0; i < 4; i++ {
			id := fmt.Sprint("acct-", i)
			opening[name][id] = 500
			accounts = append(accounts, twopc.Leg{Ledger: name, Account: id})
		}
	}
	bk.open(opening)
	const workers, each = 4, 30
	var wg sync.WaitGroup
	restarted := make(chan struct{})
	var errs sync.Map
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 7))
			for n := 0; n < each; n++ {
				if w == 0 && n == each/2 {
					bk.restart(1)
					close(restarted)
				}
				perm := r.Perm(len(accounts))
				value := 3 + r.Int64N(50)
				legs := []twopc.Leg{accounts[perm[0]], accounts[perm[1]]}
				legs[0].Amount, legs[1].Amount = -value, value
				if r.IntN(3) == 0 {
					third := accounts[perm[2]]
					third.Amount = value / 3
					legs[1].Amount -= value / 3
					legs = append(legs, third)
				}
				_, err := c.TransferLegs(ctx, legs, twopc.WithKey(fmt.Sprintf("w%d-%d", w, n)))
				if err != nil {
					errs.Store(err.Error(), true)
				}
			}
		}(w)
	}
	wg.Wait()
	<-restarted
	require.NoError(t, c.Settle(ctx))
	bk.recoverAll()
	bk.check(opening)

	// Every write command of the run, to either deployment, delivered
	// again once everything is finished and unfenced: no balance moves.
	bk.unfenceAll()
	before := bk.states()
	for i := range bk.recorders {
		cmds := bk.recorders[i].recorded()
		require.NotEmpty(t, cmds)
		resendAll(t, bk.database(i), cmds)
		t.Logf("%s: %d write commands delivered again", bankNames[i], len(cmds))
	}
	bk.recoverAll()
	require.Equal(t, before, bk.states(), "a replayed write moved money")
	bk.check(opening)
	var done int64
	cur, err := bk.log.Collection("transactions").CountDocuments(ctx, bson.D{{Key: "state", Value: "done"}})
	require.NoError(t, err)
	done = cur
	n := 0
	errs.Range(func(any, any) bool { n++; return true })
	t.Logf("%d transfers across two deployments, one restarted mid-run: %d done, %d distinct errors", workers*each, done, n)
	assert.Positive(t, done)
}

// commandLog records, in order, when each data command of a set of
// clients starts and ends, by the deployment it went to.
type commandLog struct {
	mu     sync.Mutex
	events []string         // "start shanghai update", "end shanghai update transactions", ...
	names  map[int64]string // a command's name as logged, by request id
}

// logName is the name a started command is logged under: its name, and
// for an update of another collection than accounts (the log's inserts,
// commits and moves to done), that collection's too.
func logName(e *event.CommandStartedEvent) string {
	if e.CommandName == "update" {
		if coll, _ := e.Command.Lookup("update").StringValueOK(); coll != "accounts" {
			return "update " + coll
		}
	}
	return e.CommandName
}

func (cl *commandLog) monitor(deployment string) *event.CommandMonitor {
	add := func(what, command, name string) {
		if !dataCommands[command] {
			return
		}
		cl.mu.Lock()
		defer cl.mu.Unlock()
		cl.events = append(cl.events, what+" "+deployment+" "+name)
	}
	named := func(id int64) string {
		cl.mu.Lock()
		defer cl.mu.Unlock()
		return cl.names[id]
	}
	return &event.CommandMonitor{
		Started: func(_ context.Context, e *event.CommandStartedEvent) {
			name := logName(e)
			cl.mu.Lock()
			if cl.names == nil {
				cl.names = map[int64]string{}
			}
			cl.names[e.RequestID] = name
			cl.mu.Unlock()
			add("start", e.CommandName, name)
		},
		Succeeded: func(_ context.Context, e *event.CommandSucceededEvent) { add("end", e.CommandName, named(e.RequestID)) },
		Failed:    func(_ context.Context, e *event.CommandFailedEvent) { add("end", e.CommandName, named(e.RequestID)) },
	}
}

func (cl *commandLog) index(event string) int {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	for i, e := range cl.events {
		if e == event {
			return i
		}
	}
	return -1
}

// startBarrier holds the first command of a name sent to each of a set of
// deployments until all of them have been sent: commands sent one after the
// other never get past it, and it records that it gave up waiting.
type startBarrier struct {
	command string
	mu      sync.Mutex
	waiting map[string]bool // deployments not yet arrived
	all     chan struct{}   // closed when every deployment has arrived
	gaveUp  bool
}

func newStartBarrier(command string, deployments ...string) *startBarrier {
	b := &startBarrier{command: command, waiting: map[string]bool{}, all: make(chan struct{})}
	for _, d := range deployments {
		b.waiting[d] = true
	}
	return b
}

// arrive holds a command until the barrier opens, if it is the first of
// the barrier's name to its deployment. It gives up after ten seconds, far
// beyond a round trip here, so that a sequential sender fails the test
// rather than hanging it.
func (b *startBarrier) arrive(deployment, command string) {
	if command != b.command {
		return
	}
	b.mu.Lock()
	if !b.waiting[deployment] {
		b.mu.Unlock()
		return
	}
	delete(b.waiting, deployment)
	if len(b.waiting) == 0 {
		close(b.all)
	}
	b.mu.Unlock()
	select {
	case <-b.all:
	case <-time.After(10 * time.Second):
		b.mu.Lock()
		b.gaveUp = true
		b.mu.Unlock()
	}
}

func (b *startBarrier) timedOut() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.gaveUp
}

// The legs of a cross-deployment transfer are sent at once: each leg's
// update is held, in the command monitor, until the other deployment's leg
// has been sent too, so legs sent one after the other never both start and
// the test fails. So the transfer reaches its commit point in three round
// trips of latency (insert; both legs together; commit), as on one
// deployment.
func TestLedgersLegsInParallel(t *testing.T) {
	ownServers(t)
	ctx := testCtx(t)
	bk := newBanks(t)
	bk.open(seed004)
	var cl commandLog
	both := newStartBarrier("update", bankNames[0], bankNames[1])
	connect := func(i int) *mongo.Database {
		m := cl.monitor(bankNames[i])
		logged := m.Started
		m.Started = func(ctx context.Context, e *event.CommandStartedEvent) {
			logged(ctx, e)
			both.arrive(bankNames[i], logName(e))
		}
		return mongotest.ConnectURI(t, bk.servers[i].URI, options.Client().SetRetryWrites(false).
			SetMonitor(m)).Database(bk.name)
	}
	c, err := twopc.NewCoordinator(connect(0),
		twopc.WithLedger("shanghai", connect(0).Collection("accounts")),
		twopc.WithLedger("beijing", connect(1).Collection("accounts")))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	_, err = c.TransferLegs(ctx, crossLegs(100))
	require.NoError(t, err)
	require.NoError(t, c.Settle(ctx))
	t.Logf("commands: %v", cl.events)
	beijingStart, shanghaiEnd := cl.index("start beijing update"), cl.index("end shanghai update")
	require.NotEqual(t, -1, beijingStart)
	require.NotEqual(t, -1, shanghaiEnd)
	assert.Less(t, beijingStart, shanghaiEnd, "Beijing's leg waited for Shanghai's")
	assert.Less(t, cl.index("start shanghai update"), cl.index("end beijing update"), "Shanghai's leg waited for Beijing's")
	assert.False(t, both.timedOut(), "one leg was not sent until the other's reply came")
	// Round trips on the caller's path: the insert, then both legs, then
	// the commit, each starting after the previous ended (the insert, the
	// commit and the move to done are updates of the transactions).
	assert.Less(t, cl.index("end shanghai update transactions"), cl.index("start shanghai update"))
	var logs []int // the insert, the commit, the move to done
	for i, e := range cl.events {
		if e == "start shanghai update transactions" {
			logs = append(logs, i)
		}
	}
	require.GreaterOrEqual(t, len(logs), 2)
	commit := logs[1]
	assert.Less(t, max(shanghaiEnd, cl.index("end beijing update")), commit, "the commit waited for both legs")
	bk.check(seed004)
}

// The tutorial's hazard across deployments: the owner stalls before
// sending the legs, or before its commit; a recoverer takes the transfer
// over and finishes it (no leg applied: rolled back; both applied: rolled
// forward); then the owner resumes. No leg applies twice at either bank,
// and the owner reports what happened.
func TestLedgersStalledOwnerResumes(t *testing.T) {
	ownServers(t)
	for _, step := range []twopc.Step{twopc.StepApply, twopc.StepCommit} {
		t.Run(step.String(), func(t *testing.T) {
			s := newStall(step)
			bk := newBanks(t, twopc.WithStepHook(s.hook), twopc.WithApplication("owner"), twopc.WithSyncSettle())
			bk.open(seed004)
			res := make(chan error, 1)
			go func() {
				_, err := bk.c.TransferLegs(testCtx(t), crossLegs(100))
				res <- err
			}()
			<-s.reached
			rep := bk.recoverAll()
			bk.check(seed004)
			close(s.release)
			err := <-res
			began := step == twopc.StepCommit
			if began {
				assert.Equal(t, 1, rep.RolledForward)
				require.NoError(t, err, "the transfer happened, by the recoverer's hand")
			} else {
				assert.Equal(t, 1, rep.RolledBack)
				require.ErrorIs(t, err, twopc.ErrCanceled)
			}
			bk.check(seed004)
			want := map[bool]int64{true: 100, false: 0}[began]
			assert.Equal(t, 1000-want, bk.balance("shanghai", "A"))
			assert.Equal(t, want, bk.balance("beijing", "B"))
		})
	}
}

// TestMarkRollForwardAcrossDeploymentsAfterOneReturns: a transfer across
// both banks applies its leg at Shanghai while Beijing's deployment is
// down; it stays pending, holding the low-water mark back, while other
// transfers at Shanghai move the line of its account there; once Beijing
// is back, recovery rolls it forward: its Shanghai leg was not refused by
// the line, nothing rolled back.
func TestMarkRollForwardAcrossDeploymentsAfterOneReturns(t *testing.T) {
	ownServers(t)
	ctx := testCtx(t)
	var bk *banks
	var once sync.Once
	bk = newBanks(t, twopc.WithSyncSettle(), twopc.WithStepHook(func(_ context.Context, s twopc.Step, _ *twopc.Txn) error {
		if s == twopc.StepApply {
			once.Do(func() { bk.stop(1) })
		}
		return nil
	}))
	opening := map[string]map[string]int64{"shanghai": {"A": 1000, "C": 1000}, "beijing": {"B": 0}}
	bk.open(opening)
	_, err := bk.c.TransferLegs(ctx, crossLegs(100))
	require.Error(t, err, "beijing is down")
	var stuck twopc.Txn
	require.NoError(t, bk.log.Collection("transactions").FindOne(ctx, bson.D{}).Decode(&stuck))
	require.Equal(t, twopc.StatePending, stuck.State)

	c := bk.coordinator(twopc.WithFrozenMark(), twopc.WithMarkMargin(0))
	mark, err := twopc.ReadMark(ctx, c)
	require.NoError(t, err)
	require.True(t, mark.Before(stuck.Created), "the pending transfer holds the mark back")
	_, err = c.TransferLegs(ctx, []twopc.Leg{{Ledger: "shanghai", Account: "C", Amount: -5}, {Ledger: "shanghai", Account: "A", Amount: 5}})
	require.NoError(t, err)
	var a struct {
		FencedBefore time.Time `bson:"fencedBefore"`
	}
	require.NoError(t, bk.database(0).Collection("accounts").FindOne(ctx, bson.D{{Key: "_id", Value: "A"}}).Decode(&a))
	require.False(t, a.FencedBefore.IsZero(), "the line at Shanghai moved")
	require.True(t, a.FencedBefore.Before(stuck.Created), "and stays before the pending transfer")

	bk.start(1)
	rep := bk.recoverAll()
	assert.Equal(t, 1, rep.RolledForward)
	assert.Zero(t, rep.RolledBack)
	var done twopc.Txn
	require.NoError(t, bk.log.Collection("transactions").FindOne(ctx, bson.D{{Key: "_id", Value: stuck.ID}}).Decode(&done))
	assert.Equal(t, twopc.StateDone, done.State)
	bk.check(opening)
}
