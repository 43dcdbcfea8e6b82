package devserver_test

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/twopc/twopc/examples/devserver"
)

// libraryLogIndexes are the library's three indexes on its log
// (indexes.go's libraryIndexes).
var libraryLogIndexes = []mongo.IndexModel{
	{Keys: bson.D{{Key: "state", Value: 1}, {Key: "created", Value: 1}}, Options: options.Index().SetName("state_1_created_1")},
	{Keys: bson.D{{Key: "accounts", Value: 1}, {Key: "committedAt", Value: 1}}, Options: options.Index().SetName("accounts_1_committedAt_1")},
	{Keys: bson.D{{Key: "accounts", Value: 1}, {Key: "created", Value: 1}, {Key: "_id", Value: 1}}, Options: options.Index().SetName("accounts_1_created_1__id_1")},
}

// TestUpdateMaintainsOnlyChangedIndexes: on a collection with the
// library's three log indexes, an update that changes no indexed field
// maintains no index but _id's, and one that changes an indexed field
// maintains only the indexes that read it, as MongoDB's updates do
// (issue 49). SQLite maintains an index during an UPDATE statement if, and
// only if, the statement's SET list names a column the index reads (an
// expression index reads the columns of its expression); an "AFTER UPDATE
// OF columns" trigger fires by the same rule. So the test adds to the
// server's SQLite file, for each index, a probe trigger on the columns the
// index reads that records the index's name, and checks which fired. Stock
// FerretDB's indexes read the JSON column every update rewrites: every
// probe fires on every update.
func TestUpdateMaintainsOnlyChangedIndexes(t *testing.T) {
	dir := t.TempDir()
	s := startServer(t, devserver.Config{Dir: dir})
	client := connect(t, s.URI())
	ctx := t.Context()
	coll := client.Database("devserver").Collection("transactions")
	_, err := coll.Indexes().CreateMany(ctx, libraryLogIndexes)
	require.NoError(t, err)
	ids := []bson.ObjectID{bson.NewObjectID(), bson.NewObjectID()}
	for i, id := range ids {
		_, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: "state", Value: "pending"},
			{Key: "created", Value: at(i)}, {Key: "lastModified", Value: at(i)}, {Key: "claim", Value: bson.NewObjectID()},
			{Key: "accounts", Value: bson.A{fmt.Sprintf("a%d", i), "b"}}})
		require.NoError(t, err)
	}

	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "devserver.sqlite"))
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, db.Close()) })
	var table string
	require.NoError(t, db.QueryRowContext(ctx, `SELECT table_name FROM _ferretdb_collections WHERE name = ?`, coll.Name()).Scan(&table))
	var columns []string
	rows, err := db.QueryContext(ctx, `SELECT name FROM pragma_table_info(?)`, table)
	require.NoError(t, err)
	for rows.Next() {
		var c string
		require.NoError(t, rows.Scan(&c))
		columns = append(columns, c)
	}
	require.NoError(t, rows.Err())
	// An elements table only for the indexes whose first key holds arrays.
	for name, want := range map[string]bool{"state_1_created_1": false, "accounts_1_committedAt_1": true, "accounts_1_created_1__id_1": true} {
		_, elements := elementsTable(t, db, coll.Name(), name)
		assert.Equal(t, want, elements != "", "%s has an elements table", name)
	}
	_, err = db.ExecContext(ctx, `CREATE TABLE probe (name TEXT)`)
	require.NoError(t, err)
	for _, ixName := range []string{"state_1_created_1", "accounts_1_committedAt_1", "accounts_1_created_1__id_1"} {
		name := table + "_" + ixName
		var q string
		require.NoError(t, db.QueryRowContext(ctx, `SELECT sql FROM sqlite_schema WHERE type = 'index' AND name = ?`, name).Scan(&q))
		// The columns the index reads: those its key list names.
		keys := q[strings.LastIndex(q, "("):]
		var read []string
		for _, c := range columns {
			if regexp.MustCompile(`\b` + regexp.QuoteMeta(c) + `\b`).MatchString(keys) {
				read = append(read, fmt.Sprintf("%q", c))
			}
		}
		require.NotEmpty(t, read, "%s reads columns: %s", name, q)
		_, err := db.ExecContext(ctx, fmt.Sprintf(`CREATE TRIGGER %q AFTER UPDATE OF %s ON %q BEGIN INSERT INTO probe (name) VALUES (%s); END`,
			"probe_"+name, strings.Join(read, ", "), table, "'"+ixName+"'"))
		require.NoError(t, err)
	}
	maintained := func(filter, update bson.D) []string {
		t.Helper()
		_, err := db.ExecContext(ctx, `DELETE FROM probe`)
		require.NoError(t, err)
		res, err := coll.UpdateOne(ctx, filter, update)
		require.NoError(t, err)
		require.EqualValues(t, 1, res.ModifiedCount, "%v", update)
		rows, err := db.QueryContext(ctx, `SELECT DISTINCT name FROM probe`)
		require.NoError(t, err)
		defer rows.Close()
		out := []string{}
		for rows.Next() {
			var n string
			require.NoError(t, rows.Scan(&n))
			out = append(out, n)
		}
		require.NoError(t, rows.Err())
		slices.Sort(out)
		return out
	}
	now := bson.E{Key: "$currentDate", Value: bson.D{{Key: "lastModified", Value: true}}}
	set := func(doc ...bson.E) bson.E { return bson.E{Key: "$set", Value: bson.D(doc)} }

	// A claim (no indexed field).
	assert.Equal(t, []string{}, maintained(bson.D{{Key: "_id", Value: ids[0]}, {Key: "state", Value: "pending"}},
		bson.D{set(bson.E{Key: "claim", Value: bson.NewObjectID()}), now}), "claim")
	// A state move: the index on state only.
	assert.Equal(t, []string{"state_1_created_1"}, maintained(bson.D{{Key: "_id", Value: ids[0]}, {Key: "state", Value: "pending"}},
		bson.D{set(bson.E{Key: "state", Value: "applied"}), now}), "state move")
	// A commit: the index on committedAt only.
	assert.Equal(t, []string{"accounts_1_committedAt_1"}, maintained(bson.D{{Key: "_id", Value: ids[1]}},
		bson.D{set(bson.E{Key: "committedAt", Value: time.Now()}), now}), "commit")
	// accounts: both indexes on it.
	assert.Equal(t, []string{"accounts_1_committedAt_1", "accounts_1_created_1__id_1"}, maintained(bson.D{{Key: "_id", Value: ids[1]}},
		bson.D{{Key: "$push", Value: bson.D{{Key: "accounts", Value: "c"}}}}), "accounts")
	// A value set again to what it was: none.
	assert.Equal(t, []string{}, maintained(bson.D{{Key: "_id", Value: ids[1]}},
		bson.D{set(bson.E{Key: "state", Value: "pending"}, bson.E{Key: "other", Value: 1})}), "same state")

	assertKeyColumns(t, "updated", db, coll.Name())

	// The reads by the indexes still find them.
	for filter, want := range map[string]bson.D{
		"applied": {{Key: "state", Value: "applied"}},
		"c":       {{Key: "accounts", Value: "c"}},
	} {
		n, err := coll.CountDocuments(ctx, want)
		require.NoError(t, err)
		assert.EqualValues(t, 1, n, filter)
	}
}
