package main

import (
	"context"
	"errors"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/twopc/twopc"
)

// TestFeedStatusCommand: feed status NAME prints the feed as status does
// and each subscriber group's lag: a group that acknowledged every event
// (stopped cleanly by its context), one that acknowledged one of three,
// one that acknowledged none; their saved positions, how many published
// events each is behind, the oldest one's time and its age by the
// server's clock, as text and as JSON.
func TestFeedStatusCommand(t *testing.T) {
	f := newFixture(t)
	f.open(map[string]int64{"alice": 1000, "bob": 0})
	feed, _ := f.feedRun(nil, "audit")
	for range 3 {
		f.done("alice", "bob", 10)
	}
	evs := f.feedEvents(feed, 3)

	// No group yet: said so.
	r := f.run("feed", "status", "audit")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "Change feeds (twopc help feed):")
	require.Regexp(t, `(?m)^\s+audit\s+\d+\s+1\s+seed/\S+\s+`, r.stdout)
	require.Contains(t, r.stdout, "No subscriber groups")

	// caught: every event, its subscriber stopped (ctx canceled) by its
	// handler once it had them all, its stop clean (saved).
	ctx, cancel := context.WithCancel(f.ctx)
	got := 0
	err := feed.Subscribe(ctx, "caught", func(_ context.Context, es []twopc.Event) error {
		got += len(es)
		if got == len(evs) {
			cancel()
		}
		return nil
	})
	require.ErrorIs(t, err, context.Canceled)
	// one: a slice of 1, the first acknowledged, the second refused.
	refused := errors.New("not now")
	calls := 0
	err = f.c.Feed("audit", twopc.WithFeedSlice(1)).Subscribe(f.ctx, "one", func(context.Context, []twopc.Event) error {
		calls++
		if calls > 1 {
			return refused
		}
		return nil
	})
	require.ErrorIs(t, err, refused)
	// none: refused the first.
	err = feed.Subscribe(f.ctx, "none", func(context.Context, []twopc.Event) error { return refused })
	require.ErrorIs(t, err, refused)

	r = f.run("feed", "status", "audit", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	var rep feedStatusReport
	r.decode(t, &rep)
	assert.Equal(t, "audit", rep.Name)
	assert.False(t, rep.ServerTime.IsZero())
	require.Len(t, rep.Groups, 3)
	byName := map[string]groupStatusJSON{}
	for _, g := range rep.Groups {
		byName[g.Name] = g
		assert.Empty(t, g.Holder, "%s: its subscriber gave the lease up on return", g.Name)
		assert.False(t, g.Truncated, g.Name)
	}
	caught, one, none := byName["caught"], byName["one"], byName["none"]
	assert.Equal(t, string(evs[2].Pos), caught.Position)
	assert.Zero(t, caught.Behind)
	assert.Nil(t, caught.Oldest)
	assert.Nil(t, caught.OldestAge)
	assert.Equal(t, string(evs[0].Pos), one.Position)
	assert.Equal(t, 2, one.Behind)
	require.NotNil(t, one.Oldest)
	assert.True(t, evs[1].At.Equal(*one.Oldest), "%v, %v", evs[1].At, *one.Oldest)
	require.NotNil(t, one.OldestAge)
	assert.InDelta(t, rep.ServerTime.Sub(evs[1].At).Seconds(), *one.OldestAge, 0.001)
	assert.Positive(t, *one.OldestAge)
	assert.Equal(t, 3, none.Behind)
	require.NotNil(t, none.Oldest)
	assert.True(t, evs[0].At.Equal(*none.Oldest))
	require.NotNil(t, none.OldestAge)
	assert.GreaterOrEqual(t, *none.OldestAge, *one.OldestAge)

	// The same as text: a row per group, as status prints them.
	r = f.run("feed", "status", "audit")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "Subscriber groups:")
	require.Regexp(t, `(?m)^\s+FEED\s+GROUP\s+POSITION\s+BEHIND\s+OLDEST WAITING\s+SUBSCRIBER$`, r.stdout)
	require.Regexp(t, `(?m)^\s+audit\s+caught\s+`+regexp.QuoteMeta(string(evs[2].Pos))+`\s+0\s+-\s+none$`, r.stdout)
	require.Regexp(t, `(?m)^\s+audit\s+one\s+`+regexp.QuoteMeta(string(evs[0].Pos))+`\s+2\s+`+
		regexp.QuoteMeta(timestamp(evs[1].At))+` \([^)]+ ago\)\s+none$`, r.stdout)
	require.Regexp(t, `(?m)^\s+audit\s+none\s+\S+\s+3\s+`+regexp.QuoteMeta(timestamp(evs[0].At))+` \([^)]+ ago\)\s+none$`, r.stdout)
	require.NotContains(t, r.stdout, "No subscriber groups")

	// status --json says the same ages.
	r = f.run("status", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	var st statusReport
	r.decode(t, &st)
	require.Len(t, st.Feeds, 1)
	require.Len(t, st.Feeds[0].Groups, 3)
	for _, g := range st.Feeds[0].Groups {
		if g.Oldest == nil {
			assert.Nil(t, g.OldestAge, g.Name)
			continue
		}
		require.NotNil(t, g.OldestAge, g.Name)
		assert.InDelta(t, st.ServerTime.Sub(*g.Oldest).Seconds(), *g.OldestAge, 0.001, g.Name)
	}

	// Bad input.
	for _, tc := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"status"}, exitUsage, "missing NAME: twopc feed status NAME"},
		{[]string{"status", "audit", "--limit", "3"}, exitUsage, "--limit is for reading a feed: feed status takes none"},
		{[]string{"status", "No"}, exitUsage, `feed name "No"`},
		{[]string{"status", "nosuch"}, exitFailed, `no feed "nosuch"`},
	} {
		r := f.run("feed", tc.args...)
		require.Equal(t, tc.code, r.code, "%v: %s%s", tc.args, r.stdout, r.stderr)
		require.Contains(t, r.stderr, tc.stderr, tc.args)
	}

	// A deleted feed: its row says so.
	require.NoError(t, feed.Delete(f.ctx))
	r = f.run("feed", "status", "audit")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Regexp(t, `(?m)^\s+audit\s+\d+\s+\d+\s+.*\s+-\s+yes$`, r.stdout)
}
