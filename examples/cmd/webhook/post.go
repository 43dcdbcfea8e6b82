package main

// One event as a webhook: its JSON body, its signature, and the POST that
// delivers it.

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc"
)

// The headers of a delivery, in the Standard Webhooks scheme's shape.
const (
	headerID        = "Webhook-Id"
	headerTimestamp = "Webhook-Timestamp"
	headerSignature = "Webhook-Signature"
	// signatureVersion prefixes the signature: "v1=" and the hex HMAC.
	signatureVersion = "v1="
)

// payload is the JSON body of one event's POST.
type payload struct {
	ID          string      `json:"id"`   // the event's ID, also Webhook-Id: the receiver's dedupe key
	Kind        string      `json:"kind"` // committed, held, captured, voided, expired, canceled
	Pos         string      `json:"pos"`  // the feed's position after the event
	At          time.Time   `json:"at"`   // the event's own time, by the log server's clock
	Transaction transaction `json:"transaction"`
}

// transaction is the event's transaction. Money is in minor units
// (int64), as the library stores it.
type transaction struct {
	ID    string `json:"id"`
	State string `json:"state"` // the state the event left it in: held, applied or canceled
	// A transfer made with Transfer or Hold has a source, a destination
	// and an amount; one made with TransferLegs or HoldLegs has legs, and
	// amount is the total credited.
	Source      any               `json:"source,omitempty"`
	Destination any               `json:"destination,omitempty"`
	Amount      int64             `json:"amount"`
	Asset       string            `json:"asset,omitempty"`
	Legs        []leg             `json:"legs,omitempty"`
	Hold        bool              `json:"hold,omitempty"`
	Key         string            `json:"key,omitempty"`
	Metadata    map[string]string `json:"metadata,omitempty"`
	CaptureOf   string            `json:"captureOf,omitempty"` // a capture's hold
	RefundOf    string            `json:"refundOf,omitempty"`  // a refund's transfer
	Reason      string            `json:"reason,omitempty"`    // why it was canceled
	Created     time.Time         `json:"created"`
	Application string            `json:"application,omitempty"`
}

// leg is one leg of a transfer of legs: a debit is negative.
type leg struct {
	Ledger  string `json:"ledger,omitempty"`
	Account any    `json:"account"`
	Amount  int64  `json:"amount"`
	Asset   string `json:"asset,omitempty"`
}

// newPayload returns e as a webhook's body.
func newPayload(e twopc.Event) payload {
	t := e.Txn
	tx := transaction{
		ID: t.ID.Hex(), State: string(t.State), Amount: t.Value, Asset: t.Asset,
		Hold: t.Hold, Key: t.Key, Metadata: t.Metadata, Reason: t.Reason,
		Created: t.Created.UTC(), Application: t.Application,
	}
	if len(t.Legs) > 0 {
		for _, l := range t.Legs {
			tx.Legs = append(tx.Legs, leg{Ledger: l.Ledger, Account: accountJSON(l.Account), Amount: l.Amount, Asset: l.Asset})
		}
	} else {
		tx.Source, tx.Destination = accountJSON(t.Source), accountJSON(t.Destination)
	}
	if !t.CaptureOf.IsZero() {
		tx.CaptureOf = t.CaptureOf.Hex()
	}
	if !t.RefundOf.IsZero() {
		tx.RefundOf = t.RefundOf.Hex()
	}
	return payload{ID: e.ID, Kind: string(e.Kind), Pos: string(e.Pos), At: e.At.UTC(), Transaction: tx}
}

// accountJSON returns an account id as JSON writes it plainly: an
// ObjectID as its hex string, a string or a number as itself, anything
// else as fmt prints it.
func accountJSON(id any) any {
	switch v := id.(type) {
	case nil, string, bool, int32, int64, int, float64:
		return v
	case bson.ObjectID:
		return v.Hex()
	}
	return fmt.Sprint(id)
}

// sign returns the Webhook-Signature value of a delivery: "v1=" and the
// hex HMAC-SHA256, keyed by secret, of "<id>.<timestamp>.<body>".
func sign(secret []byte, id, timestamp string, body []byte) string {
	return signatureVersion + hex.EncodeToString(mac(secret, id, timestamp, body))
}

// mac is the HMAC-SHA256, keyed by secret, of "<id>.<timestamp>.<body>".
func mac(secret []byte, id, timestamp string, body []byte) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte(id))
	h.Write([]byte("."))
	h.Write([]byte(timestamp))
	h.Write([]byte("."))
	h.Write(body)
	return h.Sum(nil)
}

// poster POSTs events to one URL, signed with one secret.
type poster struct {
	url     string
	secret  []byte
	timeout time.Duration // for each POST, from sending to the answer's end
	client  *http.Client
	now     func() time.Time // the clock of Webhook-Timestamp
}

// newPoster returns a poster whose client reports a redirect as the
// non-2xx answer it is instead of following it.
func newPoster(url string, secret []byte, timeout time.Duration) *poster {
	return &poster{url: url, secret: secret, timeout: timeout, now: time.Now,
		client: &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// post delivers e: one POST of its JSON body, signed, answered 2xx within
// the timeout; anything else (a network error, the timeout, another
// status) is an error. It returns the status.
func (p *poster) post(ctx context.Context, e twopc.Event) (int, error) {
	body, err := json.Marshal(newPayload(e))
	if err != nil {
		return 0, fmt.Errorf("event %s: encode: %w", e.ID, err)
	}
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	// Each attempt is signed afresh: the same id and body, its own time.
	ts := strconv.FormatInt(p.now().Unix(), 10)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "twopc-webhook")
	req.Header.Set(headerID, e.ID)
	req.Header.Set(headerTimestamp, ts)
	req.Header.Set(headerSignature, sign(p.secret, e.ID, ts, body))
	resp, err := p.client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("event %s: POST %s: %w", e.ID, p.url, err)
	}
	defer resp.Body.Close()
	// Read the answer to its end (a little of it kept for the error), so
	// that the connection is used again, and within the timeout.
	var head bytes.Buffer
	_, err = io.Copy(&head, io.LimitReader(resp.Body, 200))
	if err == nil {
		_, err = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		msg := ""
		if b := bytes.TrimSpace(head.Bytes()); len(b) > 0 {
			msg = fmt.Sprintf(" %q", b)
		}
		return resp.StatusCode, fmt.Errorf("event %s: POST %s: %s%s", e.ID, p.url, resp.Status, msg)
	}
	if err != nil {
		// A 2xx whose body did not arrive within the timeout: not
		// taken for an acknowledgement.
		return resp.StatusCode, fmt.Errorf("event %s: POST %s: reading the answer: %w", e.ID, p.url, err)
	}
	return resp.StatusCode, nil
}
