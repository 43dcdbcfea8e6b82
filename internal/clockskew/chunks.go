package clockskew

// Where documents live on a sharded cluster, as its config servers say,
// read through the router: the shards that hold the log, and the chunks of
// the probe collection, into which a probe document's _id is chosen to hash.

import (
	"context"
	"crypto/md5"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/twopc/twopc/internal/schema"
)

// HashedLong returns the value that a hashed index, and so a collection
// sharded on {_id: "hashed"}, gives the _id n: the first eight bytes,
// little-endian, of the MD5 of the seed (0, four bytes), the canonical
// type of numbers (10, four bytes) and n as eight bytes, all
// little-endian. That is MongoDB's BSONElementHasher::hash64
// (src/mongo/db/hasher.cpp), the function the manual's
// convertShardKeyToHashed says the hashed index uses; the server checks
// itself at startup that 42 hashes to -944302157085130861, which
// TestUnitHashedLongIsTheServers checks here.
func HashedLong(n int64) int64 {
	var b [16]byte
	binary.LittleEndian.PutUint32(b[0:], 0)  // the seed
	binary.LittleEndian.PutUint32(b[4:], 10) // canonicalizeBSONType of every number type
	binary.LittleEndian.PutUint64(b[8:], uint64(n))
	d := md5.Sum(b[:])
	return int64(binary.LittleEndian.Uint64(d[:8]))
}

// bound is one end of a chunk's range of hashed values: MinKey (below
// every value), MaxKey (above every value), or a value.
type bound struct {
	inf int // -1 MinKey, +1 MaxKey, 0 a value
	v   int64
}

// Chunk is one chunk of a collection sharded on {_id: "hashed"}: the
// hashed values in [Min, Max) live on Shard.
type Chunk struct {
	Shard    string
	min, max bound
}

// holds reports whether the hashed value h is in the chunk's range.
func (c Chunk) holds(h int64) bool {
	aboveMin := c.min.inf < 0 || (c.min.inf == 0 && h >= c.min.v)
	belowMax := c.max.inf > 0 || (c.max.inf == 0 && h < c.max.v)
	return aboveMin && belowMax
}

// parseChunk reads a config.chunks document of a collection sharded on
// {_id: "hashed"}: {shard, min: {_id: MinKey or a long}, max: {_id: a
// long or MaxKey}}.
func parseChunk(raw bson.Raw) (Chunk, error) {
	var doc struct {
		Shard string   `bson:"shard"`
		Min   bson.Raw `bson:"min"`
		Max   bson.Raw `bson:"max"`
	}
	if err := bson.Unmarshal(raw, &doc); err != nil {
		return Chunk{}, fmt.Errorf("config.chunks: %w", err)
	}
	c := Chunk{Shard: doc.Shard}
	var err error
	if c.min, err = parseBound(doc.Min); err == nil {
		c.max, err = parseBound(doc.Max)
	}
	if err != nil || c.Shard == "" {
		return Chunk{}, fmt.Errorf("config.chunks: %s is not a chunk of a collection sharded on {_id: \"hashed\"}: %v", raw, err)
	}
	return c, nil
}

func parseBound(doc bson.Raw) (bound, error) {
	v, err := doc.LookupErr("_id")
	if err != nil {
		return bound{}, errors.New("no _id in a bound")
	}
	switch v.Type {
	case bson.TypeMinKey:
		return bound{inf: -1}, nil
	case bson.TypeMaxKey:
		return bound{inf: 1}, nil
	case bson.TypeInt64:
		return bound{v: v.Int64()}, nil
	}
	return bound{}, fmt.Errorf("a bound of type %s", v.Type)
}

// maxTries bounds the _ids tried for one shard: with its chunks covering
// a fraction f of the hashed values, one in 1/f hashes there.
const maxTries = 1 << 16

// probeIDs returns, for each of shards, the first _id from 0 up whose
// hashed value falls in one of that shard's chunks, and the shards for
// which none does (no chunk there, or chunks too small to find in
// maxTries).
func probeIDs(chunks []Chunk, shards []string) (map[string]int64, []string) {
	ids := map[string]int64{}
	want := map[string]bool{}
	for _, s := range shards {
		want[s] = true
	}
	for n := int64(0); n < maxTries && len(ids) < len(want); n++ {
		h := HashedLong(n)
		for _, c := range chunks {
			if c.holds(h) {
				if _, found := ids[c.Shard]; want[c.Shard] && !found {
					ids[c.Shard] = n
				}
				break
			}
		}
	}
	var unreached []string
	for _, s := range shards {
		if _, ok := ids[s]; !ok {
			unreached = append(unreached, s)
		}
	}
	return ids, unreached
}

