package twopc_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc"
)

// TestMetadataStoredAndReturned: a transfer's metadata is written with it
// and comes back from the call, Get, GetByKey (in the log and in the
// archive), whatever the transfer (two legs, several, a hold, a reversal,
// one of a batch); the caller's map is copied.
func TestMetadataStoredAndReturned(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	archive := b.db.Collection("archive")
	c := b.coordinator(twopc.WithHistory(time.Millisecond, archive), twopc.WithSyncSettle())
	b.open(map[string]int64{"A": 1000, "B": 0, "C": 0})

	meta := map[string]string{"order": "o-17", "memo": "rent, March", "é": "ü"}
	paid, err := c.Transfer(ctx, "A", "B", 30, twopc.WithKey("order-17"), twopc.WithMetadata(meta))
	require.NoError(t, err)
	want := map[string]string{"order": "o-17", "memo": "rent, March", "é": "ü"}
	meta["order"] = "changed after the call"
	assert.Equal(t, want, paid.Metadata)
	got, err := c.Get(ctx, paid.ID)
	require.NoError(t, err)
	assert.Equal(t, want, got.Metadata)
	got, err = c.GetByKey(ctx, "order-17")
	require.NoError(t, err)
	assert.Equal(t, want, got.Metadata)
	var stored struct {
		Metadata bson.D `bson:"metadata"`
	}
	require.NoError(t, b.db.Collection("transactions").FindOne(ctx, bson.D{{Key: "_id", Value: paid.ID}}).Decode(&stored))
	assert.Equal(t, bson.D{{Key: "memo", Value: "rent, March"}, {Key: "order", Value: "o-17"}, {Key: "é", Value: "ü"}}, stored.Metadata, "stored with its keys in order")

	legs, err := c.TransferLegs(ctx, []twopc.Leg{{Account: "A", Amount: -20}, {Account: "B", Amount: 10}, {Account: "C", Amount: 10}}, twopc.WithMetadata(map[string]string{"split": "yes"}))
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"split": "yes"}, legs.Metadata)
	hold, err := c.Hold(ctx, "A", "C", 5, twopc.WithMetadata(map[string]string{"auth": "a-1"}))
	require.NoError(t, err)
	captured, err := c.Capture(ctx, hold.ID, 5, twopc.WithMetadata(map[string]string{"capture": "c-1"}))
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"capture": "c-1"}, captured.Metadata, "a capture's own")
	held, err := c.Get(ctx, hold.ID)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"auth": "a-1"}, held.Metadata, "the hold's")
	rev, err := c.Reverse(ctx, legs.ID, twopc.WithMetadata(map[string]string{"why": "refund"}))
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"why": "refund"}, rev.Metadata)
	plain, err := c.Transfer(ctx, "A", "B", 1, twopc.WithMetadata(map[string]string{}))
	require.NoError(t, err)
	assert.Nil(t, plain.Metadata, "an empty map is no metadata")

	res, err := c.TransferBatch(ctx, []twopc.TransferRequest{
		{Source: "A", Destination: "B", Value: 1, Metadata: map[string]string{"n": "1"}},
		{Source: "A", Destination: "B", Value: 1},
		{Source: "A", Destination: "B", Value: 1, Metadata: map[string]string{"$bad": "x"}},
	})
	require.NoError(t, err)
	require.NoError(t, res[0].Err)
	require.NoError(t, res[1].Err)
	require.ErrorIs(t, res[2].Err, twopc.ErrInvalidTransfer)
	got, err = c.Get(ctx, res[0].Txn.ID)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"n": "1"}, got.Metadata)
	got, err = c.Get(ctx, res[1].Txn.ID)
	require.NoError(t, err)
	assert.Nil(t, got.Metadata)

	// Moved to the archive: the same.
	var doc bson.Raw
	require.NoError(t, b.db.Collection("transactions").FindOneAndDelete(ctx, bson.D{{Key: "_id", Value: paid.ID}}).Decode(&doc))
	_, err = archive.InsertOne(ctx, doc)
	require.NoError(t, err)
	got, err = c.GetByKey(ctx, "order-17")
	require.NoError(t, err)
	assert.Equal(t, want, got.Metadata)
}

// TestMetadataKeyedRepeat: a keyed call repeated with the same metadata
// (in any map order) returns the first transaction; with other metadata,
// or none, it is another transfer: ErrKeyConflict, nothing moved.
func TestMetadataKeyedRepeat(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	b.open(map[string]int64{"A": 100, "B": 0})
	meta := map[string]string{"a": "1", "b": "2", "c": "3"}
	first, err := b.c.Transfer(ctx, "A", "B", 10, twopc.WithKey("k"), twopc.WithMetadata(meta))
	require.NoError(t, err)
	again, err := b.c.Transfer(ctx, "A", "B", 10, twopc.WithKey("k"), twopc.WithMetadata(map[string]string{"c": "3", "b": "2", "a": "1"}))
	require.NoError(t, err)
	assert.Equal(t, first.ID, again.ID)
	for _, other := range []map[string]string{nil, {"a": "1", "b": "2"}, {"a": "1", "b": "2", "c": "4"}} {
		_, err := b.c.Transfer(ctx, "A", "B", 10, twopc.WithKey("k"), twopc.WithMetadata(other))
		require.ErrorIsf(t, err, twopc.ErrKeyConflict, "metadata %v", other)
	}
	assert.Equal(t, int64(90), b.balance("A"))
	assert.Len(t, b.txns(), 1)
}

