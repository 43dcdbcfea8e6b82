package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/internal/mongotest"
)

// twoBanks is make banks' setting (examples/cmd/banks): two deployments,
// each a dev server of its own; the coordinator's log in database
// "coordinator" at Shanghai's, ledger "shanghai" the accounts of database
// "bank" there, ledger "beijing" the accounts of database "bank" at
// Beijing's.
type twoBanks struct {
	t        *testing.T
	ctx      context.Context
	shanghai *mongotest.DevServer
	beijing  *mongotest.DevServer
	log      *mongo.Database
	sh, bj   *mongo.Collection // each bank's accounts
}

func newTwoBanks(t *testing.T) *twoBanks {
	t.Helper()
	b := &twoBanks{t: t, ctx: testCtx(t)}
	for _, s := range []**mongotest.DevServer{&b.shanghai, &b.beijing} {
		srv, err := mongotest.StartDevServer(b.ctx, "", "")
		require.NoError(t, err)
		t.Cleanup(func() { _ = srv.Stop() })
		*s = srv
	}
	b.log = mongotest.ConnectURI(t, b.shanghai.URI).Database("coordinator")
	b.sh = mongotest.ConnectURI(t, b.shanghai.URI).Database("bank").Collection("accounts")
	b.bj = mongotest.ConnectURI(t, b.beijing.URI).Database("bank").Collection("accounts")
	return b
}

// namespace is the connection string of server s whose path is the
// namespace db.coll, as --uri and --ledger take it.
func namespace(s *mongotest.DevServer, ns string) string {
	return strings.TrimSuffix(s.URI, "/") + "/" + ns
}

// coordinator is a coordinator on the log with both ledgers.
func (b *twoBanks) coordinator(opts ...twopc.Option) *twopc.Coordinator {
	b.t.Helper()
	c, err := twopc.NewCoordinator(b.log, append([]twopc.Option{
		twopc.WithLedger("shanghai", b.sh), twopc.WithLedger("beijing", b.bj), twopc.WithSyncSettle(),
	}, opts...)...)
	require.NoError(b.t, err)
	b.t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// run runs the tool on the log, with every ledger where it is, and args.
func (b *twoBanks) run(cmd string, args ...string) result {
	return runTool(b.ctx, append([]string{cmd, "--uri", namespace(b.shanghai, "coordinator"),
		"--ledger", "shanghai=" + namespace(b.shanghai, "bank.accounts"),
		"--ledger", "beijing=" + namespace(b.beijing, "bank.accounts")}, args...)...)
}

func (b *twoBanks) balance(accounts *mongo.Collection, id string) int64 {
	b.t.Helper()
	var a accountDoc
	require.NoError(b.t, accounts.FindOne(b.ctx, bson.D{{Key: "_id", Value: id}}).Decode(&a))
	require.Zero(b.t, a.Credit, "%s: pendingCredit left", id)
	require.Zero(b.t, a.Debit, "%s: pendingDebit left", id)
	return a.Balance
}

// backdate makes transaction id look untouched for an hour, as if its
// owner died that long ago.
func (b *twoBanks) backdate(id bson.ObjectID) {
	b.t.Helper()
	res, err := b.log.Collection(twopc.DefaultTransactions).UpdateOne(b.ctx, bson.D{{Key: "_id", Value: id}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "lastModified", Value: time.Now().Add(-time.Hour)}}}})
	require.NoError(b.t, err)
	require.EqualValues(b.t, 1, res.MatchedCount)
}

