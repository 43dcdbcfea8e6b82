package main

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/internal/schema"
)

// feedRun starts the sequencer of feed name on coordinator c (the
// fixture's if nil), and returns once the feed's document exists and the
// server's clock is past its since, so that every transaction the test
// makes next is the feed's. The sequencer stops when the test ends (or
// at stop); an error of it other than that end, or the feed's deletion,
// fails the test.
func (f *fixture) feedRun(c *twopc.Coordinator, name string) (feed *twopc.Feed, stop func()) {
	f.t.Helper()
	if c == nil {
		c = f.c
	}
	feed = c.Feed(name, twopc.WithFeedPoll(5*time.Millisecond))
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan error, 1)
	go func() { done <- feed.Run(ctx) }()
	var doc struct {
		Since time.Time `bson:"since"`
	}
	for {
		err := f.db.Collection("transactions_feeds").FindOne(f.ctx, bson.D{{Key: "_id", Value: "feed:" + name}}).Decode(&doc)
		if err == nil {
			break
		}
		select {
		case err := <-done:
			cancel()
			f.t.Fatalf("feed %s: Run: %v", name, err)
		case <-time.After(5 * time.Millisecond):
		}
		require.NoError(f.t, f.ctx.Err())
	}
	for {
		now, err := schema.ServerNow(f.ctx, f.db)
		require.NoError(f.t, err)
		if now.After(doc.Since) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, twopc.ErrFeedDeleted) {
			f.t.Errorf("feed %s: Run: %v", name, err)
		}
	}
	f.t.Cleanup(stop)
	return feed, stop
}

// feedEvents reads feed from the start, through the library, until it
// has n events, and returns them.
func (f *fixture) feedEvents(feed *twopc.Feed, n int) []twopc.Event {
	f.t.Helper()
	for {
		evs, _, err := feed.Read(f.ctx, "", 1000)
		require.NoError(f.t, err)
		if len(evs) >= n {
			require.Len(f.t, evs, n, "more events than the test made")
			return evs
		}
		require.NoError(f.t, f.ctx.Err(), "feed %s: %d events, want %d", feed.Name(), len(evs), n)
		time.Sleep(5 * time.Millisecond)
	}
}

// feedLine is one line of feed --json.
type feedLine struct {
	ID          string          `json:"id"`
	Kind        string          `json:"kind"`
	Pos         string          `json:"pos"`
	At          time.Time       `json:"at"`
	Transaction json.RawMessage `json:"transaction"`
	Error       string          `json:"error"`
	ExitStatus  int             `json:"exitStatus"`
}

// feedLines parses feed --json's output, one JSON object a line.
func feedLines(t *testing.T, stdout string) []feedLine {
	t.Helper()
	var out []feedLine
	for _, line := range strings.Split(strings.TrimRight(stdout, "\n"), "\n") {
		if line == "" {
			continue
		}
		var l feedLine
		require.NoError(t, json.Unmarshal([]byte(line), &l), "line %q", line)
		out = append(out, l)
	}
	return out
}

// eventRows are the lines of feed's human output that are events (they
// begin with a position), split into their columns' first words.
func eventRows(stdout string) [][]string {
	var rows [][]string
	for _, line := range strings.Split(stdout, "\n") {
		fields := strings.Fields(line)
		if len(fields) > 0 && regexp.MustCompile(`^\d+\.\d+$`).MatchString(fields[0]) {
			rows = append(rows, fields)
		}
	}
	return rows
}

