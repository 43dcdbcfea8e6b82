package twopc_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/internal/mongotest"
)

// recorder is an Observer that keeps every event.
type recorder struct {
	mu          sync.Mutex
	transitions []twopc.TransitionEvent
	recoveries  []twopc.RecoveryEvent
}

func (r *recorder) observer() twopc.Observer {
	return twopc.Observer{
		Transition: func(_ context.Context, e twopc.TransitionEvent) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.transitions = append(r.transitions, e)
		},
		Recovery: func(_ context.Context, e twopc.RecoveryEvent) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.recoveries = append(r.recoveries, e)
		},
	}
}

// move is a transition as the tests compare them.
type move struct {
	From, To twopc.State
	Step     twopc.Step
	Outcome  twopc.Outcome
}

// moves returns the transitions of transaction id, in the order observed,
// and checks what every event must carry.
func (r *recorder) moves(t *testing.T, id bson.ObjectID, application string) []move {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []move
	for _, e := range r.transitions {
		if e.Txn != id {
			continue
		}
		assert.Equal(t, application, e.Application)
		assert.Positive(t, e.Duration, "duration of %s→%s", e.From, e.To)
		assert.GreaterOrEqual(t, e.Batch, 1)
		if e.Outcome == twopc.OutcomeError {
			assert.Error(t, e.Err)
		} else {
			assert.NoError(t, e.Err)
		}
		out = append(out, move{e.From, e.To, e.Step, e.Outcome})
	}
	return out
}

// action is a recovery action as the tests compare them.
type action struct {
	Action  twopc.RecoveryAction
	State   twopc.State
	Outcome twopc.Outcome
}

// actions returns the recovery actions on transaction id, in the order
// observed.
func (r *recorder) actions(t *testing.T, id bson.ObjectID, application string) []action {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []action
	for _, e := range r.recoveries {
		if e.Txn != id {
			continue
		}
		assert.Equal(t, application, e.Application)
		assert.Positive(t, e.Duration, "duration of %s", e.Action)
		out = append(out, action{e.Action, e.State, e.Outcome})
	}
	return out
}

// TestObserverSeesTransfer: a transfer's observer hears of its creation
// pending, its commit point and its move to done, in order, each moved by
// this coordinator, with the time each write took.
func TestObserverSeesTransfer(t *testing.T) {
	ctx := testCtx(t)
	var rec recorder
	b := newBank(t, twopc.WithApplication("payments"), twopc.WithObserver(rec.observer()))
	b.open(map[string]int64{"A": 100, "B": 0})
	txn, err := b.c.Transfer(ctx, "A", "B", 10)
	require.NoError(t, err)
	require.NoError(t, b.c.Settle(ctx))
	assert.Equal(t, []move{
		{"", twopc.StatePending, twopc.StepInsert, twopc.OutcomeMoved},
		{twopc.StatePending, twopc.StateApplied, twopc.StepCommit, twopc.OutcomeMoved},
		{twopc.StateApplied, twopc.StateDone, twopc.StepDone, twopc.OutcomeMoved},
	}, rec.moves(t, txn.ID, "payments"))
	assert.Empty(t, rec.actions(t, txn.ID, "payments"))

	_, err = twopc.NewCoordinator(b.db, twopc.WithObserver(twopc.Observer{}))
	require.Error(t, err, "an Observer with no funcs")
}

