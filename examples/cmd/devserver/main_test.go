package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// runMainEnv makes the test binary behave as the command, so the tests can
// run it as a child process.
const runMainEnv = "DEVSERVER_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// command returns the command with args, its standard output and standard
// error.
func command(t *testing.T, args ...string) (*exec.Cmd, *bufio.Reader, *strings.Builder) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), os.Args[0], args...)
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	stderr := new(strings.Builder)
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, bufio.NewReader(stdout), stderr
}

func TestContract(t *testing.T) {
	for _, sig := range []os.Signal{syscall.SIGTERM, os.Interrupt} {
		t.Run(sig.String(), func(t *testing.T) {
			cmd, stdout, stderr := command(t, "-addr", "127.0.0.1:0", "-control", "127.0.0.1:0")

			uri, err := stdout.ReadString('\n')
			require.NoError(t, err, "stderr: %s", stderr)
			require.Regexp(t, regexp.MustCompile(`^mongodb://127\.0\.0\.1:[0-9]+/\n$`), uri)
			control, err := stdout.ReadString('\n')
			require.NoError(t, err)
			require.Regexp(t, regexp.MustCompile(`^control http://127\.0\.0\.1:[0-9]+\n$`), control)

			// The server is ready as soon as the URI is printed.
			client, err := mongo.Connect(options.Client().ApplyURI(strings.TrimSpace(uri)))
			require.NoError(t, err)
			require.NoError(t, client.Ping(t.Context(), nil))
			require.NoError(t, client.Disconnect(t.Context()))

			req, err := http.NewRequestWithContext(t.Context(), "GET", strings.TrimPrefix(strings.TrimSpace(control), "control ")+"/stats", nil)
			require.NoError(t, err)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			var stats map[string]uint64
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&stats))
			require.NoError(t, resp.Body.Close())
			assert.NotZero(t, stats["forwarded"])

			require.NoError(t, cmd.Process.Signal(sig))
			rest, err := io.ReadAll(stdout)
			require.NoError(t, err)
			assert.Empty(t, string(rest), "nothing else on standard output")
			require.NoError(t, cmd.Wait(), "clean exit; stderr: %s", stderr)
			assert.Empty(t, stderr.String(), "quiet without -v")
		})
	}
}

func TestWithoutControl(t *testing.T) {
	cmd, stdout, stderr := command(t, "-addr", "127.0.0.1:0", "-dir", t.TempDir(), "-v")
	uri, err := stdout.ReadString('\n')
	require.NoError(t, err, "stderr: %s", stderr)
	require.True(t, strings.HasPrefix(uri, "mongodb://127.0.0.1:"), uri)

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	rest, err := io.ReadAll(stdout)
	require.NoError(t, err)
	assert.Empty(t, string(rest), "one line without -control")
	require.NoError(t, cmd.Wait())
	assert.Contains(t, stderr.String(), "Connection started", "-v shows FerretDB's logs on standard error")
}

// TestCPUProfile: -cpuprofile leaves a CPU profile in the file when the
// server stops.
func TestCPUProfile(t *testing.T) {
	profile := filepath.Join(t.TempDir(), "cpu.prof")
	cmd, stdout, stderr := command(t, "-addr", "127.0.0.1:0", "-cpuprofile", profile)
	uri, err := stdout.ReadString('\n')
	require.NoError(t, err, "stderr: %s", stderr)
	client, err := mongo.Connect(options.Client().ApplyURI(strings.TrimSpace(uri)))
	require.NoError(t, err)
	require.NoError(t, client.Ping(t.Context(), nil))
	require.NoError(t, client.Disconnect(t.Context()))

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	_, _ = io.ReadAll(stdout)
	require.NoError(t, cmd.Wait(), "stderr: %s", stderr)
	b, err := os.ReadFile(profile)
	require.NoError(t, err)
	require.Greater(t, len(b), 2)
	assert.Equal(t, []byte{0x1f, 0x8b}, b[:2], "a profile, gzipped as runtime/pprof writes it")
}

func TestBusyAddress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })

	cmd, stdout, stderr := command(t, "-addr", ln.Addr().String())
	out, err := io.ReadAll(stdout)
	require.NoError(t, err)
	assert.Empty(t, string(out), "no URI when the server cannot start")

	err = cmd.Wait()
	var exitErr *exec.ExitError
	require.ErrorAs(t, err, &exitErr)
	assert.Equal(t, 1, exitErr.ExitCode())
	assert.Contains(t, stderr.String(), "address already in use")
}

// TestKilledKeepsData checks that a parent may simply kill the server:
// writes acknowledged before are in -dir for the next run.
func TestKilledKeepsData(t *testing.T) {
	dir := t.TempDir()
	ping := func(uri string) *mongo.Client {
		client, err := mongo.Connect(options.Client().ApplyURI(strings.TrimSpace(uri)))
		require.NoError(t, err)
		t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
		return client
	}

	cmd, stdout, stderr := command(t, "-addr", "127.0.0.1:0", "-dir", dir)
	uri, err := stdout.ReadString('\n')
	require.NoError(t, err, "stderr: %s", stderr)
	coll := ping(uri).Database("cli").Collection("kill")
	_, err = coll.InsertOne(t.Context(), map[string]any{"_id": "kept"})
	require.NoError(t, err)
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()

	_, stdout, stderr = command(t, "-addr", "127.0.0.1:0", "-dir", dir)
	uri, err = stdout.ReadString('\n')
	require.NoError(t, err, "stderr: %s", stderr)
	n, err := ping(uri).Database("cli").Collection("kill").CountDocuments(t.Context(), map[string]any{"_id": "kept"})
	require.NoError(t, err)
	assert.Equal(t, int64(1), n)
}
