package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc"
)

var recoverCommand = &command{
	name:    "recover",
	summary: "finish stale transactions: one recovery pass, or a pass every --interval",
	help: `Recover makes one recovery pass (twopc's Recoverer.RecoverOnce): it
settles every applied transaction, takes over each initial, pending or
canceling transaction untouched for longer than its lease and finishes
it (a pending one rolls forward if a leg of it was applied, back if
none was; a pending hold always rolls back), voids every hold held past
its expiry (WithExpiry, by the server's clock), and, for transactions
recorded with a time to keep (WithHistory), archives or removes those
past it. Fences need no pass: the writes that touch an account drop
them. It prints what the pass did; progress goes to stderr.

Taking a transaction over (or voiding a hold for its expiry) writes the
tool's application name in the transaction's application field, in place
of the name of the application that made it; the library keeps no other
record of the maker. So the pass lists each transaction it took over, in
the state it found it, with the application that made it and what it
did: "ID (pending, made by payments-1): taken over by twopc-cli, rolled
forward" (--json: transactions[], with madeBy and finishedBy).

A transaction's lease is the longest StaleAfter of the processes that
claimed it, recorded in it, so the tool judges each transaction by the
lease its own processes set, never sooner than --min-lease. --min-lease
is also the tool's own StaleAfter while it drives a transaction it took
over: its leg writes must finish within half of it. The pass says, for
each unfinished transaction it left because that lease has not run out,
when it becomes eligible: its lastModified plus the longer of its
recorded lease and --min-lease, by the server's clock: "left for its
lease: ID (pending, application payments-1): untouched for 3s of its
lease 1m0s (recorded in it); eligible from 2026-11-26T10:01:00.000Z (in
57s, by the server's clock)" (--json: waiting[], with leaseSeconds,
minLeaseSeconds, eligibleAt and eligibleInSeconds). A transaction whose
recorded lease is shorter, untouched for longer than that lease but not
for --min-lease, is left for the floor alone, and said so: "left by
--min-lease 10s: ID (pending, application payments-1): untouched for 4s,
past its recorded lease (1s) but not --min-lease; a pass takes it over
from ..." (--json: minLeaseSkipped[] as well, with untouchedSeconds,
leaseSeconds and minLeaseSeconds). A later pass takes each over once
eligible.

With --watch it makes a pass every --interval until SIGINT or SIGTERM,
printing each pass's report (with --json, one JSON document per line),
and exits 0 when stopped; a pass that fails is reported on stderr and
the next one follows.

Every ledger an unfinished transaction has legs on must be given with
--ledger: NAME=COLLECTION for a collection of the log's database, or
NAME=URI for one anywhere else, the connection string's path naming
DB.COLLECTION (--ledger beijing=mongodb://127.0.0.1:27018/bank.accounts).
A transaction with a leg on a ledger not given is left untouched for a
recoverer that has it, and the pass exits 1 naming the ledger.

Exit status (one pass): 0 if every transaction it met was finished or
left to its owner; 1 if one could not be, for what it is (malformed, a
ledger not given); 3 if the server failed.

Examples:
  twopc recover
  twopc recover --watch --interval 30s
  twopc recover --ledger shanghai=accounts_sh --json
  twopc recover --uri mongodb://127.0.0.1:27017/bank \
      --ledger beijing=mongodb://127.0.0.1:27018/bank.accounts`,
	run: runRecover,
}

