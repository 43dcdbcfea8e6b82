package twopc_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/internal/clockskew"
	"github.com/twopc/twopc/internal/mongotest"
	"github.com/twopc/twopc/internal/schema"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(envChild); mode != "" {
		os.Exit(childMain(mode)) // a coordinator process of TestKilledProcesses
	}
	if unitOnly() {
		mongotest.Main(m) // the pure parts need no server: start none
		return
	}
	mongotest.MainWithURI(m)
}

// unitOnly reports whether this run selects only the tests of the pure
// parts (go test -run Unit), which need no server.
func unitOnly() bool {
	flag.Parse()
	f := flag.Lookup("test.run")
	return f != nil && f.Value.String() == "Unit"
}

// ownServers runs t beside the package's other tests that call it (after
// the serial ones, as t.Parallel does). Its callers reach only servers of
// their own (dev servers they start, or an address where nothing
// listens), never the shared server, whose fault rules and fail points
// are global; they wait on server starts, leases and bounds more than
// they compute, so the package's run overlaps those waits.
func ownServers(t *testing.T) {
	t.Helper()
	t.Parallel()
}

// testCtx is a context that ends with the test.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// bank is a fresh database with accounts and a coordinator on it.
type bank struct {
	t      *testing.T
	server *mongotest.Server
	db     *mongo.Database
	c      *twopc.Coordinator
}

func newBank(t *testing.T, opts ...twopc.Option) *bank {
	t.Helper()
	return newBankOn(t, mongotest.Shared(t), opts...)
}

// newFaultBank is a bank on a server whose front injects faults, reached
// with retryable writes off so that every lost reply reaches the library.
func newFaultBank(t *testing.T, opts ...twopc.Option) *bank {
	t.Helper()
	s := mongotest.FaultServer(t)
	t.Cleanup(func() { _ = s.Faults.Clear(context.Background()) })
	return newBankOn(t, s, opts...)
}

func newBankOn(t *testing.T, s *mongotest.Server, opts ...twopc.Option) *bank {
	t.Helper()
	db := mongotest.NewDatabaseOn(t, s, options.Client().SetRetryWrites(false).SetRetryReads(false))
	b := &bank{t: t, server: s, db: db}
	b.c = b.coordinator(opts...)
	require.NoError(t, b.c.EnsureIndexes(testCtx(t)))
	return b
}

