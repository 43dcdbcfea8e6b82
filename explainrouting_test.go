package twopc_test

// How the sharded tests read the library's commands and what the router's
// explain says of each: which shards a statement reaches, and which
// documented broadcast a read is.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// shardedCtx is a context for a sharded test, longer than testCtx: a
// cluster of nine processes on one runner, under the race detector.
func shardedCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// startedCommand is a command a client sent, as its monitor saw it.
type startedCommand struct {
	name string
	db   string
	cmd  bson.Raw
}

// commandRecorder records every command a client starts.
type commandRecorder struct {
	mu   sync.Mutex
	cmds []startedCommand
}

func (l *commandRecorder) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		c := startedCommand{name: e.CommandName, db: e.DatabaseName, cmd: append(bson.Raw(nil), e.Command...)}
		l.mu.Lock()
		defer l.mu.Unlock()
		l.cmds = append(l.cmds, c)
	}}
}

func (l *commandRecorder) recorded() []startedCommand {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.cmds)
}

// explainedKinds are the commands whose routing TestShardedExplainEachCommand
// explains. An insert is routed by its document's _id, and needs none.
var explainedKinds = map[string]bool{
	"find": true, "update": true, "delete": true, "findAndModify": true, "aggregate": true, "count": true,
}

// notExplained are the fields of a command as sent that are not the
// command's own (the session, the cluster time, the database, the server
// API) or that explain refuses inside the command it explains (the write
// and read concerns, the read preference, a time limit); "ordered" has no
// meaning for one statement.
var notExplained = map[string]bool{
	"lsid": true, "txnNumber": true, "autocommit": true, "startTransaction": true,
	"$clusterTime": true, "$db": true, "$readPreference": true,
	"writeConcern": true, "readConcern": true, "maxTimeMS": true, "ordered": true,
	"apiVersion": true, "apiStrict": true, "apiDeprecationErrors": true,
}

// statement is one statement of a recorded command, as explain takes it.
type statement struct {
	name   string   // find, update, delete, findAndModify, aggregate, count
	db     string   // its database
	coll   string   // its collection
	cmd    bson.D   // the command to explain: the statement alone
	filter bson.Raw // the documents it reads or writes
	write  bool
	// changeStream marks an aggregate that opens a change stream: the
	// router opens it on every shard, and explain does not take it.
	changeStream bool
}

// statementsOf splits a recorded command into statements: an update or a
// delete into one command per statement, each alone; any other command is
// one statement, without the fields explain refuses.
func statementsOf(t *testing.T, c startedCommand) []statement {
	t.Helper()
	coll, _ := c.cmd.Lookup(c.name).StringValueOK()
	st := statement{name: c.name, db: c.db, coll: coll}
	own := func() bson.D {
		var d bson.D
		elems, err := c.cmd.Elements()
		require.NoError(t, err)
		for _, e := range elems {
			if !notExplained[e.Key()] {
				d = append(d, bson.E{Key: e.Key(), Value: e.Value()})
			}
		}
		return d
	}
	lookupDoc := func(doc bson.Raw, key string) bson.Raw {
		v, err := doc.LookupErr(key)
		if err != nil {
			return bson.Raw{5, 0, 0, 0, 0} // no filter: {}
		}
		d, ok := v.DocumentOK()
		require.True(t, ok, "%s of %s is not a document", key, c.cmd)
		return d
	}
	switch c.name {
	case "update", "delete":
		array, field := "updates", "q"
		if c.name == "delete" {
			array = "deletes"
		}
		arr, ok := c.cmd.Lookup(array).ArrayOK()
		require.True(t, ok, "%s without %s: %s", c.name, array, c.cmd)
		values, err := arr.Values()
		require.NoError(t, err)
		var all []statement
		for _, v := range values {
			one := st
			one.write = true
			one.filter = lookupDoc(v.Document(), field)
			one.cmd = bson.D{{Key: c.name, Value: coll}, {Key: array, Value: bson.A{v}}}
			all = append(all, one)
		}
		return all
	case "findAndModify":
		st.write = true
		st.filter = lookupDoc(c.cmd, "query")
	case "count":
		st.filter = lookupDoc(c.cmd, "query")
	case "aggregate":
		st.filter = bson.Raw{5, 0, 0, 0, 0}
		if pipeline, ok := c.cmd.Lookup("pipeline").ArrayOK(); ok {
			if first, err := pipeline.IndexErr(0); err == nil {
				st.filter = lookupDoc(first.Document(), "$match")
				_, err := first.Document().LookupErr("$changeStream")
				st.changeStream = err == nil
			}
		}
	default: // find
		st.filter = lookupDoc(c.cmd, "filter")
	}
	st.cmd = own()
	return []statement{st}
}