// TestFeedCommand makes a feed and events of four kinds, and reads them
// with the tool: every one, in the library's order, by page, as JSON,
// and after a position printed; status shows the feed; then feed delete,
// after which the feed is refused.
func TestFeedCommand(t *testing.T) {
	f := newFixture(t)
	f.open(map[string]int64{"alice": 1000, "bob": 0, "carol": 0, "poor": 5})
	feed, _ := f.feedRun(nil, "audit")

	t1 := f.done("alice", "bob", 100)
	legs, err := f.c.TransferLegs(f.ctx, []twopc.Leg{{Account: "alice", Amount: -30}, {Account: "bob", Amount: 20}, {Account: "carol", Amount: 10}})
	require.NoError(t, err)
	h, err := f.c.Hold(f.ctx, "alice", "carol", 40)
	require.NoError(t, err)
	_, err = f.c.Transfer(f.ctx, "poor", "bob", 50)
	require.ErrorIs(t, err, twopc.ErrInsufficientFunds)
	want := f.feedEvents(feed, 4)

	// Every event, in the library's order, one line each.
	r := f.run("feed", "audit")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "Feed audit, events after the start:")
	require.Regexp(t, `(?m)^POS\s+KIND\s+AT\s+TRANSACTION\s+LEGS\s+EVENT$`, r.stdout)
	rows := eventRows(r.stdout)
	require.Len(t, rows, 4, r.stdout)
	for i, e := range want {
		row := rows[i]
		assert.Equal(t, string(e.Pos), row[0])
		assert.Equal(t, string(e.Kind), row[1])
		assert.Equal(t, timestamp(e.At), row[2])
		assert.Equal(t, e.Txn.ID.Hex(), row[3])
		assert.Equal(t, e.ID, row[len(row)-1])
	}
	require.Contains(t, r.stdout, "alice → bob 100")
	require.Contains(t, r.stdout, "alice -30, bob +20, carol +10")
	require.Contains(t, r.stdout, t1.Hex()+".committed")
	require.Contains(t, r.stdout, legs.ID.Hex()+".committed")
	require.Contains(t, r.stdout, h.ID.Hex()+".held")
	require.Regexp(t, `\.canceled\n`, r.stdout)
	require.Contains(t, r.stdout, minorNote)
	require.Contains(t, r.stdout, "End of the published events: --after "+string(want[3].Pos)+" reads the ones published next.")

	// --json: one object a line, the transaction as stored, in the state
	// the event left it in.
	r = f.run("feed", "audit", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	lines := feedLines(t, r.stdout)
	require.Len(t, lines, 4)
	for i, e := range want {
		l := lines[i]
		assert.Equal(t, e.ID, l.ID)
		assert.Equal(t, string(e.Kind), l.Kind)
		assert.Equal(t, string(e.Pos), l.Pos)
		assert.True(t, e.At.Equal(l.At), "%v, %v", e.At, l.At)
		var txn map[string]any
		require.NoError(t, json.Unmarshal(l.Transaction, &txn))
		assert.Equal(t, e.Txn.ID.Hex(), txn["_id"])
		assert.Equal(t, string(e.Txn.State), txn["state"])
		if e.Txn.ID == legs.ID {
			assert.NotContains(t, txn, "source", "a transfer of legs stores none")
			assert.Len(t, txn["legs"], 3)
		}
		if e.Txn.ID == h.ID {
			assert.Equal(t, "held", txn["state"])
			assert.Equal(t, true, txn["hold"])
		}
		if e.Txn.ID == t1 {
			assert.Equal(t, "applied", txn["state"], "committed: the state the event left it in")
			assert.Equal(t, "alice", txn["source"])
			assert.EqualValues(t, 100, txn["value"])
		}
	}

	// --after a position printed: the events after it.
	r = f.run("feed", "audit", "--after", rows[1][0])
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "Feed audit, events after "+rows[1][0]+":")
	after := eventRows(r.stdout)
	require.Len(t, after, 2, r.stdout)
	assert.Equal(t, want[2].ID, after[0][len(after[0])-1])
	assert.Equal(t, want[3].ID, after[1][len(after[1])-1])
	r = f.run("feed", "audit", "--after", string(want[3].Pos), "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Empty(t, r.stdout, "nothing after the last")
	r = f.run("feed", "audit", "--after", string(want[3].Pos))
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "No events.")

	// --limit: a page, and where the next starts.
	r = f.run("feed", "audit", "--limit", "2")
	require.Equal(t, exitOK, r.code, r.stderr)
	page := eventRows(r.stdout)
	require.Len(t, page, 2, r.stdout)
	require.Contains(t, r.stdout, "More follow: --after "+string(want[1].Pos)+"\n")
	r = f.run("feed", "audit", "--limit", "2", "--after", string(want[1].Pos), "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	lines = feedLines(t, r.stdout)
	require.Len(t, lines, 2)
	assert.Equal(t, []string{want[2].ID, want[3].ID}, []string{lines[0].ID, lines[1].ID})
	r = f.run("feed", "audit", "--limit", "4")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Len(t, eventRows(r.stdout), 4)
	require.Contains(t, r.stdout, "End of the published events", "exactly the limit: none more")

	// status: the feed, its published batch, nothing waiting once read;
	// a group whose handler took nothing is behind by every event.
	refused := errors.New("not now")
	require.ErrorIs(t, feed.Subscribe(f.ctx, "hooks", func(context.Context, []twopc.Event) error { return refused }), refused)
	st, err := feed.Status(f.ctx)
	require.NoError(t, err)
	require.GreaterOrEqual(t, st.Published, int64(1))
	r = f.run("status", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	var rep statusReport
	r.decode(t, &rep)
	require.Len(t, rep.Feeds, 1)
	fst := rep.Feeds[0]
	assert.Equal(t, "audit", fst.Name)
	assert.Equal(t, st.Published, fst.Published)
	assert.EqualValues(t, 1, fst.Epoch)
	assert.Zero(t, fst.Waiting, "nothing waits once every event was read")
	assert.Zero(t, fst.Takeovers)
	assert.False(t, fst.Deleted)
	assert.NotEmpty(t, fst.Holder)
	require.NotNil(t, fst.LeaseEnds)
	assert.True(t, fst.LeaseEnds.After(fst.Since))
	require.Len(t, fst.Groups, 1)
	assert.Equal(t, "hooks", fst.Groups[0].Name)
	assert.Equal(t, st.Groups[0].Behind, fst.Groups[0].Behind)
	assert.Positive(t, fst.Groups[0].Behind, "behind by every event")
	require.NotNil(t, fst.Groups[0].Oldest)
	r = f.run("status")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "Change feeds (twopc help feed):")
	require.Regexp(t, `(?m)^\s+FEED\s+PUBLISHED\s+EPOCH\s+SEQUENCER\s+LEASE ENDS\s+TAKEOVERS\s+WAITING\s+DELETED$`, r.stdout)
	require.Regexp(t, `(?m)^\s+audit\s+`+strconv.FormatInt(st.Published, 10)+`\s+1\s+seed/\S+\s+\S+ \(in [^)]+\)\s+0\s+0\s+no$`, r.stdout)
	require.Contains(t, r.stdout, "Subscriber groups:")
	require.Regexp(t, `(?m)^\s+audit\s+hooks\s+\S+\s+`+strconv.Itoa(st.Groups[0].Behind)+`\s+\S+ \([^)]+ ago\)\s+none$`, r.stdout)

	// Bad input: usage errors; a name no feed has: refused.
	for _, tc := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"Bad-Name"}, exitUsage, `feed name "Bad-Name": a name is 1 to 32 of a-z, 0-9 and _`},
		{[]string{strings.Repeat("a", 33)}, exitUsage, "a name is 1 to 32"},
		{[]string{"audit", "--after", "x"}, exitUsage, `invalid feed: position "x"`},
		{[]string{"audit", "--after", "1.999"}, exitUsage, "invalid feed"},
		{[]string{"audit", "--limit", "-1"}, exitUsage, "--limit must not be negative"},
		{[]string{"audit", "extra"}, exitUsage, `unexpected argument "extra"`},
		{[]string{}, exitUsage, "missing NAME | status NAME | delete NAME"},
		{[]string{"delete"}, exitUsage, "missing NAME: twopc feed delete NAME"},
		{[]string{"delete", "audit", "--follow"}, exitUsage, "--follow is for reading a feed"},
		{[]string{"delete", "No"}, exitUsage, `feed name "No"`},
		{[]string{"nosuch"}, exitFailed, `no feed "nosuch" on log "transactions" of database ` + f.db.Name()},
		{[]string{"delete", "nosuch"}, exitFailed, `no feed "nosuch"`},
	} {
		r := f.run("feed", tc.args...)
		require.Equal(t, tc.code, r.code, "%v: %s%s", tc.args, r.stdout, r.stderr)
		require.Contains(t, r.stderr, tc.stderr, tc.args)
		if tc.code == exitUsage {
			require.Contains(t, r.stderr, "Run 'twopc help feed' for its usage.", tc.args)
			require.Empty(t, r.stdout, tc.args)
		}
	}
	r = f.run("feed", "audit", "--after", "x", "--json")
	require.Equal(t, exitUsage, r.code, r.stderr)
	var e jsonError
	r.decode(t, &e)
	assert.Equal(t, exitUsage, e.ExitStatus)
	assert.Contains(t, e.Error, "invalid feed")

	// feed delete: said, then the feed is refused; again: said so.
	r = f.run("feed", "delete", "audit")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "Deleted feed audit (it had published ")
	require.Contains(t, r.stdout, "Its name is not used again.")
	r = f.run("feed", "audit")
	require.Equal(t, exitFailed, r.code, r.stdout+r.stderr)
	require.Contains(t, r.stderr, `twopc: feed deleted: "audit": deleted by Feed.Delete (twopc feed delete)`)
	r = f.run("feed", "audit", "--json")
	require.Equal(t, exitFailed, r.code, r.stdout+r.stderr)
	r.decode(t, &e)
	assert.Equal(t, exitFailed, e.ExitStatus)
	assert.Contains(t, e.Error, "feed deleted")
	r = f.run("feed", "audit", "--follow")
	require.Equal(t, exitFailed, r.code, r.stdout+r.stderr)
	require.Contains(t, r.stderr, "feed deleted")
	r = f.run("feed", "delete", "audit", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	var del feedDeleteReport
	r.decode(t, &del)
	assert.Equal(t, feedDeleteReport{Feed: "audit", Deleted: true, AlreadyDeleted: true, Published: st.Published}, del)
	r = f.run("feed", "delete", "audit")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "Feed audit was deleted already: nothing changed.")

	// status lists it, deleted.
	r = f.run("status", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	r.decode(t, &rep)
	require.Len(t, rep.Feeds, 1)
	assert.True(t, rep.Feeds[0].Deleted)
	r = f.run("status")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Regexp(t, `(?m)^\s+audit\s+\d+\s+\d+\s+.*\s+-\s+yes$`, r.stdout)
}

