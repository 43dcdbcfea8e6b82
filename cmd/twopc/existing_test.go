package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// readCommands are the read commands that refuse a database holding
// none of the collections the flags name, each with its arguments.
var readCommands = [][]string{
	{"audit"},
	{"list"},
	{"statement", "alice"},
	{"balance", "alice"},
	{"account", "alice"},
	{"accounts"},
}

// TestReadCommandsNoCollections: audit, list, statement, balance, account
// and accounts on a database with neither the accounts nor the
// transactions collection say so and exit 1, rather than report nothing
// found (accounts said "No accounts."); on
// the fixture's database (EnsureIndexes made both) they run.
func TestReadCommandsNoCollections(t *testing.T) {
	f := newFixture(t)
	f.open(map[string]int64{"alice": 1000, "bob": 0})
	f.done("alice", "bob", 100)
	empty := "empty_" + f.db.Name()
	for _, args := range readCommands {
		r := runTool(f.ctx, append(args, "--uri", f.uri, "--db", empty)...)
		require.Equal(t, exitFailed, r.code, "%v: %s%s", args, r.stdout, r.stderr)
		require.Contains(t, r.stderr, `database `+empty+` has neither collection "accounts" nor "transactions", so nothing to read`, args)
		require.Contains(t, r.stderr, "it has no collection at all", args)
		require.Empty(t, r.stdout, args)

		r = runTool(f.ctx, append(args, "--uri", f.uri, "--db", empty, "--json")...)
		require.Equal(t, exitFailed, r.code, "%v: %s%s", args, r.stdout, r.stderr)
		var e struct {
			Error      string `json:"error"`
			ExitStatus int    `json:"exitStatus"`
		}
		r.decode(t, &e)
		require.Contains(t, e.Error, `has neither collection "accounts" nor "transactions"`, args)
		require.Equal(t, exitFailed, e.ExitStatus, args)

		r = f.run(args[0], args[1:]...)
		require.Equal(t, exitOK, r.code, "%v: %s%s", args, r.stdout, r.stderr)
	}
}

// TestReadCommandsSomeCollection: a database holding one of the
// collections the flags name in it is read, whichever that is; the
// refusal names every collection looked for and those the database has.
func TestReadCommandsSomeCollection(t *testing.T) {
	f := newFixture(t)
	f.open(map[string]int64{"alice": 1000})

	// The accounts alone: list finds no transaction, and says so.
	r := f.run("list", "--transactions", "txns")
	require.Equal(t, exitOK, r.code, r.stdout+r.stderr)
	// The log alone.
	r = f.run("list", "--accounts", "accts")
	require.Equal(t, exitOK, r.code, r.stdout+r.stderr)

	r = f.run("audit", "--accounts", "accts", "--transactions", "txns")
	require.Equal(t, exitFailed, r.code, r.stdout+r.stderr)
	require.Contains(t, r.stderr, `has neither collection "accts" nor "txns"`)
	require.Contains(t, r.stderr, "or --db, --accounts or --transactions names another")
	require.Regexp(t, `its collections: .*accounts, .*transactions`, r.stderr)

	r = f.run("list", "--accounts", "accts", "--transactions", "txns", "--archive", "old")
	require.Equal(t, exitFailed, r.code, r.stdout+r.stderr)
	require.Contains(t, r.stderr, `has none of the collections "accts", "txns" and "old"`)
	require.Contains(t, r.stderr, "or --db, --accounts, --transactions or --archive names another")

	// A ledger of the database, given with --ledger, is one of them.
	r = f.run("audit", "--accounts", "accts", "--transactions", "txns", "--ledger", "sh=shanghai")
	require.Equal(t, exitFailed, r.code, r.stdout+r.stderr)
	require.Contains(t, r.stderr, `has none of the collections "accts", "txns" and "shanghai"`)
	require.Contains(t, r.stderr, "--transactions or --ledger names another")
	r = f.run("audit", "--accounts", "accts", "--transactions", "txns", "--ledger", "sh=accounts")
	require.Equal(t, exitOK, r.code, r.stdout+r.stderr)
	require.Contains(t, r.stdout, "accounts by ledger: sh 1;")
}
