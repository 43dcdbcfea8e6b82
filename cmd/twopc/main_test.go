package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/internal/mongotest"
	"github.com/twopc/twopc/internal/schema"
)

func TestMain(m *testing.M) { mongotest.Main(m) }

// testCtx is a context that ends with the test.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// result is what one run of the tool did.
type result struct {
	code           int
	stdout, stderr string
}

// runTool runs the tool with args as its command line.
func runTool(ctx context.Context, args ...string) result {
	var stdout, stderr bytes.Buffer
	code := run(ctx, args, &stdout, &stderr)
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// decode parses the run's stdout, which must be one JSON document.
func (r result) decode(t *testing.T, v any) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	require.NoError(t, dec.Decode(v), "stdout: %s\nstderr: %s", r.stdout, r.stderr)
	require.False(t, dec.More(), "more than one JSON document: %s", r.stdout)
}

// fixture is a fresh database on the test server, with a coordinator
// "seed" that settles before Transfer returns.
type fixture struct {
	t   *testing.T
	ctx context.Context
	uri string
	db  *mongo.Database
	c   *twopc.Coordinator
}

func newFixture(t *testing.T, opts ...twopc.Option) *fixture {
	t.Helper()
	f := &fixture{t: t, ctx: testCtx(t), uri: mongotest.Shared(t).URI, db: mongotest.NewDatabase(t)}
	f.c = f.coordinator(append([]twopc.Option{twopc.WithApplication("seed"), twopc.WithSyncSettle()}, opts...)...)
	require.NoError(t, f.c.EnsureIndexes(f.ctx))
	return f
}

// coordinator returns a coordinator on the fixture's database, closed when
// the test ends.
func (f *fixture) coordinator(opts ...twopc.Option) *twopc.Coordinator {
	f.t.Helper()
	c, err := twopc.NewCoordinator(f.db, opts...)
	require.NoError(f.t, err)
	f.t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// run runs the tool's command cmd on the fixture's database, with args.
func (f *fixture) run(cmd string, args ...string) result {
	return runTool(f.ctx, append([]string{cmd, "--uri", f.uri, "--db", f.db.Name()}, args...)...)
}

// open opens accounts in the default ledger.
func (f *fixture) open(balances map[string]int64) {
	f.t.Helper()
	for id, b := range balances {
		require.NoError(f.t, f.c.OpenAccount(f.ctx, id, b))
	}
}

var errCrash = errors.New("crash")

// crashAtCommit makes a coordinator that dies at the commit point, and
// returns it.
func (f *fixture) crashAtCommit(opts ...twopc.Option) *twopc.Coordinator {
	return f.coordinator(append([]twopc.Option{
		twopc.WithApplication("crashing"),
		twopc.WithStepHook(func(_ context.Context, step twopc.Step, _ *twopc.Txn) error {
			if step == twopc.StepCommit {
				return errCrash
			}
			return nil
		}),
	}, opts...)...)
}

// pendingTransfer starts a transfer whose coordinator dies at the commit
// point: both legs applied, pending, for recovery to roll forward.
func (f *fixture) pendingTransfer(src, dst string, value int64) bson.ObjectID {
	f.t.Helper()
	txn, err := f.crashAtCommit().Transfer(f.ctx, src, dst, value)
	require.ErrorIs(f.t, err, errCrash)
	require.NotNil(f.t, txn)
	require.Equal(f.t, twopc.StatePending, txn.State)
	return txn.ID
}

// done makes a transfer that settles.
func (f *fixture) done(src, dst string, value int64) bson.ObjectID {
	f.t.Helper()
	txn, err := f.c.Transfer(f.ctx, src, dst, value)
	require.NoError(f.t, err)
	require.Equal(f.t, twopc.StateDone, txn.State)
	return txn.ID
}

// fence is the hex of the fence that leg i of transaction id leaves on its
// account once closed (schema.Fence).
func (f *fixture) fence(id bson.ObjectID, i int) string {
	f.t.Helper()
	txn, err := f.c.Get(f.ctx, id)
	require.NoError(f.t, err)
	return schema.Fence(txn.Created, schema.Marker(id, i)).Hex()
}

// backdate makes transaction id look untouched for d, as if its owner
// died that long ago.
func (f *fixture) backdate(id bson.ObjectID, d time.Duration) {
	f.t.Helper()
	// Its time too, which is never later than its last write: the
	// history prune reads by it.
	res, err := f.db.Collection(twopc.DefaultTransactions).UpdateOne(f.ctx, bson.D{{Key: "_id", Value: id}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "lastModified", Value: time.Now().Add(-d)}}},
			{Key: "$min", Value: bson.D{{Key: "created", Value: time.Now().Add(-d)}}}})
	require.NoError(f.t, err)
	require.EqualValues(f.t, 1, res.MatchedCount)
}

// accountDoc is an account as stored.
type accountDoc struct {
	Balance int64           `bson:"balance"`
	Credit  int64           `bson:"pendingCredit"`
	Debit   int64           `bson:"pendingDebit"`
	Pending []bson.ObjectID `bson:"pendingTransactions"`
}

func (f *fixture) account(coll string, id any) accountDoc {
	f.t.Helper()
	var a accountDoc
	require.NoError(f.t, f.db.Collection(coll).FindOne(f.ctx, bson.D{{Key: "_id", Value: id}}).Decode(&a))
	return a
}

func (f *fixture) balance(id string) int64 { return f.account(twopc.DefaultAccounts, id).Balance }

// state reads transaction id's state.
func (f *fixture) state(id bson.ObjectID) string {
	f.t.Helper()
	var doc struct {
		State string `bson:"state"`
	}
	require.NoError(f.t, f.db.Collection(twopc.DefaultTransactions).FindOne(f.ctx, bson.D{{Key: "_id", Value: id}}).Decode(&doc))
	return doc.State
}

// txnJSON is a transaction as the tool prints it with --json.
type txnJSON struct {
	ID          string `json:"_id"` // 24 hexadecimal digits
	State       string `json:"state"`
	Application string `json:"application"`
	Placeholder bool   `json:"placeholder"`
}

// lineWriter collects what is written and announces each complete line.
type lineWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	part  []byte
	lines chan string
}

func newLineWriter() *lineWriter { return &lineWriter{lines: make(chan string, 1000)} }

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	w.part = append(w.part, p...)
	for {
		i := bytes.IndexByte(w.part, '\n')
		if i < 0 {
			break
		}
		select {
		case w.lines <- string(w.part[:i]):
		default:
		}
		w.part = w.part[i+1:]
	}
	return len(p), nil
}

func (w *lineWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}
