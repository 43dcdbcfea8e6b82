package main

// The built-in receiver (-receive ADDR): it verifies each delivery's
// signature and timestamp, drops what it handled before by Webhook-Id,
// and prints the events.

import (
	"context"
	"crypto/hmac"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// defaultTolerance is how far a delivery's Webhook-Timestamp may be from
// the receiver's clock, either way: the Standard Webhooks scheme's
// suggestion. A delivery older than that is refused as a replay.
const defaultTolerance = 5 * time.Minute

// verify checks a delivery as a receiver must, before it trusts a byte of
// body: the three headers present, the timestamp within tolerance of now,
// and one of the signatures (space-separated, so that a sender can sign
// with an old and a new secret while it rotates them) "v1=" and the hex
// HMAC-SHA256 of "<id>.<timestamp>.<body>" keyed by secret, compared in
// constant time. body is the raw body, as received.
func verify(secret []byte, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	id, ts, sigs := h.Get(headerID), h.Get(headerTimestamp), h.Get(headerSignature)
	if id == "" || ts == "" || sigs == "" {
		return errors.New("missing Webhook-Id, Webhook-Timestamp or Webhook-Signature")
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("Webhook-Timestamp %q is not unix seconds", ts)
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("Webhook-Timestamp %s is %v from now, more than %v: refused as a replay", ts, d.Round(time.Second), tolerance)
	}
	want := mac(secret, id, ts, body)
	for _, s := range strings.Fields(sigs) {
		v, ok := strings.CutPrefix(s, signatureVersion)
		if !ok {
			continue // another scheme's version
		}
		if got, err := hex.DecodeString(v); err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return errors.New("no valid v1 signature")
}

// receiver is the built-in receiver's handler.
type receiver struct {
	secret    []byte
	tolerance time.Duration
	now       func() time.Time
	flaky     bool // answer 503 to the first delivery of each event
	verbose   bool // print each delivery's headers and body
	mu        sync.Mutex
	out       io.Writer
	tries     map[string]int  // deliveries by event id
	handled   map[string]bool // events answered 2xx: a real receiver keeps these with its effects
}

func newReceiver(secret []byte, out io.Writer) *receiver {
	return &receiver{secret: secret, tolerance: defaultTolerance, now: time.Now, out: out,
		tries: map[string]int{}, handled: map[string]bool{}}
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := verify(r.secret, req.Header, body, r.now(), r.tolerance); err != nil {
		fmt.Fprintf(r.out, "refused a delivery from %s: %v\n", req.RemoteAddr, err)
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	var p payload
	if err := json.Unmarshal(body, &p); err != nil || p.ID != req.Header.Get(headerID) {
		fmt.Fprintf(r.out, "refused event %s: not an event's body (%v)\n", req.Header.Get(headerID), err)
		http.Error(w, "not an event", http.StatusBadRequest)
		return
	}
	if r.verbose {
		fmt.Fprintf(r.out, "%s %s\n", req.Method, req.URL)
		for _, k := range []string{"Content-Type", headerID, headerTimestamp, headerSignature} {
			fmt.Fprintf(r.out, "%s: %s\n", k, req.Header.Get(k))
		}
		fmt.Fprintf(r.out, "\n%s\n\n", body)
	}
	r.tries[p.ID]++
	if r.flaky && r.tries[p.ID] == 1 {
		fmt.Fprintf(r.out, "event %s: answered 503 to its first delivery (-flaky)\n", p.ID)
		http.Error(w, "flaky: try again", http.StatusServiceUnavailable)
		return
	}
	if r.handled[p.ID] {
		// At least once: a delivery again of what was handled is
		// acknowledged and not handled again.
		fmt.Fprintf(r.out, "event %s: delivered again, already handled\n", p.ID)
		w.WriteHeader(http.StatusNoContent)
		return
	}
	r.handled[p.ID] = true
	fmt.Fprintf(r.out, "event %s: %s\n", p.ID, describe(p))
	w.WriteHeader(http.StatusNoContent)
}

// describe is one line about an event: its kind, its transaction's
// accounts and amount, its time and position.
func describe(p payload) string {
	t := p.Transaction
	var what string
	if len(t.Legs) > 0 {
		var legs []string
		for _, l := range t.Legs {
			legs = append(legs, fmt.Sprintf("%v %+d", l.Account, l.Amount))
		}
		what = strings.Join(legs, ", ")
	} else {
		what = fmt.Sprintf("%v -> %v %d", t.Source, t.Destination, t.Amount)
	}
	if t.Asset != "" {
		what += " " + t.Asset
	}
	s := fmt.Sprintf("%s, transaction %s %s (%s), at %s, pos %s", p.Kind, t.ID, t.State, what, p.At.Format(time.RFC3339Nano), p.Pos)
	if t.CaptureOf != "" {
		s += ", capture of " + t.CaptureOf
	}
	if t.Reason != "" {
		s += ", reason " + t.Reason
	}
	return s
}

// receive serves the receiver on addr until ctx is done, then shuts down.
func receive(ctx context.Context, addr string, rc *receiver, out io.Writer) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: rc, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(out, "receiving on http://%s/ (checking Webhook-Signature with $WEBHOOK_SECRET)\n", ln.Addr())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shut); err != nil {
		return err
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
