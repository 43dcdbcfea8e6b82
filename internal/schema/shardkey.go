package schema

// The shard keys the library's collections may have on a sharded cluster,
// read through the router: the library and the tool's doctor refuse any
// other.

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// ShardRule says which shard keys a collection of the library may have.
type ShardRule int

const (
	// ShardedByHashedID is the rule of the log, its checkpoints and refund
	// books, and WithHistory's archive: unsharded, or sharded on {_id:
	// "hashed"}.
	ShardedByHashedID ShardRule = iota
	// ShardedByID is the rule of an accounts collection: unsharded, or
	// sharded on {_id: "hashed"} or {_id: 1}.
	ShardedByID
)

// Why each rule: what breaks under another key.
const (
	whyLog = "a transaction's _id is its idempotency key, and a sharded cluster keeps an _id unique across " +
		"shards only when _id is the shard key (the manual's Shard Key Indexes); a range on _id would put every " +
		"insert, whose ObjectID grows with time, on the one shard of the last chunk"
	whyAccounts = "every leg names its account by _id alone, and a sharded cluster keeps an _id unique across " +
		"shards only when _id is the shard key (the manual's Shard Key Indexes); the library's upserts (fence " +
		"lines, tombstones) need the whole shard key in their filter"
)

// Problem returns why a collection whose shard key is key (nil:
// unsharded) breaks rule r, or "" if r allows it. what names the
// collection's role ("the transactions collection db.txns").
func (r ShardRule) Problem(what string, key bson.Raw) string {
	if key == nil {
		return ""
	}
	elems, err := key.Elements()
	if err == nil && len(elems) == 1 && elems[0].Key() == "_id" {
		v := elems[0].Value()
		if s, ok := v.StringValueOK(); ok && s == "hashed" {
			return ""
		}
		if n, ok := v.AsFloat64OK(); ok && n == 1 && r == ShardedByID {
			return ""
		}
	}
	if r == ShardedByID {
		return fmt.Sprintf("%s is sharded on %s; it must be unsharded or sharded on {_id: \"hashed\"} or {_id: 1}: %s",
			what, KeyLabel(key), whyAccounts)
	}
	return fmt.Sprintf("%s is sharded on %s; it must be unsharded or sharded on {_id: \"hashed\"}: %s",
		what, KeyLabel(key), whyLog)
}

// KeyLabel writes a shard key as {a: 1, b: "hashed"}.
func KeyLabel(key bson.Raw) string {
	elems, err := key.Elements()
	if err != nil {
		return key.String()
	}
	parts := make([]string, len(elems))
	for i, e := range elems {
		v := e.Value()
		switch n, isNum := v.AsFloat64OK(); {
		case isNum:
			parts[i] = fmt.Sprintf("%s: %v", e.Key(), n)
		default:
			parts[i] = e.Key() + ": " + v.String()
		}
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// Router reports whether db's server is a sharded cluster's router
// (mongos): hello's msg is "isdbgrid" there.
func Router(ctx context.Context, db *mongo.Database) (bool, error) {
	var hello struct {
		Msg string `bson:"msg"`
	}
	if err := db.RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Decode(&hello); err != nil {
		return false, fmt.Errorf("hello: %w", err)
	}
	return hello.Msg == "isdbgrid", nil
}

// ShardKey returns coll's shard key, read through a router from the
// cluster's catalog (config.collections, whose _id is the namespace), or
// nil if coll is not sharded (no entry, a dropped one, or an unsharded
// collection's). The user needs read access to the config
// database (the clusterMonitor role, or read on config).
func ShardKey(ctx context.Context, coll *mongo.Collection) (bson.Raw, error) {
	ns := Namespace(coll)
	entry, err := coll.Database().Client().Database("config").Collection("collections").
		FindOne(ctx, bson.D{{Key: "_id", Value: ns}}).Raw()
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("read the shard key of %s from config.collections (the user needs read access to the config database): %w", ns, err)
	}
	return catalogKey(entry)
}

// catalogKey returns the shard key config.collections' entry says, or nil
// if the entry is not a sharded collection's: one dropped (MongoDB before
// 5.0 leaves its entry, marked so), or, from MongoDB 8.0, an unsharded
// collection the cluster tracks (moved to another shard with
// moveCollection), marked unsplittable with key {_id: 1}: one chunk on one
// shard, unsharded as far as the protocol goes.
func catalogKey(entry bson.Raw) (bson.Raw, error) {
	var e struct {
		Key          bson.Raw `bson:"key"`
		Dropped      bool     `bson:"dropped"`
		Unsplittable bool     `bson:"unsplittable"`
	}
	if err := bson.Unmarshal(entry, &e); err != nil {
		return nil, fmt.Errorf("config.collections entry: %w", err)
	}
	if e.Dropped || e.Unsplittable {
		return nil, nil
	}
	return e.Key, nil
}

// Namespace is coll's namespace, database.collection, as the server names
// it (config.collections' _id, its errors).
func Namespace(coll *mongo.Collection) string { return coll.Database().Name() + "." + coll.Name() }