// byID says how filter names _id at its top level: "eq" for an equality
// (a value, or {$eq: v}), "in" with the number of ids for {$in: [...]},
// "" otherwise.
func byID(filter bson.Raw) (string, int) {
	v, err := filter.LookupErr("_id")
	if err != nil {
		return "", 0
	}
	if v.Type == bson.TypeRegex {
		return "", 0 // matches many ids
	}
	doc, ok := v.DocumentOK()
	if !ok {
		return "eq", 1
	}
	elems, _ := doc.Elements()
	if len(elems) == 0 || !strings.HasPrefix(elems[0].Key(), "$") {
		return "eq", 1 // an _id that is itself a document
	}
	if _, err := doc.LookupErr("$eq"); err == nil {
		return "eq", 1
	}
	if in, err := doc.LookupErr("$in"); err == nil {
		if arr, ok := in.ArrayOK(); ok {
			values, _ := arr.Values()
			return "in", len(values)
		}
	}
	return "", 0
}

// broadcastOf names the documented read (COMMANDS.md) that filter, a read
// not by _id, is, by its top-level field names: "state" (the low-water
// mark's read, recovery's scans by state and created, the audit's reads
// and counts by state), "accounts" (statements by accounts and
// committedAt, an account's transactions by accounts and created), "key"
// (statement checkpoints), "tombstone" (listing a ledger's accounts), and
// an empty filter on the accounts: the audit reading every account. ""
// for any other read.
func broadcastOf(st statement) string {
	elems, _ := st.filter.Elements()
	fields := map[string]bool{}
	tags := false
	for _, e := range elems {
		fields[e.Key()] = true
		tags = tags || strings.HasPrefix(e.Key(), "fx_") || strings.HasPrefix(e.Key(), "fh_")
	}
	switch {
	case st.changeStream:
		return "change stream"
	case tags:
		return "feed tags"
	case fields["_id"] && strings.HasSuffix(st.coll, "_feeds"):
		return "feeds" // an _id range: the feeds, or a feed's groups
	case fields["state"]:
		return "state"
	case fields["accounts"]:
		return "accounts"
	case fields["key"]:
		return "key"
	case fields["tombstone"]:
		return "tombstone"
	case len(elems) == 0 && st.name == "find" && strings.HasPrefix(st.coll, "accounts"):
		return "every account (audit)"
	}
	return ""
}

// shapeOf is v with its values left out: the keys and operators of a
// filter, which say how it is routed.
func shapeOf(v bson.RawValue) string {
	switch v.Type {
	case bson.TypeEmbeddedDocument:
		elems, _ := v.Document().Elements()
		parts := make([]string, len(elems))
		for i, e := range elems {
			parts[i] = e.Key() + ":" + shapeOf(e.Value())
		}
		return "{" + strings.Join(parts, ",") + "}"
	case bson.TypeArray:
		values, _ := v.Array().Values()
		if len(values) > 0 && values[0].Type == bson.TypeEmbeddedDocument {
			return "[" + shapeOf(values[0]) + ",…]"
		}
		return "[…]"
	default:
		return "?"
	}
}

// routing is what explain through the router says of a statement.
type routing struct {
	stage  string   // the router's stage: SINGLE_SHARD, SHARD_MERGE, SHARD_WRITE…; an aggregate's mergeType
	shards []string // the shards the statement is sent to
}

// explainRouting explains st through the router (queryPlanner verbosity:
// nothing runs) and reads the shards it targets (routingOf).
func explainRouting(ctx context.Context, t *testing.T, client *mongo.Client, st statement) routing {
	t.Helper()
	var out bson.Raw
	err := client.Database(st.db).RunCommand(ctx, bson.D{
		{Key: "explain", Value: st.cmd},
		{Key: "verbosity", Value: "queryPlanner"},
	}).Decode(&out)
	require.NoError(t, err, "explain %v", st.cmd)
	r, err := routingOf(out)
	require.NoError(t, err, "explain of %v through the router: %s", st.cmd, out)
	return r
}

// routingOf reads the router's explain of a statement: a find's, count's,
// update's, delete's or findAndModify's queryPlanner.winningPlan has the
// router's stage and the shards, each with its shardName; an aggregate's
// explain has a document of the shards, keyed by name, and its mergeType.
func routingOf(out bson.Raw) (routing, error) {
	var r routing
	if plan, err := out.LookupErr("queryPlanner", "winningPlan"); err == nil {
		doc, ok := plan.DocumentOK()
		if !ok {
			return r, errors.New("winningPlan is not a document")
		}
		r.stage, _ = doc.Lookup("stage").StringValueOK()
		shards, ok := doc.Lookup("shards").ArrayOK()
		if !ok {
			return r, errors.New("the winning plan names no shards: not a router's explain")
		}
		values, err := shards.Values()
		if err != nil {
			return r, err
		}
		for _, v := range values {
			name, ok := v.Document().Lookup("shardName").StringValueOK()
			if !ok {
				return r, fmt.Errorf("a shard without a shardName: %s", v)
			}
			r.shards = append(r.shards, name)
		}
		return r, nil
	}
	shards, err := out.LookupErr("shards")
	if err != nil {
		return r, errors.New("neither a winning plan nor shards")
	}
	doc, ok := shards.DocumentOK()
	if !ok {
		return r, errors.New("shards is not a document")
	}
	elems, err := doc.Elements()
	if err != nil {
		return r, err
	}
	for _, e := range elems {
		r.shards = append(r.shards, e.Key())
	}
	r.stage, _ = out.Lookup("mergeType").StringValueOK()
	return r, nil
}

