package devserver_test

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/twopc/twopc/examples/devserver"
)

var byID = bson.D{{Key: "_id", Value: 1}}

func TestDropBeforeForward(t *testing.T) {
	s := startServer(t, devserver.Config{})
	coll := collection(t, connect(t, s.URI()), bson.D{{Key: "_id", Value: 1}, {Key: "n", Value: 0}})

	_, err := s.Front().AddFault(devserver.Fault{Command: "update", Kind: devserver.DropBeforeForward})
	require.NoError(t, err)

	_, err = coll.UpdateOne(t.Context(), byID, inc)
	require.Error(t, err)
	assert.True(t, mongo.IsNetworkError(err), "want a network error, got %v", err)
	assert.Equal(t, uint64(1), s.Front().Stats().DropBeforeForward)

	s.Front().ClearFaults()
	assert.Equal(t, int32(0), field(t, coll, 1, "n"), "the dropped update must not be applied")
}

func TestDropAfterForward(t *testing.T) {
	s := startServer(t, devserver.Config{})
	coll := collection(t, connect(t, s.URI()), bson.D{{Key: "_id", Value: 1}, {Key: "n", Value: 0}})

	_, err := s.Front().AddFault(devserver.Fault{Command: "update", Kind: devserver.DropAfterForward})
	require.NoError(t, err)

	_, err = coll.UpdateOne(t.Context(), byID, inc)
	require.Error(t, err)
	assert.True(t, mongo.IsNetworkError(err), "want a network error, got %v", err)
	assert.Equal(t, uint64(1), s.Front().Stats().DropAfterForward)

	s.Front().ClearFaults()
	assert.Equal(t, int32(1), field(t, coll, 1, "n"), "the update must be applied although its reply was dropped")
}

// TestDelay checks that a delayed reply makes a client time out although the
// write is applied, and that other requests go through meanwhile.
func TestDelay(t *testing.T) {
	s := startServer(t, devserver.Config{})
	coll := collection(t, connect(t, s.URI()), bson.D{{Key: "_id", Value: 1}, {Key: "n", Value: 0}})

	// Far longer than the client's timeout; Close ends the wait.
	_, err := s.Front().AddFault(devserver.Fault{Command: "update", Kind: devserver.Delay, Delay: time.Minute})
	require.NoError(t, err)

	delayed := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		_, err := coll.UpdateOne(ctx, byID, inc)
		delayed <- err
	}()

	require.Eventually(t, func() bool { return s.Front().Stats().Delay == 1 }, 30*time.Second, 5*time.Millisecond)
	// The reply is still held back, yet a read through the front succeeds
	// and already sees the write.
	other := collection(t, connect(t, s.URI()))
	assert.Equal(t, int32(1), field(t, other, 1, "n"))

	err = <-delayed
	require.Error(t, err)
	assert.True(t, mongo.IsTimeout(err), "want a timeout, got %v", err)
	assert.Equal(t, int32(1), field(t, other, 1, "n"))
}

// TestFaultsApplyToWholeWriteCommand checks that a fault rule applies to a
// write command of several statements as a whole, although the front runs
// it statement by statement: dropped before, none of its statements runs;
// dropped after, all of them ran; delayed, all of them ran before the
// reply is held back.
func TestFaultsApplyToWholeWriteCommand(t *testing.T) {
	for _, kind := range []devserver.Kind{devserver.DropBeforeForward, devserver.DropAfterForward, devserver.Delay} {
		t.Run(kind.String(), func(t *testing.T) {
			s := startServer(t, devserver.Config{})
			c := connect(t, s.URI())
			var docs []any
			var models []mongo.WriteModel
			for i := range 3 {
				docs = append(docs, bson.D{{Key: "_id", Value: i}, {Key: "n", Value: 0}})
				models = append(models, mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: i}}).SetUpdate(inc))
			}
			coll := collection(t, c, docs...)
			// Far longer than the test: Close ends the wait.
			_, err := s.Front().AddFault(devserver.Fault{Command: "update", Kind: kind, Delay: time.Hour, Count: 1})
			require.NoError(t, err)

			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := coll.BulkWrite(ctx, models) // one update command of 3 statements
				done <- err
			}()

			want := int32(1)
			other := collection(t, connect(t, s.URI()))
			switch kind {
			case devserver.DropBeforeForward:
				err = <-done
				assert.True(t, mongo.IsNetworkError(err), "want a network error, got %v", err)
				assert.Equal(t, uint64(1), s.Front().Stats().DropBeforeForward)
				want = 0
			case devserver.DropAfterForward:
				err = <-done
				assert.True(t, mongo.IsNetworkError(err), "want a network error, got %v", err)
				assert.Equal(t, uint64(1), s.Front().Stats().DropAfterForward)
			case devserver.Delay:
				require.Eventually(t, func() bool { return s.Front().Stats().Delay == 1 }, 30*time.Second, 5*time.Millisecond)
				for i := range 3 { // the reply is held back; every statement ran
					assert.Equal(t, int32(1), field(t, other, i, "n"), "document %d", i)
				}
				cancel()
				assert.ErrorIs(t, <-done, context.Canceled)
			}
			for i := range 3 {
				assert.Equal(t, want, field(t, other, i, "n"), "document %d", i)
			}
		})
	}
}

