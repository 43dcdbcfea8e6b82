package twopc_test

// The acceptance run of the repeats (make soak at 200 calls of each kind):
// keyed calls of every kind cut by short deadlines, each repeated at once
// with its key and a fresh context, in the coordinator that made the
// attempt, in another coordinator, or in another process sharing the
// first's application name, while a Recoverer runs at its defaults.

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc"
)

var acceptCalls = flag.Int("accept.calls", 3, "keyed calls of each kind cut short and repeated (make soak: 200)")

// acceptKinds are the kinds of keyed call the acceptance run cuts and
// repeats; "refused" is a transfer the server refuses (no funds).
var acceptKinds = []string{"transfer", "legs", "batch", "hold", "holdlegs", "capture", "refund", "reverse", "void", "refused"}

// acceptApp is the application name of the coordinator that makes the
// attempts, and of the child process that repeats some of them.
const acceptApp = "market-api"

// acceptTakeover is the takeover lease the attempts record: how long a
// repeat from another coordinator waits for an attempt left pending.
const acceptTakeover = time.Second

// acceptCall returns the keyed call of kind with key on c; of, for a call
// on an earlier transaction (capture, refund, reverse, void), is its id.
func acceptCall(c *twopc.Coordinator, kind, key string, of bson.ObjectID) func(context.Context) (*twopc.Txn, error) {
	k := twopc.WithKey(key)
	return func(ctx context.Context) (*twopc.Txn, error) {
		switch kind {
		case "transfer":
			return c.Transfer(ctx, "A", "B", 10, k)
		case "legs":
			return c.TransferLegs(ctx, []twopc.Leg{{Account: "A", Amount: -10}, {Account: "B", Amount: 7}, {Account: "C", Amount: 3}}, k)
		case "batch":
			res, err := c.TransferBatch(ctx, []twopc.TransferRequest{{Source: "A", Destination: "B", Value: 10, Key: key}})
			if err != nil {
				return nil, err
			}
			return res[0].Txn, res[0].Err
		case "hold":
			return c.Hold(ctx, "A", "C", 10, k)
		case "holdlegs":
			return c.HoldLegs(ctx, []twopc.Leg{{Account: "A", Amount: -10}, {Account: "B", Amount: 4}, {Account: "C", Amount: 6}}, k)
		case "capture":
			return c.Capture(ctx, of, 10, k)
		case "refund":
			return c.Refund(ctx, of, 10, k)
		case "reverse":
			return c.Reverse(ctx, of, k)
		case "void":
			return c.Void(ctx, of, k)
		case "refused":
			return c.Transfer(ctx, "P", "B", 10, k)
		}
		return nil, fmt.Errorf("unknown kind %q", kind)
	}
}

// repeatChild is the child process's side (TWOPC_CHILD=repeat): it reads
// "kind key id" lines, repeats each call at once with a fresh context (a
// minute away), and prints "key elapsed-ns error-or-<nil> txn-id".
func repeatChild(c *twopc.Coordinator) int {
	in := bufio.NewScanner(os.Stdin)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for in.Scan() {
		f := strings.Fields(in.Text())
		if len(f) != 3 {
			continue
		}
		of, _ := bson.ObjectIDFromHex(f[2])
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			start := time.Now()
			txn, err := acceptCall(c, f[0], f[1], of)(ctx)
			id := "-"
			if txn != nil {
				id = txn.ID.Hex()
			}
			mu.Lock()
			fmt.Printf("%s %d %s %v\n", f[1], time.Since(start), id, strings.ReplaceAll(fmt.Sprint(err), "\n", " "))
			mu.Unlock()
		}()
	}
	wg.Wait()
	return 0
}

// acceptRepeat is one repeat's answer, wherever it was made.
type acceptRepeat struct {
	key, kind, where string
	took             time.Duration
	id               string // the transaction it answered with; "-": none
	err              string // "<nil>": none
	inProgress       bool
	of               bson.ObjectID // the transaction a call on an earlier one was on
}