// TestObserverSeesRecovery: transfers whose process died are finished by a
// recoverer of another application, whose observer hears of the takeover
// and of the action that follows it, and of each move the recoverer made.
func TestObserverSeesRecovery(t *testing.T) {
	for _, tc := range []struct {
		name    string
		crash   twopc.Step
		actions []action
		moves   []move
	}{{
		name:  "roll forward", // both legs applied, not committed
		crash: twopc.StepCommit,
		actions: []action{
			{twopc.RecoveryTakeover, twopc.StatePending, twopc.OutcomeMoved},
			{twopc.RecoveryRollForward, twopc.StatePending, twopc.OutcomeMoved},
		},
		moves: []move{
			{twopc.StatePending, twopc.StatePending, twopc.StepTakeover, twopc.OutcomeMoved},
			{twopc.StatePending, twopc.StateApplied, twopc.StepCommit, twopc.OutcomeMoved},
			{twopc.StateApplied, twopc.StateDone, twopc.StepDone, twopc.OutcomeMoved},
		},
	}, {
		name:  "roll back", // no leg applied: presumed abort
		crash: twopc.StepApply,
		actions: []action{
			{twopc.RecoveryTakeover, twopc.StatePending, twopc.OutcomeMoved},
			{twopc.RecoveryRollBack, twopc.StatePending, twopc.OutcomeMoved},
		},
		moves: []move{
			{twopc.StatePending, twopc.StatePending, twopc.StepTakeover, twopc.OutcomeMoved},
			{twopc.StatePending, twopc.StateCanceling, twopc.StepCancel, twopc.OutcomeMoved},
			{twopc.StateCanceling, twopc.StateCanceled, twopc.StepCanceled, twopc.OutcomeMoved},
		},
	}, {
		name:    "settle", // committed, not settled
		crash:   twopc.StepSettle,
		actions: []action{{twopc.RecoverySettle, twopc.StateApplied, twopc.OutcomeMoved}},
		moves:   []move{{twopc.StateApplied, twopc.StateDone, twopc.StepDone, twopc.OutcomeMoved}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			b := newBank(t, twopc.WithStepHook(crashAt(tc.crash)), twopc.WithSyncSettle())
			b.open(map[string]int64{"A": 100, "B": 0})
			txn, err := b.c.Transfer(ctx, "A", "B", 10)
			require.ErrorIs(t, err, errCrash)
			var rec recorder
			b.recoverAll(twopc.WithObserver(rec.observer()))
			assert.Equal(t, tc.actions, rec.actions(t, txn.ID, "recoverer"))
			assert.Equal(t, tc.moves, rec.moves(t, txn.ID, "recoverer"))
			b.checkSettled(map[string]int64{"A": 100, "B": 0})
		})
	}
}

// TestObserverSeesCancel: a transfer rolled back for want of funds, one
// canceled by a Canceler, and an id canceled before any transaction had
// it (a placeholder, created canceled) each end canceling → canceled.
func TestObserverSeesCancel(t *testing.T) {
	ctx := testCtx(t)
	var rec recorder
	b := newBank(t, twopc.WithApplication("app"), twopc.WithObserver(rec.observer()),
		twopc.WithStepHook(crashAt(twopc.StepApply)))
	b.open(map[string]int64{"A": 100, "B": 0})

	stopped, err := b.c.Transfer(ctx, "A", "B", 10)
	require.ErrorIs(t, err, errCrash)
	_, err = twopc.NewCanceler(b.c).Cancel(ctx, stopped.ID)
	require.NoError(t, err)
	assert.Equal(t, []move{
		{"", twopc.StatePending, twopc.StepInsert, twopc.OutcomeMoved},
		{twopc.StatePending, twopc.StateCanceling, twopc.StepCancel, twopc.OutcomeMoved},
		{twopc.StateCanceling, twopc.StateCanceled, twopc.StepCanceled, twopc.OutcomeMoved},
	}, rec.moves(t, stopped.ID, "app"))

	overdraft, err := b.c.Transfer(ctx, "A", "B", 1000)
	require.ErrorIs(t, err, twopc.ErrInsufficientFunds)
	assert.Equal(t, []move{
		{"", twopc.StatePending, twopc.StepInsert, twopc.OutcomeMoved},
		{twopc.StatePending, twopc.StateCanceling, twopc.StepCancel, twopc.OutcomeMoved},
		{twopc.StateCanceling, twopc.StateCanceled, twopc.StepCanceled, twopc.OutcomeMoved},
	}, rec.moves(t, overdraft.ID, "app"))

	unknown := twopc.NewTxnID()
	_, err = twopc.NewCanceler(b.c).Cancel(ctx, unknown)
	require.NoError(t, err)
	_, err = twopc.NewCanceler(b.c).Cancel(ctx, unknown) // found, not written again
	require.NoError(t, err)
	assert.Equal(t, []move{
		{"", twopc.StateCanceled, twopc.StepCancel, twopc.OutcomeMoved},
	}, rec.moves(t, unknown, "app"), "the second Cancel only reads it")
	b.checkSettled(map[string]int64{"A": 100, "B": 0})
}

