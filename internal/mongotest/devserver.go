package mongotest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// DevServer is a dev server process of the test's own, for tests that stop
// and restart a server on the same data directory.
type DevServer struct {
	// URI is the connection string of the server's front.
	URI string
	// Faults drives the server's fault-injecting front.
	Faults *Faults

	cmd  *exec.Cmd
	done chan error
}

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
)

// EnvDevServerBinary names a dev server binary built from this tree
// (examples/cmd/devserver) for the harness to start instead of building
// its own: make test builds it once for all its test binaries.
const EnvDevServerBinary = "TWOPC_DEVSERVER_BIN"

// devServerBinary builds the dev server once per test binary, from the
// examples module next to this one, unless TWOPC_DEVSERVER_BIN names one.
// The Go build cache makes later builds in other packages of the same `go
// test` run fast.
func devServerBinary(ctx context.Context) (string, error) {
	buildOnce.Do(func() {
		if bin := os.Getenv(EnvDevServerBinary); bin != "" {
			if _, err := os.Stat(bin); err != nil {
				buildErr = fmt.Errorf("%s: %w", EnvDevServerBinary, err)
				return
			}
			binary = bin
			return
		}
		_, file, _, _ := runtime.Caller(0)
		examples := filepath.Join(filepath.Dir(file), "..", "..", "examples")
		dir, err := os.MkdirTemp("", "twopc-devserver-bin-")
		if err != nil {
			buildErr = err
			return
		}
		extraStops = append(extraStops, func() error { return os.RemoveAll(dir) })
		binary = filepath.Join(dir, "devserver")
		cmd := exec.CommandContext(ctx, "go", "build", "-o", binary, "./cmd/devserver")
		cmd.Dir = examples
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("build dev server in %s: %w\n%s", examples, err, out)
		}
	})
	return binary, buildErr
}

// StartDevServer starts a dev server of the caller's own on addr (a free
// loopback port if addr is ""), with its data in dir (a fresh temporary
// directory if dir is ""). Stop it with Stop; starting another on the same
// addr and dir finds the same data where clients left it.
func StartDevServer(ctx context.Context, addr, dir string) (*DevServer, error) {
	bin, err := devServerBinary(ctx)
	if err != nil {
		return nil, err
	}
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	args := []string{"-addr", addr, "-control", "127.0.0.1:0"}
	if dir != "" {
		args = append(args, "-dir", dir)
	}
	if pause := os.Getenv("TWOPC_STATEMENT_PAUSE"); pause != "" {
		// For randomized runs: the front pauses a write between its
		// statements (and a multi-document one between its documents) for
		// a random time below pause, with its lock released, so other
		// clients' requests land there more often; TWOPC_STATEMENT_SEED
		// seeds the pauses (default 1).
		seed := os.Getenv("TWOPC_STATEMENT_SEED")
		if seed == "" {
			seed = "1"
		}
		args = append(args, "-statement-pause", pause, "-seed", seed)
	}
	if profile := os.Getenv("TWOPC_DEVSERVER_CPUPROFILE"); profile != "" {
		// For diagnosis: the server writes its CPU profile there when it
		// stops. Every dev server of the run writes to the same file.
		args = append(args, "-cpuprofile", profile)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stderr = os.Stderr
	setParentDeathSignal(cmd)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start dev server: %w", err)
	}
	s := &DevServer{cmd: cmd, done: make(chan error, 1)}
	lines := make(chan string, 2)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		_, _ = io.Copy(io.Discard, stdout)
		s.done <- cmd.Wait()
	}()
	read := func(what string) (string, error) {
		select {
		case l, ok := <-lines:
			if !ok {
				return "", fmt.Errorf("dev server exited before printing its %s", what)
			}
			return l, nil
		case <-ctx.Done():
			_ = cmd.Process.Kill()
			return "", fmt.Errorf("dev server did not print its %s: %w", what, ctx.Err())
		}
	}
	uri, err := read("URI")
	if err != nil {
		return nil, err
	}
	control, err := read("control address")
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(uri, "mongodb://") || !strings.HasPrefix(control, "control ") {
		_ = cmd.Process.Kill()
		return nil, fmt.Errorf("dev server printed %q, %q", uri, control)
	}
	s.URI = uri
	s.Faults = &Faults{base: strings.TrimPrefix(control, "control "), pid: cmd.Process.Pid}
	return s, nil
}

// Addr returns the host:port the server's front listens on.
func (s *DevServer) Addr() string {
	return strings.TrimSuffix(strings.TrimPrefix(s.URI, "mongodb://"), "/")
}

// Server returns s as a Server, for helpers that take one.
func (s *DevServer) Server() *Server {
	return &Server{Backend: BackendDevServer, URI: s.URI, Faults: s.Faults}
}

// Stop stops the server with SIGTERM and waits for it to exit.
func (s *DevServer) Stop() error {
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	select {
	case err := <-s.done:
		return err
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		return fmt.Errorf("dev server did not stop within 30s of SIGTERM; killed")
	}
}

func startDevServer(ctx context.Context, dir string) (*Server, error) {
	s, err := StartDevServer(ctx, "", dir)
	if err != nil {
		return nil, err
	}
	return &Server{Backend: BackendDevServer, URI: s.URI, Faults: s.Faults, stop: s.Stop}, nil
}

var (
	faultOnce   sync.Once
	faultServer *Server
	faultErr    error
)

// FaultServer returns a server with a fault-injecting front: the shared
// server when it is the dev server, otherwise a dev server of this test
// binary's own, started on first use and stopped by Main.
func FaultServer(tb testing.TB) *Server {
	tb.Helper()
	if s := Shared(tb); s.Faults != nil {
		return s
	}
	faultOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		faultServer, faultErr = startDevServer(ctx, "")
		if faultErr == nil {
			extraStops = append(extraStops, faultServer.stop)
		}
	})
	if faultErr != nil {
		tb.Fatalf("mongotest: no fault server: %v", faultErr)
	}
	return faultServer
}
