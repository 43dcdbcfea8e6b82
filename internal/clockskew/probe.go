package clockskew

// The probe: through the router only, one document per shard that holds
// the log, in the probe collection, stamped by that shard's primary with
// $currentDate (the clock that stamps committedAt), against the router's
// hello localTime (the clock that judges the horizons).

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"

	"github.com/twopc/twopc/internal/schema"
)

// Comment is the comment on every command of the probe (its hellos, its
// reads of the config database, its writes), which tells them apart from
// a transfer's commands.
const Comment = "twopc: clock skew probe"

// Rounds is how many times each shard is probed; the narrowest reading
// of each is kept (a round trip slowed by the network or the host only
// widens its interval).
const Rounds = 3

// Report is what a probe found.
type Report struct {
	// Router is false when the log's server is not a sharded cluster's
	// router: one server's clock both stamps the commits and judges the
	// horizons, and nothing else was read.
	Router bool
	// Probe is the probe collection's namespace.
	Probe string
	// Prepared is false when the probe collection is not sharded on
	// {_id: "hashed"} (Prepare makes it so): nothing was probed.
	Prepared bool
	// LogShards are the shards that hold the log, sorted.
	LogShards []string
	// Readings has one reading per shard of LogShards reached, in its
	// order.
	Readings []Reading
	// Unreached are the shards of LogShards that hold no chunk of the
	// probe collection: a shard added after the probe collection was
	// sharded gets none from the balancer, which moves data, and the
	// probe collection holds a document a shard (drop it: Prepare shards
	// it anew over every shard).
	Unreached []string
}

// Prepare shards the probe collection on {_id: "hashed"} through the
// router if it is not yet: a hashed shard key on an empty collection
// makes MongoDB place its initial chunks across every shard (the
// manual's shardCollection). It reports whether it sharded it. The user
// needs the enableSharding privilege (the clusterManager role, or
// enableSharding on the database); a probe collection sharded on another
// key is an error, left as it is.
func Prepare(ctx context.Context, probe *mongo.Collection) (bool, error) {
	e, err := readEntry(ctx, probe)
	if err != nil {
		return false, err
	}
	ns := schema.Namespace(probe)
	switch {
	case e.hashedID():
		return false, nil
	case e.tracked() && !e.Unsplittable && e.Key != nil:
		return false, fmt.Errorf("the clock probe collection %s is sharded on %s; drop it, and it is sharded anew on {_id: \"hashed\"}", ns, schema.KeyLabel(e.Key))
	}
	admin := probe.Database().Client().Database("admin")
	// enableSharding was required before MongoDB 6.0 and is accepted
	// since; it makes the database, with a primary shard, if need be.
	if err := admin.RunCommand(ctx, bson.D{{Key: "enableSharding", Value: probe.Database().Name()}}).Err(); err != nil {
		return false, fmt.Errorf("enableSharding %s (the user needs the enableSharding privilege): %w", probe.Database().Name(), err)
	}
	if err := admin.RunCommand(ctx, bson.D{
		{Key: "shardCollection", Value: ns},
		{Key: "key", Value: bson.D{{Key: "_id", Value: "hashed"}}},
	}).Err(); err != nil {
		return false, fmt.Errorf("shardCollection %s on {_id: \"hashed\"} (the user needs the enableSharding privilege): %w", ns, err)
	}
	return true, nil
}

