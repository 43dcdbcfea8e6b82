package mongotest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// EnvSharded names the variable that says the server is a sharded
// cluster reached through its routers: "1" only in the GitHub workflow's
// sharded job.
const EnvSharded = "TWOPC_TEST_SHARDED"

// notSharded is why a test that needs a sharded cluster skips elsewhere.
const notSharded = "runs only in the GitHub workflow's sharded job (.github/workflows/ci.yml: " +
	"a cluster of two shards and two routers, TWOPC_TEST_SHARDED=1, MONGODB_URI naming the routers); " +
	"this server is not one"

// ShardedCollections are the collections NewDatabaseOn shards on
// {_id: "hashed"} in each fresh database when Sharded: the names the
// tests give the log and its side collections (the default transactions
// collection, its _checkpoints, _refunds and _feeds, WithHistory's archive) and
// the accounts collections of their ledgers. A collection of another name
// stays unsharded, which the topology the library states also allows.
var ShardedCollections = []string{
	"accounts",
	"transactions",
	"transactions_checkpoints",
	"transactions_refunds",
	"transactions_feeds",
	"archive",
	"accounts_other",
	"fees",
	"accounts_fees",
}

// ShardKeyIndex is the name of the index MongoDB makes for the shard key
// {_id: "hashed"} of each collection in ShardedCollections when Sharded.
const ShardKeyIndex = "_id_hashed"

// Sharded reports whether the tests run against a sharded cluster through
// its routers (TWOPC_TEST_SHARDED=1, set only by the GitHub workflow's
// sharded job, with MONGODB_URI naming the routers). Then NewDatabaseOn
// shards the ShardedCollections of every fresh database on the server
// MONGODB_URI names, and the tests that need a sharded cluster
// (RequireSharded) run.
func Sharded() bool { return os.Getenv(EnvSharded) == "1" }

// RequireSharded skips the test unless Sharded, saying where it runs. When
// Sharded, it fails the test if the shared server is not MONGODB_URI's.
func RequireSharded(tb testing.TB) {
	tb.Helper()
	if !Sharded() {
		tb.Skip(notSharded)
	}
	if s := Shared(tb); s.Backend != BackendURI {
		tb.Fatalf("mongotest: %s=1 wants MONGODB_URI naming the cluster's routers; the backend is %s", EnvSharded, s.Backend)
	}
}

// IsShardKeyIndex reports whether an index named name is the one sharding
// made (ShardKeyIndex, when Sharded), not one the library or a test made.
func IsShardKeyIndex(name string) bool { return Sharded() && name == ShardKeyIndex }

// RouterURIs returns one connection string per host of uri, each naming
// that host alone, with uri's credentials, database and options: on a
// sharded cluster, one per router. Only the mongodb:// scheme lists its
// hosts (mongodb+srv:// is refused).
func RouterURIs(uri string) ([]string, error) {
	const scheme = "mongodb://"
	if !strings.HasPrefix(uri, scheme) {
		return nil, fmt.Errorf("mongotest: %q does not list its hosts (want %s)", redact(uri), scheme)
	}
	rest := uri[len(scheme):]
	end := strings.IndexAny(rest, "/?")
	if end < 0 {
		end = len(rest)
	}
	authority, tail := rest[:end], rest[end:]
	userinfo := ""
	if at := strings.LastIndex(authority, "@"); at >= 0 {
		userinfo, authority = authority[:at+1], authority[at+1:]
	}
	var uris []string
	for _, host := range strings.Split(authority, ",") {
		if host == "" {
			return nil, fmt.Errorf("mongotest: %q has an empty host", redact(uri))
		}
		uris = append(uris, scheme+userinfo+host+tail)
	}
	return uris, nil
}

// RouterClients returns one client per host MONGODB_URI (the shared
// server's URI) names, each connected to that host alone (RouterURIs):
// in the sharded job, one per router. Options in opts are applied after
// the URI. The clients are disconnected when the test ends.
func RouterClients(tb testing.TB, opts ...*options.ClientOptions) []*mongo.Client {
	tb.Helper()
	uris, err := RouterURIs(Shared(tb).URI)
	if err != nil {
		tb.Fatal(err)
	}
	clients := make([]*mongo.Client, len(uris))
	for i, uri := range uris {
		clients[i] = ConnectURI(tb, uri, opts...)
	}
	return clients
}

// shardedOn reports whether NewDatabaseOn shards the collections of a
// database on s: when Sharded, and s is the server MONGODB_URI names (a
// dev server of a test's own, or the fault server, is never sharded).
func shardedOn(s *Server) bool { return Sharded() && s.Backend == BackendURI }