// coordinator returns another coordinator on the same database, through a
// client of its own, closed when the test ends.
func (b *bank) coordinator(opts ...twopc.Option) *twopc.Coordinator {
	b.t.Helper()
	db := b.db
	if b.c != nil {
		db = mongotest.ConnectURI(b.t, b.server.URI, options.Client().SetRetryWrites(false)).Database(b.db.Name())
	}
	c, err := twopc.NewCoordinator(db, opts...)
	require.NoError(b.t, err)
	b.t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

func (b *bank) open(balances map[string]int64) {
	b.t.Helper()
	for id, bal := range balances {
		require.NoError(b.t, b.c.OpenAccount(testCtx(b.t), id, bal))
	}
}

// applyLegByHand applies leg i of txn (0: the source's debit, 1: the
// destination's credit) as the library's apply would, as a process that
// died right after that one leg write would have left it.
func (b *bank) applyLegByHand(txn *twopc.Txn, i int) {
	b.t.Helper()
	acct, inc := txn.Source, bson.D{{Key: "balance", Value: -txn.Value}, {Key: "pendingDebit", Value: txn.Value}}
	if i == 1 {
		acct, inc = txn.Destination, bson.D{{Key: "pendingCredit", Value: txn.Value}}
	}
	_, err := b.db.Collection("accounts").UpdateOne(testCtx(b.t), bson.D{{Key: "_id", Value: acct}},
		bson.D{{Key: "$inc", Value: inc}, {Key: "$push", Value: bson.D{{Key: "pendingTransactions", Value: twopc.LegMarker(txn.ID, i)}}}})
	require.NoError(b.t, err)
}

// diedAfterCredit starts a transfer on b's coordinator, whose step hook
// must be crashAt(StepApply), and applies its credit leg by hand: a
// transfer whose process died after one leg, which recovery rolls forward
// by applying the debit.
func (b *bank) diedAfterCredit(src, dst string, value int64) *twopc.Txn {
	b.t.Helper()
	txn, err := b.c.Transfer(testCtx(b.t), src, dst, value)
	require.ErrorIs(b.t, err, errCrash)
	b.applyLegByHand(txn, 1)
	return txn
}

// accountDoc is an account as stored.
type accountDoc struct {
	ID      any             `bson:"_id"`
	Balance int64           `bson:"balance"`
	Pending []bson.ObjectID `bson:"pendingTransactions"`
	Fenced  []bson.ObjectID `bson:"fencedLegs"` // see twopc.LegFence
	Credit  int64           `bson:"pendingCredit"`
	Debit   int64           `bson:"pendingDebit"`
	// FencedBefore is the account's fence line.
	FencedBefore time.Time `bson:"fencedBefore"`
}

func (b *bank) account(id any) accountDoc {
	b.t.Helper()
	var a accountDoc
	require.NoError(b.t, b.db.Collection("accounts").FindOne(testCtx(b.t), bson.D{{Key: "_id", Value: id}}).Decode(&a))
	return a
}

func (b *bank) balance(id any) int64 { return b.account(id).Balance }

// txnDoc is a transaction as stored, with the fields the library keeps to
// itself.
type txnDoc struct {
	twopc.Txn `bson:",inline"`
	Claim     bson.ObjectID `bson:"claim"`
}

func (b *bank) txn(id bson.ObjectID) txnDoc {
	b.t.Helper()
	var d txnDoc
	require.NoError(b.t, b.db.Collection("transactions").FindOne(testCtx(b.t), bson.D{{Key: "_id", Value: id}}).Decode(&d))
	return d
}

func (b *bank) txns() []txnDoc {
	b.t.Helper()
	var all []txnDoc
	cur, err := b.db.Collection("transactions").Find(testCtx(b.t), bson.D{})
	require.NoError(b.t, err)
	require.NoError(b.t, cur.All(testCtx(b.t), &all))
	return all
}

// backdate makes transaction id look untouched for age, as if its owner
// had stalled that long, so that recovery and takeover can be tested
// without waiting; a hold held looks held for age longer too.
func (b *bank) backdate(id bson.ObjectID, age time.Duration) {
	b.t.Helper()
	d := b.txn(id)
	set := bson.D{{Key: "lastModified", Value: d.LastModified.Add(-age)}}
	if !d.HeldAt.IsZero() {
		set = append(set, bson.E{Key: "heldAt", Value: d.HeldAt.Add(-age)})
	}
	_, err := b.db.Collection("transactions").UpdateOne(testCtx(b.t), bson.D{{Key: "_id", Value: id}},
		bson.D{{Key: "$set", Value: set}})
	require.NoError(b.t, err)
}

// serverPast returns once the server's clock, which has millisecond
// steps, reads later than when.
func (b *bank) serverPast(when time.Time) {
	b.t.Helper()
	for {
		now, err := schema.ServerNow(testCtx(b.t), b.db)
		require.NoError(b.t, err)
		if now.After(when) {
			return
		}
		runtime.Gosched()
	}
}

// serverPastTxns waits until the server's clock is past the lastModified
// of every transaction in b's log: an audit started then decides its
// totals, which it leaves undecided if anything in the log was written
// from its start on by the server's millisecond clock (a transfer's last
// write and the audit's first read can fall in one millisecond).
func (b *bank) serverPastTxns() {
	b.t.Helper()
	var last time.Time
	for _, d := range b.txns() {
		if d.LastModified.After(last) {
			last = d.LastModified
		}
	}
	b.serverPast(last)
}

// moveLine moves the fence lines of accounts ids up to line (see
// twopc.MoveLine): what the next apply or rollback on each does once the
// low-water mark has passed line, which drops the fences of transactions
// made up to then.
func (b *bank) moveLine(line time.Time, ids ...any) {
	b.t.Helper()
	for _, id := range ids {
		require.NoError(b.t, twopc.MoveLine(testCtx(b.t), b.c, "", id, line))
	}
}

// backdateAll backdates every transaction not yet final. Final ones keep
// their time, so that their fences stay within retention.
func (b *bank) backdateAll(age time.Duration) {
	b.t.Helper()
	for _, d := range b.txns() {
		if !d.State.Final() {
			b.backdate(d.ID, age)
		}
	}
}

// checkSettled asserts the invariant every finished run must keep: every
// transaction is done or canceled, every balance is its opening balance
// plus the net of its done transactions, and no account holds a pending
// marker, a pending credit or a held debit.
func (b *bank) checkSettled(opening map[string]int64) {
	b.t.Helper()
	want := map[string]int64{}
	for id, bal := range opening {
		want[id] = bal
	}
	for _, d := range b.txns() {
		require.Truef(b.t, d.State.Final(), "transaction %s is %s", d.ID.Hex(), d.State)
		if d.State == twopc.StateDone {
			for _, l := range d.SettledLegs() {
				want[l.Account.(string)] += l.Amount
			}
		}
	}
	for id, bal := range want {
		a := b.account(id)
		require.Equalf(b.t, bal, a.Balance, "balance of %s", id)
		require.Emptyf(b.t, a.Pending, "pending markers on %s", id)
		require.Zerof(b.t, a.Credit, "pending credit on %s", id)
		require.Zerof(b.t, a.Debit, "held debit on %s", id)
	}
}

// commandCounter counts the data commands a client sends, and the most
// statements one update command carried.
type commandCounter struct {
	mu          sync.Mutex
	counts      map[string]int
	mostUpdates int
	troubles    []string // the first write commands that failed or had write errors, for failure messages
}

var dataCommands = map[string]bool{
	"insert": true, "update": true, "delete": true, "findAndModify": true,
	"find": true, "aggregate": true, "getMore": true, "bulkWrite": true, "count": true,
}

// background reports whether e is a command a coordinator sends on its
// own, not per transfer: the low-water mark's read of the log (four times
// a second), or, on a sharded cluster, the clock skew probe's (once, its
// hellos included).
func background(e *event.CommandStartedEvent) bool {
	c, _ := e.Command.Lookup("comment").StringValueOK()
	return c == twopc.MarkComment || c == clockskew.Comment
}

// monitor counts the data commands of transfers: not the background ones
// (see background).
func (cc *commandCounter) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if !dataCommands[e.CommandName] || background(e) {
			return
		}
		cc.mu.Lock()
		defer cc.mu.Unlock()
		if cc.counts == nil {
			cc.counts = map[string]int{}
		}
		cc.counts[e.CommandName]++
		if e.CommandName == "update" {
			updates, _ := e.Command.Lookup("updates").ArrayOK()
			values, _ := updates.Values()
			cc.mostUpdates = max(cc.mostUpdates, len(values))
		}
	}, Succeeded: func(_ context.Context, e *event.CommandSucceededEvent) {
		if we, ok := e.Reply.Lookup("writeErrors").ArrayOK(); ok {
			cc.trouble(fmt.Sprintf("%s %d: write errors %s", e.CommandName, e.RequestID, truncate(we.String(), 400)))
		} else if e.CommandName == "update" {
			ups, _ := e.Reply.Lookup("upserted").ArrayOK()
			n, _ := ups.Values()
			cc.trouble(fmt.Sprintf("update %d: n %v, %d upserted", e.RequestID, e.Reply.Lookup("n"), len(n)))
		}
	}, Failed: func(_ context.Context, e *event.CommandFailedEvent) {
		cc.trouble(fmt.Sprintf("%s %d failed: %v", e.CommandName, e.RequestID, e.Failure))
	}}
}

