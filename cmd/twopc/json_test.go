package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc"
)

// requirePlain checks that v, decoded JSON, holds no Extended JSON: no key
// anywhere begins with "$".
func requirePlain(t *testing.T, v any, path string) {
	t.Helper()
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			require.False(t, strings.HasPrefix(k, "$"), "%s.%s: Extended JSON", path, k)
			requirePlain(t, e, path+"."+k)
		}
	case []any:
		for i, e := range x {
			requirePlain(t, e, fmt.Sprintf("%s[%d]", path, i))
		}
	}
}

var hex24 = regexp.MustCompile(`^[0-9a-f]{24}$`)

// TestJSONIsPlain: --json prints plain JSON: ids as hex strings, times as
// RFC 3339 strings, numbers as numbers; no Extended JSON anywhere.
func TestJSONIsPlain(t *testing.T) {
	f := newFixture(t)
	f.open(map[string]int64{"alice": 1000, "bob": 0})
	settled := f.done("alice", "bob", 50)
	pending := f.pendingTransfer("alice", "bob", 100)

	r := f.run("show", settled.Hex(), "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	var any1 map[string]any
	r.decode(t, &any1)
	requirePlain(t, any1, "show")
	var sh struct {
		Transaction struct {
			ID           string    `json:"_id"`
			Value        int64     `json:"value"`
			LastModified time.Time `json:"lastModified"` // RFC 3339, or this fails
			Created      time.Time `json:"created"`
			Claim        string    `json:"claim"`
		} `json:"transaction"`
		Legs []struct {
			AccountID string `json:"accountId"`
			Account   struct {
				ID           string    `json:"_id"`
				Balance      int64     `json:"balance"`
				Fences       []string  `json:"fencedLegs"`
				FencedBefore time.Time `json:"fencedBefore"`
			} `json:"account"`
		} `json:"legs"`
	}
	r.decode(t, &sh)
	require.Equal(t, settled.Hex(), sh.Transaction.ID)
	require.EqualValues(t, 50, sh.Transaction.Value)
	require.WithinDuration(t, time.Now(), sh.Transaction.LastModified, time.Minute)
	require.WithinDuration(t, time.Now(), sh.Transaction.Created, time.Minute)
	require.Regexp(t, hex24, sh.Transaction.Claim)
	require.Len(t, sh.Legs, 2)
	require.Equal(t, "alice", sh.Legs[0].AccountID)
	require.EqualValues(t, 850, sh.Legs[0].Account.Balance)
	require.Contains(t, sh.Legs[0].Account.Fences, f.fence(settled, 0))

	r = f.run("list", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	var l map[string]any
	r.decode(t, &l)
	requirePlain(t, l, "list")
	var ids []string
	for _, x := range l["transactions"].([]any) {
		ids = append(ids, x.(map[string]any)["_id"].(string))
	}
	require.Equal(t, []string{settled.Hex(), pending.Hex()}, ids)

	for _, args := range [][]string{
		{"status", "--json"}, {"audit", "--json"}, {"recover", "--json", "--quiet"}, {"accounts", "--json"},
		{"cancel", "--placeholder", bson.NewObjectID().Hex(), "--json"},
		{"reverse", settled.Hex(), "--json"},
	} {
		r = f.run(args[0], args[1:]...)
		require.Equal(t, exitOK, r.code, "%v: %s", args, r.stderr)
		var v map[string]any
		r.decode(t, &v)
		requirePlain(t, v, args[0])
	}
}

// TestJSONError: a failure under --json prints a JSON error object on
// stdout, and keeps its exit status.
func TestJSONError(t *testing.T) {
	f := newFixture(t)
	f.open(map[string]int64{"alice": 1000, "bob": 0})
	pending := f.pendingTransfer("alice", "bob", 100)
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"show", bson.NewObjectID().Hex(), "--json"}, exitFailed, "transaction not found"},
		{[]string{"cancel", pending.Hex(), "--json"}, exitFailed, "in progress"},
		{[]string{"show", "alice", "--json"}, exitFailed, `transaction not found: key "alice"`},
		{[]string{"show", "", "--json"}, exitUsage, "neither a transaction id"},
		{[]string{"list", "--bogus", "--json"}, exitUsage, "flag provided but not defined: -bogus"},
		{[]string{"status", "--json", "--connect-timeout", "200ms", "--uri", "mongodb://127.0.0.1:1/bank"}, exitServer, "cannot connect"},
	} {
		r := f.run(tc.args[0], tc.args[1:]...)
		require.Equal(t, tc.code, r.code, "%v: %s", tc.args, r.stdout+r.stderr)
		var e struct {
			Error      string `json:"error"`
			ExitStatus int    `json:"exitStatus"`
		}
		r.decode(t, &e)
		require.Contains(t, e.Error, tc.msg, tc.args)
		require.Equal(t, tc.code, e.ExitStatus, tc.args)
		require.Contains(t, r.stderr, tc.msg, "stderr says it too: %v", tc.args)
	}
	// Without --json, stdout stays empty.
	r := f.run("show", bson.NewObjectID().Hex())
	require.Equal(t, exitFailed, r.code)
	require.Empty(t, r.stdout)
}

