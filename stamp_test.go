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
	"github.com/twopc/twopc/internal/schema"
)

// insertGate is a command monitor that can hold the next insert of a new
// transaction a client sends (grouped or alone), before it reaches the
// server, until released: the driver publishes a started event
// synchronously, just before it sends the command.
type insertGate struct {
	mu      sync.Mutex
	armed   bool
	held    chan struct{}
	release chan struct{}
}

func newInsertGate() *insertGate {
	return &insertGate{held: make(chan struct{}, 1), release: make(chan struct{})}
}

// holdNext holds the next insert write.
func (g *insertGate) holdNext() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.armed = true
}

// waitHeld waits until an insert write is held.
func (g *insertGate) waitHeld(t *testing.T) {
	t.Helper()
	select {
	case <-g.held:
	case <-time.After(time.Minute):
		t.Fatal("no insert write within a minute")
	}
}

func (g *insertGate) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if !insertsTransaction(e) {
			return
		}
		g.mu.Lock()
		hold := g.armed
		g.armed = false
		g.mu.Unlock()
		if hold {
			g.held <- struct{}{}
			<-g.release
		}
	}}
}

// insertsTransaction reports whether e is an insert of a new transaction:
// an update or findAndModify of the transactions collection that sets it
// pending on insert.
func insertsTransaction(e *event.CommandStartedEvent) bool {
	var u bson.RawValue
	switch e.CommandName {
	case "update":
		coll, _ := e.Command.Lookup("update").StringValueOK()
		updates, ok := e.Command.Lookup("updates").ArrayOK()
		if coll != "transactions" || !ok {
			return false
		}
		first, ok := updates.Index(0).DocumentOK()
		if !ok {
			return false
		}
		u = first.Lookup("u")
	case "findAndModify":
		coll, _ := e.Command.Lookup("findAndModify").StringValueOK()
		if coll != "transactions" {
			return false
		}
		u = e.Command.Lookup("update")
	default:
		return false
	}
	doc, ok := u.DocumentOK()
	if !ok {
		return false
	}
	s, _ := doc.Lookup("$setOnInsert", "state").StringValueOK()
	return s == string(twopc.StatePending)
}

// TestInsertStampedWhenSentNotWhenQueued: a transfer queued behind an
// insert of its own coordinator that is held in flight is stamped when
// its own insert is sent, not when it was queued. So its wait in the
// queue, longer than the mark's margin, while another coordinator's
// transfer moves its accounts' lines past the time it was queued at, does
// not make it too late: it moves its money, once. The insert held in
// flight was stamped as it was sent, and reached the log later than the
// margin allows: that time still counts, and its legs are refused
// (ErrTooLate), moving nothing. Before, the queued transfer was stamped
// when it was queued and was refused as well.
func TestInsertStampedWhenSentNotWhenQueued(t *testing.T) {
	const margin = 50 * time.Millisecond
	ctx := testCtx(t)
	b := newBank(t)
	b.open(map[string]int64{"A": 100, "B": 0})
	gate := newInsertGate()
	db := mongotest.ConnectURI(t, b.server.URI, options.Client().SetMonitor(gate.monitor())).Database(b.db.Name())
	c := markCoordinator(b, db, twopc.WithMarkMargin(margin))
	queued := make(chan struct{}, 1)
	twopc.OnInsertWait(c, func() { queued <- struct{}{} })
	transfer := func(value int64) <-chan transferResult {
		res := make(chan transferResult, 1)
		go func() {
			txn, err := c.Transfer(ctx, "A", "B", value)
			res <- transferResult{txn, err}
		}()
		return res
	}

	gate.holdNext()
	first := transfer(30)
	gate.waitHeld(t) // its insert is in flight, held before the server
	second := transfer(10)
	<-queued // behind it, in the insert stage
	queuedAt, err := schema.ServerNow(ctx, b.db)
	require.NoError(t, err)

	// Neither is in the log: another coordinator's mark passes both, well
	// past the time the second was queued at, and its transfer's apply
	// moves the accounts' lines up to it.
	other := markCoordinator(b, nil, twopc.WithMarkMargin(margin))
	line := markPast(t, other, queuedAt.Add(margin))
	_, err = other.Transfer(ctx, "A", "B", 1)
	require.NoError(t, err)
	for _, id := range []string{"A", "B"} {
		require.Equalf(t, line, b.account(id).FencedBefore, "the line of %s", id)
	}

	close(gate.release)
	late, queuedOne := <-first, <-second
	require.NoError(t, queuedOne.err, "the queued transfer was refused for its wait in the queue")
	require.NotNil(t, queuedOne.txn)
	assert.True(t, queuedOne.txn.Created.After(line), "stamped %v, when its insert was sent: after the line %v", queuedOne.txn.Created, line)
	assert.Equal(t, b.txn(queuedOne.txn.ID).Created, queuedOne.txn.Created.UTC(), "the time it was told of is the one the log holds")
	assert.Equal(t, twopc.StateDone, b.txn(queuedOne.txn.ID).State)

	require.ErrorIs(t, late.err, twopc.ErrTooLate, "held in flight past the margin: its own time to reach the log counts")
	require.NotNil(t, late.txn)
	assert.True(t, late.txn.Created.Before(line), "stamped %v, before its write was held: before the line %v", late.txn.Created, line)
	assert.Equal(t, twopc.StateCanceled, b.txn(late.txn.ID).State)

	b.checkSettled(map[string]int64{"A": 100, "B": 0})
	assert.Equal(t, int64(89), b.balance("A"), "the queued transfer and the other moved their money once; the late one nothing")
	assert.Equal(t, int64(11), b.balance("B"))
}