// TestUnitExplainRouting checks, without a server, how
// TestShardedExplainEachCommand reads what it explains: a command as the
// driver sends it split into statements without the fields explain
// refuses, filters told apart by how they name _id or which broadcast
// they are, and a router's explain of a find and of an aggregate read
// for the shards they reach (a mongod's explain, which names none, is
// refused).
func TestUnitExplainRouting(t *testing.T) {
	raw := func(d bson.D) bson.Raw {
		b, err := bson.Marshal(d)
		require.NoError(t, err)
		return b
	}
	session := bson.D{
		{Key: "lsid", Value: bson.D{{Key: "id", Value: bson.NewObjectID()}}},
		{Key: "txnNumber", Value: int64(3)},
		{Key: "$clusterTime", Value: bson.D{{Key: "clusterTime", Value: bson.Timestamp{T: 1}}}},
		{Key: "writeConcern", Value: bson.D{{Key: "w", Value: "majority"}}},
		{Key: "$db", Value: "db"},
	}
	q1 := bson.D{{Key: "_id", Value: "A"}, {Key: "balance", Value: bson.D{{Key: "$gte", Value: 5}}}}
	q2 := bson.D{{Key: "_id", Value: "B"}}
	update := append(bson.D{
		{Key: "update", Value: "accounts"},
		{Key: "ordered", Value: false},
		{Key: "updates", Value: bson.A{
			bson.D{{Key: "q", Value: q1}, {Key: "u", Value: bson.D{{Key: "$inc", Value: bson.D{{Key: "balance", Value: -5}}}}}},
			bson.D{{Key: "q", Value: q2}, {Key: "u", Value: bson.D{{Key: "$inc", Value: bson.D{{Key: "balance", Value: 5}}}}}},
		}},
	}, session...)
	sts := statementsOf(t, startedCommand{name: "update", db: "db", cmd: raw(update)})
	require.Len(t, sts, 2, "one statement each")
	for i, q := range []bson.D{q1, q2} {
		assert.True(t, sts[i].write)
		assert.Equal(t, "accounts", sts[i].coll)
		assert.Equal(t, raw(q), sts[i].filter)
		require.Len(t, sts[i].cmd, 2, "update and its one statement: %v", sts[i].cmd)
		assert.Equal(t, "update", sts[i].cmd[0].Key)
		assert.Equal(t, "updates", sts[i].cmd[1].Key)
		sent := raw(sts[i].cmd) // as explain will carry it
		assert.Equal(t, raw(q), sent.Lookup("updates", "0", "q").Document())
	}

	find := append(bson.D{
		{Key: "find", Value: "transactions"},
		{Key: "filter", Value: bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: bson.A{1, 2, 3}}}}}},
		{Key: "limit", Value: int64(1)},
		{Key: "readConcern", Value: bson.D{{Key: "level", Value: "majority"}}},
		{Key: "maxTimeMS", Value: int64(500)},
		{Key: "$readPreference", Value: bson.D{{Key: "mode", Value: "primary"}}},
	}, session...)
	sts = statementsOf(t, startedCommand{name: "find", db: "db", cmd: raw(find)})
	require.Len(t, sts, 1)
	var keys []string
	for _, e := range sts[0].cmd {
		keys = append(keys, e.Key)
	}
	assert.Equal(t, []string{"find", "filter", "limit"}, keys, "what explain takes, nothing else")
	kind, n := byID(sts[0].filter)
	assert.Equal(t, "in", kind)
	assert.Equal(t, 3, n)

	count := bson.D{
		{Key: "aggregate", Value: "transactions"},
		{Key: "pipeline", Value: bson.A{
			bson.D{{Key: "$match", Value: bson.D{{Key: "state", Value: "done"}}}},
			bson.D{{Key: "$group", Value: bson.D{{Key: "_id", Value: 1}, {Key: "n", Value: bson.D{{Key: "$sum", Value: 1}}}}}},
		}},
		{Key: "cursor", Value: bson.D{}},
	}
	sts = statementsOf(t, startedCommand{name: "aggregate", db: "db", cmd: raw(count)})
	require.Len(t, sts, 1)
	assert.Equal(t, raw(bson.D{{Key: "state", Value: "done"}}), sts[0].filter, "the $match of CountDocuments")
	assert.Equal(t, "state", broadcastOf(sts[0]))

	fam := append(bson.D{
		{Key: "findAndModify", Value: "transactions"},
		{Key: "query", Value: bson.D{{Key: "_id", Value: bson.D{{Key: "$eq", Value: 7}}}, {Key: "state", Value: "pending"}}},
		{Key: "update", Value: bson.D{{Key: "$set", Value: bson.D{{Key: "state", Value: "applied"}}}}},
		{Key: "new", Value: true},
	}, session...)
	sts = statementsOf(t, startedCommand{name: "findAndModify", db: "db", cmd: raw(fam)})
	require.Len(t, sts, 1)
	assert.True(t, sts[0].write)
	kind, _ = byID(sts[0].filter)
	assert.Equal(t, "eq", kind)

	for _, tc := range []struct {
		filter bson.D
		kind   string
	}{
		{bson.D{{Key: "_id", Value: bson.NewObjectID()}}, "eq"},
		{bson.D{{Key: "_id", Value: bson.D{{Key: "bank", Value: "x"}, {Key: "n", Value: 1}}}}, "eq"},
		{bson.D{{Key: "_id", Value: bson.D{{Key: "$type", Value: "objectId"}}}, {Key: "state", Value: "applied"}}, ""},
		{bson.D{{Key: "state", Value: "held"}}, ""},
	} {
		kind, _ := byID(raw(tc.filter))
		assert.Equal(t, tc.kind, kind, "%v", tc.filter)
	}
	for _, tc := range []struct {
		st   statement
		want string
	}{
		{statement{name: "find", coll: "transactions", filter: raw(bson.D{{Key: "_id", Value: bson.D{{Key: "$type", Value: "objectId"}}}, {Key: "state", Value: bson.D{{Key: "$in", Value: bson.A{"initial", "pending"}}}}})}, "state"},
		{statement{name: "find", coll: "transactions", filter: raw(bson.D{{Key: "accounts", Value: "|A"}, {Key: "committedAt", Value: bson.D{{Key: "$type", Value: "date"}}}})}, "accounts"},
		{statement{name: "find", coll: "transactions_checkpoints", filter: raw(bson.D{{Key: "key", Value: "|A"}, {Key: "removal", Value: true}})}, "key"},
		{statement{name: "find", coll: "accounts", filter: raw(bson.D{{Key: "tombstone", Value: bson.D{{Key: "$ne", Value: true}}}})}, "tombstone"},
		{statement{name: "find", coll: "accounts", filter: raw(bson.D{})}, "every account (audit)"},
		{statement{name: "find", coll: "transactions", filter: raw(bson.D{})}, ""},
		{statement{name: "find", coll: "accounts", filter: raw(bson.D{{Key: "balance", Value: 1}})}, ""},
	} {
		assert.Equal(t, tc.want, broadcastOf(tc.st), "%s %s %s", tc.st.name, tc.st.coll, tc.st.filter)
	}

	r, err := routingOf(raw(bson.D{{Key: "queryPlanner", Value: bson.D{
		{Key: "mongosPlannerVersion", Value: 1},
		{Key: "winningPlan", Value: bson.D{
			{Key: "stage", Value: "SINGLE_SHARD"},
			{Key: "shards", Value: bson.A{bson.D{{Key: "shardName", Value: "sh01"}, {Key: "winningPlan", Value: bson.D{{Key: "stage", Value: "IDHACK"}}}}}},
		}},
	}}}))
	require.NoError(t, err)
	assert.Equal(t, routing{stage: "SINGLE_SHARD", shards: []string{"sh01"}}, r)
	r, err = routingOf(raw(bson.D{
		{Key: "mergeType", Value: "mongos"},
		{Key: "splitPipeline", Value: bson.D{}},
		{Key: "shards", Value: bson.D{{Key: "sh01", Value: bson.D{}}, {Key: "sh02", Value: bson.D{}}}},
	}))
	require.NoError(t, err)
	assert.Equal(t, routing{stage: "mongos", shards: []string{"sh01", "sh02"}}, r)
	_, err = routingOf(raw(bson.D{{Key: "queryPlanner", Value: bson.D{{Key: "winningPlan", Value: bson.D{{Key: "stage", Value: "IXSCAN"}}}}}}))
	assert.Error(t, err, "a mongod's explain names no shards")

	assert.Equal(t, "{_id:{$in:[…]},state:?}",
		shapeOf(bson.RawValue{Type: bson.TypeEmbeddedDocument, Value: raw(bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: bson.A{1, 2}}}}, {Key: "state", Value: "held"}})}))
}
