package twopc_test

import (
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc"
)

// TestFeedWakes: on a server with change streams (a replica set, a
// sharded cluster: the GitHub workflow's jobs), a sequencer that polls
// once an hour numbers a transfer made after it opened its stream: the
// log's write woke it. On a server with none (the development server, a
// standalone), the sequencer says so once, at info level, and numbers what
// its polls find. Either way the event is read once.
func TestFeedWakes(t *testing.T) {
	h := &kept{ch: make(chan slog.Record, 100)}
	b := newBank(t, twopc.WithSyncSettle(), twopc.WithLogger(slog.New(h)))
	ctx := testCtx(t)
	b.open(map[string]int64{"A": 1000, "B": 0})
	said := func() (n int) {
		for _, r := range h.all() {
			if strings.Contains(r.Message, "no change stream") {
				n++
				assert.Equal(t, slog.LevelInfo, r.Level)
			}
		}
		return n
	}
	watching := make(chan struct{})
	var once sync.Once
	// A sequencer that polls once an hour and renews its lease every 20
	// minutes: after its first round, only a wake numbers a transfer
	// within the test's time.
	stop := feedRun(t, b, b.c.Feed("wake", twopc.WithFeedPoll(time.Hour), twopc.WithFeedLease(time.Hour), twopc.WithFeedHook(func(step int) error {
		if step == twopc.FeedWatching {
			once.Do(func() { close(watching) })
		}
		return nil
	})))
	streams := false
	for decided := false; !decided; {
		select {
		case <-watching:
			streams, decided = true, true
		case r := <-h.ch:
			decided = strings.Contains(r.Message, "no change stream")
		case <-ctx.Done():
			t.Fatal("the sequencer neither opened a change stream nor said it polls")
		}
	}
	if !streams {
		// No stream: the hourly sequencer is stopped, having said so once
		// (it looks again only after 30 s), and one that polls takes over,
		// then another, after it stopped: each Run says it once.
		stop()
		assert.Equal(t, 1, said(), "said once")
		polling := b.c.Feed("wake", twopc.WithFeedPoll(5*time.Millisecond))
		stop = feedRun(t, b, polling)
		transfers(t, b, b.c, 1)
		readUntil(t, polling, "", 1)
		stop()
		feedRun(t, b, polling)
	}
	want := 1 // this transfer's event, after the polling one's, if any
	if !streams {
		want = 2
	}
	txns := transfers(t, b, b.c, 1)
	evs, _ := readUntil(t, b.c.Feed("wake", twopc.WithFeedPoll(5*time.Millisecond)), "", want)
	assert.Equal(t, txns[0], evs[want-1].Txn.ID)
	if streams {
		assert.Zero(t, said(), "a server with change streams")
	} else {
		assert.LessOrEqual(t, said(), 3, "once a Run at most")
	}
}

// TestFeedRenewsWhileWaiting: a sequencer whose poll is longer than its
// lease renews the lease while it waits between rounds (a third of a
// lease after the last stamp), so that another waiting for the lease does
// not take it over: its epoch stays while the lease is renewed again and
// again.
func TestFeedRenewsWhileWaiting(t *testing.T) {
	b := newBank(t, twopc.WithSyncSettle())
	ctx := testCtx(t)
	b.open(map[string]int64{"A": 1000, "B": 0})
	lease := 3 * time.Second
	feedRun(t, b, b.c.Feed("renew", twopc.WithFeedPoll(time.Hour), twopc.WithFeedLease(lease)))
	var d struct {
		Epoch        int64     `bson:"epoch"`
		LastModified time.Time `bson:"lastModified"`
	}
	read := func() {
		require.NoError(t, b.db.Collection("transactions_feeds").FindOne(ctx, bson.D{{Key: "_id", Value: "feed:renew"}}).Decode(&d))
		require.NoError(t, ctx.Err())
	}
	for read(); d.Epoch == 0; read() { // until it took the lease
	}
	// Another, ready to take over the moment the lease lapses.
	feedRun(t, b, b.coordinator().Feed("renew", twopc.WithFeedPoll(5*time.Millisecond), twopc.WithFeedLease(lease)))
	seen := map[time.Time]bool{}
	for len(seen) < 3 { // the take's stamp, then two renewals
		read()
		require.EqualValues(t, 1, d.Epoch, "taken over: the lease was not renewed")
		seen[d.LastModified] = true
	}
}
