package twopc

// The indexes the library reads by: made by the coordinator itself, once,
// before the first read that needs them (the low-water mark's, a recovery
// pass's, a statement's, an account's transactions'), or, under
// WithManagedIndexes, checked there and named when missing. No such read
// scans the log, nor WithHistory's archive.

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// The server's codes for an index that exists with other options, or other
// keys, under the name asked for.
const (
	codeIndexOptionsConflict  = 85
	codeIndexKeySpecsConflict = 86
)

// indexColl says which collection an index of the library is on.
type indexColl int

const (
	onLog         indexColl = iota // the transactions collection
	onCheckpoints                  // the statements' checkpoints
	onArchive                      // WithHistory's archive, if there is one
)

// libraryIndex is one index the library reads by.
type libraryIndex struct {
	coll indexColl
	name string
	keys bson.D
}

// The keys the log and the archive are read by for an account: its
// entries (statements) and its transactions (Coordinator.Transactions).
var (
	entriesIndexKeys      = bson.D{{Key: fieldEntryKeys, Value: 1}, {Key: fieldCommittedAt, Value: 1}}
	transactionsIndexKeys = bson.D{{Key: fieldEntryKeys, Value: 1}, {Key: fieldCreated, Value: 1}, {Key: "_id", Value: 1}}
)

// libraryIndexes are the indexes the library reads by: on the log,
// {state, created} for the low-water mark and recovery's scans,
// {accounts, committedAt} for statements and {accounts, created, _id} for
// an account's transactions, the last two on the archive too; and {key,
// at} for the statements' checkpoints. Every index on the log is
// maintained by the writes that move a transaction's state (a MongoDB
// server updates an index whose keys a write changes; the development
// server's every index at every write), so the log has no index a read
// could do without: recovery's scans read by the mark's index.
func libraryIndexes() []libraryIndex {
	return []libraryIndex{
		{coll: onLog, name: "state_1_created_1", keys: bson.D{{Key: fieldState, Value: 1}, {Key: fieldCreated, Value: 1}}},
		{coll: onLog, name: "accounts_1_committedAt_1", keys: entriesIndexKeys},
		{coll: onLog, name: "accounts_1_created_1__id_1", keys: transactionsIndexKeys},
		{coll: onCheckpoints, name: "key_1_at_-1", keys: bson.D{{Key: "key", Value: 1}, {Key: "at", Value: -1}}},
		{coll: onArchive, name: "accounts_1_committedAt_1", keys: entriesIndexKeys},
		{coll: onArchive, name: "accounts_1_created_1__id_1", keys: transactionsIndexKeys},
	}
}

// EnsureIndexes creates the indexes the protocol's scans use, idempotently:
// {state, created} for the low-water mark (the oldest unfinished
// transaction) and recovery's scans, {accounts, committedAt} for
// statements and {accounts, created, _id} for an account's transactions
// (Transactions), with {key, at} on the statements' checkpoints (the
// transactions collection's name with "_checkpoints"), and, with
// WithHistory's archive, {accounts, committedAt} and {accounts, created,
// _id} on the archive. An index of the same name already there is kept as
// it is.
//
// Calling it is optional: a coordinator makes these indexes itself before
// its first read that needs them (the low-water mark's, a recovery pass's,
// a statement's, Transactions'), unless WithManagedIndexes says they are
// managed elsewhere. EnsureIndexes makes them whatever the options. On a
// sharded cluster it first reads, through the router, the shard key of
// every collection the coordinator writes, and returns ErrShardKey, making
// no index, if one is sharded on a key the protocol does not rest on (see
// ErrShardKey). No index is
// needed for correctness: accounts and transactions are read and written
// by _id, and idempotency keys are enforced by the _id derived from them;
// the indexes keep those reads from scanning the log.
//
// EnsureIndexes is bounded per round trip, not as a whole: each read by
// WithReadTimeout's bound, each index it makes by WithCallTimeout's. An
// index build on a large log that outlasts the call bound ends the call
// with the bound's error; MongoDB goes on building it (a createIndexes is
// not killed when its client goes away: SERVER-101507), and calling
// EnsureIndexes again waits for that build (a createIndexes of an index
// being built joins the build).
func (c *Coordinator) EnsureIndexes(ctx context.Context) (err error) {
	t := c.trips(ctx, "ensure indexes")
	defer func() { err = t.explain(err) }()
	if err := t.read(ctx, c.shards.recheck); err != nil {
		return err
	}
	return c.indexes.ensureIn(ctx, t)
}

// ensure makes the library's indexes that are missing (see EnsureIndexes).
func (x *logIndexes) ensure(ctx context.Context) error { return x.ensureIn(ctx, trips{}) }

// ensureIn is ensure, its round trips bounded by t.
func (x *logIndexes) ensureIn(ctx context.Context, t trips) error {
	if err := t.read(ctx, x.shards.logAndArchive); err != nil {
		return err
	}
	// Only the missing ones are asked for, one per command: an index of
	// that name serves; and FerretDB
	// v1 drops the connection when one createIndexes names several that
	// exist.
	have := map[indexColl]map[string]bool{}
	for _, coll := range x.colls() {
		var specs []mongo.IndexSpecification
		err := t.read(ctx, func(ctx context.Context) (err error) {
			specs, err = x.coll(coll).Indexes().ListSpecifications(ctx)
			return err
		})
		if err != nil {
			return errorf("twopc: ensure indexes: %w", err)
		}
		have[coll] = map[string]bool{}
		for _, ix := range specs {
			have[coll][ix.Name] = true
		}
	}
	for _, ix := range x.indexes() {
		err := t.write(ctx, func(ctx context.Context) error {
			return ensureIndex(ctx, x.coll(ix.coll), have[ix.coll], ix.name, ix.keys)
		})
		if err != nil {
			return errorf("twopc: ensure indexes: %w", err)
		}
	}
	return nil
}