// TestFeedStatusNone: a log with no feed says so; --json has an empty
// list, not null.
func TestFeedStatusNone(t *testing.T) {
	f := newFixture(t)
	r := f.run("status")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "No change feeds.")
	r = f.run("status", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, `"feeds": []`)
}

// TestFeedFollow runs feed --follow until its context ends, as SIGINT
// ends it: it prints the events there were, then each one published
// while it runs, and exits 0; with --limit it stops by itself.
func TestFeedFollow(t *testing.T) {
	f := newFixture(t)
	f.open(map[string]int64{"alice": 1000, "bob": 0})
	feed, _ := f.feedRun(nil, "live")
	first := f.done("alice", "bob", 1)
	f.feedEvents(feed, 1)

	// follow runs feed live --follow with args until stop, as SIGINT
	// stops it.
	type following struct {
		lines          chan string
		code           chan int
		stop           context.CancelFunc
		stdout, stderr *lineWriter
	}
	follow := func(args ...string) *following {
		ctx, cancel := context.WithCancel(f.ctx)
		t.Cleanup(cancel)
		fl := &following{code: make(chan int, 1), stop: cancel, stdout: newLineWriter(), stderr: newLineWriter()}
		fl.lines = fl.stdout.lines
		go func() {
			fl.code <- run(ctx, append([]string{"feed", "live", "--uri", f.uri, "--db", f.db.Name(), "--follow"}, args...), fl.stdout, fl.stderr)
		}()
		return fl
	}
	// next returns the next line of fl's output that holds want.
	next := func(fl *following, want string) string {
		t.Helper()
		for {
			select {
			case line := <-fl.lines:
				if strings.Contains(line, want) {
					return line
				}
			case c := <-fl.code:
				t.Fatalf("feed --follow exited with %d before a line with %q: %s%s", c, want, fl.stdout, fl.stderr)
			case <-time.After(time.Minute):
				t.Fatalf("no line with %q: %s", want, fl.stdout)
			}
		}
	}

	// --json: the event there was, then one made while it follows.
	fl := follow("--json")
	var l feedLine
	require.NoError(t, json.Unmarshal([]byte(next(fl, first.Hex())), &l))
	assert.Equal(t, first.Hex()+".committed", l.ID)
	second := f.done("alice", "bob", 2)
	require.NoError(t, json.Unmarshal([]byte(next(fl, second.Hex())), &l))
	assert.Equal(t, second.Hex()+".committed", l.ID)
	fl.stop()
	require.Equal(t, exitOK, <-fl.code, fl.stderr.String())
	require.Len(t, feedLines(t, fl.stdout.String()), 2, fl.stdout.String())
	require.Empty(t, fl.stderr.String())

	// For people: the lines as they come, and where to resume.
	fl = follow("--after", l.Pos)
	next(fl, "Feed live, events after "+l.Pos+", following until interrupted:")
	third := f.done("alice", "bob", 3)
	row := next(fl, third.Hex())
	assert.Contains(t, row, "committed")
	assert.Contains(t, row, "alice → bob 3")
	fl.stop()
	require.Equal(t, exitOK, <-fl.code, fl.stderr.String())
	stdout := fl.stdout.String()
	require.NotContains(t, stdout, first.Hex())
	require.NotContains(t, stdout, second.Hex())
	require.Contains(t, stdout, "Stopped after 1 event: --after "+strings.Fields(row)[0]+" continues from here.")

	// --limit ends it without a signal.
	fl = follow("--limit", "2", "--json")
	select {
	case c := <-fl.code:
		require.Equal(t, exitOK, c, fl.stderr.String())
	case <-time.After(time.Minute):
		t.Fatalf("feed --follow --limit 2 still runs: %s", fl.stdout)
	}
	got := feedLines(t, fl.stdout.String())
	require.Len(t, got, 2)
	assert.Equal(t, []string{first.Hex() + ".committed", second.Hex() + ".committed"}, []string{got[0].ID, got[1].ID})

	// The feed deleted under a follower: it stops, exit status 1, its
	// JSON lines ending with the error's.
	fl = follow("--json")
	next(fl, third.Hex())
	r := f.run("feed", "delete", "live")
	require.Equal(t, exitOK, r.code, r.stderr)
	select {
	case c := <-fl.code:
		require.Equal(t, exitFailed, c, fl.stderr.String())
	case <-time.After(time.Minute):
		t.Fatalf("feed --follow still runs on a deleted feed: %s", fl.stdout)
	}
	got = feedLines(t, fl.stdout.String())
	require.Len(t, got, 4, fl.stdout.String())
	last := got[len(got)-1]
	assert.Contains(t, last.Error, "feed deleted")
	assert.Equal(t, exitFailed, last.ExitStatus)
	assert.Contains(t, fl.stderr.String(), "feed deleted")
}

