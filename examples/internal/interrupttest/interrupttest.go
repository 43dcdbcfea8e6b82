// Package interrupttest runs the commands that run until interrupted
// (cmd/banks -serve, cmd/devserver, cmd/metrics) as a user does, built or
// through make, and interrupts them as Ctrl-C does, for their tests.
package interrupttest

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// BuildCommand builds the command of the package under test (the test's
// working directory) into dir, where make's
// go build then finds it up to date, and returns its path.
func BuildCommand(t *testing.T, dir string) string {
	t.Helper()
	wd, err := os.Getwd()
	require.NoError(t, err)
	bin := filepath.Join(dir, filepath.Base(wd))
	out, err := exec.CommandContext(t.Context(), "go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

// MakeCommand returns make running target of the repository's Makefile
// with vars, building into dir.
func MakeCommand(t *testing.T, dir, target string, vars ...string) []string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	require.NoError(t, err)
	require.FileExists(t, filepath.Join(root, "Makefile"))
	_, err = exec.LookPath("make")
	require.NoError(t, err, "this test runs make, as a user does")
	return append([]string{"make", "-s", "-C", root, target, "BIN=" + dir}, vars...)
}

// Output is a strings.Builder that a command's output (its process, or
// its goroutines) and the test may use at the same time.
type Output struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *Output) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *Output) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Interrupt starts args in a process group of its own, reads its standard
// output until a line matches ready, then sends SIGINT to the group, as
// Ctrl-C in a terminal does to the foreground job, and waits for it to
// end. It returns everything printed (standard output and error) and how
// the process ended.
func Interrupt(t *testing.T, ready *regexp.Regexp, args ...string) (string, *os.ProcessState) {
	t.Helper()
	return InterruptAfter(t, ready, nil, args...)
}

// InterruptAfter is Interrupt, calling use with the line that matched
// ready (when use is not nil) before it sends SIGINT: use works with the
// running command.
func InterruptAfter(t *testing.T, ready *regexp.Regexp, use func(line string), args ...string) (string, *os.ProcessState) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	// Not the flags of a make the tests run under (make test).
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "MAKEFLAGS" && k != "MFLAGS" && k != "MAKELEVEL" {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out Output
	cmd.Stderr = &out
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })

	lines := bufio.NewReader(stdout)
	for {
		line, err := lines.ReadString('\n')
		_, _ = out.Write([]byte(line))
		if ready.MatchString(line) {
			if use != nil {
				use(line)
			}
			break
		}
		if err != nil {
			_ = cmd.Wait()
			require.NoError(t, err, "ended before it was ready (%v):\n%s", cmd.ProcessState, out.String())
		}
	}
	require.NoError(t, syscall.Kill(-cmd.Process.Pid, syscall.SIGINT))
	_, _ = io.Copy(&out, lines)
	err = cmd.Wait()
	require.NoError(t, ctx.Err(), "still running after SIGINT:\n%s", out.String())
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		require.NoError(t, err)
	}
	return out.String(), cmd.ProcessState
}

// makeWaitRace matches the lines GNU make (4.3 here) prints when its own
// SIGINT handler waits for a child that the wait it interrupted had
// already reaped: "wait: No child processes. Stop.", then "Waiting for
// unfinished jobs...." and the first line again, and it exits 2. It
// happens when the command exits on the signal before make has run its
// handler (a loaded machine: make test's parts at nice 10), whatever the
// command and the Makefile do; seen in two runs of make test on
// 2026-11-29. The command's own clean exit is checked by running it
// without make.
var makeWaitRace = regexp.MustCompile(`(?m)^make: \*\*\* (wait: No child processes\.  Stop\.|Waiting for unfinished jobs\.\.\.\.)\n?`)

// RequireMakeQuiet checks how make ended after SIGINT to its process
// group: it reports no error (the command exited 0), and it either exited
// 0 or, as every interrupted make does, ended by the signal itself. GNU
// make's own race between its signal handler and its wait (makeWaitRace)
// is the one report allowed, with the status 2 it ends make with.
func RequireMakeQuiet(t *testing.T, out string, state *os.ProcessState) {
	t.Helper()
	ws := state.Sys().(syscall.WaitStatus)
	rest := makeWaitRace.ReplaceAllString(out, "")
	if rest != out {
		t.Logf("GNU make's race between its SIGINT handler and its wait (makeWaitRace):\n%s", out)
		require.NotContains(t, rest, "make: ***", "make reports no other error")
		require.True(t, ws.Exited() && ws.ExitStatus() == 2, "make ended by %v:\n%s", state, out)
		return
	}
	require.NotContains(t, out, "make: ***", "make reports no error")
	require.True(t, ws.Exited() && ws.ExitStatus() == 0 || ws.Signaled() && ws.Signal() == syscall.SIGINT,
		"make ended by %v:\n%s", state, out)
}
