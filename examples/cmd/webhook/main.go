// Command webhook delivers a twopc change feed to an HTTP endpoint: it
// subscribes to a feed (twopc's Feed.Subscribe) as a subscriber group and
// POSTs each event, alone, as JSON, signed with a shared secret.
//
// # The run
//
// Subscribe hands the events a slice at a time (-batch), in the feed's
// order. Each event of a slice is POSTed in turn, and the next only once
// the receiver answered 2xx within -timeout. A non-2xx answer, a network
// error or a timeout ends the slice: the handler returns the error,
// Subscribe returns it with the group's position still before the slice,
// and the command calls Subscribe again after a backoff (-backoff, doubled
// at each failure in a row up to -max-backoff, with jitter; back to
// -backoff after an event goes through). Subscribe then hands the same
// slice again: the events of it the receiver acknowledged are skipped (this
// process remembers them), the failed one is POSTed again with the same
// Webhook-Id, and the run goes on where it stopped. The group's position is saved in MongoDB after each
// slice all acknowledged, so a restarted process (or another, on another
// machine) resumes from there too. One process of a group delivers at a
// time, across processes: the others wait for its lease (-lease) to
// lapse, and a slice never takes more than half the lease (it yields, and
// takes the lease again at once). Errors that no retry mends end the
// command with exit status 1: a deleted feed, a feed or group name the
// library refuses, or a group that fell behind what the log keeps
// (twopc.ErrFeedTruncated).
//
// A feed numbers the events since its sequencer first ran (Feed.Run; by
// the log server's clock), and its events reach subscribers only once it numbered them:
// one sequencer runs per feed, anywhere. -sequencer runs it in this
// process, beside the subscriber (started again after a backoff too).
//
// # Guarantees
//
// Every event is delivered at least once, in the feed's order, none
// skipped: the position moves past an event only after the receiver
// acknowledged it. An event may be delivered again (the same Webhook-Id,
// a new Webhook-Timestamp and signature): within one process only after
// a failed delivery of that very event; after a restart, a crash or a
// takeover by another process, the events of the last slice whose
// position was not saved (at most -batch), in order again from the first.
// The receiver makes that exactly once by keeping the Webhook-Ids it
// handled with what it did, and answering 2xx to one it has.
//
// # A delivery
//
//	POST <url>
//	Content-Type: application/json
//	Webhook-Id: 6650f1c2a4b0e1f2a3b4c5d6.committed
//	Webhook-Timestamp: 1717000000
//	Webhook-Signature: v1=5f0e…(64 hex digits)
//
//	{"id":"6650f1c2a4b0e1f2a3b4c5d6.committed","kind":"committed","pos":"1.1",
//	 "at":"2026-05-24T12:00:00.123Z","transaction":{"id":"6650f1c2a4b0e1f2a3b4c5d6",
//	 "state":"applied","source":"A","destination":"B","amount":100,
//	 "key":"order/17","metadata":{"order":"17"},"created":"…","application":"shop"}}
//
// kind is committed, held, captured, voided, expired or canceled; pos is
// the feed's position after the event; at is the event's own time (by the
// log server's clock). transaction.state is the state the event left it
// in (held, applied or canceled). A transfer made with Transfer or Hold
// has source, destination and amount; one made with TransferLegs or
// HoldLegs has legs ([{ledger, account, amount, asset}], a debit
// negative) and amount is what it credits. Amounts are integers in minor
// units, as the library stores them. A capture has captureOf (its hold),
// a refund refundOf, a canceled transfer reason.
//
// # The signature
//
// The headers follow the Standard Webhooks scheme's shape
// (https://www.standardwebhooks.com): Webhook-Id, Webhook-Timestamp (unix
// seconds) and Webhook-Signature over "<id>.<timestamp>.<body>", so that
// neither the body, nor the id, nor the time can be changed or replayed
// later without the secret. It differs in its encoding: the signature is
// "v1=" and the hex HMAC-SHA256 (the scheme's is "v1," and base64), and
// the secret is $WEBHOOK_SECRET's bytes as they are (not whsec_ and
// base64), so a Standard Webhooks library does not verify it as is. A
// receiver verifies a delivery before it trusts a byte of it:
//
//  1. read the raw body, as received (not parsed and encoded again);
//  2. refuse a request missing one of the three headers;
//  3. refuse a Webhook-Timestamp more than 5 minutes from its own clock,
//     either way: a request captured and sent again later is refused;
//  4. compute the hex HMAC-SHA256, keyed by the secret, of the id, ".",
//     the timestamp as sent, ".", and the body, and compare it, in
//     constant time (hmac.Equal), with each space-separated "v1=" value of
//     Webhook-Signature (a sender rotating secrets signs with both);
//  5. then drop a Webhook-Id it handled before (answering 2xx).
//
// verify in receive.go does 2 to 4.
//
// # Try it
//
// The feed's database lives in a MongoDB server, or in the development
// server the examples run (FerretDB behind a serializing front). In four
// terminals, from the examples directory (make targets from the root):
//
//	make devserver     # or: go run ./cmd/devserver (either serves mongodb://127.0.0.1:27017/)
//	WEBHOOK_SECRET=s3cret go run ./cmd/webhook -receive 127.0.0.1:8080 [-v] [-flaky]
//	MONGODB_URI=mongodb://127.0.0.1:27017/bank WEBHOOK_SECRET=s3cret go run ./cmd/webhook -sequencer -url http://127.0.0.1:8080/
//	MONGODB_URI=mongodb://127.0.0.1:27017/bank go run ./cmd/webhook -try
//
// -receive serves a receiver that verifies each delivery as above, prints
// its event (with -v, its headers and body too), and drops a Webhook-Id
// it handled; -flaky makes it answer 503 to each event's first delivery,
// to watch the sender retry. -try opens accounts A and B in the database
// and makes a transfer, one refused for want of funds, and a hold, whose
// events the receiver prints; it prints the command lines of the
// operators' tool (go run ./cmd/twopc from the repository's root) that
// capture or void the hold, which are events as well (the operators' tool
// has no command that makes a transfer). -try says so when the feed has
// not run yet: the transactions made before its first run are not in it.
// Stop the webhook and run -try again: the new transactions wait, and
// their events are numbered and delivered when it starts again.
//
// SIGINT or SIGTERM stops any mode cleanly, with exit status 0 (go run
// itself then reports exit status 1 whatever the program did; a built
// command does not). Stopped in the middle of a slice, it abandons the
// POST in flight, and the next start delivers the slice again from its
// first event, as after a crash.
//
// # Flags
//
//	-uri URI            the server (default $MONGODB_URI)
//	-db NAME            the database of the coordinator's log (default: the URI's path)
//	-feed NAME          the feed (default webhooks)
//	-group NAME         the subscriber group: its position is kept in the database (default webhook)
//	-url URL            where each event is POSTed
//	-sequencer          run the feed's sequencer in this process too
//	-timeout D          for each POST (default 10s)
//	-batch N, -lease D, -poll D, -backoff D, -max-backoff D
//	-receive ADDR [-v] [-flaky]   the receiver, instead of delivering
//	-try                make a few transactions, instead of delivering
//
// The secret is $WEBHOOK_SECRET, never a flag (a command line is visible
// to every user of the machine).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/connstring"
)