// TestFeedTruncated: once history moved transactions of a batch out of
// the log, a reader from a position before it is refused, exit status 1,
// and says why, as --json says it on its last line; a reader from the
// start reads from what the feed keeps.
func TestFeedTruncated(t *testing.T) {
	f := newFixture(t)
	f.open(map[string]int64{"alice": 1000, "bob": 0})
	archive := f.db.Collection("archive")
	c := f.coordinator(twopc.WithHistory(time.Millisecond, archive), twopc.WithSyncSettle())
	feed, _ := f.feedRun(c, "kept")
	// A reader's position before anything was published.
	_, before, err := feed.Read(f.ctx, "", 10)
	require.NoError(t, err)
	txn, err := c.Transfer(f.ctx, "alice", "bob", 10)
	require.NoError(t, err)
	evs := f.feedEvents(feed, 1)

	r := f.run("feed", "kept", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Len(t, feedLines(t, r.stdout), 1)

	// Finished two hours ago: history moves it to the archive.
	_, err = f.db.Collection(twopc.DefaultTransactions).UpdateOne(f.ctx, bson.D{{Key: "_id", Value: txn.ID}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "lastModified", Value: time.Now().Add(-2 * time.Hour)}}}})
	require.NoError(t, err)
	rep, err := twopc.NewRecoverer(f.coordinator(twopc.WithApplication("recoverer"), twopc.WithHistory(time.Millisecond, archive))).RecoverOnce(f.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, rep.Removed, "%+v", rep)

	r = f.run("feed", "kept", "--after", string(before))
	require.Equal(t, exitFailed, r.code, r.stdout+r.stderr)
	require.Contains(t, r.stderr, "twopc: feed position older than what the feed keeps")
	require.Contains(t, r.stderr, "left the log (twopc.WithHistory) before this reader read them")
	r = f.run("feed", "kept", "--after", string(before), "--json")
	require.Equal(t, exitFailed, r.code, r.stdout+r.stderr)
	var e jsonError
	r.decode(t, &e)
	assert.Equal(t, exitFailed, e.ExitStatus)
	assert.Contains(t, e.Error, "older than what the feed keeps")
	r = f.run("feed", "kept", "--after", string(before), "--follow", "--json")
	require.Equal(t, exitFailed, r.code, r.stdout+r.stderr)
	// From the start: the start of what the feed keeps.
	r = f.run("feed", "kept")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "No events.")
	// A reader past it reads on.
	r = f.run("feed", "kept", "--after", string(evs[0].Pos))
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "No events.")
}