// trouble records what a failure message of a count should show: the
// first 20.
func (cc *commandCounter) trouble(s string) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if len(cc.troubles) < 20 {
		cc.troubles = append(cc.troubles, s)
	}
}

// String is the counts and the troubles, for failure messages.
func (cc *commandCounter) String() string {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return fmt.Sprintf("%v; replies: %q", cc.counts, cc.troubles)
}

// truncate is s cut to n bytes.
func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// largestUpdate returns the most statements one update command carried.
func (cc *commandCounter) largestUpdate() int {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.mostUpdates
}

func (cc *commandCounter) total() int {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	n := 0
	for _, v := range cc.counts {
		n += v
	}
	return n
}

// count returns how many commands named name were counted.
func (cc *commandCounter) count(name string) int {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.counts[name]
}

func (cc *commandCounter) reset() {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	cc.counts, cc.troubles = nil, nil
}

// countedDatabase is the bank's database through a client that counts its
// commands.
func (b *bank) countedDatabase(cc *commandCounter) *mongo.Database {
	return mongotest.ConnectURI(b.t, b.server.URI, options.Client().SetMonitor(cc.monitor())).Database(b.db.Name())
}

// transferResult is what a Transfer returned.
type transferResult struct {
	txn *twopc.Txn
	err error
}

// stalledTransfer starts a transfer on b's coordinator, whose step hook is
// s.hook, waits until it stalls at s's step, and returns where its result
// will come once released.
func stalledTransfer(t *testing.T, b *bank, s *stall, src, dst string, value int64, opts ...twopc.TransferOption) <-chan transferResult {
	t.Helper()
	res := make(chan transferResult, 1)
	go func() {
		txn, err := b.c.Transfer(testCtx(t), src, dst, value, opts...)
		res <- transferResult{txn, err}
	}()
	<-s.reached
	return res
}

// seenThenDeleted opens account id through c, so that c has seen it
// exist, then deletes it by hand: a transfer of c naming it is not read
// for it before its insert, fails its leg there and rolls back, its fence
// leaving a tombstone under id (the bound PROTOCOL.md states, Fences).
func (b *bank) seenThenDeleted(c *twopc.Coordinator, id any) {
	b.t.Helper()
	require.NoError(b.t, c.OpenAccount(testCtx(b.t), id, 0))
	_, err := b.db.Collection("accounts").DeleteOne(testCtx(b.t), bson.D{{Key: "_id", Value: id}})
	require.NoError(b.t, err)
}
