package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/examples/devserver"
	"github.com/twopc/twopc/examples/internal/interrupttest"
)

// TestWebhook delivers a feed's events to an httptest receiver that checks
// every delivery's headers and signature (with its own HMAC, and with the
// command's verify) and answers 500 to the first delivery of the first
// held event. Three transfers, one refused, a hold and its capture: the
// subscriber loop (run) delivers the six events in the feed's order, the
// failed one again (the same Webhook-Id) after its backoff, each
// acknowledged once. Stopped, and run again with -sequencer after the
// test's sequencer stopped, it delivers the three events made meanwhile
// (numbered by its own sequencer) and nothing acknowledged before.
func TestWebhook(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	uri, _, stop, err := devserver.URIOrStart(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = stop() })
	client, err := mongo.Connect(options.Client().ApplyURI(uri))
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	dbName := fmt.Sprintf("twopc_webhook_%d", time.Now().UnixNano())
	db := client.Database(dbName)
	t.Cleanup(func() { _ = db.Drop(context.Background()) })
	c, err := twopc.NewCoordinator(db, twopc.WithApplication("shop"), twopc.WithSyncSettle())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	require.NoError(t, c.EnsureIndexes(ctx))
	require.NoError(t, c.OpenAccount(ctx, "A", 1000))
	require.NoError(t, c.OpenAccount(ctx, "B", 0))

	// The feed's sequencer, run by the test for the first part.
	f := c.Feed("payments", twopc.WithFeedPoll(5*time.Millisecond))
	seqCtx, stopSeq := context.WithCancel(ctx)
	defer stopSeq()
	sequenced := make(chan error, 1)
	go func() { sequenced <- f.Run(seqCtx) }()
	waitFeedMade(ctx, t, db, f)

	secret := []byte("test secret")
	rec := &testReceiver{t: t, secret: secret}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	var out interrupttest.Output
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the command's output:\n%s", out.String())
		}
	})
	cfg := config{
		uri: uri, db: dbName, feed: "payments", group: "hooks", url: srv.URL + "/hooks", secret: secret,
		timeout: 5 * time.Second, batch: 20, lease: 30 * time.Second, poll: 5 * time.Millisecond,
		backoff: 10 * time.Millisecond, maxBackoff: 100 * time.Millisecond,
	}

	t1, err := c.Transfer(ctx, "A", "B", 100, twopc.WithKey("order/1"), twopc.WithMetadata(map[string]string{"order": "1"}))
	require.NoError(t, err)
	t2, err := c.Transfer(ctx, "A", "B", 50)
	require.NoError(t, err)
	refused, err := c.Transfer(ctx, "A", "B", 5000)
	require.ErrorIs(t, err, twopc.ErrInsufficientFunds)
	hold, err := c.Hold(ctx, "A", "B", 200, twopc.WithExpiry(time.Hour))
	require.NoError(t, err)
	t3, err := c.Transfer(ctx, "B", "A", 30)
	require.NoError(t, err)
	capture, err := c.Capture(ctx, hold.ID, 150)
	require.NoError(t, err)
	want := readFeed(ctx, t, f, 6)

	// The first run: every event once, the held one twice.
	runFor(ctx, t, cfg, &out, func() {
		waitFor(ctx, t, "six events acknowledged", func() bool { return len(rec.acked()) == 6 })
		waitGroupDone(ctx, t, db, f, "hooks")
	})
	require.NotEmpty(t, rec.failed, "a held event's first delivery was answered 500")
	var wantTries []string // the events in order, the failed one twice
	for _, e := range want {
		wantTries = append(wantTries, e.ID)
		if e.ID == rec.failed {
			wantTries = append(wantTries, e.ID)
		}
	}
	assert.Equal(t, wantTries, rec.ids(false), "each delivered in the feed's order, the failed one again at once")
	assert.Equal(t, ids(want), rec.acked(), "each acknowledged once, in the feed's order")
	ds := rec.all()
	for i, d := range ds {
		if d.id == rec.failed {
			assert.Equal(t, http.StatusInternalServerError, d.status, "the first delivery of %s fails", d.id)
			assert.Equal(t, d.id, ds[i+1].id, "delivered again with the same Webhook-Id")
			assert.Equal(t, http.StatusNoContent, ds[i+1].status)
			break
		}
	}
	assert.Contains(t, out.String(), "again in", "the failure was logged with its backoff")

	// What each body says of its event and transaction.
	byID := map[string]testPayload{}
	for _, d := range ds {
		byID[d.id] = d.body
	}
	for _, e := range want {
		p := byID[e.ID]
		assert.Equal(t, string(e.Kind), p.Kind)
		assert.Equal(t, string(e.Pos), p.Pos)
		assert.True(t, e.At.Equal(p.At), "%s: at %v, want %v", e.ID, p.At, e.At)
		assert.Equal(t, e.Txn.ID.Hex(), p.Transaction.ID)
	}
	// The transaction of id's event of kind, as delivered.
	byTxn := map[string]testTxn{}
	for _, p := range byID {
		byTxn[p.Transaction.ID+" "+p.Kind] = p.Transaction
	}
	at := func(id bson.ObjectID, kind twopc.EventKind) testTxn { return byTxn[id.Hex()+" "+string(kind)] }
	assert.Equal(t, testTxn{ID: t1.ID.Hex(), State: "applied", Source: "A", Destination: "B", Amount: 100,
		Key: "order/1", Metadata: map[string]string{"order": "1"}}, at(t1.ID, twopc.EventCommitted))
	assert.Equal(t, int64(50), at(t2.ID, twopc.EventCommitted).Amount)
	assert.Equal(t, "B", at(t3.ID, twopc.EventCommitted).Source)
	assert.Equal(t, testTxn{ID: refused.ID.Hex(), State: "canceled", Source: "A", Destination: "B", Amount: 5000,
		Reason: "insufficient_funds"}, at(refused.ID, twopc.EventCanceled))
	assert.Equal(t, testTxn{ID: hold.ID.Hex(), State: "held", Source: "A", Destination: "B", Amount: 200, Hold: true},
		at(hold.ID, twopc.EventHeld))
	got := at(capture.ID, twopc.EventCaptured)
	got.Key = "" // the library's own key of a capture
	assert.Equal(t, testTxn{ID: capture.ID.Hex(), State: "applied", Source: "A", Destination: "B", Amount: 150,
		CaptureOf: hold.ID.Hex()}, got)

	// The test's sequencer stops; events made now wait for one. The
	// command, run again with -sequencer, numbers and delivers them, from
	// the group's position: nothing acknowledged before comes again.
	stopSeq()
	require.ErrorIs(t, <-sequenced, context.Canceled)
	t4, err := c.Transfer(ctx, "A", "B", 10)
	require.NoError(t, err)
	voided, err := c.Hold(ctx, "A", "B", 20)
	require.NoError(t, err)
	_, err = c.Void(ctx, voided.ID)
	require.NoError(t, err)
	before := len(ds)
	cfg.sequencer = true
	var all []twopc.Event
	runFor(ctx, t, cfg, &out, func() {
		all = readFeed(ctx, t, f, 9)
		waitFor(ctx, t, "nine events acknowledged", func() bool { return len(rec.acked()) == 9 })
		waitGroupDone(ctx, t, db, f, "hooks")
	})
	assert.Equal(t, ids(want), ids(all[:6]), "the feed's first events are the same")
	assert.Equal(t, ids(all[6:]), rec.idsFrom(before), "after the restart, only the new events, once each")
	assert.Equal(t, ids(all), rec.acked(), "every event acknowledged once, in the feed's order")
	kinds := map[string]string{}
	for _, d := range rec.all()[before:] {
		kinds[d.body.Transaction.ID+" "+d.body.Kind] = d.body.Transaction.State
	}
	assert.Equal(t, map[string]string{
		t4.ID.Hex() + " committed": "applied", voided.ID.Hex() + " held": "held", voided.ID.Hex() + " voided": "canceled",
	}, kinds)
	assert.Contains(t, out.String(), "its sequencer running here")
}

