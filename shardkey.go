package twopc

// The shard keys of the library's collections. On a sharded cluster each
// is read through its router once per coordinator, before the first
// write that inserts or upserts into it (a transfer, a hold, a capture, a
// refund's book, Cancel's placeholder, OpenAccount, SetLimits) and before
// the coordinator makes or checks its indexes; EnsureIndexes reads them
// all again. Any key the protocol does not rest on is refused with
// ErrShardKey: the log's ids are its idempotency keys, unique across
// shards only when _id is the shard key, and every write names one
// document by _id alone (see PROTOCOL.md, Scale-out).

import (
	"context"
	"errors"
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

// shardKeys are a coordinator's collections whose shard keys are
// checked, in groups that are down or up together and needed apart: the
// log's (the log, its checkpoints and refund books), which every money
// call writes; WithHistory's archive, which history passes and its
// readers need; and each ledger's accounts (Ledger.shards), so that a
// deployment that cannot be reached holds up only what needs it.
type shardKeys struct {
	log     *shardCheck
	archive *shardCheck // nil: no archive
	ledgers map[string]*shardCheck
}

// shardCheck is one group's check, made once: the first caller that
// needs it reads the keys, and a failure (a key refused, or the read) is
// returned to it and read again by the next.
type shardCheck struct {
	colls []shardedColl
	once  *untilDone
	// routed, if set, is called after each check that succeeded and found
	// the group's first collection's server a router (the log's group:
	// the shards' clock skew check, clockskew.go).
	routed func()
}

// newShardKeys returns the shard keys of c's collections, and gives each
// ledger its group.
func newShardKeys(c *Coordinator) *shardKeys {
	group := func(colls ...shardedColl) *shardCheck {
		return &shardCheck{colls: colls, once: &untilDone{turn: make(chan struct{}, 1)}}
	}
	s := &shardKeys{
		log: group(
			shardedColl{c.log.txns, "the transactions collection", schema.ShardedByHashedID},
			shardedColl{c.checkpoints, "the statements' checkpoints", schema.ShardedByHashedID},
			shardedColl{c.books.coll, "the refund books", schema.ShardedByHashedID},
			shardedColl{c.feeds, "the feeds", schema.ShardedByHashedID}),
		ledgers: map[string]*shardCheck{},
	}
	s.log.routed = c.skew.start
	if c.history.archive != nil {
		s.archive = group(shardedColl{c.history.archive, "WithHistory's archive", schema.ShardedByHashedID})
	}
	for name, l := range c.ledgers {
		role := "the accounts of ledger " + name
		if name == "" {
			role = "the accounts collection"
		}
		l.shards = group(shardedColl{l.accounts, role, schema.ShardedByID})
		s.ledgers[name] = l.shards
	}
	return s
}

// need returns nil once the log's collections' shard keys, and those of
// the ledgers named, were read and allowed, or their servers are not
// routers; ErrShardKey, naming each collection refused, the key it has
// and the keys it may have, if any is refused.
func (s *shardKeys) need(ctx context.Context, ledgers ...string) error {
	if err := s.log.need(ctx); err != nil {
		return err
	}
	var refused []error
	for _, name := range ledgers {
		if g := s.ledgers[name]; g != nil {
			if err := g.need(ctx); err != nil {
				refused = append(refused, err)
			}
		}
	}
	return errors.Join(refused...)
}

// logAndArchive returns nil once the log's and the archive's shard keys
// were read and allowed (see need).
func (s *shardKeys) logAndArchive(ctx context.Context) error {
	if err := s.log.need(ctx); err != nil {
		return err
	}
	return s.archive.need(ctx)
}

// recheck reads every group's shard keys again, whatever an earlier
// check found (EnsureIndexes: a collection resharded since is seen).
func (s *shardKeys) recheck(ctx context.Context) error {
	groups := []*shardCheck{s.log}
	if s.archive != nil {
		groups = append(groups, s.archive)
	}
	for _, name := range slices.Sorted(maps.Keys(s.ledgers)) {
		groups = append(groups, s.ledgers[name])
	}
	var refused []error
	for _, g := range groups {
		if err := g.check(ctx); err != nil {
			refused = append(refused, err)
		}
	}
	return errors.Join(refused...)
}

// need runs the group's check until it first succeeds; nil for no group.
func (g *shardCheck) need(ctx context.Context) error {
	if g == nil {
		return nil
	}
	return g.once.do(ctx, g.check)
}

// check reads each collection's shard key through its router (a server
// that is not one has none) and refuses those the rules do not allow.
func (g *shardCheck) check(ctx context.Context) error {
	routers := map[*mongo.Client]bool{}
	var refused []string
	for _, sc := range g.colls {
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
		if why := sc.rule.Problem(sc.role+" "+schema.Namespace(sc.coll), key); why != "" {
			refused = append(refused, why)
		}
	}
	if len(refused) > 0 {
		return errorf("%w: %s", ErrShardKey, strings.Join(refused, "; "))
	}
	if g.routed != nil && routers[g.colls[0].coll.Database().Client()] {
		g.routed()
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
