package devserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/FerretDB/FerretDB/ferretdb"
)

// Config configures a [Server].
type Config struct {
	// Addr is where the front listens, such as "127.0.0.1:27017";
	// "127.0.0.1:0" (or empty) picks a free loopback port.
	Addr string

	// Dir holds the data. If empty, a fresh temporary directory is used and
	// removed by Close. If set, it is created if missing and kept, so a later
	// Server with the same Dir sees the same data.
	Dir string

	// Logger receives FerretDB's and the front's logs. Nil means only
	// FerretDB's errors and the front's warnings, to standard error: FerretDB
	// logs every connection at info level and every failed command at warn
	// level with a dump of the reply, which includes the endSessions that
	// drivers send on Disconnect (FerretDB v1 does not implement it). Pass a
	// logger at debug level to see every request and reply, or one built on
	// [slog.DiscardHandler] for silence.
	Logger *slog.Logger

	// Seed seeds the front's fault random source; see [FrontOptions.Seed].
	Seed uint64

	// StallWarning is how long a request may be at FerretDB before the
	// front warns; see [FrontOptions.StallWarning].
	StallWarning time.Duration

	// StatementPause pauses a write command between its statements, and a
	// multi-document statement between its documents, for a random time
	// below it, with the front's lock released; see
	// [FrontOptions.StatementPause].
	StatementPause time.Duration

	// Fsync makes SQLite flush every commit to disk (FerretDB's default).
	// Without it (synchronous=OFF) writes are about 1.5 times as fast and
	// survive a clean stop or a killed process, but not an operating system
	// crash or power loss, which is fine for development data.
	Fsync bool
}

// Server is an embedded FerretDB (SQLite storage) behind a [Front] that
// serializes requests, which makes single-document writes atomic. Clients
// connect to the front, at [Server.URI]; FerretDB listens nowhere, and the
// front hands it each request in process.
type Server struct {
	dir     string
	front   *Front
	ferret  *ferretdb.FerretDB
	stop    context.CancelFunc
	done    chan struct{} // closed when FerretDB's Run returns
	tempDir string        // removed by Close; "" if the caller gave Dir

	closeOnce sync.Once
	closeErr  error
}

// newFerretDBMu serializes ferretdb.New, which writes to a package-level
// variable of FerretDB's (version.Get().Package) and would otherwise race
// when several Servers start at once.
var newFerretDBMu sync.Mutex

// Start starts FerretDB, serving only the front's in-process connections,
// and the front on cfg.Addr, and returns once the front answers. ctx bounds the start only; stop the server
// with [Server.Close].
func Start(ctx context.Context, cfg Config) (_ *Server, err error) {
	ferretLogger, frontLogger := cfg.Logger, cfg.Logger
	if cfg.Logger == nil {
		ferretLogger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
		frontLogger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	addr := cfg.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}

	s := &Server{done: make(chan struct{})}
	defer func() {
		if err != nil {
			err = errors.Join(err, s.Close())
		}
	}()

	dir, err := s.dataDir(cfg.Dir)
	if err != nil {
		return nil, err
	}
	s.dir = dir
	sqliteURL := &url.URL{Scheme: "file", Path: dir + "/"}
	if !cfg.Fsync {
		sqliteURL.RawQuery = url.Values{"_pragma": {"synchronous(OFF)"}}.Encode()
	}

	newFerretDBMu.Lock()
	s.ferret, err = ferretdb.New(&ferretdb.Config{
		Listener:  ferretdb.ListenerConfig{InProcess: true},
		Logger:    ferretLogger.With(slog.String("component", "ferretdb")),
		Handler:   "sqlite",
		SQLiteURL: sqliteURL.String(),
	})
	newFerretDBMu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("devserver: starting FerretDB on %s: %w", sqliteURL, err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	s.stop = stop
	go func() {
		defer close(s.done)
		_ = s.ferret.Run(runCtx) // always returns nil
	}()

	s.front, err = newFront(addr, "FerretDB in process", dialInProcess(s.ferret), FrontOptions{
		Seed:           cfg.Seed,
		Logger:         frontLogger.With(slog.String("component", "front")),
		StallWarning:   cfg.StallWarning,
		StatementPause: cfg.StatementPause,
	})
	if err != nil {
		return nil, err
	}
	if err := ping(ctx, s.front.Addr().String()); err != nil {
		return nil, fmt.Errorf("devserver: front or FerretDB not answering: %w", err)
	}
	return s, nil
}

// dataDir returns the absolute directory for the data, creating it (and
// recording a temporary one for removal) as needed.
func (s *Server) dataDir(dir string) (string, error) {
	if dir == "" {
		tmp, err := os.MkdirTemp("", "devserver-")
		if err != nil {
			return "", fmt.Errorf("devserver: creating data directory: %w", err)
		}
		s.tempDir = tmp
		return tmp, nil
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("devserver: data directory %s: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return "", fmt.Errorf("devserver: creating data directory: %w", err)
	}
	return abs, nil
}

// URI returns the mongodb:// connection string clients use: the front's.
func (s *Server) URI() string { return s.front.URI() }

// Dir returns the absolute path of the data directory.
func (s *Server) Dir() string { return s.dir }

// Front returns the server's front, to inject faults and read its stats.
func (s *Server) Front() *Front { return s.front }

// Close stops the front and FerretDB, waits for them to finish and removes
// the data directory if Start created it. It is safe to call more than once.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		var errs []error
		if s.front != nil {
			errs = append(errs, s.front.Close())
		}
		if s.stop != nil { // FerretDB is running
			s.stop()
			<-s.done
		}
		if s.tempDir != "" {
			if err := os.RemoveAll(s.tempDir); err != nil {
				errs = append(errs, fmt.Errorf("devserver: removing data directory: %w", err))
			}
		}
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// URIOrStart returns MONGODB_URI if it is set, with a stop that does
// nothing; otherwise it starts a dev server, quiet, and returns its URI and
// a stop that closes it. started says which: what the examples print.
func URIOrStart(ctx context.Context) (uri string, started bool, stop func() error, err error) {
	if uri := os.Getenv("MONGODB_URI"); uri != "" {
		return uri, false, func() error { return nil }, nil
	}
	srv, err := Start(ctx, Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return "", false, nil, fmt.Errorf("start dev server: %w", err)
	}
	return srv.URI(), true, srv.Close, nil
}
