package main

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/twopc/twopc/internal/mongotest"
)

// TestUsage checks help and usage errors; none of these runs reaches a
// server (the URI given names none that listens).
func TestUsage(t *testing.T) {
	const nowhere = "mongodb://127.0.0.1:1/bank"
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stdout string // a substring of stdout
		stderr string // a substring of stderr
	}{
		{name: "no command", code: exitUsage, stderr: "no command: give one of status, list"},
		{name: "unknown command", args: []string{"frobnicate"}, code: exitUsage, stderr: `unknown command "frobnicate"`},
		{name: "help", args: []string{"help"}, code: exitOK, stdout: "Exit status:"},
		{name: "--help", args: []string{"--help"}, code: exitOK, stdout: "Commands:"},
		{name: "help status", args: []string{"help", "status"}, code: exitOK, stdout: "Examples:"},
		{name: "help unknown", args: []string{"help", "frobnicate"}, code: exitUsage, stderr: "unknown command"},
		{name: "status -h", args: []string{"status", "-h"}, code: exitOK, stdout: "Usage: twopc status"},
		{name: "cancel --help", args: []string{"cancel", "--help"}, code: exitOK, stdout: "--placeholder"},
		{name: "unknown flag", args: []string{"status", "--uri", nowhere, "--bogus"}, code: exitUsage, stderr: "flag provided but not defined: -bogus"},
		{name: "status takes no --ledger", args: []string{"status", "--uri", nowhere, "--ledger", "a=b"}, code: exitUsage, stderr: "flag provided but not defined: -ledger"},
		{name: "show without id", args: []string{"show", "--uri", nowhere}, code: exitUsage, stderr: "missing ID"},
		{name: "show bad id or key", args: []string{"show", "--uri", nowhere, "\xff"}, code: exitUsage, stderr: `is neither a transaction id (24 hexadecimal digits) nor an idempotency key`},
		{name: "list bad key", args: []string{"list", "--uri", nowhere, "--key", ""}, code: exitUsage, stderr: `--key "": an empty key`},
		{name: "accounts takes no argument", args: []string{"accounts", "--uri", nowhere, "alice"}, code: exitUsage, stderr: `unexpected argument "alice"`},
		{name: "accounts two ledgers", args: []string{"accounts", "--uri", nowhere, "--ledger", "a", "--ledger", "b"}, code: exitUsage, stderr: "one --ledger NAME at a time"},
		{name: "cancel bad id", args: []string{"cancel", "--uri", nowhere, "123"}, code: exitUsage, stderr: "not a transaction id"},
		{name: "reverse bad id", args: []string{"reverse", "--uri", nowhere, "xyz"}, code: exitUsage, stderr: "not a transaction id"},
		{name: "show two ids", args: []string{"show", "--uri", nowhere, "6740c1a2e4b0a1b2c3d4e500", "6740c1a2e4b0a1b2c3d4e500"}, code: exitUsage, stderr: "unexpected argument"},
		{name: "list bad state", args: []string{"list", "--uri", nowhere, "--state", "lost"}, code: exitUsage, stderr: `unknown state "lost"`},
		{name: "list ledger with collection", args: []string{"list", "--uri", nowhere, "--ledger", "sh=accounts_sh"}, code: exitUsage, stderr: "takes a ledger's name here"},
		{name: "list negative limit", args: []string{"list", "--uri", nowhere, "--limit", "-1"}, code: exitUsage, stderr: "--limit"},
		{name: "bad ledger flag", args: []string{"show", "--uri", nowhere, "--ledger", "sh", "6740c1a2e4b0a1b2c3d4e500"}, code: exitUsage, stderr: "NAME=COLLECTION"},
		{name: "ledger named default", args: []string{"audit", "--uri", nowhere, "--ledger", "default=x"}, code: exitUsage, stderr: "default ledger"},
		{name: "audit bad total", args: []string{"audit", "--uri", nowhere, "--total", "lots"}, code: exitUsage, stderr: "LEDGER=N"},
		{name: "audit total of an unknown ledger", args: []string{"audit", "--uri", nowhere, "--total", "sh=5"}, code: exitUsage, stderr: "no ledger"},
		{name: "audit asset total of an unknown ledger", args: []string{"audit", "--uri", nowhere, "--total", "sh:USD/2=5"}, code: exitUsage, stderr: `no ledger "sh"`},
		{name: "audit total given twice", args: []string{"audit", "--uri", nowhere, "--total", "default:none=7", "--total", "none=8"}, code: exitUsage,
			stderr: "--total default:none=7 and --total none=8 state the same total"},
		{name: "audit total of a bad asset", args: []string{"audit", "--uri", nowhere, "--total", "default:usd=5"}, code: exitUsage, stderr: `asset code "usd": want upper-case`},
		{name: "recover zero interval", args: []string{"recover", "--uri", nowhere, "--interval", "0"}, code: exitUsage, stderr: "--interval"},
		{name: "same collections", args: []string{"status", "--uri", nowhere, "--accounts", "x", "--transactions", "x"}, code: exitUsage, stderr: "both"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runTool(context.Background(), tc.args...)
			require.Equal(t, tc.code, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
			require.Contains(t, r.stdout, tc.stdout)
			require.Contains(t, r.stderr, tc.stderr)
			if tc.code == exitUsage {
				require.Empty(t, r.stdout, "a usage error writes nothing on stdout")
			}
		})
	}
}

