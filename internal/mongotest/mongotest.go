// Package mongotest hands integration tests a fresh database on a real
// MongoDB-compatible server.
//
// The server is chosen once per test binary, in this order:
//
//  1. MONGODB_URI, if set: used as it is.
//  2. A testcontainers-go MongoDB 8 container (single-node replica set), if a
//     Docker engine answers. If the container cannot start (the image
//     cannot be pulled: offline, a registry refusing), the harness logs why
//     and goes on to 3.
//  3. Otherwise the project's dev server (FerretDB behind a serializing wire
//     front, built from the examples module), started on a free loopback port,
//     shared by the tests of the binary and stopped when they end
//     (TWOPC_DEVSERVER_BIN, if set, names a binary built already).
//
// TWOPC_TEST_BACKEND=uri|docker|devserver forces a choice, with no fallback:
// TWOPC_TEST_BACKEND=docker fails, saying what to do, if the container
// cannot start. Tests never skip for want of a server: if the chosen
// backend cannot start, the test fails.
//
// TWOPC_TEST_SHARDED=1 (set only by the GitHub workflow's sharded job, with
// MONGODB_URI naming the routers of a cluster of two shards) says the
// server is a sharded cluster: NewDatabase then shards the collections the
// tests use (ShardedCollections) on {_id: "hashed"} in each fresh
// database, and the tests that need such a cluster run (RequireSharded);
// elsewhere they skip, saying where they run. RouterClients connects to
// each router apart.
//
// A test package uses it from TestMain:
//
//	func TestMain(m *testing.M) { mongotest.Main(m) }
//
// and then, in a test:
//
//	db := mongotest.NewDatabase(t)
package mongotest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Backend names, as logged and as accepted by TWOPC_TEST_BACKEND.
const (
	BackendURI       = "uri"
	BackendDocker    = "docker"
	BackendDevServer = "devserver"
)

// Server is a running server the tests of this binary share.
type Server struct {
	// Backend is one of BackendURI, BackendDocker, BackendDevServer.
	Backend string
	// URI is the connection string clients use.
	URI string
	// Faults drives the dev server's fault-injecting front. It is nil on
	// other backends.
	Faults *Faults

	stop func() error
}

var (
	extraStops []func() error // run by Main last: servers besides the shared one, the dev server's binary
	startOnce  sync.Once
	shared     *Server
	startErr   error
)

// Main runs the tests of a package and stops the shared server, if one was
// started, when they end. Call it from TestMain.
func Main(m *testing.M) {
	code := m.Run()
	if shared != nil && shared.stop != nil {
		if err := shared.stop(); err != nil {
			log.Printf("mongotest: stopping %s: %v", shared.Backend, err)
		}
	}
	for _, stop := range extraStops {
		if err := stop(); err != nil {
			log.Printf("mongotest: stopping a dev server: %v", err)
		}
	}
	os.Exit(code)
}

// MainWithURI is Main for packages whose runnable examples connect to
// MONGODB_URI: it starts the shared server before the tests and examples
// run and, if MONGODB_URI is unset, sets it to the server's URI for this
// process.
func MainWithURI(m *testing.M) {
	startOnce.Do(func() {
		shared, startErr = start()
	})
	if startErr != nil {
		log.Fatalf("mongotest: no server: %v", startErr)
	}
	log.Printf("mongotest: backend %s at %s", shared.Backend, redact(shared.URI))
	if os.Getenv("MONGODB_URI") == "" {
		_ = os.Setenv("MONGODB_URI", shared.URI)
	}
	Main(m)
}

// Shared returns the server for this test binary, starting it on first use.
// It fails the test if no server can be had.
func Shared(tb testing.TB) *Server {
	tb.Helper()
	startOnce.Do(func() {
		shared, startErr = start()
		if startErr == nil {
			log.Printf("mongotest: backend %s at %s", shared.Backend, redact(shared.URI))
		}
	})
	if startErr != nil {
		tb.Fatalf("mongotest: no server: %v", startErr)
	}
	return shared
}

func start() (*Server, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	return choose(ctx, os.Getenv, backends{
		dockerAnswers: dockerAnswers,
		container:     startContainer,
		devServer:     func(ctx context.Context) (*Server, error) { return startDevServer(ctx, "") },
		logf:          log.Printf,
	})
}