// Probe measures, through log's client (a router), the clock of each
// shard that holds log against the router's, with documents of probe (a
// collection of log's database that Prepare sharded, which nothing else
// reads): for each shard, an _id that hashes into one of its chunks
// (HashedLong, config.chunks), upserted with $currentDate, which sets the
// field to the date when it ran on that shard's primary (the manual's
// $currentDate), between two readings of the host's monotonic clock,
// after a hello whose localTime is the router's clock. Each reading is
// an interval that accounts for both round trips and each clock's
// millisecond (see Interval); Rounds rounds, the narrowest kept.
//
// It reads config.collections, config.chunks and config.databases (the
// user needs read access to the config database) and writes only probe's
// documents, one per shard, at write concern 1 (the probe decides
// nothing by them).
func Probe(ctx context.Context, log, probe *mongo.Collection) (*Report, error) {
	rep := &Report{Probe: schema.Namespace(probe)}
	h, err := routerHello(ctx, log.Database())
	if rep.Router = h.Msg == "isdbgrid"; err != nil || !rep.Router {
		return rep, err
	}
	e, err := readEntry(ctx, probe)
	if err != nil {
		return rep, err
	}
	if rep.Prepared = e.hashedID(); !rep.Prepared {
		return rep, nil
	}
	if rep.LogShards, err = shardsOf(ctx, log); err != nil {
		return rep, err
	}
	chunks, err := chunksOf(ctx, probe, e)
	if err != nil {
		return rep, err
	}
	ids, unreached := probeIDs(chunks, rep.LogShards)
	rep.Unreached = unreached
	probe = probe.Clone(options.Collection().SetWriteConcern(writeconcern.W1()).SetReadPreference(readpref.Primary()))
	best := map[string]Reading{}
	for range Rounds {
		sent := time.Now()
		h, err := routerHello(ctx, log.Database())
		back := time.Now()
		if err != nil {
			return rep, err
		}
		router := h.LocalTime
		for _, shard := range rep.LogShards {
			id, ok := ids[shard]
			if !ok {
				continue
			}
			r, err := stamp(ctx, probe, shard, id, sent, back, router)
			if err != nil {
				return rep, err
			}
			if b, ok := best[shard]; !ok || r.High-r.Low < b.High-b.Low {
				best[shard] = r
			}
		}
	}
	for _, shard := range rep.LogShards {
		if r, ok := best[shard]; ok {
			rep.Readings = append(rep.Readings, r)
		}
	}
	return rep, nil
}

// hello is what the probe reads of a hello's reply: a router's msg is
// "isdbgrid", and localTime is the answering server's clock (the
// manual's hello).
type hello struct {
	Msg       string    `bson:"msg"`
	LocalTime time.Time `bson:"localTime"`
}

// routerHello sends hello to db's server, with the probe's comment.
func routerHello(ctx context.Context, db *mongo.Database) (hello, error) {
	var h hello
	err := db.RunCommand(ctx, bson.D{{Key: "hello", Value: 1}, {Key: "comment", Value: Comment}}).Decode(&h)
	if err == nil && h.Msg == "isdbgrid" && h.LocalTime.IsZero() {
		err = errors.New("the router's hello has no localTime")
	}
	if err != nil {
		return h, fmt.Errorf("hello: %w", err)
	}
	return h, nil
}

// stamp upserts the probe document id with $currentDate and returns the
// reading it gives against the router's clock read by a hello sent at
// helloSent and answered at helloBack.
func stamp(ctx context.Context, probe *mongo.Collection, shard string, id int64, helloSent, helloBack, router time.Time) (Reading, error) {
	var doc struct {
		At time.Time `bson:"at"`
	}
	sent := time.Now()
	err := probe.FindOneAndUpdate(ctx, bson.D{{Key: "_id", Value: id}},
		bson.D{
			{Key: "$currentDate", Value: bson.D{{Key: "at", Value: true}}},
			{Key: "$set", Value: bson.D{{Key: "shard", Value: shard}}},
		},
		options.FindOneAndUpdate().SetUpsert(true).SetReturnDocument(options.After).SetComment(Comment)).Decode(&doc)
	back := time.Now()
	if err == nil && doc.At.IsZero() {
		err = errors.New("the probe document came back without its date")
	}
	if err != nil {
		return Reading{}, fmt.Errorf("probe shard %s (%s, _id %d): %w", shard, schema.Namespace(probe), id, err)
	}
	r := Interval(helloSent, helloBack, router, sent, back, doc.At)
	r.Shard, r.ID = shard, id
	return r, nil
}

// Interval returns the skew that one probe allows, shard minus router. A
// hello sent at helloSent and answered at helloBack (the host's monotonic
// clock) read the router's clock as router, at some instant between the
// two; a write sent at writeSent and answered at writeBack was stamped
// stamped by the shard at some instant between those. Both dates are
// whole milliseconds, truncated from the clocks. So at the write's
// instant the router's clock read between router + (writeSent −
// helloBack) and router + 1 ms + (writeBack − helloSent), and the
// shard's between stamped and stamped + 1 ms: the interval is 2 ms wider
// than the two round trips together, and its middle is the estimate.
func Interval(helloSent, helloBack, router, writeSent, writeBack, stamped time.Time) Reading {
	routerLow := router.Add(writeSent.Sub(helloBack))
	routerHigh := router.Add(time.Millisecond + writeBack.Sub(helloSent))
	return Reading{
		Low:  stamped.Sub(routerHigh),
		High: stamped.Add(time.Millisecond).Sub(routerLow),
	}
}
