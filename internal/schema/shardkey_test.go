package schema

import (
	"bytes"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

func rawKey(t *testing.T, d bson.D) bson.Raw {
	t.Helper()
	b, err := bson.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestShardRules checks which shard keys each rule allows: the log's
// collections only {_id: "hashed"}, an accounts collection {_id:
// "hashed"} or {_id: 1} (in any numeric type, as the catalog may store
// it), both unsharded; and that a refusal names the collection, its key
// and the keys allowed.
func TestShardRules(t *testing.T) {
	cases := []struct {
		key          bson.D
		log, account bool // allowed
	}{
		{nil, true, true},
		{bson.D{{Key: "_id", Value: "hashed"}}, true, true},
		{bson.D{{Key: "_id", Value: 1}}, false, true},
		{bson.D{{Key: "_id", Value: int64(1)}}, false, true},
		{bson.D{{Key: "_id", Value: 1.0}}, false, true},
		{bson.D{{Key: "_id", Value: -1}}, false, false},
		{bson.D{{Key: "owner", Value: 1}}, false, false},
		{bson.D{{Key: "owner", Value: "hashed"}}, false, false},
		{bson.D{{Key: "_id", Value: "hashed"}, {Key: "owner", Value: 1}}, false, false},
		{bson.D{{Key: "owner", Value: 1}, {Key: "_id", Value: 1}}, false, false},
		{bson.D{{Key: "_id", Value: "text"}}, false, false},
	}
	for _, c := range cases {
		var key bson.Raw
		if c.key != nil {
			key = rawKey(t, c.key)
		}
		for _, r := range []struct {
			rule    ShardRule
			allowed bool
			want    string
		}{
			{ShardedByHashedID, c.log, `must be unsharded or sharded on {_id: "hashed"}:`},
			{ShardedByID, c.account, `must be unsharded or sharded on {_id: "hashed"} or {_id: 1}:`},
		} {
			why := r.rule.Problem("the collection db.c", key)
			if (why == "") != r.allowed {
				t.Errorf("rule %d, key %v: problem %q, want allowed %v", r.rule, c.key, why, r.allowed)
				continue
			}
			if why != "" && (!strings.HasPrefix(why, "the collection db.c is sharded on {") || !strings.Contains(why, r.want) || !strings.Contains(why, "Shard Key Indexes")) {
				t.Errorf("rule %d, key %v: problem %q does not say the collection, its key and what is allowed, and why", r.rule, c.key, why)
			}
		}
	}
}

// TestKeyLabel checks how a refused key is written.
func TestKeyLabel(t *testing.T) {
	got := KeyLabel(rawKey(t, bson.D{{Key: "owner", Value: int32(1)}, {Key: "_id", Value: "hashed"}}))
	if want := `{owner: 1, _id: "hashed"}`; got != want {
		t.Errorf("KeyLabel = %s, want %s", got, want)
	}
}

// TestCatalogKey checks which config.collections entries are sharded
// collections: not a dropped one's, nor an unsharded one the cluster
// tracks (MongoDB 8.0's unsplittable, key {_id: 1}).
func TestCatalogKey(t *testing.T) {
	hashed := bson.D{{Key: "_id", Value: "hashed"}}
	for _, c := range []struct {
		entry bson.D
		want  bson.D // nil: unsharded
	}{
		{bson.D{{Key: "_id", Value: "db.c"}, {Key: "key", Value: hashed}}, hashed},
		{bson.D{{Key: "_id", Value: "db.c"}, {Key: "key", Value: hashed}, {Key: "dropped", Value: true}}, nil},
		{bson.D{{Key: "_id", Value: "db.c"}, {Key: "key", Value: bson.D{{Key: "_id", Value: 1}}}, {Key: "unsplittable", Value: true}}, nil},
		{bson.D{{Key: "_id", Value: "db.c"}, {Key: "key", Value: bson.D{{Key: "_id", Value: 1}}}, {Key: "unsplittable", Value: false}}, bson.D{{Key: "_id", Value: 1}}},
	} {
		got, err := catalogKey(rawKey(t, c.entry))
		if err != nil {
			t.Fatal(err)
		}
		if c.want == nil {
			if got != nil {
				t.Errorf("entry %v: key %s, want unsharded", c.entry, got)
			}
			continue
		}
		if !bytes.Equal(got, rawKey(t, c.want)) {
			t.Errorf("entry %v: key %s, want %v", c.entry, got, c.want)
		}
	}
}