// TestEveryCommandHasHelp checks that each command's help has examples
// and names its flags.
func TestEveryCommandHasHelp(t *testing.T) {
	for _, cmd := range commands {
		r := runTool(context.Background(), cmd.name, "-h")
		require.Equal(t, exitOK, r.code, cmd.name)
		require.Contains(t, r.stdout, "Examples:", cmd.name)
		require.Contains(t, r.stdout, "-uri", cmd.name)
		require.Contains(t, r.stdout, "Exit status", cmd.name)
	}
}

// TestDatabase checks where the database name comes from: --db, else the
// connection string's path (--uri or MONGODB_URI); neither is a usage
// error that says what to do.
func TestDatabase(t *testing.T) {
	uri := mongotest.Shared(t).URI
	t.Setenv("MONGODB_URI", "")
	ctx := testCtx(t)

	r := runTool(ctx, "status", "--uri", withPath(uri, ""))
	require.Equal(t, exitUsage, r.code, r.stderr)
	require.Contains(t, r.stderr, "no database: pass --db NAME")
	require.Empty(t, r.stdout)

	r = runTool(ctx, "status")
	require.Equal(t, exitUsage, r.code, r.stderr)
	require.Contains(t, r.stderr, "MONGODB_URI")

	f := newFixture(t)
	r = runTool(ctx, "status", "--uri", withPath(uri, f.db.Name()))
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "Database "+f.db.Name())

	t.Setenv("MONGODB_URI", withPath(uri, f.db.Name()))
	r = runTool(ctx, "status", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	var rep statusReport
	r.decode(t, &rep)
	require.Equal(t, f.db.Name(), rep.Database)

	// --db wins over the path: that database has no transactions.
	r = runTool(ctx, "status", "--json", "--db", "other_"+f.db.Name())
	require.Equal(t, exitFailed, r.code, r.stderr)
	var e jsonError
	r.decode(t, &e)
	require.Contains(t, e.Error, "database other_"+f.db.Name()+" has no collection")
}

// TestCannotConnect checks the exit status of a server that does not
// answer.
func TestCannotConnect(t *testing.T) {
	r := runTool(testCtx(t), "status", "--uri", "mongodb://127.0.0.1:1/bank", "--connect-timeout", "200ms")
	require.Equal(t, exitServer, r.code, r.stderr)
	require.Contains(t, r.stderr, "cannot connect")
}

func TestDatabaseOf(t *testing.T) {
	for uri, want := range map[string]string{
		"mongodb://127.0.0.1:27017":                       "",
		"mongodb://127.0.0.1:27017/":                      "",
		"mongodb://127.0.0.1:27017/bank":                  "bank",
		"mongodb://u:p@h1:1,h2:2/bank?replicaSet=rs0":     "bank",
		"mongodb://h/?directConnection=true":              "",
		"mongodb+srv://u:p%2Fq@cluster.example.net/b%20k": "b k",
	} {
		got, err := databaseOf(uri)
		require.NoError(t, err, uri)
		require.Equal(t, want, got, uri)
	}
	require.Equal(t, "mongodb://u:***@h/bank", redact("mongodb://u:secret@h/bank"))
}

// withPath returns uri with its path set to db.
func withPath(uri, db string) string {
	base, query, _ := strings.Cut(uri, "?")
	scheme, rest, _ := strings.Cut(base, "://")
	host, _, _ := strings.Cut(rest, "/")
	out := scheme + "://" + host + "/" + db
	if query != "" {
		out += "?" + query
	}
	return out
}

// TestUsageErrorIsOneLine: a usage error prints what is wrong on one line,
// and where to read more, not the whole help.
func TestUsageErrorIsOneLine(t *testing.T) {
	const nowhere = "mongodb://127.0.0.1:1/bank"
	for _, tc := range []struct {
		args []string
		line string // the error line
		more string // where to read more
	}{
		{[]string{"status", "--uri", nowhere, "--bogus"}, "twopc status: flag provided but not defined: -bogus", "Run 'twopc help status'"},
		{[]string{"list", "--uri", nowhere, "--limit", "many"}, `twopc list: invalid value "many" for flag -limit`, "Run 'twopc help list'"},
		{[]string{"show", "--uri", nowhere}, "twopc show: missing ID", "Run 'twopc help show'"},
		{[]string{"show", "--uri", nowhere, ""}, `twopc show: "" is neither a transaction id (24 hexadecimal digits) nor an idempotency key: an empty key`, "Run 'twopc help show'"},
		{[]string{"recover", "--uri", nowhere, "--interval", "0"}, "twopc recover: --interval must be positive", "Run 'twopc help recover'"},
		{[]string{"status", "--uri", nowhere, "--accounts", "x", "--transactions", "x"}, `twopc status: --accounts and --transactions are both "x"`, "Run 'twopc help status'"},
		{[]string{"audit", "--uri", nowhere, "--ledger", "sh"}, "twopc audit: --ledger: want NAME=COLLECTION", "Run 'twopc help audit'"},
		{[]string{"frobnicate"}, `twopc: unknown command "frobnicate"`, "Run 'twopc help'"},
		{nil, "twopc: no command", "Run 'twopc help'"},
	} {
		r := runTool(context.Background(), tc.args...)
		require.Equal(t, exitUsage, r.code, "%v: %s", tc.args, r.stderr)
		lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
		require.Len(t, lines, 2, "%v: one line, and where to read more:\n%s", tc.args, r.stderr)
		require.Contains(t, lines[0], tc.line, tc.args)
		require.Contains(t, lines[1], tc.more, tc.args)
		require.NotContains(t, r.stderr, "Flags:", tc.args)
		require.Empty(t, r.stdout, tc.args)
	}
}
