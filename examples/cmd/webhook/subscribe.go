package main

// The subscriber: the feed's Subscribe with a handler that POSTs each
// event, started again after a capped exponential backoff whenever it
// ends with an error; and, with -sequencer, the feed's sequencer beside
// it, started again likewise.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/twopc/twopc"
)

// config is what the flags and the environment say.
type config struct {
	uri, db    string // the server and the database of the coordinator's log
	feed       string // the feed's name
	group      string // the subscriber group: its position is saved in the database
	url        string // where each event is POSTed
	secret     []byte // the HMAC key of Webhook-Signature ($WEBHOOK_SECRET)
	sequencer  bool   // also run the feed's sequencer in this process
	timeout    time.Duration
	batch      int           // events handed to the handler at a time (WithFeedSlice)
	lease      time.Duration // the group's lease (WithFeedLease)
	poll       time.Duration // how often to look again when nothing is new (WithFeedPoll)
	backoff    time.Duration // the first wait after a failure
	maxBackoff time.Duration // the longest
}

// application is the name the coordinator, the sequencer's and the
// group's leases are held under.
const application = "webhook"

// connect connects to cfg's server and returns a coordinator on its
// database, and what closes both.
func connect(cfg config) (*twopc.Coordinator, func(), error) {
	client, err := mongo.Connect(options.Client().ApplyURI(cfg.uri))
	if err != nil {
		return nil, nil, err
	}
	c, err := twopc.NewCoordinator(client.Database(cfg.db), twopc.WithApplication(application), twopc.WithSyncSettle())
	if err != nil {
		_ = client.Disconnect(context.Background())
		return nil, nil, err
	}
	return c, func() {
		_ = c.Close(context.Background())
		_ = client.Disconnect(context.Background())
	}, nil
}

// run delivers cfg.feed's events to cfg.url as cfg.group until ctx is
// done (then it returns nil) or the feed cannot be read any more (deleted,
// or the group's position older than what history keeps): that error.
// With cfg.sequencer it also runs the feed's sequencer until then.
func run(ctx context.Context, cfg config, out io.Writer) error {
	c, closeAll, err := connect(cfg)
	if err != nil {
		return err
	}
	defer closeAll()
	log := &logger{w: out}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	sequenced := make(chan error, 1)
	if cfg.sequencer {
		f := c.Feed(cfg.feed, twopc.WithFeedPoll(cfg.poll))
		go func() {
			err := again(ctx, cfg, log, "sequencer", func(ctx context.Context) (bool, error) {
				start := time.Now()
				err := f.Run(ctx) // returns only with an error
				return time.Since(start) >= cfg.maxBackoff, err
			})
			if err != nil {
				cancel() // the subscriber too: the feed is gone
			}
			sequenced <- err
		}()
	} else {
		sequenced <- nil
	}

	d := &deliverer{
		feed:  c.Feed(cfg.feed, twopc.WithFeedSlice(cfg.batch), twopc.WithFeedLease(cfg.lease), twopc.WithFeedPoll(cfg.poll)),
		group: cfg.group, lease: cfg.lease, log: log,
		post: newPoster(cfg.url, cfg.secret, cfg.timeout),
	}
	seq := ""
	if cfg.sequencer {
		seq = ", its sequencer running here"
	}
	log.printf("delivering feed %q as group %q to %s%s", cfg.feed, cfg.group, cfg.url, seq)
	err = again(ctx, cfg, log, "subscriber", d.subscribe)
	cancel()
	if serr := <-sequenced; err == nil {
		err = serr
	}
	return err
}

// permanent reports an error that no retry mends: the feed deleted or
// misnamed, or the group's position older than what the log keeps.
func permanent(err error) bool {
	return errors.Is(err, twopc.ErrFeedDeleted) || errors.Is(err, twopc.ErrInvalidFeed) || errors.Is(err, twopc.ErrFeedTruncated)
}

// errYield ends a slice that has taken half the group's lease: Subscribe
// returns it with the position before the slice, and is called again at
// once; the events of the slice already acknowledged are skipped.
var errYield = errors.New("the slice took half the group's lease: taking the lease again")

// again calls fn until ctx is done (it returns nil) or fn fails for good
// (it returns that error). After any other error it waits, first
// cfg.backoff, doubled at each failure in a row up to cfg.maxBackoff,
// with jitter; back to cfg.backoff once fn reports progress (an event
// acknowledged, a sequencer that ran a while).
func again(ctx context.Context, cfg config, log *logger, what string, fn func(context.Context) (progressed bool, err error)) error {
	wait := cfg.backoff
	for {
		progressed, err := fn(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case permanent(err):
			log.printf("%s: %v", what, err)
			return err
		case errors.Is(err, errYield):
			continue
		}
		if progressed {
			wait = cfg.backoff
		}
		// A random wait in the upper half of the backoff: processes that
		// failed together do not come back together.
		d := wait/2 + rand.N(wait/2+1)
		log.printf("%s: %v; again in %v", what, err, d.Round(time.Millisecond))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(d):
		}
		wait = min(2*wait, cfg.maxBackoff)
	}
}

// deliverer is Subscribe's handler: it POSTs each event of a slice, in
// order, and fails the slice at the first event not acknowledged.
type deliverer struct {
	feed  *twopc.Feed
	group string
	lease time.Duration
	post  *poster
	log   *logger
	// acked are the events of the last slice the receiver acknowledged.
	// Subscribe hands a failed slice again, from its first event: these
	// are skipped, not posted again (by this process: after a restart,
	// those of a slice whose position was not saved are posted again).
	acked      map[string]bool
	progressed bool // an event acknowledged since subscribe began
}

// subscribe runs one Subscribe: until ctx is done or the handler fails.
func (d *deliverer) subscribe(ctx context.Context) (bool, error) {
	d.progressed = false
	err := d.feed.Subscribe(ctx, d.group, d.handle)
	return d.progressed, err
}

// handle POSTs evs, one at a time, in order. The first error ends the
// slice: Subscribe returns it, the group's position stays before the
// slice. It ends the slice with errYield rather than start a POST past
// half the group's lease, so that a slice never outlives the lease (the
// lease is renewed between slices only), which would let another process
// of the group take over and deliver the same events at the same time.
func (d *deliverer) handle(ctx context.Context, evs []twopc.Event) error {
	yield := time.Now().Add(d.lease / 2)
	acked := make(map[string]bool, len(evs))
	defer func() { d.acked = acked }()
	for _, e := range evs {
		if d.acked[e.ID] {
			acked[e.ID] = true
			continue
		}
		if time.Now().After(yield) {
			return errYield
		}
		start := time.Now()
		status, err := d.post.post(ctx, e)
		if err != nil {
			return err
		}
		acked[e.ID] = true
		d.progressed = true
		d.log.printf("delivered %s (pos %s): %d in %v", e.ID, e.Pos, status, time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// logger writes lines to w, one at a time: the sequencer's and the
// subscriber's.
type logger struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *logger) printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, format+"\n", args...)
}