func main() {
	// SIGINT or SIGTERM ends the run cleanly (exit status 0); a second
	// signal kills the command.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() { <-ctx.Done(); stop() }()
	code := command(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit statuses.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// mode is what the command does.
type mode int

const (
	modeDeliver mode = iota
	modeReceive
	modeTry
)

// cmdline is the parsed command line and environment.
type cmdline struct {
	mode    mode
	cfg     config
	receive string // -receive's address
	verbose bool
	flaky   bool
}

// command runs the command line args and returns its exit status.
func command(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	o, err := parse(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintln(stderr, "webhook:", err)
		return exitUsage
	}
	switch o.mode {
	case modeReceive:
		rc := newReceiver(o.cfg.secret, stdout)
		rc.verbose, rc.flaky = o.verbose, o.flaky
		err = receive(ctx, o.receive, rc, stdout)
	case modeTry:
		err = try(ctx, o.cfg, stdout)
	default:
		err = run(ctx, o.cfg, stdout)
	}
	if err != nil && ctx.Err() == nil {
		fmt.Fprintln(stderr, "webhook:", err)
		return exitError
	}
	return exitOK
}

// parse reads the flags and the environment.
func parse(args []string, getenv func(string) string, stderr io.Writer) (*cmdline, error) {
	fs := flag.NewFlagSet("webhook", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &cmdline{}
	c := &o.cfg
	fs.StringVar(&c.uri, "uri", getenv("MONGODB_URI"), "the server's connection string (default $MONGODB_URI)")
	fs.StringVar(&c.db, "db", "", "the database of the coordinator's log (default: the connection string's path)")
	fs.StringVar(&c.feed, "feed", "webhooks", "the feed's `name`")
	fs.StringVar(&c.group, "group", "webhook", "the subscriber group's `name`: its position is kept in the database")
	fs.StringVar(&c.url, "url", "", "POST each event to `URL`")
	fs.BoolVar(&c.sequencer, "sequencer", false, "also run the feed's sequencer in this process")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "how long a POST may take, to the answer's end")
	fs.IntVar(&c.batch, "batch", 20, "events handed at a time: the position is saved after each such slice")
	fs.DurationVar(&c.lease, "lease", 30*time.Second, "the group's lease: how long another process waits for one that stopped answering")
	fs.DurationVar(&c.poll, "poll", 200*time.Millisecond, "how often to look again when nothing is new")
	fs.DurationVar(&c.backoff, "backoff", 500*time.Millisecond, "the wait after a failure, doubled at each failure in a row")
	fs.DurationVar(&c.maxBackoff, "max-backoff", 30*time.Second, "the longest wait after a failure")
	fs.StringVar(&o.receive, "receive", "", "instead of delivering, receive deliveries on `ADDR` (host:port): verify and print them")
	fs.BoolVar(&o.verbose, "v", false, "with -receive: print each delivery's headers and body")
	fs.BoolVar(&o.flaky, "flaky", false, "with -receive: answer 503 to the first delivery of each event")
	try := fs.Bool("try", false, "instead of delivering, make a few transactions in the database")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: webhook -url URL [-sequencer] [flags]   (MONGODB_URI, WEBHOOK_SECRET set)")
		fmt.Fprintln(fs.Output(), "       webhook -receive ADDR [-v] [-flaky]      (WEBHOOK_SECRET set)")
		fmt.Fprintln(fs.Output(), "       webhook -try                             (MONGODB_URI set)")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	switch {
	case o.receive != "" && *try:
		return nil, errors.New("-receive and -try: give one")
	case o.receive != "":
		o.mode = modeReceive
	case *try:
		o.mode = modeTry
	}
	if o.mode != modeTry {
		c.secret = []byte(getenv("WEBHOOK_SECRET"))
		if len(c.secret) == 0 {
			return nil, errors.New("no secret: set WEBHOOK_SECRET (the sender's and the receiver's the same)")
		}
	}
	if o.mode == modeReceive {
		return o, nil
	}
	if c.uri == "" {
		return nil, errors.New("no server: pass -uri mongodb://HOST:PORT/DATABASE or set MONGODB_URI (make devserver serves mongodb://127.0.0.1:27017/)")
	}
	cs, err := connstring.ParseAndValidate(c.uri)
	if err != nil {
		return nil, fmt.Errorf("connection string: %w", err)
	}
	if c.db == "" {
		c.db = cs.Database
	}
	if c.db == "" {
		return nil, errors.New("no database: pass -db NAME, or name it in the connection string's path (mongodb://HOST:PORT/NAME)")
	}
	if o.mode == modeTry {
		return o, nil
	}
	if u, err := url.Parse(c.url); c.url == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("-url %q: want an http:// or https:// URL", c.url)
	}
	switch {
	case c.timeout <= 0 || c.poll <= 0 || c.backoff <= 0 || c.batch < 1:
		return nil, errors.New("-timeout, -poll, -backoff and -batch must be positive")
	case c.maxBackoff < c.backoff:
		return nil, errors.New("-max-backoff must be at least -backoff")
	case c.timeout >= c.lease/2:
		return nil, fmt.Errorf("-timeout %v must be under half of -lease %v: a slice yields the lease at half of it, and a POST started then must end within it", c.timeout, c.lease)
	}
	return o, nil
}