// coll is the collection of the library's indexes named by which: the
// log, the statements' checkpoints, or the archive (nil if none).
func (x *logIndexes) coll(which indexColl) *mongo.Collection {
	switch which {
	case onCheckpoints:
		return x.checkpoints
	case onArchive:
		return x.archive
	}
	return x.log
}

// colls are the collections x has indexes on: the log, the checkpoints,
// and the archive if there is one.
func (x *logIndexes) colls() []indexColl {
	if x.archive == nil {
		return []indexColl{onLog, onCheckpoints}
	}
	return []indexColl{onLog, onCheckpoints, onArchive}
}

// indexes are the library's indexes on x's collections.
func (x *logIndexes) indexes() []libraryIndex {
	var out []libraryIndex
	for _, ix := range libraryIndexes() {
		if ix.coll != onArchive || x.archive != nil {
			out = append(out, ix)
		}
	}
	return out
}

// ensureIndex creates index name, of keys, unless have names it.
func ensureIndex(ctx context.Context, coll *mongo.Collection, have map[string]bool, name string, keys bson.D) error {
	if have[name] {
		return nil
	}
	_, err := coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: keys, Options: options.Index().SetName(name)})
	var se mongo.ServerError
	if errors.As(err, &se) && (se.HasErrorCode(codeIndexOptionsConflict) || se.HasErrorCode(codeIndexKeySpecsConflict)) {
		return nil // made meanwhile by another process under that name: it serves
	}
	return err
}

// logIndexes is a coordinator's indexes on the log, the checkpoints and
// WithHistory's archive, made (or checked) once: the first caller that
// needs them does it, the others wait for it (or their context); a
// failure is returned to that caller and the next one tries again.
type logIndexes struct {
	log, checkpoints *mongo.Collection
	archive          *mongo.Collection // nil: none
	managed          bool              // WithManagedIndexes: check, never make
	shards           *shardKeys        // the log's and the archive's shard keys, read and allowed before any index is made or checked
	once             *untilDone
}

// newLogIndexes returns the indexes of log, checkpoints and archive (nil:
// none), to be made (or, managed, checked) at the first need, once shards
// allows the collections' shard keys.
func newLogIndexes(log, checkpoints, archive *mongo.Collection, managed bool, shards *shardKeys) *logIndexes {
	return &logIndexes{log: log, checkpoints: checkpoints, archive: archive, managed: managed, shards: shards,
		once: &untilDone{turn: make(chan struct{}, 1)}}
}

// need returns once the library's indexes exist: made by this
// coordinator (ensure) the first time, or, under WithManagedIndexes,
// found (ErrMissingIndex, naming those missing, otherwise), after the
// collections' shard keys were allowed (ErrShardKey otherwise). Once they
// were made or found, it costs nothing.
func (x *logIndexes) need(ctx context.Context) error {
	return x.once.do(ctx, func(ctx context.Context) error {
		if x.managed {
			return x.check(ctx)
		}
		return x.ensure(ctx)
	})
}

// check returns ErrMissingIndex, naming each missing one by its
// collection and keys, unless every index the library reads by exists
// (by its keys, under any name and options).
func (x *logIndexes) check(ctx context.Context) error {
	if err := x.shards.logAndArchive(ctx); err != nil {
		return err
	}
	keys := map[indexColl][]bson.Raw{}
	for _, coll := range x.colls() {
		specs, err := x.coll(coll).Indexes().ListSpecifications(ctx)
		if err != nil {
			return errorf("twopc: check indexes: %w", err)
		}
		for _, ix := range specs {
			keys[coll] = append(keys[coll], ix.KeysDocument)
		}
	}
	var missing []string
	for _, ix := range x.indexes() {
		found := false
		for _, k := range keys[ix.coll] {
			if sameKeys(k, ix.keys) {
				found = true
				break
			}
		}
		if !found {
			missing = append(missing, fmt.Sprintf("%s %s (%s)", x.coll(ix.coll).Name(), keysLabel(ix.keys), ix.name))
		}
	}
	if len(missing) > 0 {
		return errorf("%w: %s; create them (Coordinator.EnsureIndexes does) or drop WithManagedIndexes", ErrMissingIndex, strings.Join(missing, ", "))
	}
	return nil
}

// sameKeys reports whether index key document got has the fields of want,
// in order, each in the same direction (a number of any type).
func sameKeys(got bson.Raw, want bson.D) bool {
	elems, err := got.Elements()
	if err != nil || len(elems) != len(want) {
		return false
	}
	for i, e := range elems {
		if e.Key() != want[i].Key {
			return false
		}
		v, ok := e.Value().AsFloat64OK()
		if !ok {
			return false
		}
		if (v > 0) != (want[i].Value.(int) > 0) {
			return false
		}
	}
	return true
}

// keysLabel writes index keys as {a: 1, b: -1}.
func keysLabel(keys bson.D) string {
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s: %v", k.Key, k.Value)
	}
	return "{" + strings.Join(parts, ", ") + "}"
}
