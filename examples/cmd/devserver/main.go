// Command devserver runs a MongoDB-compatible development server: an
// embedded FerretDB (SQLite storage) behind a front that lets one request
// through at a time, which makes single-document writes atomic.
//
// Usage:
//
//	devserver [-addr 127.0.0.1:27017] [-dir DIR] [-v] [-control ADDR] [-seed N] [-fsync] [-cpuprofile FILE]
//
// Once the server accepts connections, the first line on standard output is
// the front's URI, exactly "mongodb://HOST:PORT/". With -control, the second
// line is "control http://HOST:PORT", the address of the fault injection API
// (see devserver.ControlHandler), which also reports the server's own time
// by command and collection (GET /work). -cpuprofile writes the server's
// CPU profile when it stops; tests started through internal/mongotest
// pass it when TWOPC_DEVSERVER_CPUPROFILE names a file. Nothing else is written to standard
// output; logs go to standard error. It runs on one processor
// (GOMAXPROCS 1) unless the environment sets GOMAXPROCS: the front serves
// one request at a time, and a second processor cost more processor time
// for no less wall time. SIGINT or SIGTERM stops the server
// cleanly with exit status 0. Killing it outright is fine too: data written
// to a -dir survives, only a temporary directory is left behind.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/twopc/twopc/examples/devserver"
)

func main() {
	// The front lets one request through at a time, so a second processor
	// serves the server only for its garbage collector and idle spinning:
	// with one, BenchmarkServerTransactionInsert's library upsert and
	// BenchmarkServerTransactionUpdate's commit cost the server 3 to 16%
	// less processor time a statement (srv-cpu-ms/op), in about the same
	// time (ns/op within 12% faster and 4% slower; 2026-11-29, two runs
	// each). A GOMAXPROCS in the environment is kept.
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "devserver:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("devserver", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:27017", "listen `address` of the front clients connect to; port 0 picks a free one")
	dir := fs.String("dir", "", "data `directory`, kept at exit (default: a fresh temporary directory removed at exit)")
	verbose := fs.Bool("v", false, "log FerretDB's and the front's activity, down to every request and reply, to standard error")
	control := fs.String("control", "", "serve the fault injection HTTP API on this `address`, such as 127.0.0.1:0")
	seed := fs.Uint64("seed", 0, "seed of the fault random source (0: random)")
	fsync := fs.Bool("fsync", false, "flush every SQLite commit to disk (slower; only matters for OS crashes)")
	pause := fs.Duration("statement-pause", 0, "pause a write command between its statements, and a multi-document one between its documents, for a random time below this (seeded by -seed), with the lock released")
	cpuProfile := fs.String("cpuprofile", "", "write the server's CPU profile (FerretDB's and the front's) to `file` when it stops; read it with go tool pprof")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %q", fs.Args())
	}

	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			_ = f.Close()
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer func() {
			pprof.StopCPUProfile()
			if err := f.Close(); err != nil {
				fmt.Fprintln(stderr, "devserver: cpu profile:", err)
			}
		}()
	}

	// Without -v, the server logs only errors and the front's warnings.
	var serverLogger *slog.Logger
	if *verbose {
		serverLogger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	srv, err := devserver.Start(ctx, devserver.Config{
		Addr:           *addr,
		Dir:            *dir,
		Logger:         serverLogger,
		Seed:           *seed,
		Fsync:          *fsync,
		StatementPause: *pause,
	})
	if err != nil {
		return err
	}
	defer srv.Close()

	var ctl *http.Server
	var ctlDone chan error
	var ctlLn net.Listener
	if *control != "" {
		ctlLn, err = net.Listen("tcp", *control)
		if err != nil {
			return fmt.Errorf("control API listening on %s: %w", *control, err)
		}
		ctl = &http.Server{
			Handler:           devserver.ControlHandler(srv.Front()),
			ReadHeaderTimeout: 10 * time.Second,
			ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		}
		ctlDone = make(chan error, 1)
		go func() { ctlDone <- ctl.Serve(ctlLn) }()
	}

	if _, err := fmt.Fprintln(stdout, srv.URI()); err != nil {
		return fmt.Errorf("writing URI: %w", err)
	}
	if ctl != nil {
		if _, err := fmt.Fprintf(stdout, "control http://%s\n", ctlLn.Addr()); err != nil {
			return fmt.Errorf("writing control address: %w", err)
		}
	}

	select {
	case <-ctx.Done():
	case err := <-ctlDone:
		return fmt.Errorf("control API: %w", err)
	}
	stop() // a second signal now kills the process

	var errs []error
	if ctl != nil {
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := ctl.Shutdown(shutdownCtx); err != nil {
			errs = append(errs, fmt.Errorf("stopping control API: %w", err))
		}
	}
	if err := srv.Close(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