type recoverReport struct {
	Started       time.Time `json:"started"`
	Duration      float64   `json:"durationSeconds"`
	RolledForward int       `json:"rolledForward"`
	Settled       int       `json:"settled"`
	RolledBack    int       `json:"rolledBack"`
	Canceled      int       `json:"canceled"`
	Skipped       int       `json:"skipped"`
	Failed        int       `json:"failed"`
	Expired       int       `json:"expired"` // holds past their expiry, voided
	Removed       int       `json:"removed"`
	Finished      int       `json:"finished"`
	Error         string    `json:"error,omitempty"`
	// Transactions are those the pass took over (or voided for expiry),
	// at most maxListed, each with the application that made it: taking
	// a transaction over writes the tool's application name in its
	// document in place of the maker's. NotListed counts the rest.
	Transactions []recoveredTxn `json:"transactions"`
	NotListed    int            `json:"notListed,omitempty"`
	// MinLeaseSkipped are the unfinished transactions the pass left
	// because of the --min-lease floor alone: untouched for longer than
	// the lease recorded in them, not for longer than --min-lease.
	MinLeaseSkipped []floorSkip `json:"minLeaseSkipped"`
	// Waiting are the unfinished transactions (initial, pending,
	// canceling) the pass left because their lease, or --min-lease, had
	// not run out, each with when it becomes eligible (those of
	// MinLeaseSkipped among them), at most maxListed.
	Waiting  []waitingTxn `json:"waiting"`
	minLease time.Duration
	took     time.Duration
	end      time.Time // the pass's end, by the server's clock
}

// floorSkip is a transaction a pass left for the --min-lease floor.
type floorSkip struct {
	ID          string  `json:"id"`
	State       string  `json:"state"`
	Application string  `json:"application"`
	Untouched   float64 `json:"untouchedSeconds"` // at the pass's start, by the server's clock
	Lease       float64 `json:"leaseSeconds"`     // recorded in it
	MinLease    float64 `json:"minLeaseSeconds"`
	untouched   time.Duration
	lease       time.Duration
	eligibleAt  time.Time
}

// recoveredTxn is one transaction a pass took over and what it did.
type recoveredTxn struct {
	ID    string `json:"id"`
	State string `json:"state"` // the state the pass found it in
	// MadeBy is the application the transaction named when the pass took
	// it over: the one that made it, unless an earlier takeover replaced
	// it. FinishedBy is the tool's, which its document names now.
	MadeBy     string `json:"madeBy"`
	FinishedBy string `json:"finishedBy"`
	Action     string `json:"action"`  // roll_forward, roll_back, cancel_initial, expire
	Outcome    string `json:"outcome"` // moved; not_moved (another process was first); error
	Error      string `json:"error,omitempty"`
}

// maxListed bounds the transactions a pass's report lists.
const maxListed = 1000

// takeovers follows a pass: the step hook gives each transaction as it
// stood before the tool claimed it (its maker's name), the observer what
// the pass did with it. Both are called from many goroutines.
type takeovers struct {
	mu          sync.Mutex
	application string
	makers      map[bson.ObjectID]string
	txns        []recoveredTxn
	notListed   int
}

