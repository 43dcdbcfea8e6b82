package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/twopc/twopc"
)

// TestListMetaAndShow: list --meta keeps the transfers whose metadata has
// every KEY=VALUE given; show prints the metadata; a bad --meta is a
// usage error.
func TestListMetaAndShow(t *testing.T) {
	f := newFixture(t)
	f.open(map[string]int64{"alice": 100, "bob": 0})
	a, err := f.c.Transfer(f.ctx, "alice", "bob", 1, twopc.WithMetadata(map[string]string{"order": "o-17", "shop": "north"}))
	require.NoError(t, err)
	_, err = f.c.Transfer(f.ctx, "alice", "bob", 2, twopc.WithMetadata(map[string]string{"order": "o-18", "shop": "north"}))
	require.NoError(t, err)
	f.done("alice", "bob", 3)

	var l struct {
		Count        int `json:"count"`
		Transactions []struct {
			ID string `json:"_id"`
		} `json:"transactions"`
	}
	r := f.run("list", "--meta", "order=o-17", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	r.decode(t, &l)
	require.Equal(t, 1, l.Count)
	assert.Equal(t, a.ID.Hex(), l.Transactions[0].ID)
	r = f.run("list", "--meta", "shop=north", "--json")
	r.decode(t, &l)
	assert.Equal(t, 2, l.Count)
	r = f.run("list", "--meta", "shop=north", "--meta", "order=o-18", "--json")
	r.decode(t, &l)
	assert.Equal(t, 1, l.Count)
	r = f.run("list", "--meta", "shop=south")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "No transaction matches.")

	r = f.run("show", a.ID.Hex())
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `metadata\s+.*order.*o-17`, r.stdout)

	for _, bad := range []string{"order", "=x", "$k=v", "a.b=v"} {
		r = f.run("list", "--meta", bad)
		assert.Equalf(t, exitUsage, r.code, "--meta %s: %s", bad, r.stdout)
	}
}