// catalogEntry is a collection's config.collections document, the fields
// read here.
type catalogEntry struct {
	UUID         bson.RawValue `bson:"uuid"`
	Key          bson.Raw      `bson:"key"`
	Timestamp    bson.RawValue `bson:"timestamp"`
	Dropped      bool          `bson:"dropped"`
	Unsplittable bool          `bson:"unsplittable"`
}

// tracked reports whether the entry names chunks: a collection sharded,
// or (MongoDB 8.0) an unsharded one the cluster tracks.
func (e *catalogEntry) tracked() bool { return e != nil && !e.Dropped }

// hashedID reports whether the entry is a collection sharded on
// {_id: "hashed"}.
func (e *catalogEntry) hashedID() bool {
	if !e.tracked() || e.Unsplittable || e.Key == nil {
		return false
	}
	elems, err := e.Key.Elements()
	if err != nil || len(elems) != 1 || elems[0].Key() != "_id" {
		return false
	}
	s, ok := elems[0].Value().StringValueOK()
	return ok && s == "hashed"
}

// readEntry reads coll's config.collections entry through the router, or
// nil if it has none (an unsharded collection the cluster does not track).
func readEntry(ctx context.Context, coll *mongo.Collection) (*catalogEntry, error) {
	ns := schema.Namespace(coll)
	var e catalogEntry
	err := coll.Database().Client().Database("config").Collection("collections").
		FindOne(ctx, bson.D{{Key: "_id", Value: ns}}, options.FindOne().SetComment(Comment)).Decode(&e)
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("read %s's entry in config.collections (the user needs read access to the config database): %w", ns, err)
	}
	return &e, nil
}

// readChunks reads the config.chunks documents of the collection of entry
// e: by its uuid from MongoDB 5.0 (an entry with a timestamp), by its
// namespace before, as the server's own catalog cache does (SERVER-53105).
func readChunks(ctx context.Context, coll *mongo.Collection, e *catalogEntry) ([]bson.Raw, error) {
	ns := schema.Namespace(coll)
	filter := bson.D{{Key: "ns", Value: ns}}
	if e.Timestamp.Type != 0 {
		filter = bson.D{{Key: "uuid", Value: e.UUID}}
	}
	cur, err := coll.Database().Client().Database("config").Collection("chunks").
		Find(ctx, filter, options.Find().SetComment(Comment).SetProjection(bson.D{{Key: "shard", Value: 1}, {Key: "min", Value: 1}, {Key: "max", Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("read %s's chunks in config.chunks: %w", ns, err)
	}
	var raws []bson.Raw
	if err := cur.All(ctx, &raws); err != nil {
		return nil, fmt.Errorf("read %s's chunks in config.chunks: %w", ns, err)
	}
	if len(raws) == 0 {
		return nil, fmt.Errorf("config.chunks holds no chunk of %s", ns)
	}
	return raws, nil
}

// shardsOf returns the shards that hold coll, sorted: those of its chunks
// if the cluster tracks it (sharded, or moved with moveCollection), else
// its database's primary shard (config.databases), where an untracked
// unsharded collection lives.
func shardsOf(ctx context.Context, coll *mongo.Collection) ([]string, error) {
	e, err := readEntry(ctx, coll)
	if err != nil {
		return nil, err
	}
	if !e.tracked() {
		var db struct {
			Primary string `bson:"primary"`
		}
		name := coll.Database().Name()
		err := coll.Database().Client().Database("config").Collection("databases").
			FindOne(ctx, bson.D{{Key: "_id", Value: name}}, options.FindOne().SetComment(Comment)).Decode(&db)
		if err != nil {
			return nil, fmt.Errorf("read database %s's primary shard in config.databases: %w", name, err)
		}
		return []string{db.Primary}, nil
	}
	raws, err := readChunks(ctx, coll, e)
	if err != nil {
		return nil, err
	}
	var shards []string
	for _, raw := range raws {
		s, _ := raw.Lookup("shard").StringValueOK()
		if s != "" && !slices.Contains(shards, s) {
			shards = append(shards, s)
		}
	}
	slices.Sort(shards)
	return shards, nil
}

// chunksOf returns the chunks of the probe collection, sharded on
// {_id: "hashed"} (entry e).
func chunksOf(ctx context.Context, probe *mongo.Collection, e *catalogEntry) ([]Chunk, error) {
	raws, err := readChunks(ctx, probe, e)
	if err != nil {
		return nil, err
	}
	chunks := make([]Chunk, 0, len(raws))
	for _, raw := range raws {
		c, err := parseChunk(raw)
		if err != nil {
			return nil, err
		}
		chunks = append(chunks, c)
	}
	return chunks, nil
}
