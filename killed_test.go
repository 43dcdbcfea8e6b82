package twopc_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/twopc/twopc"
)

// Child processes: the test binary re-executed with TWOPC_CHILD set runs
// childMain instead of the tests (see TestMain).
const (
	envChild    = "TWOPC_CHILD" // "transfer", "recover", "repeat" (see repeatChild) or "subscribe" (subscribeChild)
	envURI      = "TWOPC_CHILD_URI"
	envDB       = "TWOPC_CHILD_DB"
	envApp      = "TWOPC_CHILD_APP"
	envAccounts = "TWOPC_CHILD_ACCOUNTS"
	envSeed     = "TWOPC_CHILD_SEED"
)

// childMain runs a coordinator in a child process: "transfer" makes random
// transfers until it is killed, printing a line after each; "recover" makes
// one recovery pass and prints its report. It returns the exit code.
func childMain(mode string) int {
	ctx := context.Background()
	client, err := mongo.Connect(options.Client().ApplyURI(os.Getenv(envURI)).SetRetryWrites(false))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	c, err := twopc.NewCoordinator(client.Database(os.Getenv(envDB)), twopc.WithApplication(os.Getenv(envApp)))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	switch mode {
	case "transfer":
		ids := strings.Split(os.Getenv(envAccounts), ",")
		seed, _ := strconv.ParseUint(os.Getenv(envSeed), 10, 64)
		rng := rand.New(rand.NewPCG(seed, 0))
		for n := 0; ; n++ {
			src, dst := ids[rng.IntN(len(ids))], ids[rng.IntN(len(ids))]
			if src == dst {
				continue
			}
			_, err := c.Transfer(ctx, src, dst, 1+rng.Int64N(100), twopc.WithKey(fmt.Sprintf("%s-%d", os.Getenv(envApp), n)))
			fmt.Printf("%d %v\n", n, err)
		}
	case "repeat":
		return repeatChild(c)
	case "subscribe":
		return subscribeChild(c)
	case "recover":
		rep, err := twopc.NewRecoverer(c).RecoverOnce(ctx)
		if err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			return 1
		}
		fmt.Printf("%+v\n", rep)
		return 0
	}
	fmt.Fprintln(os.Stderr, "child: unknown mode", mode)
	return 2
}

// startChild re-executes the test binary as a coordinator process.
func startChild(t *testing.T, b *bank, mode, app string, accounts []string, seed uint64) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(),
		envChild+"="+mode, envURI+"="+b.server.URI, envDB+"="+b.db.Name(), envApp+"="+app,
		envAccounts+"="+strings.Join(accounts, ","), envSeed+"="+strconv.FormatUint(seed, 10))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, bufio.NewScanner(out)
}

// TestKilledProcesses runs coordinators as child processes and kills them
// with SIGKILL at random moments mid-load (after a random number of
// transfers, while the next is under way and earlier ones are settling in
// the background); then a fresh process recovers, and the checker runs.
func TestKilledProcesses(t *testing.T) {
	b := newBank(t)
	seed := simSeeds()[0]
	rng := rand.New(rand.NewPCG(seed, 99))
	opening := map[string]int64{}
	var ids []string
	for i := 0; i < 6; i++ {
		id := fmt.Sprintf("acct-%d", i)
		ids = append(ids, id)
		opening[id] = 500
	}
	b.open(opening)

	const rounds, parallel = 3, 3
	kills := 0
	for round := 0; round < rounds; round++ {
		type child struct {
			cmd   *exec.Cmd
			lines *bufio.Scanner
			after int
		}
		var children []child
		for p := 0; p < parallel; p++ {
			app := fmt.Sprintf("proc-%d-%d", round, p)
			cmd, lines := startChild(t, b, "transfer", app, ids, seed+uint64(round*parallel+p))
			children = append(children, child{cmd, lines, 3 + rng.IntN(25)})
		}
		for _, ch := range children {
			for n := 0; n < ch.after; n++ {
				require.True(t, ch.lines.Scan(), "child stopped early: %v", ch.lines.Err())
				line := ch.lines.Text()
				require.Regexp(t, `^\d+ (<nil>|.*twopc: .*)$`, line, "a transfer failed with an unexpected error")
			}
			require.NoError(t, ch.cmd.Process.Kill())
			var exit *exec.ExitError
			require.True(t, errors.As(ch.cmd.Wait(), &exit), "killed")
			kills++
		}
	}

	unfinished := 0
	for _, d := range b.txns() {
		if !d.State.Final() {
			unfinished++
		}
	}
	t.Logf("seed %d: %d processes killed, %d transactions, %d left unfinished", seed, kills, len(b.txns()), unfinished)

	// Every coordinator is dead: their transactions are stale for anyone
	// who waits StaleAfter; backdate rather than wait.
	b.backdateAll(time.Hour)
	cmd, lines := startChild(t, b, "recover", "fresh-process", ids, 0)
	var report []string
	for lines.Scan() {
		report = append(report, lines.Text())
	}
	require.NoError(t, cmd.Wait(), "the recovering process failed")
	t.Logf("recovery: %s", strings.Join(report, " "))
	b.checkSettled(opening)
}