// backends are the ways choose can get a server; a test of choose
// replaces them.
type backends struct {
	dockerAnswers func(context.Context) bool
	container     func(context.Context) (*Server, error)
	devServer     func(context.Context) (*Server, error)
	logf          func(format string, args ...any)
}

// choose picks the server as the package documentation says, reading the
// environment through getenv. When Docker answers but the container
// cannot start (the image cannot be pulled: offline, a registry refusing)
// it logs why and falls back to the dev server, unless
// TWOPC_TEST_BACKEND=docker demands the container: then it fails, saying
// what to do.
func choose(ctx context.Context, getenv func(string) string, b backends) (*Server, error) {
	choice := getenv("TWOPC_TEST_BACKEND")
	uri := getenv("MONGODB_URI")
	switch {
	case choice == BackendURI || (choice == "" && uri != ""):
		if uri == "" {
			return nil, fmt.Errorf("TWOPC_TEST_BACKEND=uri but MONGODB_URI is empty")
		}
		return &Server{Backend: BackendURI, URI: uri}, nil
	case choice == BackendDocker:
		s, err := b.container(ctx)
		if err != nil {
			return nil, fmt.Errorf("TWOPC_TEST_BACKEND=docker: %w; make the image available (docker pull %s), "+
				"or set MONGODB_URI to a server, or unset TWOPC_TEST_BACKEND to fall back to the dev server", err, containerImage)
		}
		return s, nil
	case choice == BackendDevServer:
		return b.devServer(ctx)
	case choice != "":
		return nil, fmt.Errorf("TWOPC_TEST_BACKEND=%q: want uri, docker or devserver", choice)
	}
	if b.dockerAnswers(ctx) {
		s, err := b.container(ctx)
		if err == nil {
			return s, nil
		}
		b.logf("mongotest: Docker answers but the container did not start: %v; falling back to the dev server "+
			"(TWOPC_TEST_BACKEND=docker makes this an error)", err)
	}
	return b.devServer(ctx)
}

// Connect returns a client connected to the shared server, disconnected when
// the test ends. Options in opts are applied after the URI.
func Connect(tb testing.TB, opts ...*options.ClientOptions) *mongo.Client {
	tb.Helper()
	return ConnectURI(tb, Shared(tb).URI, opts...)
}

// ConnectURI is Connect for a server of the test's own.
func ConnectURI(tb testing.TB, uri string, opts ...*options.ClientOptions) *mongo.Client {
	tb.Helper()
	all := append([]*options.ClientOptions{options.Client().ApplyURI(uri)}, opts...)
	client, err := mongo.Connect(all...)
	if err != nil {
		tb.Fatalf("mongotest: connect: %v", err)
	}
	tb.Cleanup(func() {
		// Disconnect ends the client's sessions on a server it selects,
		// which waits up to the context for a server a test stopped; to
		// a server that answers it takes a round trip.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = client.Disconnect(ctx)
	})
	return client
}

// NewDatabaseOn is NewDatabase on server s.
func NewDatabaseOn(tb testing.TB, s *Server, opts ...*options.ClientOptions) *mongo.Database {
	tb.Helper()
	db := ConnectURI(tb, s.URI, opts...).Database(DatabaseName(tb))
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = db.Drop(ctx)
	})
	if shardedOn(s) {
		if err := shardDatabase(s, db.Name()); err != nil {
			tb.Fatalf("mongotest: sharding %s: %v", db.Name(), err)
		}
	}
	return db
}

// NewDatabase returns a database with a fresh random name on the shared
// server, reached through a client of its own, and drops it when the test
// ends. When Sharded, the database's ShardedCollections are sharded on
// {_id: "hashed"} first, their initial chunks spread over the shards.
func NewDatabase(tb testing.TB, opts ...*options.ClientOptions) *mongo.Database {
	tb.Helper()
	return NewDatabaseOn(tb, Shared(tb), opts...)
}

// DatabaseName returns a fresh database name derived from the test's name.
func DatabaseName(tb testing.TB) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, tb.Name())
	if len(name) > 40 {
		name = name[:40]
	}
	return "t_" + name + "_" + hex.EncodeToString(b[:])
}

func redact(uri string) string {
	at := strings.LastIndex(uri, "@")
	scheme := strings.Index(uri, "://")
	if at < 0 || scheme < 0 || at < scheme {
		return uri
	}
	return uri[:scheme+3] + "***" + uri[at:]
}
