package twopc

// The shard keys of the library's collections. On a sharded cluster each
// is read through its router once per coordinator, before its first
// money write and before it makes or checks its indexes (EnsureIndexes
// too), and any key the protocol does not rest on is refused with
// ErrShardKey: the log's ids are its idempotency keys, unique across
// shards only when _id is the shard key, and every write names one
// document by _id alone (see PROTOCOL.md, Scale-out).

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/twopc/twopc/internal/schema"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// shardedColl is a collection the library writes, and the shard keys it
// may have.
type shardedColl struct {
	coll *mongo.Collection
	role string // "the transactions collection", said in the error
	rule schema.ShardRule
}

// shardKeys are a coordinator's collections whose shard keys are checked,
// once: the first caller that needs it reads them, and a failure (a key
// refused, or the read) is returned to it and read again by the next.
type shardKeys struct {
	colls []shardedColl
	once  *untilDone
}

// newShardKeys returns the shard keys of c's collections: the log, its
// checkpoints and refund books, the archive, each ledger's accounts.
func newShardKeys(c *Coordinator) *shardKeys {
	s := &shardKeys{once: &untilDone{turn: make(chan struct{}, 1)}}
	add := func(coll *mongo.Collection, role string, rule schema.ShardRule) {
		s.colls = append(s.colls, shardedColl{coll: coll, role: role, rule: rule})
	}
	add(c.log.txns, "the transactions collection", schema.ShardedByHashedID)
	add(c.checkpoints, "the statements' checkpoints", schema.ShardedByHashedID)
	add(c.books.coll, "the refund books", schema.ShardedByHashedID)
	if c.history.archive != nil {
		add(c.history.archive, "WithHistory's archive", schema.ShardedByHashedID)
	}
	for _, name := range slices.Sorted(maps.Keys(c.ledgers)) {
		role := "the accounts of ledger " + name
		if name == "" {
			role = "the accounts collection"
		}
		add(c.ledgers[name].accounts, role, schema.ShardedByID)
	}
	return s
}

// need returns nil once every collection's shard key was read and
// allowed, or its server is not a router; ErrShardKey, naming each
// collection refused, the key it has and the keys it may have, if any is
// refused.
func (s *shardKeys) need(ctx context.Context) error { return s.once.do(ctx, s.check) }

// check reads each collection's shard key through its router (a server
// that is not one has none) and refuses those the rules do not allow.
func (s *shardKeys) check(ctx context.Context) error {
	routers := map[*mongo.Client]bool{}
	var refused []string
	for _, sc := range s.colls {
		client := sc.coll.Database().Client()
		router, known := routers[client]
		if !known {
			var err error
			if router, err = schema.Router(ctx, sc.coll.Database()); err != nil {
				return errorf("twopc: shard keys: %w", err)
			}
			routers[client] = router
		}
		if !router {
			continue
		}
		key, err := schema.ShardKey(ctx, sc.coll)
		if err != nil {
			return errorf("twopc: shard keys: %w", err)
		}
		ns := sc.coll.Database().Name() + "." + sc.coll.Name()
		if why := sc.rule.Problem(sc.role+" "+ns, key); why != "" {
			refused = append(refused, why)
		}
	}
	if len(refused) > 0 {
		return errorf("%w: %s", ErrShardKey, strings.Join(refused, "; "))
	}
	return nil
}

// untilDone runs a check until it first succeeds: the first caller that
// needs it runs it, the others wait their turn (or their context); a
// failure is returned to that caller, and the next one runs it again.
// Once it succeeded, it costs nothing.
type untilDone struct {
	done atomic.Bool
	turn chan struct{} // a one-slot semaphore: whose turn it is to try
}

// do returns nil if check succeeded once; otherwise it runs check, in
// its turn, and returns what check returns.
func (u *untilDone) do(ctx context.Context, check func(context.Context) error) error {
	if u.done.Load() {
		return nil
	}
	select {
	case u.turn <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-u.turn }()
	if u.done.Load() {
		return nil
	}
	err := check(ctx)
	if err == nil {
		u.done.Store(true)
	}
	return err
}