// hook notes who named a transaction before the pass claimed it: a
// takeover, or the void of a hold's expiry.
func (k *takeovers) hook(_ context.Context, step twopc.Step, t *twopc.Txn) error {
	if t == nil || (step != twopc.StepTakeover && step != twopc.StepVoid) {
		return nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.makers[t.ID]; !ok {
		k.makers[t.ID] = t.Application
	}
	return nil
}

// recovered lists what the pass did with a transaction it claimed.
func (k *takeovers) recovered(_ context.Context, e twopc.RecoveryEvent) {
	switch e.Action {
	case twopc.RecoveryRollForward, twopc.RecoveryRollBack, twopc.RecoveryCancelInitial, twopc.RecoveryExpire:
	default:
		return // the takeover itself, and what claims nothing
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.txns) == maxListed {
		k.notListed++
		return
	}
	r := recoveredTxn{ID: e.Txn.Hex(), State: string(e.State), MadeBy: k.makers[e.Txn], FinishedBy: k.application,
		Action: string(e.Action), Outcome: string(e.Outcome)}
	if e.Err != nil {
		r.Error = e.Err.Error()
	}
	k.txns = append(k.txns, r)
}

// take returns what the pass did, and forgets it, for the next pass.
func (k *takeovers) take() ([]recoveredTxn, int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	txns, n := k.txns, k.notListed
	if txns == nil {
		txns = []recoveredTxn{}
	}
	k.makers, k.txns, k.notListed = map[bson.ObjectID]string{}, nil, 0
	return txns, n
}

func runRecover(ctx context.Context, cl *cli, cmd *command, args []string) error {
	fs := cl.flagSet(cmd)
	var g globals
	g.register(fs, withApplication|withLedgers)
	watch := fs.Bool("watch", false, "make a pass every --interval until SIGINT or SIGTERM")
	interval := fs.Duration("interval", twopc.DefaultInterval, "the time between passes, with --watch")
	batch := fs.Int("batch", twopc.DefaultRecoveryBatch, "how many stale transactions a pass reads at a time")
	minLease := fs.Duration("min-lease", defaultMinLease, "take over no transaction untouched for less than this, whatever its recorded lease")
	quiet := fs.Bool("quiet", false, "no progress on stderr")
	archive := fs.String("archive", "", "the archive collection of transactions recorded with one (WithHistory); without it, only those recorded for removal are removed")
	if _, err := cl.parse(cmd, fs, args, 0, 0); err != nil {
		return err
	}
	switch {
	case *interval <= 0:
		return cl.usage(cmd, fs, "--interval must be positive")
	case *batch <= 0:
		return cl.usage(cmd, fs, "--batch must be positive")
	case *minLease <= 0:
		return cl.usage(cmd, fs, "--min-lease must be positive")
	}
	cn, err := g.connect(ctx, cl)
	if err != nil {
		return err
	}
	defer cn.close()
	var steps stepCounter
	took := &takeovers{application: g.application, makers: map[bson.ObjectID]string{}}
	opts := []twopc.Option{
		twopc.WithStaleAfter(*minLease),
		twopc.WithStepHook(func(ctx context.Context, step twopc.Step, t *twopc.Txn) error {
			_ = took.hook(ctx, step, t)
			return steps.hook(ctx, step, t)
		}),
		twopc.WithObserver(twopc.Observer{Recovery: took.recovered}),
	}
	if *archive != "" {
		// The time to keep is each transaction's own, recorded in it; the
		// tool creates no transaction here, so its own keep is unused.
		opts = append(opts, twopc.WithHistory(time.Hour, cn.db.Collection(*archive)))
	}
	c, err := cn.coordinator(opts...)
	if err != nil {
		return err
	}
	defer func() { _ = closeCoordinator(c) }()
	r := twopc.NewRecoverer(c, twopc.WithBatch(*batch))

	pass := func() (recoverReport, error) {
		steps.reset()
		took.take()
		p := startProgress(cl.stderr, *quiet, "recover", steps.String)
		start := time.Now()
		before, nowErr := cn.serverNow(ctx)
		rep, err := r.RecoverOnce(ctx)
		out := recoverReport{Started: start, RolledForward: rep.RolledForward, Settled: rep.Settled,
			RolledBack: rep.RolledBack, Canceled: rep.Canceled, Expired: rep.Expired, Skipped: rep.Skipped, Failed: rep.Failed,
			Removed: rep.Removed, Finished: rep.Finished()}
		out.Transactions, out.NotListed = took.take()
		out.MinLeaseSkipped, out.Waiting, out.minLease = []floorSkip{}, []waitingTxn{}, *minLease
		if nowErr == nil {
			nowErr = out.leftForLease(ctx, cn, before)
		}
		if err == nil {
			err = nowErr
		}
		p.end()
		out.took = time.Since(start)
		out.Duration = seconds(out.took)
		if err != nil {
			out.Error = err.Error()
		}
		return out, err
	}
	if !*watch {
		rep, err := pass()
		if exitCode(err) == exitUsage {
			return err
		}
		if g.json {
			if jerr := cl.printJSON(rep); jerr != nil {
				return jerr
			}
		} else {
			rep.print(cl.stdout)
		}
		if err != nil && errors.Is(err, twopc.ErrUnknownLedger) {
			return refused(fmt.Errorf("%w (give every ledger with --ledger NAME=COLLECTION or NAME=mongodb://HOST:PORT/DB.COLLECTION)", err))
		}
		return err
	}

	t := time.NewTicker(*interval)
	defer t.Stop()
	for n := 1; ; n++ {
		rep, err := pass()
		if ctx.Err() != nil {
			return nil // stopped by a signal: not a failure
		}
		if g.json {
			if err := cl.printJSONLine(rep); err != nil {
				return err
			}
		} else {
			fmt.Fprintf(cl.stdout, "pass %d, %s: ", n, timestamp(rep.Started))
			rep.print(cl.stdout)
		}
		if err != nil {
			fmt.Fprintf(cl.stderr, "twopc recover: pass %d: %v\n", n, err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// defaultMinLease is the default --min-lease: short enough that each
// transaction is judged by the lease recorded in it (the library's
// default StaleAfter is a minute), long enough for the tool's own leg
// writes after a takeover (half of it) on a slow server.
const defaultMinLease = 10 * time.Second

// humanListed bounds the transactions human output lists of a pass.
const humanListed = 20

// actionWords say what a pass did to a transaction it claimed.
var actionWords = map[string]string{
	string(twopc.RecoveryRollForward):   "taken over by %s, rolled forward",
	string(twopc.RecoveryRollBack):      "taken over by %s, rolled back",
	string(twopc.RecoveryCancelInitial): "taken over by %s, canceled",
	string(twopc.RecoveryExpire):        "expired, voided by %s",
}

func (r recoverReport) print(w io.Writer) {
	fmt.Fprintf(w, "finished %d (rolled forward %d, settled %d, rolled back %d, canceled %d, holds expired %d); skipped %d, failed %d; archived or removed %d; took %v\n",
		r.Finished, r.RolledForward, r.Settled, r.RolledBack, r.Canceled, r.Expired, r.Skipped, r.Failed, r.Removed, r.took.Round(time.Millisecond))
	for i, t := range r.Transactions {
		if i == humanListed {
			fmt.Fprintf(w, "  and %d more (--json lists them)\n", len(r.Transactions)-humanListed+r.NotListed)
			break
		}
		did := fmt.Sprintf(actionWords[t.Action], appName(t.FinishedBy))
		switch twopc.Outcome(t.Outcome) {
		case twopc.OutcomeNotMoved:
			did += ": not moved, another process finished it first"
		case twopc.OutcomeError:
			did += ": failed, " + t.Error
		}
		fmt.Fprintf(w, "  %s (%s, made by %s): %s\n", t.ID, t.State, appName(t.MadeBy), did)
	}
	if len(r.Transactions) <= humanListed && r.NotListed > 0 {
		fmt.Fprintf(w, "  and %d more\n", r.NotListed)
	}
	floor := map[string]bool{}
	for i, t := range r.MinLeaseSkipped {
		floor[t.ID] = true
		if i == humanListed {
			fmt.Fprintf(w, "  and %d more left by --min-lease (--json lists them)\n", len(r.MinLeaseSkipped)-humanListed)
			break
		}
		fmt.Fprintf(w, "  left by --min-lease %v: %s (%s, application %s): untouched for %v, past its recorded lease (%v) but not --min-lease; "+
			"a pass takes it over from %s (in %v, by the server's clock), or give a lower --min-lease\n",
			r.minLease, t.ID, t.State, appName(t.Application), t.untouched.Round(100*time.Millisecond), t.lease,
			timestamp(t.eligibleAt), until(r.end, t.eligibleAt))
	}
	listed := 0
	for _, t := range r.Waiting {
		if floor[t.ID] {
			continue
		}
		if listed == humanListed {
			fmt.Fprintf(w, "  and more left for their lease (--json lists them)\n")
			break
		}
		listed++
		fmt.Fprintf(w, "  left for its lease: %s (%s, application %s): %s\n", t.ID, t.State, appName(t.Application), t.lease.words(r.end))
	}
}
