package twopc_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/internal/mongotest"
)

// commitGate is a command monitor that sees every commit write a client
// sends (pending → applied) and can hold the next ones in flight, before
// they reach the server, until released: the driver publishes a started
// event synchronously, just before it sends the command.
type commitGate struct {
	mu     sync.Mutex
	hold   map[string]int // "alone" or "group": how many of the next to hold
	alone  int            // commits written alone (findAndModify)
	groups []int          // the size of each grouped commit (an update of one statement per transaction)
	// filters holds, for each grouped commit, its statements' filters.
	filters [][]bson.Raw

	held    chan string
	release chan struct{}
}

func newCommitGate() *commitGate {
	return &commitGate{hold: map[string]int{}, held: make(chan string, 4), release: make(chan struct{})}
}

// holdNext holds the next commit write of kind.
func (g *commitGate) holdNext(kind string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.hold[kind]++
}

// waitHeld waits until a write of kind is held.
func (g *commitGate) waitHeld(t *testing.T, kind string) {
	t.Helper()
	select {
	case got := <-g.held:
		require.Equal(t, kind, got)
	case <-time.After(time.Minute):
		t.Fatalf("no %s commit write within a minute", kind)
	}
}

// counts returns the commits written alone and the group sizes so far.
func (g *commitGate) counts() (int, []int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.alone, append([]int(nil), g.groups...)
}

func (g *commitGate) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		kind := ""
		switch e.CommandName {
		case "findAndModify":
			if coll, _ := e.Command.Lookup("findAndModify").StringValueOK(); coll == "transactions" &&
				setsApplied(e.Command.Lookup("update")) {
				kind = "alone"
			}
		case "update":
			coll, _ := e.Command.Lookup("update").StringValueOK()
			updates, ok := e.Command.Lookup("updates").ArrayOK()
			if coll != "transactions" || !ok {
				return
			}
			first, ok := updates.Index(0).DocumentOK()
			if !ok || !setsApplied(first.Lookup("u")) {
				return
			}
			stmts, _ := updates.Values()
			if len(stmts) == 1 {
				kind = "alone" // a commit written alone: one statement by _id
				break
			}
			var filters []bson.Raw
			for _, st := range stmts {
				doc, _ := st.DocumentOK()
				q, _ := doc.Lookup("q").DocumentOK()
				filters = append(filters, q)
			}
			kind = "group"
			g.mu.Lock()
			g.groups = append(g.groups, len(stmts))
			g.filters = append(g.filters, filters)
			g.mu.Unlock()
		}
		if kind == "" {
			return
		}
		g.mu.Lock()
		if kind == "alone" {
			g.alone++
		}
		hold := g.hold[kind] > 0
		if hold {
			g.hold[kind]--
		}
		g.mu.Unlock()
		if hold {
			g.held <- kind
			<-g.release
		}
	}}
}

// setsApplied reports whether an update document sets state to applied.
func setsApplied(u bson.RawValue) bool {
	doc, ok := u.DocumentOK()
	if !ok {
		return false
	}
	s, _ := doc.Lookup("$set", "state").StringValueOK()
	return s == string(twopc.StateApplied)
}

// gatedCoordinator returns a coordinator of b's database through a client
// whose commit writes g sees, with hook counts of StepCommit per transfer
// value, and a channel that receives each commit that starts waiting for
// a group.
func (b *bank) gatedCoordinator(g *commitGate, hook func(context.Context, twopc.Step, *twopc.Txn) error) (*twopc.Coordinator, *valueIndex, <-chan struct{}) {
	b.t.Helper()
	db := mongotest.ConnectURI(b.t, b.server.URI, options.Client().SetRetryWrites(false).SetMonitor(g.monitor())).Database(b.db.Name())
	idx := &valueIndex{ids: map[int64]bson.ObjectID{}, commits: map[int64]int{}}
	c, err := twopc.NewCoordinator(db, twopc.WithApplication("app"), twopc.WithStepHook(func(ctx context.Context, s twopc.Step, tx *twopc.Txn) error {
		if s == twopc.StepCommit {
			idx.add(tx)
		}
		if hook != nil {
			return hook(ctx, s, tx)
		}
		return nil
	}))
	require.NoError(b.t, err)
	b.t.Cleanup(func() { _ = c.Close(context.Background()) })
	waiting := make(chan struct{}, 16)
	twopc.OnCommitWait(c, func() { waiting <- struct{}{} })
	return c, idx, waiting
}

// valueIndex remembers, by transfer value, each transaction's id and how
// many times its StepCommit hook ran.
type valueIndex struct {
	mu      sync.Mutex
	ids     map[int64]bson.ObjectID
	commits map[int64]int
}

func (v *valueIndex) add(tx *twopc.Txn) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.ids[tx.Value] = tx.ID
	v.commits[tx.Value]++
}

func (v *valueIndex) id(value int64) bson.ObjectID {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.ids[value]
}

func (v *valueIndex) hookCalls(value int64) int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.commits[value]
}

