package twopc_test

// How a statement is routed on collections sharded on {_id: "hashed"},
// read from its filter alone.

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// routeClass is how st is routed on a collection sharded on {_id:
// "hashed"}, read from its filter alone: "eq" (one shard), "in(n)" (at
// most n shards), "broadcast: <what>" for a read PROTOCOL.md's Scale-out
// lists as a broadcast, and "broadcast write: feeds" for the one write of
// many it lists (a deleted feed's groups); "" for anything else: a write
// not by _id, or a read it does not list.
func routeClass(st statement) string {
	kind, ids := byID(st.filter)
	switch {
	case st.changeStream:
		return "broadcast: change stream"
	case kind == "eq":
		return "eq"
	case kind == "in":
		return fmt.Sprintf("in(%d)", ids)
	}
	b := broadcastOf(st)
	switch {
	case b == "":
		return ""
	case st.write && st.name == "delete" && groupsOfOneFeed(st.filter):
		return "broadcast write: feeds"
	case st.write:
		return ""
	}
	return "broadcast: " + b
}

// groupsOfOneFeed reports whether filter is exactly Delete's of one
// feed's subscriber groups: {_id: {$gte: "group:<feed>:", $lt: that and
// "\xff"}}.
func groupsOfOneFeed(filter bson.Raw) bool {
	elems, _ := filter.Elements()
	if len(elems) != 1 || elems[0].Key() != "_id" {
		return false
	}
	rng, ok := elems[0].Value().DocumentOK()
	if !ok {
		return false
	}
	bounds, _ := rng.Elements()
	if len(bounds) != 2 || bounds[0].Key() != "$gte" || bounds[1].Key() != "$lt" {
		return false
	}
	lo, _ := bounds[0].Value().StringValueOK()
	hi, _ := bounds[1].Value().StringValueOK()
	feed, ok := strings.CutPrefix(lo, "group:")
	return ok && strings.Count(feed, ":") == 1 && strings.HasSuffix(feed, ":") && len(feed) > 1 && hi == lo+"\xff"
}

// TestUnitRouteClass: routeClass takes a statement for routed by _id, by
// ids, or a listed broadcast only when its filter says so: a delete of
// many on the feeds' collection only when it is one feed's groups.
func TestUnitRouteClass(t *testing.T) {
	doc := func(d bson.D) bson.Raw {
		b, err := bson.Marshal(d)
		require.NoError(t, err)
		return b
	}
	del := func(filter bson.D) statement {
		return statement{name: "delete", coll: "transactions_feeds", write: true, filter: doc(filter)}
	}
	find := func(coll string, filter bson.D) statement {
		return statement{name: "find", coll: coll, filter: doc(filter)}
	}
	rng := func(lo, hi string) bson.D {
		return bson.D{{Key: "_id", Value: bson.D{{Key: "$gte", Value: lo}, {Key: "$lt", Value: hi}}}}
	}
	for _, c := range []struct {
		name string
		st   statement
		want string
	}{
		{"by _id", find("transactions", bson.D{{Key: "_id", Value: bson.NewObjectID()}}), "eq"},
		{"by ids", find("transactions", bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: bson.A{1, 2}}}}}), "in(2)"},
		{"a regex _id", statement{name: "update", coll: "transactions", write: true,
			filter: doc(bson.D{{Key: "_id", Value: bson.Regex{Pattern: "^a"}}})}, ""},
		{"a feed's search", find("transactions", bson.D{{Key: "fx_f", Value: nil}, {Key: "state", Value: "done"}}), "broadcast: feed tags"},
		{"the feeds", find("transactions_feeds", rng("feed:", "feed;")), "broadcast: feeds"},
		{"one feed's groups", del(rng("group:f:", "group:f:\xff")), "broadcast write: feeds"},
		{"every feed's groups", del(rng("group:", "group;")), ""},
		{"the feeds deleted", del(rng("feed:", "feed;")), ""},
		{"any _id", del(bson.D{{Key: "_id", Value: bson.D{{Key: "$exists", Value: true}}}}), ""},
		{"a range and more", del(append(rng("group:f:", "group:f:\xff"), bson.E{Key: "pos", Value: ""})), ""},
		{"an update by range", statement{name: "update", coll: "transactions_feeds", write: true,
			filter: doc(rng("group:f:", "group:f:\xff"))}, ""},
		{"a change stream", statement{name: "aggregate", coll: "transactions", filter: doc(bson.D{}), changeStream: true},
			"broadcast: change stream"},
	} {
		assert.Equal(t, c.want, routeClass(c.st), c.name)
	}
}
