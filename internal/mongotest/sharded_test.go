package mongotest_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/twopc/twopc/internal/mongotest"
)

// TestShardedRouterURIs: the connection string the sharded job gives
// (MONGODB_URI naming both routers) becomes one per router, each naming
// that host alone with the credentials, database and options kept; a URI
// that does not list its hosts is refused. Pure: it needs no server.
func TestShardedRouterURIs(t *testing.T) {
	for _, tc := range []struct {
		uri  string
		want []string
	}{
		{"mongodb://localhost:27017,localhost:27018/?w=majority",
			[]string{"mongodb://localhost:27017/?w=majority", "mongodb://localhost:27018/?w=majority"}},
		{"mongodb://localhost:27017",
			[]string{"mongodb://localhost:27017"}},
		{"mongodb://a:1,b:2?w=majority",
			[]string{"mongodb://a:1?w=majority", "mongodb://b:2?w=majority"}},
		{"mongodb://user:p%40ss@a:1,b:2/admin?authSource=admin&w=majority",
			[]string{"mongodb://user:p%40ss@a:1/admin?authSource=admin&w=majority", "mongodb://user:p%40ss@b:2/admin?authSource=admin&w=majority"}},
		{"mongodb://[::1]:27017,127.0.0.1:27018/db",
			[]string{"mongodb://[::1]:27017/db", "mongodb://127.0.0.1:27018/db"}},
	} {
		got, err := mongotest.RouterURIs(tc.uri)
		require.NoError(t, err, tc.uri)
		assert.Equal(t, tc.want, got, tc.uri)
	}
	for _, bad := range []string{"mongodb+srv://cluster.example.com/", "localhost:27017", "mongodb://a,,b/", "mongodb:///?w=1"} {
		_, err := mongotest.RouterURIs(bad)
		assert.Error(t, err, bad)
	}
}

// TestShardedShardReplicaSetURI: a shard's host in config.shards
// ("rs/host:port,…") becomes a replica set's connection string; a
// standalone shard's host is refused.
func TestShardedShardReplicaSetURI(t *testing.T) {
	uri, err := mongotest.Shard{ID: "sh01", Host: "rs1/localhost:27217,localhost:27218,localhost:27219"}.ReplicaSetURI()
	require.NoError(t, err)
	assert.Equal(t, "mongodb://localhost:27217,localhost:27218,localhost:27219/?replicaSet=rs1", uri)
	_, err = mongotest.Shard{ID: "sh02", Host: "localhost:27220"}.ReplicaSetURI()
	assert.Error(t, err)
}
