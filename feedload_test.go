package twopc_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc"
)

var (
	feedLoadTransfers = flag.Int("feedload.transfers", 120, "TestFeedLoad's transfers (make soak: 2,000)")
	feedLoadLease     = flag.Duration("feedload.lease", 300*time.Millisecond, "TestFeedLoad's sequencers' lease (make soak: 10 s, the default)")
)

// feedLoadName is TestFeedLoad's feed.
const feedLoadName = "load"

// feedLoadWorkers is how many goroutines make TestFeedLoad's transfers.
const feedLoadWorkers = 8

// loadSequencer is one of TestFeedLoad's two sequencers: an application
// of its own whose Run is started again when restart is sent, until its
// context ends.
type loadSequencer struct {
	name    string
	c       *twopc.Coordinator
	opts    []twopc.FeedOption
	restart chan struct{}
	errs    chan error // a Run that ended otherwise than by its context
}

// loop runs the sequencer until ctx ends: a restart cancels its Run
// (which gives the lease up) and starts another.
func (s *loadSequencer) loop(ctx context.Context) {
	for {
		rctx, cancel := context.WithCancel(ctx)
		ran := make(chan error, 1)
		go func() { ran <- s.c.Feed(feedLoadName, s.opts...).Run(rctx) }()
		select {
		case <-s.restart:
			cancel()
			if err := <-ran; !errors.Is(err, context.Canceled) {
				s.errs <- fmt.Errorf("%s: Run stopped for its restart: %w", s.name, err)
				return
			}
		case err := <-ran:
			cancel()
			if ctx.Err() == nil {
				s.errs <- fmt.Errorf("%s: Run: %w", s.name, err)
			}
			return
		}
	}
}

// loadStall stalls the first sequencer to reach a step once armed, until
// released or the run ends (quit): both sequencers' hook.
type loadStall struct {
	armed   atomic.Int64 // the step+1 to stall at; 0: none
	reached chan string  // the sequencer stalled
	release chan struct{}
	quit    <-chan struct{}
}

// hook is sequencer name's.
func (s *loadStall) hook(name string, step int) error {
	if s.armed.CompareAndSwap(int64(step)+1, 0) {
		select {
		case s.reached <- name:
		case <-s.quit:
			return nil
		}
		select {
		case <-s.release:
		case <-s.quit:
		}
	}
	return nil
}

// loadConsumer counts the committed events one consumer (the All reader,
// or a subscriber group) was handed, by transaction.
type loadConsumer struct {
	name string
	mu   sync.Mutex
	seen map[bson.ObjectID]int
	at   map[bson.ObjectID]time.Time // when each was first handed
	all  chan struct{}               // closed once every transfer was handed
	want int
}

func newLoadConsumer(name string, want int) *loadConsumer {
	return &loadConsumer{name: name, seen: map[bson.ObjectID]int{}, at: map[bson.ObjectID]time.Time{}, all: make(chan struct{}), want: want}
}

func (l *loadConsumer) take(evs ...twopc.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range evs {
		if e.Kind != twopc.EventCommitted {
			continue
		}
		l.seen[e.Txn.ID]++
		if l.seen[e.Txn.ID] == 1 {
			l.at[e.Txn.ID] = time.Now()
		}
		if len(l.seen) == l.want && l.seen[e.Txn.ID] == 1 {
			close(l.all)
		}
	}
}

// check requires each transfer handed exactly once, and nothing else.
func (l *loadConsumer) check(t *testing.T, committed []bson.ObjectID) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var twice, missing []string
	for _, id := range committed {
		switch n := l.seen[id]; {
		case n == 0:
			missing = append(missing, id.Hex())
		case n > 1:
			twice = append(twice, fmt.Sprintf("%s ×%d", id.Hex(), n))
		}
	}
	assert.Empty(t, missing, "%s: transfers never handed", l.name)
	assert.Empty(t, twice, "%s: transfers handed more than once", l.name)
	assert.Len(t, l.seen, len(committed), "%s: events of no transfer of the run", l.name)
}