func transferAsync(ctx context.Context, c *twopc.Coordinator, value int64) <-chan transferResult {
	res := make(chan transferResult, 1)
	go func() {
		txn, err := c.Transfer(ctx, "A", "B", value)
		res <- transferResult{txn, err}
	}()
	return res
}

func waitFor(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(time.Minute):
		t.Fatalf("%s: not within a minute", what)
	}
}

func result(t *testing.T, ch <-chan transferResult, what string) transferResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(time.Minute):
		t.Fatalf("%s: no result within a minute", what)
		return transferResult{}
	}
}

// requireCommitted takes the results of transfers, by value, and requires
// each to have returned committed.
func requireCommitted(t *testing.T, results map[int64]<-chan transferResult) {
	t.Helper()
	for v, r := range results {
		res := result(t, r, "transfer")
		require.NoErrorf(t, res.err, "transfer of %d", v)
		assert.Truef(t, res.txn.State.Committed(), "transfer of %d is %s", v, res.txn.State)
	}
}

// settleAll settles c's transfers, has recovery finish the rest, checks
// the bank (A opened with 1000, B empty) and that B holds wantB.
func settleAll(t *testing.T, b *bank, c *twopc.Coordinator, wantB int64, msgAndArgs ...any) {
	t.Helper()
	require.NoError(t, c.Settle(testCtx(t)))
	b.recoverAll()
	b.checkSettled(map[string]int64{"A": 1000, "B": 0})
	assert.Equal(t, wantB, b.balance("B"), msgAndArgs...)
}

// TestGroupCommit holds one commit write in flight while three more
// commits arrive: they go in one guarded write, which moves the two still
// pending under their claims and not the one a canceler took meanwhile. A
// commit whose step hook fails is not written.
func TestGroupCommit(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	b.open(map[string]int64{"A": 1000, "B": 0})
	g := newCommitGate()
	c, idx, waiting := b.gatedCoordinator(g, func(_ context.Context, s twopc.Step, tx *twopc.Txn) error {
		if s == twopc.StepCommit && tx.Value == 5 {
			return errCrash
		}
		return nil
	})

	g.holdNext("alone")
	r1 := transferAsync(ctx, c, 1)
	g.waitHeld(t, "alone")
	r2 := transferAsync(ctx, c, 2)
	r3 := transferAsync(ctx, c, 3)
	r4 := transferAsync(ctx, c, 4)
	for i := 0; i < 3; i++ {
		waitFor(t, waiting, "a commit waits for the group")
	}
	_, err := c.Transfer(ctx, "A", "B", 5)
	require.ErrorIs(t, err, errCrash, "a failing hook stops its own commit")

	b.backdate(idx.id(4), time.Hour) // a canceler of another Coordinator takes over only a stale transaction
	got, err := twopc.NewCanceler(b.coordinator(twopc.WithApplication("app"))).Cancel(ctx, idx.id(4))
	require.NoError(t, err)
	require.Equal(t, twopc.StateCanceled, got.State)
	g.release <- struct{}{}

	requireCommitted(t, map[int64]<-chan transferResult{1: r1, 2: r2, 3: r3})
	require.ErrorIs(t, result(t, r4, "transfer of 4").err, twopc.ErrCanceled)
	alone, groups := g.counts()
	assert.Equal(t, 1, alone, "commits written alone")
	assert.Equal(t, []int{3}, groups, "one group write, for 2, 3 and 4")
	assert.Equal(t, twopc.StatePending, b.txn(idx.id(5)).State, "the crashed commit was not written")

	settleAll(t, b, c, int64(1+2+3+5))
}

// TestGroupCommitWaiterGivesUp ends the context of a commit waiting for
// the next group: it returns at once, not written, and the others go on.
func TestGroupCommitWaiterGivesUp(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	b.open(map[string]int64{"A": 1000, "B": 0})
	g := newCommitGate()
	c, idx, waiting := b.gatedCoordinator(g, nil)

	g.holdNext("alone")
	r1 := transferAsync(ctx, c, 1)
	g.waitHeld(t, "alone")
	ctx2, cancel2 := context.WithCancel(ctx)
	defer cancel2()
	r2 := transferAsync(ctx2, c, 2)
	waitFor(t, waiting, "2 waits for the group")
	r3 := transferAsync(ctx, c, 3)
	waitFor(t, waiting, "3 waits for the group")
	cancel2()
	res2 := result(t, r2, "the commit that gave up, while the write before it is still held")
	require.ErrorIs(t, res2.err, context.Canceled)
	assert.Equal(t, twopc.StatePending, b.txn(idx.id(2)).State, "never written")
	g.release <- struct{}{}

	requireCommitted(t, map[int64]<-chan transferResult{1: r1, 3: r3})
	alone, groups := g.counts()
	assert.Equal(t, 2, alone, "1 and then 3 written alone")
	assert.Empty(t, groups)

	settleAll(t, b, c, int64(1+2+3), "recovery rolled 2 forward")
}