// jqExample is a line of the tool's help or manual that pipes --json
// output into jq.
var jqExample = regexp.MustCompile(`(?m)^\s*(?://\s*)?(?:\S+=\S+ )?twopc (.*--json.*?) \| jq (.+)$`)

// words splits a command line as sh would, for the quoting the examples
// use: single quotes.
func words(s string) []string {
	var out []string
	var cur strings.Builder
	in, quoted := false, false
	for _, r := range s {
		switch {
		case r == '\'':
			in, quoted = !in, true
		case r == ' ' && !in:
			if cur.Len() > 0 || quoted {
				out = append(out, cur.String())
			}
			cur.Reset()
			quoted = false
		default:
			cur.WriteRune(r)
		}
	}
	if cur.Len() > 0 || quoted {
		out = append(out, cur.String())
	}
	return out
}

// TestHelpJQExamples runs every "twopc ... --json | jq ..." example of the
// help texts and the manual (doc.go) against a database that has what they
// name, through jq: each must print values, none null, no Extended JSON;
// ids come out as 24 hexadecimal digits that show takes back.
func TestHelpJQExamples(t *testing.T) {
	jq, err := exec.LookPath("jq")
	require.NoError(t, err, "the help's examples pipe into jq: install it (apt-get install jq)")

	f := newFixture(t)
	c := f.coordinator(twopc.WithApplication("seed"), twopc.WithSyncSettle(),
		twopc.WithLedger("shanghai", f.db.Collection("accounts_sh")))
	f.open(map[string]int64{"alice": 1000, "carol": 0})
	feed, _ := f.feedRun(nil, "audit") // the feed examples' feed
	sh, err := c.Ledger("shanghai")
	require.NoError(t, err)
	require.NoError(t, sh.OpenAccount(f.ctx, "bob", 5000))
	example := f.done("alice", "carol", 100) // the examples' 6740c1a2e4b0a1b2c3d4e500
	_, err = f.crashAtCommit(twopc.WithApplication("payments-1")).Transfer(f.ctx, "alice", "carol", 7)
	require.ErrorIs(t, err, errCrash)
	f.feedEvents(feed, 1)
	notNow := errors.New("not now") // a group behind by the one event
	require.ErrorIs(t, feed.Subscribe(f.ctx, "hooks", func(context.Context, []twopc.Event) error { return notNow }), notNow)

	var texts bytes.Buffer
	(&cli{}).help(&texts)
	for _, cmd := range commands {
		texts.WriteString(cmd.help + "\n")
	}
	manual, err := os.ReadFile("doc.go")
	require.NoError(t, err)
	texts.Write(manual)

	examples := jqExample.FindAllStringSubmatch(texts.String(), -1)
	require.GreaterOrEqual(t, len(examples), 6, "the examples piped into jq")
	for _, ex := range examples {
		line := strings.TrimSpace(ex[0])
		args := words(strings.ReplaceAll(ex[1], "6740c1a2e4b0a1b2c3d4e500", example.Hex()))
		r := runTool(f.ctx, append(args, "--uri", f.uri, "--db", f.db.Name())...)
		require.NotEqual(t, exitUsage, r.code, "%s: %s", line, r.stderr)
		require.NotEqual(t, exitServer, r.code, "%s: %s", line, r.stderr)

		jqArgs := words(ex[2])
		cmd := exec.CommandContext(f.ctx, jq, jqArgs...)
		cmd.Stdin = strings.NewReader(r.stdout)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		require.NoError(t, err, "%s: jq: %s\ninput: %s", line, stderr.String(), r.stdout)
		values := strings.Split(strings.TrimSpace(string(out)), "\n")
		require.NotEmpty(t, strings.TrimSpace(string(out)), line)
		for _, v := range values {
			require.NotEqual(t, "null", v, "%s: prints null", line)
			require.NotContains(t, v, "$oid", line)
			require.NotContains(t, v, "$date", line)
			require.NotContains(t, v, "$number", line)
		}
		if !strings.HasSuffix(strings.Trim(jqArgs[len(jqArgs)-1], "'"), "_id") {
			continue
		}
		// Ids: hexadecimal, as show takes them back.
		for _, v := range values {
			var id string
			if strings.Contains(ex[2], "-r") {
				id = v
			} else {
				require.NoError(t, json.Unmarshal([]byte(v), &id), "%s: %s is not a string", line, v)
			}
			require.Regexp(t, hex24, id, line)
			r := f.run("show", id)
			require.Equal(t, exitOK, r.code, "%s: show %s: %s", line, id, r.stderr)
		}
	}
}
