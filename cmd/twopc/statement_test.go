package main

import (
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc"
)

// TestStatementAndBalance: statement prints an account's entries with
// their running balance, key and metadata, page after page; balance
// prints its balance at a time; bad input is a usage error, an unknown
// account exit status 1.
func TestStatementAndBalance(t *testing.T) {
	f := newFixture(t)
	f.open(map[string]int64{"alice": 100, "bob": 0})
	var ids []bson.ObjectID
	for i, v := range []int64{10, 20, 30} {
		txn, err := f.c.Transfer(f.ctx, "alice", "bob", v, twopc.WithKey(string(rune('a'+i))),
			twopc.WithMetadata(map[string]string{"n": string(rune('1' + i))}))
		require.NoError(t, err)
		ids = append(ids, txn.ID)
	}
	// Entries are listed once a second old: commit them a minute earlier.
	for _, id := range ids {
		var d struct {
			At time.Time `bson:"committedAt"`
		}
		require.NoError(t, f.db.Collection("transactions").FindOne(f.ctx, bson.D{{Key: "_id", Value: id}}).Decode(&d))
		_, err := f.db.Collection("transactions").UpdateOne(f.ctx, bson.D{{Key: "_id", Value: id}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "committedAt", Value: d.At.Add(-time.Minute)}}}})
		require.NoError(t, err)
	}

	var rep statementReport
	r := f.run("statement", "alice", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	r.decode(t, &rep)
	require.Len(t, rep.Entries, 3)
	for i, want := range []int64{90, 70, 40} {
		assert.Equal(t, ids[i].Hex(), rep.Entries[i].Txn)
		assert.Equal(t, want, rep.Entries[i].Balance)
		assert.Equal(t, map[string]string{"n": string(rune('1' + i))}, rep.Entries[i].Metadata)
	}
	assert.Equal(t, int64(-10), rep.Entries[0].Amount)
	assert.Equal(t, "a", rep.Entries[0].Key)

	r = f.run("statement", "alice", "--limit", "2")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, ids[1].Hex()+`\s+-20\s+70\s+b\s+n=2`, r.stdout)
	m := regexp.MustCompile(`--after (\S+)`).FindStringSubmatch(r.stdout)
	require.NotNil(t, m, r.stdout)
	r = f.run("statement", "alice", "--after", m[1], "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	r.decode(t, &rep)
	require.Len(t, rep.Entries, 1)
	assert.Equal(t, ids[2].Hex(), rep.Entries[0].Txn)

	var bal balanceReport
	r = f.run("balance", "bob", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	r.decode(t, &bal)
	assert.Equal(t, int64(60), bal.Balance)
	r = f.run("balance", "bob")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, ": 60\n"+minorNote+"\n", "said once: no asset, minor units")
	// Before OpenAccount opened it: refused, naming when it was opened.
	r = f.run("balance", "bob", "--at", "2000-01-01T00:00:00Z")
	require.Equal(t, exitFailed, r.code, r.stdout)
	assert.Contains(t, r.stderr, "balance of account bob at 2000-01-01T00:00:00Z: before the account was opened at ")

	for _, bad := range [][]string{
		{"statement", "alice", "--since", "yesterday"},
		{"statement", "alice", "--limit", "-1"},
		{"statement", "alice", "--after", "junk"},
		{"statement", "alice", "--since", "2026-11-25T00:00:00Z", "--until", "2026-11-24T00:00:00Z"},
		{"balance", "alice", "--at", "noon"},
		{"statement"},
	} {
		r = f.run(bad[0], bad[1:]...)
		assert.Equalf(t, exitUsage, r.code, "%v: %s", bad, r.stderr)
	}
	r = f.run("statement", "nobody")
	assert.Equal(t, exitFailed, r.code, r.stderr)
	r = f.run("balance", "nobody")
	assert.Equal(t, exitFailed, r.code, r.stderr)
}
