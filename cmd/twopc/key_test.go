package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/twopc/twopc"
)

// TestListAndShowByKey: list --key and show KEY find a transaction by its
// idempotency key (an argument of 24 hexadecimal digits as an id first,
// then as a key); a key no transaction has is refused (exit 1).
func TestListAndShowByKey(t *testing.T) {
	f := newFixture(t)
	f.open(map[string]int64{"alice": 100, "bob": 0})
	keyed, err := f.c.Transfer(f.ctx, "alice", "bob", 1, twopc.WithKey("order/o-17"))
	require.NoError(t, err)
	hexKey := strings.Repeat("ab", 12) // a key that reads as an id
	hexKeyed, err := f.c.Transfer(f.ctx, "alice", "bob", 2, twopc.WithKey(hexKey))
	require.NoError(t, err)
	plain := f.done("alice", "bob", 3)

	var l struct {
		Count        int `json:"count"`
		Transactions []struct {
			ID  string `json:"_id"`
			Key string `json:"key"`
		} `json:"transactions"`
	}
	r := f.run("list", "--key", "order/o-17", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	r.decode(t, &l)
	require.Equal(t, 1, l.Count)
	assert.Equal(t, keyed.ID.Hex(), l.Transactions[0].ID)
	r = f.run("list", "--key", "order/o-17", "--account", "alice", "--state", "done", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	r.decode(t, &l)
	assert.Equal(t, 1, l.Count, "with other filters")
	r = f.run("list", "--key", "order/o-17", "--state", "canceled")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "No transaction matches.")
	r = f.run("list", "--key", "order/o-18")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "No transaction matches.")

	var s struct {
		FoundBy     string `json:"foundBy"`
		FoundIn     string `json:"foundIn"`
		Transaction struct {
			ID  string `json:"_id"`
			Key string `json:"key"`
		} `json:"transaction"`
	}
	for _, tc := range []struct {
		arg, by, id string
	}{
		{"order/o-17", "key", keyed.ID.Hex()},
		{hexKey, "key", hexKeyed.ID.Hex()},
		{keyed.ID.Hex(), "id", keyed.ID.Hex()},
		{plain.Hex(), "id", plain.Hex()},
	} {
		r = f.run("show", tc.arg, "--json")
		require.Equal(t, exitOK, r.code, "%s: %s", tc.arg, r.stderr)
		r.decode(t, &s)
		assert.Equal(t, tc.by, s.FoundBy, tc.arg)
		assert.Equal(t, tc.id, s.Transaction.ID, tc.arg)
		assert.Equal(t, "log", s.FoundIn)
	}
	r = f.run("show", "order/o-17")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "Transaction "+keyed.ID.Hex()+", found by its key in the log")
	assert.Regexp(t, `key\s+order/o-17`, r.stdout)

	r = f.run("show", "order/o-18")
	assert.Equal(t, exitFailed, r.code, r.stdout)
	assert.Contains(t, r.stderr, `key "order/o-18"`)
	r = f.run("show", strings.Repeat("cd", 12))
	assert.Equal(t, exitFailed, r.code, r.stdout)
	assert.Contains(t, r.stderr, "as an id, then as a key")
}