func TestCountExhausts(t *testing.T) {
	s := startServer(t, devserver.Config{})
	coll := collection(t, connect(t, s.URI()), bson.D{{Key: "_id", Value: 1}, {Key: "n", Value: 0}})

	_, err := s.Front().AddFault(devserver.Fault{Command: "update", Kind: devserver.DropBeforeForward, Count: 2})
	require.NoError(t, err)

	for i := range 2 {
		_, err := coll.UpdateOne(t.Context(), byID, inc)
		require.Error(t, err, "update %d", i)
	}
	assert.Empty(t, s.Front().Faults(), "an exhausted rule is removed")
	_, err = coll.UpdateOne(t.Context(), byID, inc)
	require.NoError(t, err)

	assert.Equal(t, int32(1), field(t, coll, 1, "n"))
	assert.Equal(t, uint64(2), s.Front().Stats().DropBeforeForward)
}

// TestHandshakeIsProtected checks that a catch-all rule spares handshake
// and monitoring commands, and that a rule naming one applies to it.
func TestHandshakeIsProtected(t *testing.T) {
	s := startServer(t, devserver.Config{})
	_, err := s.Front().AddFault(devserver.Fault{Kind: devserver.DropBeforeForward})
	require.NoError(t, err)

	c := connect(t, s.URI())
	require.NoError(t, c.Ping(t.Context(), nil), "hello and ping must get through a catch-all rule")
	_, err = c.Database("devserver").Collection(t.Name()).InsertOne(t.Context(), bson.D{{Key: "n", Value: 1}})
	require.Error(t, err, "insert must be dropped")

	s.Front().ClearFaults()
	_, err = s.Front().AddFault(devserver.Fault{Command: "PING", Kind: devserver.DropBeforeForward, Count: 1})
	require.NoError(t, err)
	require.Error(t, c.Ping(t.Context(), nil), "a rule naming ping applies to it, whatever the case")
	require.NoError(t, c.Ping(t.Context(), nil))
}

func TestFaultValidation(t *testing.T) {
	front := startServer(t, devserver.Config{}).Front()
	for name, f := range map[string]devserver.Fault{
		"no kind":              {Command: "update"},
		"negative probability": {Kind: devserver.DropAfterForward, Probability: -0.1},
		"probability above 1":  {Kind: devserver.DropAfterForward, Probability: 1.5},
		"negative count":       {Kind: devserver.DropAfterForward, Count: -1},
		"delay without delay":  {Kind: devserver.Delay},
	} {
		_, err := front.AddFault(f)
		assert.Error(t, err, name)
	}
	assert.Empty(t, front.Faults())
}

// frontWarnings is a slog handler that hands the front's warnings to a
// channel and drops everything else (FerretDB's logs among it).
type frontWarnings chan slog.Record

func (r frontWarnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (r frontWarnings) Handle(_ context.Context, rec slog.Record) error {
	if !strings.HasPrefix(rec.Message, "front ") {
		return nil
	}
	select {
	case r <- rec:
	default: // the test has what it waits for
	}
	return nil
}

// awaitStall waits for the front's warning that the backend has not
// answered a request of command ("": any).
func awaitStall(ctx context.Context, t *testing.T, logs frontWarnings, command string) {
	t.Helper()
	for {
		select {
		case rec := <-logs:
			if !strings.Contains(rec.Message, "has not answered") {
				continue
			}
			var got string
			rec.Attrs(func(a slog.Attr) bool {
				if a.Key == "command" {
					got = a.Value.String()
				}
				return true
			})
			if command == "" || got == command {
				return
			}
		case <-ctx.Done():
			t.Fatalf("no warning from the front about a %s the backend did not answer", command)
		}
	}
}

func (r frontWarnings) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r frontWarnings) WithGroup(string) slog.Handler      { return r }

// TestStallWarning: a backend that takes a request and never answers holds
// every client; the front says so in its log.
func TestStallWarning(t *testing.T) {
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = silent.Close() })
	accepted := make(chan net.Conn, 16)
	go func() {
		defer close(accepted)
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	t.Cleanup(func() {
		_ = silent.Close()
		for c := range accepted {
			_ = c.Close()
		}
	})

	logs := make(frontWarnings, 16)
	f, err := devserver.NewFront("127.0.0.1:0", silent.Addr().String(), devserver.FrontOptions{
		Logger:       slog.New(logs),
		StallWarning: 50 * time.Millisecond,
	})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, f.Close()) })

	// The driver's handshake goes to the silent backend.
	c := connect(t, f.URI())
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	go func() { _ = c.Ping(ctx, nil) }()
	awaitStall(ctx, t, logs, "")
}
