package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

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
its expiry (WithExpiry, by the server's clock), and removes the fences
whose retention has passed. It prints
what the pass did; progress goes to stderr.

A transaction's lease is the longest StaleAfter of the processes that
claimed it, recorded in it, so the tool judges each transaction by the
lease its own processes set, never sooner than --min-lease. --min-lease
is also the tool's own StaleAfter while it drives a transaction it took
over: its leg writes must finish within half of it.

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
	Unfenced      int       `json:"unfenced"`
	Removed       int       `json:"removed"`
	Finished      int       `json:"finished"`
	Error         string    `json:"error,omitempty"`
	took          time.Duration
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
	opts := []twopc.Option{twopc.WithStaleAfter(*minLease), twopc.WithStepHook(steps.hook)}
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
		p := startProgress(cl.stderr, *quiet, "recover", steps.String)
		start := time.Now()
		rep, err := r.RecoverOnce(ctx)
		p.end()
		out := recoverReport{Started: start, RolledForward: rep.RolledForward, Settled: rep.Settled,
			RolledBack: rep.RolledBack, Canceled: rep.Canceled, Expired: rep.Expired, Skipped: rep.Skipped, Failed: rep.Failed,
			Unfenced: rep.Unfenced, Removed: rep.Removed, Finished: rep.Finished(), took: time.Since(start)}
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

func (r recoverReport) print(w io.Writer) {
	fmt.Fprintf(w, "finished %d (rolled forward %d, settled %d, rolled back %d, canceled %d, holds expired %d); skipped %d, failed %d; fences removed for %d; archived or removed %d; took %v\n",
		r.Finished, r.RolledForward, r.Settled, r.RolledBack, r.Canceled, r.Expired, r.Skipped, r.Failed, r.Unfenced, r.Removed, r.took.Round(time.Millisecond))
}
