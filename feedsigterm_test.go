package twopc_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/twopc/twopc"
)

// envFeed configures a subscriber child (TWOPC_CHILD=subscribe): "feed
// group slice leaseMs slow".
const envFeed = "TWOPC_CHILD_FEED"

// subscribeChild is a consumer process (TWOPC_CHILD=subscribe): it
// subscribes a group until SIGTERM, as a service does. Its handler
// prints "handed N ids" at each call; the first call returns at once,
// the second waits for the SIGTERM, prints "stopping <its context's
// error>", and, unless slow, returns nil at once; slow, it outlives its
// grace: it waits for its context to end, prints "ended <unix ns>", then
// for a line on stdin before it returns nil. Each call that returns nil
// prints "acked ids" just before. Subscribe's return is printed "exit
// <error>".
func subscribeChild(c *twopc.Coordinator) int {
	var name, group string
	var slice, leaseMs int
	var slow bool
	if _, err := fmt.Sscan(os.Getenv(envFeed), &name, &group, &slice, &leaseMs, &slow); err != nil {
		fmt.Fprintln(os.Stderr, "child:", envFeed, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	f := c.Feed(name, twopc.WithFeedSlice(slice), twopc.WithFeedLease(time.Duration(leaseMs)*time.Millisecond),
		twopc.WithFeedPoll(5*time.Millisecond))
	stdin := bufio.NewScanner(os.Stdin)
	calls := 0
	err := f.Subscribe(ctx, group, func(hctx context.Context, evs []twopc.Event) error {
		calls++
		ids := make([]string, len(evs))
		for i, e := range evs {
			ids[i] = e.ID
		}
		fmt.Printf("handed %d %s\n", calls, strings.Join(ids, ","))
		if calls >= 2 {
			<-ctx.Done() // SIGTERM, mid-slice
			fmt.Printf("stopping %v\n", hctx.Err())
			if slow {
				<-hctx.Done()
				fmt.Printf("ended %d\n", time.Now().UnixNano())
				stdin.Scan()
			}
		}
		fmt.Printf("acked %s\n", strings.Join(ids, ","))
		return nil
	})
	fmt.Printf("exit %v\n", err)
	return 0
}

// subscriber is a consumer child process and its output.
type subscriber struct {
	cmd   *exec.Cmd
	lines *bufio.Scanner
	stdin io.WriteCloser
}

// startSubscriber starts a consumer process (subscribeChild) of feed
// name's group.
func startSubscriber(t *testing.T, b *bank, name, group string, slice int, lease time.Duration, slow bool) *subscriber {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChild+"=subscribe", envURI+"="+b.server.URI, envDB+"="+b.db.Name(), envApp+"=consumer",
		envFeed+"="+fmt.Sprintf("%s %s %d %d %t", name, group, slice, lease.Milliseconds(), slow))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return &subscriber{cmd: cmd, lines: bufio.NewScanner(out), stdin: in}
}

// expect reads the child's next line, which must begin with prefix, and
// returns the rest.
func (s *subscriber) expect(t *testing.T, prefix string) string {
	t.Helper()
	require.True(t, s.lines.Scan(), "the consumer stopped before %q: %v", prefix, s.lines.Err())
	line := s.lines.Text()
	require.True(t, strings.HasPrefix(line, prefix+" "), "got %q, want %q ...", line, prefix)
	return strings.TrimPrefix(line, prefix+" ")
}

// TestFeedSIGTERMdConsumer runs a subscriber in a process of its own and
// sends it SIGTERM while its handler works on its second slice: the
// handler's context stays live, the call finishes and its events are
// acknowledged; the process exits with Subscribe's context.Canceled; the
// group's lease is given up, so a consumer restarted at once (the lease
// 10 s, its default) gets the next event within a fraction of it, and
// neither an acknowledged event again nor a gap: the two together
// handled every event once.
func TestFeedSIGTERMdConsumer(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	b.open(map[string]int64{"A": 1000, "B": 0})
	f := b.c.Feed("term", twopc.WithFeedPoll(5*time.Millisecond))
	feedRun(t, b, f)
	transfers(t, b, b.c, 6)
	all, _ := readUntil(t, f, "", 6)

	const lease = 10 * time.Second // the default: a restart that waited it out would show
	child := startSubscriber(t, b, "term", "hooks", 2, lease, false)
	first := strings.Fields(child.expect(t, "handed"))
	require.Equal(t, "1", first[0])
	child.expect(t, "acked")
	second := strings.Fields(child.expect(t, "handed"))
	require.Equal(t, "2", second[0])
	require.NoError(t, child.cmd.Process.Signal(syscall.SIGTERM))
	assert.Equal(t, "<nil>", child.expect(t, "stopping"), "the handler's context outlived the SIGTERM")
	assert.Equal(t, second[1], child.expect(t, "acked"))
	assert.Equal(t, context.Canceled.Error(), child.expect(t, "exit"))
	require.NoError(t, child.cmd.Wait(), "the consumer exits 0")
	acked := strings.Split(first[1]+","+second[1], ",")
	require.Equal(t, []string{all[0].ID, all[1].ID, all[2].ID, all[3].ID}, acked)

	st, err := f.Status(ctx)
	require.NoError(t, err)
	require.Len(t, st.Groups, 1)
	assert.Empty(t, st.Groups[0].Holder, "the group's lease given up")
	assert.Equal(t, all[3].Pos, st.Groups[0].Position, "the running call's events acknowledged")
	assert.Equal(t, 2, st.Groups[0].Behind)

	// The restart: at once, after the acknowledged events, none lost.
	more := transfers(t, b, b.c, 1)
	got := make(chan twopc.Event, 10)
	rctx, rstop := context.WithCancel(ctx)
	rdone := make(chan error, 1)
	began := time.Now()
	go func() {
		rdone <- b.c.Feed("term", twopc.WithFeedPoll(5*time.Millisecond), twopc.WithFeedLease(lease)).
			Subscribe(rctx, "hooks", func(_ context.Context, evs []twopc.Event) error {
				for _, e := range evs {
					got <- e
				}
				return nil
			})
	}()
	var after []twopc.Event
	for len(after) < 3 {
		select {
		case e := <-got:
			if len(after) == 0 {
				waited := time.Since(began)
				assert.Less(t, waited, lease/4, "the restart waited %v: the lease was not given up", waited)
			}
			after = append(after, e)
		case err := <-rdone:
			t.Fatalf("the restarted subscriber stopped: %v", err)
		}
	}
	rstop()
	require.ErrorIs(t, <-rdone, context.Canceled)
	assert.Equal(t, all[4].ID, after[0].ID, "the restart begins after the acknowledged")
	assert.Equal(t, all[5].ID, after[1].ID)
	assert.Equal(t, more[0], after[2].Txn.ID, "then what came after")
	select {
	case e := <-got:
		t.Fatalf("an event handed again: %s", e.ID)
	default:
	}
}

// TestFeedSIGTERMdSlowHandler: a consumer SIGTERM'd while its handler
// works on a slice, the handler slower than the grace (it outlives its
// context, which ends nine tenths of a lease after the last renewal, the
// renewals stopped). Another subscriber of the group takes over only
// after that context ended (at most one handler with a live context),
// and is handed that slice again (not acknowledged: the handler's nil,
// returned after its context ended, saves nothing), and the late return
// does not move the group's position.
func TestFeedSIGTERMdSlowHandler(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	b.open(map[string]int64{"A": 1000, "B": 0})
	f := b.c.Feed("slow", twopc.WithFeedPoll(5*time.Millisecond))
	feedRun(t, b, f)
	transfers(t, b, b.c, 4)
	all, head := readUntil(t, f, "", 4)

	const lease = time.Second
	child := startSubscriber(t, b, "slow", "hooks", 2, lease, true)
	child.expect(t, "handed")
	child.expect(t, "acked")
	second := strings.Fields(child.expect(t, "handed"))
	require.Equal(t, all[2].ID+","+all[3].ID, second[1])
	require.NoError(t, child.cmd.Process.Signal(syscall.SIGTERM))
	assert.Equal(t, "<nil>", child.expect(t, "stopping"))

	// A second subscriber, at once: it may take the group only once the
	// first's lease lapsed, after the first handler's context ended.
	type call struct {
		at  time.Time
		evs []twopc.Event
	}
	calls := make(chan call, 10)
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- b.c.Feed("slow", twopc.WithFeedPoll(5*time.Millisecond), twopc.WithFeedLease(lease)).
			Subscribe(sctx, "hooks", func(_ context.Context, evs []twopc.Event) error {
				calls <- call{time.Now(), evs}
				return nil
			})
	}()
	ns, err := strconv.ParseInt(child.expect(t, "ended"), 10, 64)
	require.NoError(t, err)
	ended := time.Unix(0, ns)
	var c call
	select {
	case c = <-calls:
	case err := <-done:
		t.Fatalf("the second subscriber stopped: %v", err)
	}
	assert.True(t, c.at.After(ended), "the second handler began at %v, the first's context ended at %v", c.at, ended)
	ids := make([]string, len(c.evs))
	for i, e := range c.evs {
		ids[i] = e.ID
	}
	assert.Equal(t, second[1], strings.Join(ids, ","), "the slice the first did not finish within its grace, handed again")

	// The first handler returns nil now, long after its context ended.
	_, err = fmt.Fprintln(child.stdin, "return")
	require.NoError(t, err)
	child.expect(t, "acked")
	assert.Contains(t, child.expect(t, "exit"), "context canceled")
	require.NoError(t, child.cmd.Wait())
	for groupPos(t, b, "slow", "hooks") != string(head) { // the second saved the head
		require.NoError(t, ctx.Err())
	}
	st, err := f.Status(ctx)
	require.NoError(t, err)
	require.Len(t, st.Groups, 1)
	assert.Equal(t, head, st.Groups[0].Position, "the late return moved nothing")
	assert.NotEmpty(t, st.Groups[0].Holder, "the second holds the group: the first's release matched nothing")
	stop()
	require.ErrorIs(t, <-done, context.Canceled)
}