// TestObserverSeesGroupCommit: commits written together are each reported,
// with the group's size; the one a canceler took while it waited did not
// move.
func TestObserverSeesGroupCommit(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	b.open(map[string]int64{"A": 1000, "B": 0})
	g := newCommitGate()
	var rec recorder
	ids := map[int64]bson.ObjectID{}
	var mu sync.Mutex
	db := mongotest.ConnectURI(t, b.server.URI, options.Client().SetRetryWrites(false).SetMonitor(g.monitor())).Database(b.db.Name())
	c, err := twopc.NewCoordinator(db, twopc.WithApplication("app"), twopc.WithObserver(rec.observer()),
		twopc.WithStepHook(func(_ context.Context, s twopc.Step, tx *twopc.Txn) error {
			if s == twopc.StepInsert {
				mu.Lock()
				ids[tx.Value] = tx.ID
				mu.Unlock()
			}
			return nil
		}))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	waiting := make(chan struct{}, 16)
	twopc.OnCommitWait(c, func() { waiting <- struct{}{} })

	g.holdNext("alone")
	r1 := transferAsync(ctx, c, 1)
	g.waitHeld(t, "alone")
	r2 := transferAsync(ctx, c, 2)
	r3 := transferAsync(ctx, c, 3)
	r4 := transferAsync(ctx, c, 4)
	for i := 0; i < 3; i++ {
		waitFor(t, waiting, "a commit waits for the group")
	}
	mu.Lock()
	four := ids[4]
	mu.Unlock()
	b.backdate(four, time.Hour) // another Coordinator's canceler takes over only a stale transaction
	_, err = twopc.NewCanceler(b.coordinator(twopc.WithApplication("app"))).Cancel(ctx, four)
	require.NoError(t, err)
	g.release <- struct{}{}
	requireCommitted(t, map[int64]<-chan transferResult{1: r1, 2: r2, 3: r3})
	require.ErrorIs(t, result(t, r4, "transfer of 4").err, twopc.ErrCanceled)
	require.NoError(t, c.Settle(ctx))

	commit := func(value int64) (outcome twopc.Outcome, batch int) {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		mu.Lock()
		defer mu.Unlock()
		for _, e := range rec.transitions {
			if e.Txn == ids[value] && e.Step == twopc.StepCommit {
				require.Zero(t, batch, "one commit event for %d", value)
				outcome, batch = e.Outcome, e.Batch
			}
		}
		return outcome, batch
	}
	for value, want := range map[int64]struct {
		outcome twopc.Outcome
		batch   int
	}{1: {twopc.OutcomeMoved, 1}, 2: {twopc.OutcomeMoved, 3}, 3: {twopc.OutcomeMoved, 3}, 4: {twopc.OutcomeNotMoved, 3}} {
		outcome, batch := commit(value)
		assert.Equalf(t, want.outcome, outcome, "commit of %d", value)
		assert.Equalf(t, want.batch, batch, "commit of %d", value)
	}
	settleAll(t, b, c, int64(1+2+3))
}

// TestObserverPanicIsContained: an observer that panics on every event
// changes nothing: the transfer commits and settles, its recovery is
// done, and each panic is logged with the transaction.
func TestObserverPanicIsContained(t *testing.T) {
	ctx := testCtx(t)
	var logs syncBuffer
	panicky := twopc.Observer{
		Transition: func(context.Context, twopc.TransitionEvent) { panic("observer bug") },
		Recovery:   func(context.Context, twopc.RecoveryEvent) { panic("observer bug") },
	}
	logger := slog.New(slog.NewJSONHandler(&logs, nil))
	b := newBank(t, twopc.WithApplication("app"), twopc.WithObserver(panicky), twopc.WithLogger(logger))
	b.open(map[string]int64{"A": 100, "B": 0})
	txn, err := b.c.Transfer(ctx, "A", "B", 10)
	require.NoError(t, err)
	assert.Equal(t, twopc.StateApplied, txn.State)
	require.NoError(t, b.c.Settle(ctx))
	assert.Equal(t, twopc.StateDone, b.txn(txn.ID).State)

	crashed := b.coordinator(twopc.WithApplication("app"), twopc.WithObserver(panicky),
		twopc.WithStepHook(crashAt(twopc.StepCommit)))
	stopped, err := crashed.Transfer(ctx, "A", "B", 20)
	require.ErrorIs(t, err, errCrash)
	rep := b.recoverAll(twopc.WithObserver(panicky), twopc.WithLogger(logger))
	assert.Equal(t, 1, rep.RolledForward)
	assert.Equal(t, twopc.StateDone, b.txn(stopped.ID).State)
	b.checkSettled(map[string]int64{"A": 100, "B": 0})

	lines := logs.lines(t)
	panics := map[string]int{}
	for _, l := range lines {
		if l["msg"] == "twopc: observer panicked" {
			assert.Equal(t, "observer bug", l["panic"])
			assert.NotEmpty(t, l["stack"])
			assert.Contains(t, []any{"app", "recoverer"}, l["application"])
			panics[l["txn"].(string)]++
		}
	}
	assert.Equal(t, 3, panics[txn.ID.Hex()], "insert, commit, done")
	assert.GreaterOrEqual(t, panics[stopped.ID.Hex()], 4, "takeover, roll forward and the recoverer's moves")
}