// TestMetadataRefused: metadata past any limit is ErrInvalidTransfer, and
// nothing is written; metadata at each limit is taken.
func TestMetadataRefused(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	b.open(map[string]int64{"A": 100, "B": 0})
	keys := func(n int) map[string]string {
		m := map[string]string{}
		for i := range n {
			m[fmt.Sprintf("k%02d", i)] = "v"
		}
		return m
	}
	for name, m := range map[string]map[string]string{
		"51 keys":             keys(twopc.MaxMetadataKeys + 1),
		"key of 41 bytes":     {strings.Repeat("k", twopc.MaxMetadataKeyLen+1): "v"},
		"value of 501 bytes":  {"k": strings.Repeat("v", twopc.MaxMetadataValueLen+1)},
		"empty key":           {"": "v"},
		"key starting with $": {"$k": "v"},
		"key with a dot":      {"a.b": "v"},
		"key with NUL":        {"a\x00b": "v"},
		"key not UTF-8":       {"\xff": "v"},
		"value not UTF-8":     {"k": "\xff"},
	} {
		_, err := b.c.Transfer(ctx, "A", "B", 1, twopc.WithMetadata(m))
		require.ErrorIsf(t, err, twopc.ErrInvalidTransfer, "%s", name)
		_, err = b.c.Hold(ctx, "A", "B", 1, twopc.WithMetadata(m))
		require.ErrorIsf(t, err, twopc.ErrInvalidTransfer, "%s (hold)", name)
	}
	assert.Empty(t, b.txns(), "nothing written")
	assert.Equal(t, int64(100), b.balance("A"))

	for name, m := range map[string]map[string]string{
		"50 keys":            keys(twopc.MaxMetadataKeys),
		"key of 40 bytes":    {strings.Repeat("k", twopc.MaxMetadataKeyLen): "v"},
		"value of 500 bytes": {"k": strings.Repeat("v", twopc.MaxMetadataValueLen)},
		"empty value":        {"k": ""},
	} {
		txn, err := b.c.Transfer(ctx, "A", "B", 1, twopc.WithMetadata(m))
		require.NoErrorf(t, err, "%s", name)
		assert.Equalf(t, m, txn.Metadata, "%s", name)
	}
}

// TestAccountMetadata: metadata given to OpenAccount is returned by
// Account (both Coordinator's and Ledger's); metadata past the limits is
// ErrInvalidAccount with nothing written, and SetLimits takes none.
// Fields a user adds to an account by hand are left alone by transfers,
// and a hand-made "metadata" that is not a document of strings is no
// metadata.
func TestAccountMetadata(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	owner := map[string]string{"owner": "shop-17", "kind": "seller"}
	require.NoError(t, b.c.OpenAccount(ctx, "seller", 0, twopc.AccountMetadata(owner)))
	require.NoError(t, b.c.OpenAccount(ctx, "buyer", 100))
	a, err := b.c.Account(ctx, "seller")
	require.NoError(t, err)
	assert.Equal(t, owner, a.Metadata)
	l, err := b.c.Ledger("")
	require.NoError(t, err)
	la, err := l.Account(ctx, "seller")
	require.NoError(t, err)
	assert.Equal(t, owner, la.Metadata)

	err = b.c.OpenAccount(ctx, "bad", 0, twopc.AccountMetadata(map[string]string{"$x": "y"}))
	require.ErrorIs(t, err, twopc.ErrInvalidAccount)
	n, err := b.db.Collection("accounts").CountDocuments(ctx, bson.D{{Key: "_id", Value: "bad"}})
	require.NoError(t, err)
	assert.Zero(t, n, "nothing written")
	err = b.c.SetLimits(ctx, "", "seller", twopc.AccountFloor(0), twopc.AccountMetadata(owner))
	require.ErrorIs(t, err, twopc.ErrInvalidAccount)

	_, err = b.db.Collection("accounts").UpdateOne(ctx, bson.D{{Key: "_id", Value: "buyer"}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "note", Value: "vip"}, {Key: "metadata", Value: int64(7)}}}})
	require.NoError(t, err)
	_, err = b.c.Transfer(ctx, "buyer", "seller", 40)
	require.NoError(t, err)
	buyer, err := b.c.Account(ctx, "buyer")
	require.NoError(t, err)
	assert.Nil(t, buyer.Metadata)
	assert.Equal(t, int64(60), buyer.Balance)
	var doc struct {
		Note     string `bson:"note"`
		Metadata int64  `bson:"metadata"`
	}
	require.NoError(t, b.db.Collection("accounts").FindOne(ctx, bson.D{{Key: "_id", Value: "buyer"}}).Decode(&doc))
	assert.Equal(t, "vip", doc.Note, "a field added by hand is left alone")
	assert.Equal(t, int64(7), doc.Metadata)
}