// delays says how long after its Transfer returned each transfer was
// first handed: the median and the 99th percentile.
func (l *loadConsumer) delays(returned map[bson.ObjectID]time.Time) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ds []time.Duration
	for id, at := range l.at {
		if r, ok := returned[id]; ok {
			ds = append(ds, max(0, at.Sub(r)))
		}
	}
	if len(ds) == 0 {
		return l.name + ": none"
	}
	slices.Sort(ds)
	q := func(p float64) time.Duration {
		return ds[min(len(ds)-1, int(p*float64(len(ds))))].Round(time.Millisecond)
	}
	return fmt.Sprintf("%s: median %v, p99 %v", l.name, q(0.5), q(0.99))
}

// TestFeedLoad is the change feed's load run (issue 50): transfers from
// feedLoadWorkers goroutines, in four quarters, with two sequencers
// racing for the feed (each an application of its own), an All reader and
// two subscriber groups following it. During the second quarter the
// holder stalls after tagging a batch, before publishing it, until the
// other takes over (its lease lapsed); at the third the holder is
// restarted (its Run canceled, which gives the lease up, and started
// again); during the fourth the holder stalls after publishing, until
// the other takes over. Every committed transfer is in the feed exactly
// once, and was handed exactly once to the reader and to each group.
// make test runs it small (-feedload.transfers 120 at a 300 ms lease);
// make soak at 2,000 with the default lease, 10 s.
func TestFeedLoad(t *testing.T) {
	ctx := testCtx(t)
	if *feedLoadTransfers >= 1000 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.Background(), 30*time.Minute)
		t.Cleanup(cancel)
	}
	b := newBank(t)
	ids := make([]string, 16)
	opening := map[string]int64{}
	for i := range ids {
		ids[i] = fmt.Sprintf("acct-%02d", i)
		opening[ids[i]] = 1_000_000_000
	}
	b.open(opening)
	lease, n := *feedLoadLease, *feedLoadTransfers
	poll := min(200*time.Millisecond, lease/5)
	seqs := map[string]*loadSequencer{}
	errs := make(chan error, 16)
	var running sync.WaitGroup
	runCtx, stopAll := context.WithCancel(ctx)
	defer func() { stopAll(); running.Wait() }()
	stall := &loadStall{reached: make(chan string), release: make(chan struct{}), quit: runCtx.Done()}
	for _, name := range []string{"seq-a", "seq-b"} {
		hook := func(step int) error { return stall.hook(name, step) }
		s := &loadSequencer{name: name, c: b.coordinator(twopc.WithApplication(name)), restart: make(chan struct{}), errs: errs,
			opts: []twopc.FeedOption{twopc.WithFeedLease(lease), twopc.WithFeedPoll(poll), twopc.WithFeedHook(hook)}}
		seqs[name] = s
		running.Add(1)
		go func() { defer running.Done(); s.loop(runCtx) }()
	}
	waitFeed(t, ctx, b.db, feedLoadName)
	f := b.c.Feed(feedLoadName, twopc.WithFeedPoll(poll))
	status := func() *twopc.FeedStatus {
		st, err := f.Status(ctx)
		require.NoError(t, err)
		return st
	}
	// waitFor polls the feed's status until ok says so, failing on a
	// sequencer's error.
	waitFor := func(what string, ok func(*twopc.FeedStatus) bool) *twopc.FeedStatus {
		t.Helper()
		for {
			if st := status(); ok(st) {
				return st
			}
			select {
			case err := <-errs:
				t.Fatal(err)
			case <-ctx.Done():
				t.Fatalf("%s: %v", what, ctx.Err())
			case <-time.After(poll):
			}
		}
	}

	// The consumers: an All reader and two groups.
	reader := newLoadConsumer("the All reader", n)
	groups := []*loadConsumer{newLoadConsumer("group one", n), newLoadConsumer("group two", n)}
	running.Add(1 + len(groups))
	go func() {
		defer running.Done()
		for e, err := range f.All(runCtx, "") {
			if err != nil {
				if runCtx.Err() == nil {
					errs <- fmt.Errorf("All: %w", err)
				}
				return
			}
			reader.take(e)
		}
	}()
	for i, g := range groups {
		go func() {
			defer running.Done()
			err := f.Subscribe(runCtx, fmt.Sprintf("g%d", i+1), func(_ context.Context, evs []twopc.Event) error {
				g.take(evs...)
				return nil
			})
			if runCtx.Err() == nil {
				errs <- fmt.Errorf("%s: Subscribe: %w", g.name, err)
			}
		}()
	}

	// The transfers, a quarter at a time, each quarter from
	// feedLoadWorkers goroutines.
	var mu sync.Mutex
	var committed []bson.ObjectID
	returned := map[bson.ObjectID]time.Time{}
	quarter := func(q int) <-chan struct{} {
		done := make(chan struct{})
		var next atomic.Int64
		next.Store(int64(q * n / 4))
		end := int64((q + 1) * n / 4)
		var wg sync.WaitGroup
		for w := range feedLoadWorkers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(q), uint64(w)))
				for i := next.Add(1) - 1; i < end; i = next.Add(1) - 1 {
					src := rng.IntN(len(ids))
					dst := (src + 1 + rng.IntN(len(ids)-1)) % len(ids)
					txn, err := b.c.Transfer(ctx, ids[src], ids[dst], 1+rng.Int64N(100))
					if err != nil {
						t.Errorf("transfer %d: %v", i, err)
						return
					}
					now := time.Now()
					mu.Lock()
					committed = append(committed, txn.ID)
					returned[txn.ID] = now
					mu.Unlock()
				}
			}()
		}
		go func() { wg.Wait(); close(done) }()
		return done
	}
	// takeOver stalls the holder at step, during quarter q, until the
	// other sequencer holds the lease: taken over from the stalled one
	// (or before it stalled, its lease lapsed under load: the stalled one
	// learns it at its next write).
	takeOver := func(q, step int) {
		stall.armed.Store(int64(step) + 1)
		done := quarter(q)
		var stalled string
		select {
		case stalled = <-stall.reached:
		case err := <-errs:
			t.Fatal(err)
		case <-ctx.Done():
			t.Fatalf("quarter %d: no sequencer reached step %d", q, step)
		}
		waitFor("the takeover", func(st *twopc.FeedStatus) bool {
			return st.Holder != "" && !strings.HasPrefix(st.Holder, stalled+"/")
		})
		stall.release <- struct{}{}
		<-done
	}

	<-quarter(0)
	begin := status()
	takeOver(1, twopc.FeedTagged)
	holder := waitFor("a holder", func(st *twopc.FeedStatus) bool { return st.Holder != "" })
	done := quarter(2)
	select {
	case seqs[strings.SplitN(holder.Holder, "/", 2)[0]].restart <- struct{}{}:
	case err := <-errs:
		t.Fatal(err)
	}
	<-done
	takeOver(3, twopc.FeedPublished)
	require.Len(t, committed, n, "every transfer committed")

	for _, c := range append([]*loadConsumer{reader}, groups...) {
		select {
		case <-c.all:
		case err := <-errs:
			t.Fatal(err)
		case <-ctx.Done():
			c.mu.Lock()
			got := len(c.seen)
			c.mu.Unlock()
			t.Fatalf("%s: %d of %d transfers handed", c.name, got, n)
		}
	}
	end := waitFor("the feed caught up", func(st *twopc.FeedStatus) bool {
		return st.Waiting == 0 && st.Orphaned == 0 && st.Unpublished == 0
	})
	stopAll()
	running.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}

	// The whole feed, read again: each transfer once.
	feed := newLoadConsumer("the feed", n)
	var pos twopc.Position
	for {
		evs, next, err := f.Read(ctx, pos, 1000)
		require.NoError(t, err)
		feed.take(evs...)
		if len(evs) == 0 {
			break
		}
		pos = next
	}
	for _, c := range append([]*loadConsumer{feed, reader}, groups...) {
		c.check(t, committed)
	}
	assert.GreaterOrEqual(t, end.Takeovers-begin.Takeovers, 2, "the two stalls taken over")
	require.NoError(t, b.c.Settle(ctx))
	b.checkSettled(opening)
	t.Logf("%d transfers from %d goroutines, lease %v: %d batches, %d takeovers, epoch %d; each transfer once in the feed, the All reader and two groups",
		n, feedLoadWorkers, lease, end.Published, end.Takeovers, end.Epoch)
	t.Logf("from a Transfer's return to its event's first handing (two stalls and a restart included): %s; %s; %s",
		reader.delays(returned), groups[0].delays(returned), groups[1].delays(returned))
}