// shardDatabase shards the ShardedCollections of the fresh database name
// on s on {_id: "hashed"}, through the router, with a client of its own
// (so that no test's command monitor sees these commands), and checks
// that each collection's chunks are on two shards or more.
func shardDatabase(s *Server, name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	client, err := mongo.Connect(options.Client().ApplyURI(s.URI))
	if err != nil {
		return err
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	admin := client.Database("admin")
	var hello struct {
		Msg string `bson:"msg"`
	}
	if err := admin.RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Decode(&hello); err != nil {
		return fmt.Errorf("hello: %w", err)
	}
	if hello.Msg != "isdbgrid" {
		return fmt.Errorf("%s=1 but %s is not a mongos (hello.msg %q)", EnvSharded, redact(s.URI), hello.Msg)
	}
	// enableSharding was required before MongoDB 6.0 and is accepted
	// since; it also makes the database, with a primary shard.
	if err := admin.RunCommand(ctx, bson.D{{Key: "enableSharding", Value: name}}).Err(); err != nil {
		return fmt.Errorf("enableSharding %s: %w", name, err)
	}
	// The collections are sharded at once: each shardCollection is a DDL
	// operation the config server coordinates, waiting mostly on majority
	// writes; the server serializes what must be.
	errs := make([]error, len(ShardedCollections))
	var wg sync.WaitGroup
	for i, coll := range ShardedCollections {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = shardCollection(ctx, client, name+"."+coll)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// shardCollection shards ns on {_id: "hashed"} and checks its chunks'
// spread. The collection does not exist yet: on an empty collection a
// hashed shard key makes MongoDB create the collection and its initial
// chunks itself and place them across the shards (one or two a shard,
// by version), so that the tests' documents land on both shards from the
// first write, without a balancer round. That is checked: the chunks are
// read from config.chunks by the collection's uuid (config.collections),
// and all of them on one shard is an error.
func shardCollection(ctx context.Context, client *mongo.Client, ns string) error {
	admin := client.Database("admin")
	if err := admin.RunCommand(ctx, bson.D{
		{Key: "shardCollection", Value: ns},
		{Key: "key", Value: bson.D{{Key: "_id", Value: "hashed"}}},
	}).Err(); err != nil {
		return fmt.Errorf("shardCollection %s: %w", ns, err)
	}
	perShard, err := ChunksPerShard(ctx, client, ns)
	if err != nil {
		return err
	}
	if len(perShard) < 2 {
		return fmt.Errorf("shardCollection %s: its chunks are all on one shard (%v); "+
			"a hashed shard key on an empty collection should have spread them", ns, perShard)
	}
	return nil
}

// Chunk is one chunk of a sharded collection, as config.chunks holds it.
type Chunk struct {
	Min   bson.Raw `bson:"min"`
	Max   bson.Raw `bson:"max"`
	Shard string   `bson:"shard"`
}

// Chunks returns the chunks of sharded collection ns (database.collection)
// as the config server holds them, read through client (a router):
// config.chunks by the collection's uuid, which config.collections gives.
func Chunks(ctx context.Context, client *mongo.Client, ns string) ([]Chunk, error) {
	config := client.Database("config")
	var coll struct {
		UUID bson.RawValue `bson:"uuid"`
	}
	if err := config.Collection("collections").FindOne(ctx, bson.D{{Key: "_id", Value: ns}}).Decode(&coll); err != nil {
		return nil, fmt.Errorf("config.collections %s: %w", ns, err)
	}
	cur, err := config.Collection("chunks").Find(ctx, bson.D{{Key: "uuid", Value: coll.UUID}},
		options.Find().SetSort(bson.D{{Key: "min", Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("config.chunks of %s: %w", ns, err)
	}
	var chunks []Chunk
	if err := cur.All(ctx, &chunks); err != nil {
		return nil, fmt.Errorf("config.chunks of %s: %w", ns, err)
	}
	if len(chunks) == 0 {
		return nil, fmt.Errorf("config.chunks holds no chunk of %s", ns)
	}
	return chunks, nil
}

// ChunksPerShard counts the chunks of sharded collection ns per shard
// (see Chunks).
func ChunksPerShard(ctx context.Context, client *mongo.Client, ns string) (map[string]int, error) {
	chunks, err := Chunks(ctx, client, ns)
	if err != nil {
		return nil, err
	}
	perShard := map[string]int{}
	for _, c := range chunks {
		perShard[c.Shard]++
	}
	return perShard, nil
}

// Shard is a shard of the cluster, as config.shards holds it.
type Shard struct {
	ID string `bson:"_id"`
	// Host is the shard's replica set and members, "rs/host:port,…".
	Host string `bson:"host"`
}

// ReplicaSetURI is a connection string for the shard's replica set,
// which finds its primary wherever an election put it.
func (s Shard) ReplicaSetURI() (string, error) {
	set, hosts, ok := strings.Cut(s.Host, "/")
	if !ok || set == "" || hosts == "" {
		return "", fmt.Errorf("shard %s: host %q is not a replica set's (rs/host:port,…)", s.ID, s.Host)
	}
	return "mongodb://" + hosts + "/?replicaSet=" + set, nil
}

// Shards lists the cluster's shards, read through client (a router).
func Shards(ctx context.Context, client *mongo.Client) ([]Shard, error) {
	cur, err := client.Database("config").Collection("shards").Find(ctx, bson.D{},
		options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("config.shards: %w", err)
	}
	var shards []Shard
	if err := cur.All(ctx, &shards); err != nil {
		return nil, fmt.Errorf("config.shards: %w", err)
	}
	return shards, nil
}