// TestRepeatAcceptance: -accept.calls keyed calls of each kind (transfer,
// legs, a batch's keyed request, hold, hold of legs, capture, refund,
// reverse, void, and a transfer the server refuses for want of funds),
// each cut by a deadline of 1 to 20 ms and repeated at once with its key
// and a fresh context (a minute away): a third in the coordinator that
// made the attempt, a third in another coordinator of another application,
// a third in another process sharing the first's application name; a
// Recoverer runs at its defaults. Every repeat answers the first attempt's
// final outcome: success (committed; held for a hold), or the server's
// refusal (ErrInsufficientFunds) for the refused kind; none answers
// ErrInProgress; every key's transaction ends as its repeat said (no key
// spent unless the server refused a leg), a later lookup by key names the
// transaction the repeat answered with, the balances are exact, and the
// audit is clean. It logs how long the repeats took, by where they were
// made, against the goals (one second in the same coordinator, the
// takeover lease elsewhere): figures, not assertions.
func TestRepeatAcceptance(t *testing.T) {
	ctx := testCtx(t)
	if *acceptCalls > 20 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.Background(), 60*time.Minute)
		defer cancel()
	}
	b := newBank(t, twopc.WithApplication(acceptApp), twopc.WithTakeoverAfter(acceptTakeover))
	n := *acceptCalls
	b.open(map[string]int64{"A": 1_000_000_000, "B": 0, "C": 0, "P": 0})
	other := b.coordinator(twopc.WithApplication("other-app"))

	rctx, stop := context.WithCancel(ctx)
	recovered := make(chan struct{})
	go func() {
		defer close(recovered)
		_ = twopc.NewRecoverer(b.coordinator(twopc.WithApplication("recoverer"))).Run(rctx)
	}()
	defer func() { stop(); <-recovered }()

	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), envChild+"=repeat", envURI+"="+b.server.URI, envDB+"="+b.db.Name(), envApp+"="+acceptApp)
	child.Stderr = os.Stderr
	stdin, err := child.StdinPipe()
	require.NoError(t, err)
	stdout, err := child.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, child.Start())
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	var mu sync.Mutex
	waiting := map[string]chan acceptRepeat{} // key → its child repeat's answer
	go func() {
		lines := bufio.NewScanner(stdout)
		for lines.Scan() {
			var r acceptRepeat
			var ns int64
			f := strings.SplitN(lines.Text(), " ", 4)
			if len(f) != 4 {
				continue
			}
			r.key, r.id, r.err = f[0], f[2], f[3]
			_, _ = fmt.Sscan(f[1], &ns)
			r.took = time.Duration(ns)
			mu.Lock()
			ch := waiting[r.key]
			mu.Unlock()
			if ch != nil {
				ch <- r
			}
		}
	}()
	var sendMu sync.Mutex
	send := func(line string) {
		sendMu.Lock()
		defer sendMu.Unlock()
		_, err := io.WriteString(stdin, line+"\n")
		require.NoError(t, err)
	}

	// Each call on an earlier transaction gets a transaction of its own,
	// made whole first (not cut).
	setup := func(kind string) bson.ObjectID {
		var txn *twopc.Txn
		var err error
		switch kind {
		case "capture", "void":
			txn, err = b.c.Hold(ctx, "A", "C", 10)
		case "refund", "reverse":
			txn, err = b.c.Transfer(ctx, "A", "B", 10)
		default:
			return bson.ObjectID{}
		}
		require.NoError(t, err)
		return txn.ID
	}

	var all []acceptRepeat
	var allMu sync.Mutex
	var wg sync.WaitGroup
	work := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				kind := acceptKinds[i%len(acceptKinds)]
				key := fmt.Sprintf("%s-%d", kind, i)
				of := setup(kind)
				short, cancel := context.WithTimeout(ctx, time.Duration(1+i%20)*time.Millisecond)
				_, _ = acceptCall(b.c, kind, key, of)(short)
				cancel()
				r := acceptRepeat{key: key, kind: kind, of: of}
				switch (i / len(acceptKinds)) % 3 {
				case 0, 1:
					c, where := b.c, "same coordinator"
					if (i/len(acceptKinds))%3 == 1 {
						c, where = other, "another application"
					}
					rctx, cancel := context.WithTimeout(ctx, time.Minute)
					start := time.Now()
					txn, err := acceptCall(c, kind, key, of)(rctx)
					r.took, r.where = time.Since(start), where
					cancel()
					r.id, r.err = "-", fmt.Sprint(err)
					if txn != nil {
						r.id = txn.ID.Hex()
					}
				default:
					ch := make(chan acceptRepeat, 1)
					mu.Lock()
					waiting[key] = ch
					mu.Unlock()
					send(fmt.Sprintf("%s %s %s", kind, key, of.Hex()))
					select {
					case got := <-ch:
						r.took, r.id, r.err, r.where = got.took, got.id, got.err, "another process, same name"
					case <-ctx.Done():
						r.err, r.where = "no answer from the child", "another process, same name"
					}
				}
				r.inProgress = strings.Contains(r.err, "in progress")
				allMu.Lock()
				all = append(all, r)
				allMu.Unlock()
			}
		}()
	}
	for i := range n * len(acceptKinds) {
		work <- i
	}
	close(work)
	wg.Wait()
	require.NoError(t, stdin.Close())

	// Every repeat answered the outcome, and the log agrees with it.
	for _, r := range all {
		if r.kind == "refused" {
			assert.Contains(t, r.err, "insufficient funds", "%s (%s)", r.key, r.where)
		} else {
			assert.Equal(t, "<nil>", r.err, "%s (%s)", r.key, r.where)
		}
		assert.False(t, r.inProgress, "%s (%s): %s", r.key, r.where, r.err)
		if r.kind == "void" { // a void's key is the hold's (Txn.VoidKey), not a transaction's
			got, err := b.c.Get(ctx, r.of)
			require.NoError(t, err, r.key)
			assert.Equal(t, twopc.StateCanceled, got.State, "%s: voided", r.key)
			assert.Equal(t, r.key, got.VoidKey, r.key)
			if r.id != "-" {
				assert.Equal(t, got.ID.Hex(), r.id, "%s: the repeat answered with the hold", r.key)
			}
			continue
		}
		got, err := b.c.GetByKey(ctx, r.key)
		require.NoError(t, err, r.key)
		switch r.kind {
		case "refused":
			// Spent by the server's refusal: canceled, or on its way (its
			// rollback's last move may still run; checked again below).
			assert.Contains(t, []twopc.State{twopc.StateCanceling, twopc.StateCanceled}, got.State, "%s: spent by the server's refusal", r.key)
		case "hold", "holdlegs":
			assert.Equal(t, twopc.StateHeld, got.State, r.key)
		default:
			assert.True(t, got.State.Committed(), "%s: %s", r.key, got.State)
		}
		if r.id != "-" {
			assert.Equal(t, got.ID.Hex(), r.id, "%s: the repeat answered with its key's transaction", r.key)
		}
		if got.State == twopc.StateHeld { // release what it holds
			_, err := b.c.Void(ctx, got.ID)
			require.NoError(t, err)
		}
	}

	stop()
	<-recovered
	require.NoError(t, b.c.Settle(ctx))
	b.recoverAll()
	b.checkSettled(map[string]int64{"A": 1_000_000_000, "B": 0, "C": 0, "P": 0})
	for _, r := range all {
		if r.kind == "refused" {
			got, err := b.c.GetByKey(ctx, r.key)
			require.NoError(t, err)
			assert.Equal(t, twopc.StateCanceled, got.State, "%s: canceled in the end", r.key)
		}
	}
	// Each round of the kinds: transfer 10 to B, legs 7 to B and 3 to C,
	// batch 10 to B, capture 10 to C; the holds are voided, the refunds,
	// reversals and voids give back what their setup moved.
	assert.Equal(t, int64(1_000_000_000-40*n), b.balance("A"))
	assert.Equal(t, int64(27*n), b.balance("B"))
	assert.Equal(t, int64(13*n), b.balance("C"))
	assert.Equal(t, int64(0), b.balance("P"))
	auditOK(t, b, "after the repeats")

	// The figures, by where the repeats were made.
	byWhere := map[string][]time.Duration{}
	for _, r := range all {
		byWhere[r.where] = append(byWhere[r.where], r.took)
	}
	for _, where := range slices.Sorted(func(yield func(string) bool) {
		for w := range byWhere {
			if !yield(w) {
				return
			}
		}
	}) {
		d := byWhere[where]
		slices.Sort(d)
		goal := acceptTakeover + time.Second // the lease, and the poll that sees it lapse
		if where == "same coordinator" {
			goal = time.Second
		}
		within := 0
		for _, x := range d {
			if x <= goal {
				within++
			}
		}
		t.Logf("%s: %d repeats, median %v, p99 %v, max %v; %d within %v",
			where, len(d), d[len(d)/2].Round(time.Millisecond), d[len(d)*99/100].Round(time.Millisecond),
			d[len(d)-1].Round(time.Millisecond), within, goal)
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("the run outlasted its context")
	}
}