// TestGroupCommitLeaderGivesUp ends the context of the first commit of a
// group while the group's write is in flight: its caller returns at once,
// and the write goes on, under a context no caller can end, for the
// others and for it (its outcome is what the transaction's state says:
// committed).
func TestGroupCommitLeaderGivesUp(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	b.open(map[string]int64{"A": 1000, "B": 0})
	g := newCommitGate()
	c, idx, waiting := b.gatedCoordinator(g, nil)

	g.holdNext("alone")
	g.holdNext("group")
	r1 := transferAsync(ctx, c, 1)
	g.waitHeld(t, "alone")
	ctx2, cancel2 := context.WithCancel(ctx)
	defer cancel2()
	r2 := transferAsync(ctx2, c, 2)
	waitFor(t, waiting, "2 waits for the group")
	r3 := transferAsync(ctx, c, 3)
	r4 := transferAsync(ctx, c, 4)
	waitFor(t, waiting, "3 or 4 waits for the group")
	waitFor(t, waiting, "3 or 4 waits for the group")
	g.release <- struct{}{} // 1's write goes; the group of 2, 3 and 4 follows
	g.waitHeld(t, "group")
	cancel2()
	require.ErrorIs(t, result(t, r2, "the first of the group").err, context.Canceled)
	g.release <- struct{}{}

	requireCommitted(t, map[int64]<-chan transferResult{1: r1, 3: r3, 4: r4})
	_, groups := g.counts()
	assert.Equal(t, []int{3}, groups, "one group write, for 2, 3 and 4")
	assert.Equal(t, 1, idx.hookCalls(3), "3 committed once")
	assert.Equal(t, 1, idx.hookCalls(4), "4 committed once")
	assert.True(t, b.txn(idx.id(2)).State.Committed(), "2 was in the write: committed, though its caller gave up")

	settleAll(t, b, c, int64(1+2+3+4))
}

// filtersOf returns the statements' filters of each grouped commit so far.
func (g *commitGate) filtersOf() [][]bson.Raw {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([][]bson.Raw(nil), g.filters...)
}

// TestGroupCommitOneStatementPerTransfer holds one commit write in flight
// while three more commits arrive, and takes one of them over by hand (a
// new claim) before they are written: the group is one update command of
// three single-document statements, each filtering one _id as commitMove
// does (_id, state pending, its own claim), which moves the two still
// under their claims and not the one taken over, reported not moved.
func TestGroupCommitOneStatementPerTransfer(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	b.open(map[string]int64{"A": 1000, "B": 0})
	g := newCommitGate()
	c, idx, waiting := b.gatedCoordinator(g, nil)

	g.holdNext("alone")
	r1 := transferAsync(ctx, c, 1)
	g.waitHeld(t, "alone")
	r2 := transferAsync(ctx, c, 2)
	r3 := transferAsync(ctx, c, 3)
	r4 := transferAsync(ctx, c, 4)
	for range 3 {
		waitFor(t, waiting, "a commit waits for the group")
	}
	taken := bson.NewObjectID()
	res, err := b.db.Collection("transactions").UpdateOne(ctx,
		bson.D{{Key: "_id", Value: idx.id(3)}, {Key: "state", Value: twopc.StatePending}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "claim", Value: taken}, {Key: "application", Value: "other"}}}})
	require.NoError(t, err)
	require.Equal(t, int64(1), res.ModifiedCount, "3 taken over")
	g.release <- struct{}{}

	requireCommitted(t, map[int64]<-chan transferResult{1: r1, 2: r2, 4: r4})
	require.ErrorIs(t, result(t, r3, "transfer of 3").err, twopc.ErrInProgress, "taken over: not moved")
	assert.Equal(t, twopc.StatePending, b.txn(idx.id(3)).State, "3 not moved")
	assert.Equal(t, "other", b.txn(idx.id(3)).Application, "3 still under the claim that took it")

	_, groups := g.counts()
	require.Equal(t, []int{3}, groups, "one update command for 2, 3 and 4")
	filters := g.filtersOf()[0]
	seen := map[bson.ObjectID]bool{}
	for _, q := range filters {
		id, ok := q.Lookup("_id").ObjectIDOK()
		require.True(t, ok, "statement filter %s names one _id", q)
		seen[id] = true
		state, _ := q.Lookup("state").StringValueOK()
		assert.Equal(t, string(twopc.StatePending), state, "statement filter %s", q)
		_, ok = q.Lookup("claim").ObjectIDOK()
		assert.True(t, ok, "statement filter %s requires its claim", q)
		_, err := q.LookupErr("$or")
		assert.Error(t, err, "statement filter %s is no update of many", q)
	}
	assert.Equal(t, map[bson.ObjectID]bool{idx.id(2): true, idx.id(3): true, idx.id(4): true}, seen, "one statement per transaction")

	require.NoError(t, c.Settle(ctx))
	b.recoverAll()
	b.checkSettled(map[string]int64{"A": 1000, "B": 0})
	want := int64(1 + 2 + 4)
	if b.txn(idx.id(3)).State.Committed() {
		want += 3 // recovery rolled the one taken over forward
	}
	assert.Equal(t, want, b.balance("B"))
}