// TestLogLinesCarryTxnStepApplication: every line the library logs about a
// transaction names it (txn), its step, and the application that logs.
func TestLogLinesCarryTxnStepApplication(t *testing.T) {
	ctx := testCtx(t)
	var logs syncBuffer
	logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))

	// Background settling that fails at done: the settler logs it.
	b := newBank(t, twopc.WithApplication("payments"), twopc.WithLogger(logger), twopc.WithStepHook(failAt(twopc.StepDone)))
	b.open(map[string]int64{"A": 100, "B": 0})
	settled, err := b.c.Transfer(ctx, "A", "B", 10)
	require.NoError(t, err)
	require.NoError(t, b.c.Settle(ctx))

	// A recovery pass that fails at done: the recoverer logs it.
	r := twopc.NewRecoverer(b.coordinator(twopc.WithApplication("failing"), twopc.WithLogger(logger),
		twopc.WithStepHook(failAt(twopc.StepDone))))
	_, err = r.RecoverOnce(ctx)
	require.ErrorIs(t, err, errCrash)

	// A takeover: the recoverer logs it at debug level.
	crashed := b.coordinator(twopc.WithApplication("payments"), twopc.WithStepHook(crashAt(twopc.StepCommit)))
	stopped, err := crashed.Transfer(ctx, "A", "B", 20)
	require.ErrorIs(t, err, errCrash)
	b.recoverAll(twopc.WithLogger(logger))
	b.checkSettled(map[string]int64{"A": 100, "B": 0})

	type line struct{ msg, txn, step, application, action string }
	var got []line
	for _, l := range logs.lines(t) {
		for _, key := range []string{"txn", "application"} {
			require.Containsf(t, l, key, "line %v", l)
		}
		s := func(k string) string { v, _ := l[k].(string); return v }
		got = append(got, line{s("msg"), s("txn"), s("step"), s("application"), s("action")})
	}
	assert.Contains(t, got, line{"twopc: settling a committed transaction failed; nothing is lost: its money moved, and it stays applied until a Recoverer pass settles it",
		settled.ID.Hex(), "done", "payments", ""})
	assert.Contains(t, got, line{"twopc: recovery could not finish the transaction in this pass; nothing is lost: it stays where the pass stopped, and the next pass takes it on again",
		settled.ID.Hex(), "done", "failing", "settle"})
	assert.Contains(t, got, line{"twopc: took over", stopped.ID.Hex(), "takeover", "recoverer", ""})
}

// TestRecoveryPassLogCarriesApplication: Run's line about a whole pass
// names the application that made it.
func TestRecoveryPassLogCarriesApplication(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithStepHook(crashAt(twopc.StepCommit)))
	b.open(map[string]int64{"A": 100, "B": 0})
	_, err := b.c.Transfer(ctx, "A", "B", 60)
	require.ErrorIs(t, err, errCrash)
	b.backdateAll(time.Hour)
	passes := make(chan slog.Record, 100)
	r := twopc.NewRecoverer(b.coordinator(twopc.WithApplication("runner")),
		twopc.WithInterval(time.Hour), twopc.WithRecoveryLogger(slog.New(recordHandler(passes))))
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- r.Run(runCtx) }()
	var pass slog.Record
	for pass = range passes {
		if pass.Message == "twopc: recovery pass" {
			break
		}
	}
	stop()
	require.ErrorIs(t, <-ran, context.Canceled)
	attrs := map[string]string{}
	pass.Attrs(func(a slog.Attr) bool {
		attrs[a.Key] = a.Value.String()
		return true
	})
	assert.Equal(t, "runner", attrs["application"])
	assert.Contains(t, attrs, "report")
}

// syncBuffer is a buffer that log handlers of several goroutines may
// write to while a test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

// lines decodes the JSON log lines written so far.
func (s *syncBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(s.buf.Bytes()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &l), sc.Text())
		out = append(out, l)
	}
	require.NoError(t, sc.Err())
	return out
}