// runFor runs the subscriber loop (run) with cfg while until runs, then
// cancels it and waits for it to return: nil, a clean shutdown.
func runFor(ctx context.Context, t *testing.T, cfg config, out io.Writer, until func()) {
	t.Helper()
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run(rctx, cfg, out) }()
	until()
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err, "run returns nil once its context is canceled")
	case <-ctx.Done():
		t.Fatal("run did not return once canceled")
	}
}

// waitFor polls cond until it holds, the test failed, or ctx ends.
func waitFor(ctx context.Context, t *testing.T, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		if t.Failed() {
			t.FailNow()
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// waitFeedMade waits for f's document (its sequencer's first run) and
// for the server's clock to pass its since: every transaction made next
// is the feed's.
func waitFeedMade(ctx context.Context, t *testing.T, db *mongo.Database, f *twopc.Feed) {
	t.Helper()
	var since time.Time
	waitFor(ctx, t, "the feed's document", func() bool {
		st, err := f.Status(ctx)
		require.NoError(t, err)
		since = st.Since
		return !since.IsZero()
	})
	waitFor(ctx, t, "the server's clock past the feed's since", func() bool {
		var hello struct {
			LocalTime time.Time `bson:"localTime"`
		}
		require.NoError(t, db.RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Decode(&hello))
		return hello.LocalTime.After(since)
	})
}

// readFeed reads f from the start until it has n events (its sequencer
// published them).
func readFeed(ctx context.Context, t *testing.T, f *twopc.Feed, n int) []twopc.Event {
	t.Helper()
	var evs []twopc.Event
	waitFor(ctx, t, fmt.Sprintf("%d events published", n), func() bool {
		var err error
		evs, _, err = f.Read(ctx, "", 100)
		require.NoError(t, err)
		require.LessOrEqual(t, len(evs), n)
		return len(evs) == n
	})
	return evs
}

// waitGroupDone waits for group's saved position in f to be past every
// event: the last slice acknowledged is saved, and a run canceled now
// hands nothing of it again. (It may be past the last event's Pos: a
// batch may hold no event, only a transaction's "none here", as a hold's
// end by its capture, and a read steps over it.) The position is read
// from the library's feeds collection, as no API reads it: the document
// "group:FEED:GROUP" in "transactions_feeds", field pos.
func waitGroupDone(ctx context.Context, t *testing.T, db *mongo.Database, f *twopc.Feed, group string) {
	t.Helper()
	waitFor(ctx, t, "the group's position saved", func() bool {
		var g struct {
			Pos string `bson:"pos"`
		}
		err := db.Collection("transactions_feeds").FindOne(ctx, bson.D{{Key: "_id", Value: "group:" + f.Name() + ":" + group}}).Decode(&g)
		if errors.Is(err, mongo.ErrNoDocuments) {
			return false
		}
		require.NoError(t, err)
		rest, _, err := f.Read(ctx, twopc.Position(g.Pos), 100)
		require.NoError(t, err)
		return len(rest) == 0
	})
}

func ids(evs []twopc.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.ID
	}
	return out
}

// testPayload is a delivery's body as the request's fields name it.
type testPayload struct {
	ID          string    `json:"id"`
	Kind        string    `json:"kind"`
	Pos         string    `json:"pos"`
	At          time.Time `json:"at"`
	Transaction testTxn   `json:"transaction"`
}

type testTxn struct {
	ID          string            `json:"id"`
	State       string            `json:"state"`
	Source      any               `json:"source"`
	Destination any               `json:"destination"`
	Amount      int64             `json:"amount"`
	Hold        bool              `json:"hold"`
	Key         string            `json:"key"`
	Metadata    map[string]string `json:"metadata"`
	CaptureOf   string            `json:"captureOf"`
	Reason      string            `json:"reason"`
}

// testDelivery is one request the receiver answered.
type testDelivery struct {
	id     string
	status int
	body   testPayload
}

// testReceiver checks each delivery: a POST of JSON, the three headers,
// a timestamp within seconds of now, the signature its own HMAC computes
// (and the command's verify accepts), and a body whose id is the
// Webhook-Id. It answers 500 to the first delivery of the first held
// event, 204 to everything else.
type testReceiver struct {
	t      *testing.T
	secret []byte
	mu     sync.Mutex
	ds     []testDelivery
	failed string // the event whose first delivery was answered 500
}

func (r *testReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	t := r.t
	body, err := io.ReadAll(req.Body)
	if !assert.NoError(t, err) {
		return
	}
	id, ts, sig := req.Header.Get("Webhook-Id"), req.Header.Get("Webhook-Timestamp"), req.Header.Get("Webhook-Signature")
	h := hmac.New(sha256.New, r.secret)
	h.Write([]byte(id + "." + ts + "." + string(body)))
	var p testPayload
	sec, tsErr := strconv.ParseInt(ts, 10, 64)
	ok := assert.Equal(t, http.MethodPost, req.Method) &&
		assert.Equal(t, "application/json", req.Header.Get("Content-Type")) &&
		assert.NotEmpty(t, id) &&
		assert.NoError(t, tsErr, "Webhook-Timestamp %q", ts) &&
		assert.WithinDuration(t, time.Now(), time.Unix(sec, 0), 10*time.Second, "Webhook-Timestamp is the time of sending") &&
		assert.Equal(t, "v1="+hex.EncodeToString(h.Sum(nil)), sig, "Webhook-Signature") &&
		assert.NoError(t, verify(r.secret, req.Header, body, time.Now(), defaultTolerance), "the command's own receiver accepts it") &&
		assert.NoError(t, json.Unmarshal(body, &p)) &&
		assert.Equal(t, id, p.ID, "the body's id is the Webhook-Id")
	if !ok {
		http.Error(w, "refused", http.StatusUnauthorized)
		return
	}
	r.mu.Lock()
	status := http.StatusNoContent
	if r.failed == "" && p.Kind == string(twopc.EventHeld) {
		r.failed, status = id, http.StatusInternalServerError
	}
	if len(r.ds) == 0 {
		t.Logf("a delivery:\n%s %s\nContent-Type: %s\nWebhook-Id: %s\nWebhook-Timestamp: %s\nWebhook-Signature: %s\n\n%s",
			req.Method, req.URL, req.Header.Get("Content-Type"), id, ts, sig, prettyJSON(body))
	}
	r.ds = append(r.ds, testDelivery{id: id, status: status, body: p})
	r.mu.Unlock()
	w.WriteHeader(status)
}

func prettyJSON(b []byte) string {
	var buf bytes.Buffer
	if json.Indent(&buf, b, "", "  ") != nil {
		return string(b)
	}
	return buf.String()
}

func (r *testReceiver) all() []testDelivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]testDelivery(nil), r.ds...)
}

// ids returns the Webhook-Ids delivered, in order: only those answered
// 2xx if acked.
func (r *testReceiver) ids(acked bool) []string {
	var out []string
	for _, d := range r.all() {
		if !acked || d.status/100 == 2 {
			out = append(out, d.id)
		}
	}
	return out
}

func (r *testReceiver) acked() []string { return r.ids(true) }

// idsFrom returns the Webhook-Ids delivered from the i'th delivery on.
func (r *testReceiver) idsFrom(i int) []string {
	var out []string
	for _, d := range r.all()[i:] {
		out = append(out, d.id)
	}
	return out
}
