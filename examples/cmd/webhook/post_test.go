package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc"
)

// testEvent is a committed transfer's event.
func testEvent() twopc.Event {
	id := bson.NewObjectID()
	return twopc.Event{ID: id.Hex() + ".committed", Kind: twopc.EventCommitted, Pos: "1.1", At: time.Now(),
		Txn: twopc.Txn{ID: id, Source: "A", Destination: "B", Value: 100, State: twopc.StateApplied}}
}

// TestReceiver: the built-in receiver takes a delivery the poster signed,
// and refuses one with its body changed, signed with another secret,
// too old, or missing a header; -flaky answers 503 to a first delivery;
// an event handled before is acknowledged and not handled again.
func TestReceiver(t *testing.T) {
	secret := []byte("s3cret")
	var out bytes.Buffer
	rc := newReceiver(secret, &out)
	srv := httptest.NewServer(rc)
	defer srv.Close()
	ctx := t.Context()
	e := testEvent()

	p := newPoster(srv.URL, secret, 5*time.Second)
	status, err := p.post(ctx, e)
	require.NoError(t, err)
	assert.Equal(t, http.StatusNoContent, status)
	assert.Contains(t, out.String(), "event "+e.ID+": committed, transaction "+e.Txn.ID.Hex()+" applied (A -> B 100)")
	_, err = p.post(ctx, e)
	require.NoError(t, err, "a delivery again is acknowledged")
	assert.Contains(t, out.String(), "event "+e.ID+": delivered again, already handled")

	other := testEvent()
	p.secret = []byte("another")
	_, err = p.post(ctx, other)
	assert.ErrorContains(t, err, "401 Unauthorized")
	p.secret = secret
	p.now = func() time.Time { return time.Now().Add(-6 * time.Minute) }
	_, err = p.post(ctx, other)
	assert.ErrorContains(t, err, "refused as a replay")
	p.now = time.Now

	// A signed request whose body is changed on its way.
	body := []byte(`{"id":"x"}`)
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	h := http.Header{}
	h.Set(headerID, "x")
	h.Set(headerTimestamp, ts)
	h.Set(headerSignature, sign(secret, "x", ts, body))
	require.NoError(t, verify(secret, h, body, time.Now(), defaultTolerance))
	assert.ErrorContains(t, verify(secret, h, []byte(`{"id":"y"}`), time.Now(), defaultTolerance), "no valid v1 signature")
	// One of several signatures, another scheme's among them.
	h.Set(headerSignature, "v1,abc= v1=00 "+sign(secret, "x", ts, body))
	require.NoError(t, verify(secret, h, body, time.Now(), defaultTolerance))
	h.Del(headerTimestamp)
	assert.ErrorContains(t, verify(secret, h, body, time.Now(), defaultTolerance), "missing")

	rc.flaky = true
	status, err = p.post(ctx, other)
	assert.Equal(t, http.StatusServiceUnavailable, status)
	assert.ErrorContains(t, err, "flaky: try again")
	_, err = p.post(ctx, other)
	require.NoError(t, err, "its second delivery goes through")
}

// TestPostFailures: a non-2xx answer (a redirect too, not followed), a
// timeout and a refused connection are each an error.
func TestPostFailures(t *testing.T) {
	ctx := t.Context()
	e := testEvent()
	mux := http.NewServeMux()
	mux.HandleFunc("/moved", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ok", http.StatusFound) })
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) {})
	release := make(chan struct{}) // the slow answer's end: the test's
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) { <-release })
	mux.HandleFunc("/busy", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, strings.Repeat("busy ", 100), http.StatusTooManyRequests)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	defer close(release)
	post := func(path string, timeout time.Duration) (int, error) {
		return newPoster(srv.URL+path, []byte("k"), timeout).post(ctx, e)
	}
	status, err := post("/ok", time.Second)
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, status)
	status, err = post("/moved", time.Second)
	assert.Equal(t, http.StatusFound, status)
	assert.ErrorContains(t, err, "302 Found")
	status, err = post("/busy", time.Second)
	assert.Equal(t, http.StatusTooManyRequests, status)
	assert.ErrorContains(t, err, "429 Too Many Requests")
	assert.Less(t, len(err.Error()), 400, "the answer's body is cut short in the error")
	_, err = post("/slow", 20*time.Millisecond)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	_, err = newPoster("http://"+addr+"/", []byte("k"), time.Second).post(ctx, e)
	assert.ErrorContains(t, err, "connection refused")
}

// TestUsage: what the command refuses before it connects, exit status 2.
func TestUsage(t *testing.T) {
	env := map[string]string{"MONGODB_URI": "mongodb://127.0.0.1:1/bank", "WEBHOOK_SECRET": "s"}
	for _, tc := range []struct {
		args  []string
		unset string
		want  string
	}{
		{args: []string{"-url", "http://h/"}, unset: "WEBHOOK_SECRET", want: "no secret"},
		{args: []string{"-url", "http://h/"}, unset: "MONGODB_URI", want: "no server"},
		{args: []string{"-url", "http://h/", "-uri", "mongodb://127.0.0.1:1"}, want: "no database"},
		{args: []string{}, want: "-url"},
		{args: []string{"-url", "ftp://h/"}, want: "-url"},
		{args: []string{"-url", "http://h/", "-timeout", "20s"}, want: "under half of -lease"},
		{args: []string{"-url", "http://h/", "-batch", "0"}, want: "must be positive"},
		{args: []string{"-receive", ":0", "-try"}, want: "give one"},
		{args: []string{"-receive", ":0"}, unset: "WEBHOOK_SECRET", want: "no secret"},
		{args: []string{"extra"}, want: "unexpected argument"},
	} {
		getenv := func(k string) string {
			if k == tc.unset {
				return ""
			}
			return env[k]
		}
		var stderr bytes.Buffer
		code := command(t.Context(), tc.args, getenv, &bytes.Buffer{}, &stderr)
		assert.Equal(t, exitUsage, code, "%v: %s", tc.args, stderr.String())
		assert.Contains(t, stderr.String(), tc.want, "%v", tc.args)
	}
	o, err := parse([]string{"-url", "https://h/hooks"}, func(k string) string { return env[k] }, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, "bank", o.cfg.db, "the database is the connection string's path")
	assert.Equal(t, []byte("s"), o.cfg.secret)
}