// TestTwoBanks operates the two banks of two-phase commit's classic
// example, each its own deployment,
// with the tool alone: show, recover, cancel, reverse and audit reach the
// ledger at Beijing through --ledger NAME=URI, and recover without it
// leaves Beijing's transfers alone.
func TestTwoBanks(t *testing.T) {
	b := newTwoBanks(t)
	seed := b.coordinator(twopc.WithApplication("seed"))
	sh, err := seed.Ledger("shanghai")
	require.NoError(t, err)
	bj, err := seed.Ledger("beijing")
	require.NoError(t, err)
	require.NoError(t, sh.OpenAccount(b.ctx, "A", 1000))
	require.NoError(t, bj.OpenAccount(b.ctx, "B", 0))
	legs := func(v int64) []twopc.Leg {
		return []twopc.Leg{{Ledger: "shanghai", Account: "A", Amount: -v}, {Ledger: "beijing", Account: "B", Amount: v}}
	}
	done, err := seed.TransferLegs(b.ctx, legs(100))
	require.NoError(t, err)
	crashing := b.coordinator(twopc.WithApplication("crashing"),
		twopc.WithStepHook(func(_ context.Context, step twopc.Step, _ *twopc.Txn) error {
			if step == twopc.StepCommit {
				return errCrash
			}
			return nil
		}))
	var pending [2]bson.ObjectID // both legs applied, its coordinator dead at the commit point
	for i := range pending {
		txn, err := crashing.TransferLegs(b.ctx, legs(int64(200+50*i)))
		require.ErrorIs(t, err, errCrash)
		require.Equal(t, twopc.StatePending, txn.State)
		pending[i] = txn.ID
		b.backdate(txn.ID)
	}

	// show reads the Beijing leg's account at Beijing.
	r := b.run("show", pending[0].Hex())
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "1. account B, ledger beijing (collection bank.accounts at "+strings.TrimSuffix(b.beijing.URI, "/")+"), amount +200")
	require.Contains(t, r.stdout, "balance 100, pendingCredit 450")
	var shown showReport
	r = b.run("show", pending[0].Hex(), "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	r.decode(t, &shown)
	require.Equal(t, "bank", shown.Legs[1].Database)
	require.Equal(t, strings.TrimSuffix(b.beijing.URI, "/"), shown.Legs[1].Deployment)
	require.Equal(t, legApplied, shown.Legs[1].Leg)

	// Without Beijing, recover leaves both transfers to a recoverer that
	// has it, untouched, and names the ledger.
	r = runTool(b.ctx, "recover", "--uri", namespace(b.shanghai, "coordinator"),
		"--ledger", "shanghai="+namespace(b.shanghai, "bank.accounts"))
	require.Equal(t, exitFailed, r.code, r.stdout+r.stderr)
	require.Contains(t, r.stderr, `"beijing"`)
	require.Contains(t, r.stderr, "NAME=mongodb://HOST:PORT/DB.COLLECTION")
	for _, id := range pending {
		got, err := seed.Get(b.ctx, id)
		require.NoError(t, err)
		require.Equal(t, twopc.StatePending, got.State)
		require.Equal(t, "crashing", got.Application, "not taken over")
	}

	// cancel rolls one back at both banks.
	r = b.run("cancel", pending[1].Hex(), "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	var out outcomeReport
	r.decode(t, &out)
	require.Equal(t, "canceled", out.State)

	// recover rolls the other forward at both banks.
	r = b.run("recover", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	var rep recoverReport
	r.decode(t, &rep)
	require.Equal(t, 1, rep.RolledForward)
	got, err := seed.Get(b.ctx, pending[0])
	require.NoError(t, err)
	require.Equal(t, twopc.StateDone, got.State)
	require.EqualValues(t, 700, b.balance(b.sh, "A"))
	require.EqualValues(t, 300, b.balance(b.bj, "B"))

	// reverse moves the first transfer back across the deployments.
	r = b.run("reverse", done.ID.Hex(), "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.EqualValues(t, 800, b.balance(b.sh, "A"))
	require.EqualValues(t, 200, b.balance(b.bj, "B"))

	// A hold across the banks, captured in part with the tool.
	hold, err := seed.HoldLegs(b.ctx, legs(100))
	require.NoError(t, err)
	r = b.run("capture", hold.ID.Hex(), "40")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.EqualValues(t, 760, b.balance(b.sh, "A"))
	require.EqualValues(t, 240, b.balance(b.bj, "B"))

	// audit reads both banks: the totals hold, and a wrong one is found.
	r = b.run("audit", "--total", "shanghai=760", "--total", "beijing=240")
	require.Equal(t, exitOK, r.code, r.stdout+r.stderr)
	require.Contains(t, r.stdout, "accounts by ledger: beijing 1, shanghai 1")
	r = b.run("audit", "--total", "shanghai=760", "--total", "beijing=241")
	require.Equal(t, exitFailed, r.code, r.stdout+r.stderr)
	require.Contains(t, r.stdout, "total of ledger beijing: 240, want 241")
}

// TestLedgerFlag reads --ledger's two forms, and refuses what is neither.
func TestLedgerFlag(t *testing.T) {
	for _, tc := range []struct {
		in                  string
		uri, db, collection string
		err                 string
	}{
		{in: "sh=accounts_sh", collection: "accounts_sh"},
		{in: "bj=mongodb://127.0.0.1:27018/bank.accounts", uri: "mongodb://127.0.0.1:27018/bank", db: "bank", collection: "accounts"},
		{in: "bj=mongodb://u:p@h1:1,h2:2/bank.acc.v2?replicaSet=rs&authSource=admin",
			uri: "mongodb://u:p@h1:1,h2:2/bank?replicaSet=rs&authSource=admin", db: "bank", collection: "acc.v2"},
		{in: "bj=mongodb+srv://cluster0.example.net/bank.accounts", uri: "mongodb+srv://cluster0.example.net/bank", db: "bank", collection: "accounts"},
		{in: "bj=mongodb://127.0.0.1:27018/bank", err: "DB.COLLECTION"},
		{in: "bj=mongodb://127.0.0.1:27018/", err: "DB.COLLECTION"},
		{in: "bj=mongodb://127.0.0.1:27018", err: "DB.COLLECTION"},
		{in: "bj=mongodb://127.0.0.1:27018/.accounts", err: "DB.COLLECTION"},
		{in: "bj=http://127.0.0.1/bank.accounts", err: "scheme"},
		{in: "bj=mongodb:///bank.accounts", err: "no host"},
		{in: "bj=mongodb://u:secret@h/bank", err: "u:***@h"},
		{in: "bj", err: "NAME=COLLECTION"},
		{in: "=accounts", err: "NAME=COLLECTION"},
		{in: "default=accounts", err: "default ledger"},
	} {
		f, err := parseLedger(tc.in)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, tc.in)
			require.NotContains(t, err.Error(), "secret", tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		require.Equal(t, ledgerFlag{name: strings.Split(tc.in, "=")[0], uri: tc.uri, db: tc.db, collection: tc.collection}, f, tc.in)
	}
	var l ledgerList
	require.NoError(t, l.add("bj=mongodb://u:secret@h/bank.accounts"))
	require.ErrorContains(t, l.add("bj=accounts"), "given twice")
	require.Equal(t, "bj=mongodb://u:***@h/bank.accounts", l.String())

	// Passwords holding "/", "?" or "#", and secrets in the options, are
	// never printed: not by the flag package, not by an error.
	for _, arg := range []string{
		"bj=mongodb://ops:S3cret@h/bank",
		"bj=mongodb://ops:pa/S3cret@h/bank.accounts",
		"bj=mongodb://ops:pa?S3cret@h:1/bank.accounts",
		"bj=mongodb://h:1/bank.accounts?tlsCertificateKeyFilePassword=S3cret",
	} {
		r := runTool(context.Background(), "show", "--uri", "mongodb://127.0.0.1:1/log", "--connect-timeout", "1ms",
			"--ledger", arg, "--ledger", arg, "6740c1a2e4b0a1b2c3d4e500")
		require.NotEqual(t, exitOK, r.code, arg)
		require.NotContains(t, r.stdout+r.stderr, "S3cret", arg)
	}
	for uri, want := range map[string]string{
		"mongodb://u:secret@h/bank":          "mongodb://u:***@h/bank",
		"mongodb://u:pa/ss@h/bank?x=1":       "mongodb://u:***@h/bank?…",
		"mongodb://u@h/bank":                 "mongodb://u@h/bank",
		"mongodb://h/bank?authSource=admin":  "mongodb://h/bank?…",
		"mongodb+srv://u:p%40q@c.example/db": "mongodb+srv://u:***@c.example/db",
	} {
		require.Equal(t, want, redact(uri), uri)
	}
}
