package devserver_test

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
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

// The multikey tests check the dev server's FerretDB's elements tables
// (examples/third_party/README.md): an index whose first key holds arrays
// reads an equality on one element by the documents holding it, as
// MongoDB's multikey index does
// (https://www.mongodb.com/docs/manual/core/index-multikey/: "MongoDB
// creates an index key for each element in the array", and a query on an
// indexed collection returns the documents the same query returns without
// the index).

// at is the i-th commit time of the multikey tests, i seconds after a
// fixed instant; every document's date is its own, so sorted reads have no
// ties.
func at(i int) time.Time {
	return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).Add(time.Duration(i) * time.Second)
}

// multikeyOID is the _id of the multikey documents' one ObjectID _id.
var multikeyOID = must(bson.ObjectIDFromHex("0123456789abcdef01234567"))

// must returns v, and panics if err is not nil.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// multikeyIndex is the library's statement index (EnsureIndexes).
var multikeyIndex = mongo.IndexModel{
	Keys:    bson.D{{Key: "accounts", Value: 1}, {Key: "committedAt", Value: 1}},
	Options: options.Index().SetName("accounts_1_committedAt_1"),
}

// multikeyDocs are documents whose accounts field is an array of strings
// (the library's), a scalar, missing, an empty array, an array of mixed
// types, documents, and booleans (FerretDB v1 refuses nested arrays); and whose committedAt
// is a date, missing, null, a number equal to a date's milliseconds, a
// string, or an array of dates. Their _ids are strings but two.
func multikeyDocs() []any {
	d := func(id any, accounts any, committedAt any) bson.D {
		doc := bson.D{{Key: "_id", Value: id}}
		if accounts != nil {
			doc = append(doc, bson.E{Key: "accounts", Value: accounts})
		}
		if committedAt != nil {
			doc = append(doc, bson.E{Key: "committedAt", Value: committedAt})
		}
		return doc
	}
	docs := []any{
		d("arr1", bson.A{"a", "b"}, at(1)),
		d("arr2", bson.A{"b", "c"}, at(2)),
		d("arrdup", bson.A{"a", "a"}, at(3)),
		d("scalar", "a", at(4)),
		d("missing", nil, at(5)),
		d("empty", bson.A{}, at(6)),
		d("mixed", bson.A{"x", int32(1), true, nil, bson.D{{Key: "k", Value: "a"}}, 2.5, "a"}, at(7)),
		d("nested", bson.A{bson.D{{Key: "a", Value: "a"}}, bson.D{{Key: "accounts", Value: "a"}}}, at(8)),
		d("object", bson.D{{Key: "a", Value: "a"}}, at(9)),
		d("bool", bson.A{true, false}, at(10)),
		d("boolscalar", false, at(11)),
		d("numstr", bson.A{"1", int64(1)}, at(12)),
		d("pending", bson.A{"a", "b"}, nil),
		d("cnull", bson.A{"a"}, bson.Null{}),
		d("cnum", bson.A{"a"}, at(13).UnixMilli()),
		d("carr", bson.A{"a"}, bson.A{at(14), at(90)}),
		d("cstr", bson.A{"a"}, at(15).Format(time.RFC3339)),
		d("escaped", bson.A{"a<b&\"c\"", "a"}, at(16)),
		d("accented", bson.A{"réglé", "b"}, at(17)),
		d(multikeyOID, bson.A{"a", "c"}, at(18)),
		d(int32(7), bson.A{"c", "a"}, at(19)),
	}
	for i := range 40 {
		docs = append(docs, d(fmt.Sprintf("other%02d", i), bson.A{fmt.Sprintf("o%d", i), "b"}, at(100+i)))
	}
	return docs
}

// multikeyFilters are the filters compared between the collections: the
// library's statement reads ({accounts: key, committedAt: {$type: "date",
// $gte, $lte}}, either bound absent) and others on the same fields.
func multikeyFilters() []bson.D {
	type_ := bson.E{Key: "$type", Value: "date"}
	return []bson.D{
		{{Key: "accounts", Value: "a"}},
		{{Key: "accounts", Value: "b"}},
		{{Key: "accounts", Value: "a"}, {Key: "committedAt", Value: bson.D{type_}}},
		{{Key: "accounts", Value: "a"}, {Key: "committedAt", Value: bson.D{type_, {Key: "$gte", Value: at(3)}, {Key: "$lte", Value: at(16)}}}},
		{{Key: "accounts", Value: "a"}, {Key: "committedAt", Value: bson.D{type_, {Key: "$lte", Value: at(13)}}}},
		{{Key: "accounts", Value: "a"}, {Key: "committedAt", Value: bson.D{type_, {Key: "$gte", Value: at(50)}}}},
		{{Key: "accounts", Value: "a"}, {Key: "committedAt", Value: bson.D{{Key: "$gt", Value: at(3)}, {Key: "$lt", Value: at(16)}}}},
		{{Key: "accounts", Value: "a"}, {Key: "committedAt", Value: at(14)}},
		{{Key: "accounts", Value: "a"}, {Key: "committedAt", Value: bson.D{{Key: "$exists", Value: false}}}},
		{{Key: "accounts", Value: bson.D{{Key: "$in", Value: bson.A{"c", "x"}}}}, {Key: "committedAt", Value: bson.D{type_}}},
		{{Key: "accounts", Value: true}},
		{{Key: "accounts", Value: false}},
		{{Key: "accounts", Value: "1"}},
		{{Key: "accounts", Value: "réglé"}},
		{{Key: "accounts", Value: "a<b&\"c\""}},
		{{Key: "accounts", Value: "o7"}, {Key: "committedAt", Value: bson.D{type_, {Key: "$gte", Value: at(100)}, {Key: "$lte", Value: at(200)}}}},
		{{Key: "accounts", Value: "zzz"}},
	}
}

// ranged reports whether filter sets committedAt to dates only, so that a
// read sorted by it has no ties among the documents it matches.
func ranged(filter bson.D) bool {
	for _, e := range filter {
		if e.Key == "committedAt" {
			_, isDoc := e.Value.(bson.D)
			return isDoc && !strings.Contains(fmt.Sprint(e.Value), "$exists")
		}
	}
	return false
}

// idsOf returns the _ids of the documents coll returns for filter, sorted,
// as text.
func idsOf(t *testing.T, coll *mongo.Collection, filter any, opts ...options.Lister[options.FindOptions]) []string {
	t.Helper()
	cur, err := coll.Find(t.Context(), filter, opts...)
	require.NoError(t, err)
	var docs []bson.Raw
	require.NoError(t, cur.All(t.Context(), &docs))
	out := make([]string, len(docs))
	for i, doc := range docs {
		out[i] = doc.Lookup("_id").String()
	}
	return out
}

// sameAnswers asserts that every multikey filter returns the same
// documents from each collection as from plain (no index), alone and as
// the library reads them (sorted by committedAt either way, with a limit),
// and counts the same.
func sameAnswers(t *testing.T, step string, plain *mongo.Collection, indexed ...*mongo.Collection) {
	t.Helper()
	for _, filter := range multikeyFilters() {
		byID := options.Find().SetSort(bson.D{{Key: "_id", Value: 1}})
		want := idsOf(t, plain, filter, byID)
		for _, coll := range indexed {
			assert.Equal(t, want, idsOf(t, coll, filter, byID), "%s: %s %v", step, coll.Name(), filter)
			n, err := coll.CountDocuments(t.Context(), filter)
			require.NoError(t, err)
			assert.EqualValues(t, len(want), n, "%s: %s count %v", step, coll.Name(), filter)
		}
		if !ranged(filter) {
			continue
		}
		for _, dir := range []int{1, -1} {
			for _, limit := range []int64{0, 2} {
				opts := options.Find().SetSort(bson.D{{Key: "committedAt", Value: dir}}).SetLimit(limit)
				want := idsOf(t, plain, filter, opts)
				for _, coll := range indexed {
					assert.Equal(t, want, idsOf(t, coll, filter, opts), "%s: %s %v sort %d limit %d", step, coll.Name(), filter, dir, limit)
				}
			}
		}
	}
}

// sqliteDB opens the dev server's SQLite database of the devserver
// database, in dir, for reading.
func sqliteDB(t *testing.T, dir string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "devserver.sqlite")+"?mode=ro")
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, db.Close()) })
	return db
}

// elementsTable returns the table name of collection coll in db and the
// name of the elements table FerretDB's metadata records for its index
// named index ("" if none).
func elementsTable(t *testing.T, db *sql.DB, coll, index string) (table, elements string) {
	t.Helper()
	var settings string
	require.NoError(t, db.QueryRowContext(t.Context(),
		`SELECT table_name, settings FROM _ferretdb_collections WHERE name = ?`, coll).Scan(&table, &settings))
	var s struct {
		Indexes []struct {
			Name     string `json:"name"`
			Elements string `json:"twopc_elements"`
		} `json:"indexes"`
	}
	require.NoError(t, json.Unmarshal([]byte(settings), &s))
	for _, i := range s.Indexes {
		if i.Name == index {
			return table, i.Elements
		}
	}
	return table, ""
}

// schemaNames returns the names of SQLite's tables, indexes and triggers
// in db that contain part.
func schemaNames(t *testing.T, db *sql.DB, part string) []string {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), `SELECT name FROM sqlite_schema WHERE instr(name, ?) > 0 ORDER BY name`, part)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n string
		require.NoError(t, rows.Scan(&n))
		out = append(out, n)
	}
	require.NoError(t, rows.Err())
	return out
}

// assertElements asserts that the elements table of coll's multikey index
// holds exactly one row for each string or boolean element of each
// document's accounts array, with the document's committedAt (a number as
// it is, an array as "array", anything else NULL) and _id, computed here
// from the stored JSON by Go's decoder: the triggers keep no stale rows
// and miss none.
func assertElements(t *testing.T, step string, db *sql.DB, coll string) {
	t.Helper()
	table, elements := elementsTable(t, db, coll, "accounts_1_committedAt_1")
	require.NotEmpty(t, elements, "%s: %s has an elements table", step, coll)

	rows, err := db.QueryContext(t.Context(), fmt.Sprintf(`SELECT _ferretdb_sjson->'_id', _ferretdb_sjson FROM %q`, table))
	require.NoError(t, err)
	var want []string
	for rows.Next() {
		var id, doc string
		require.NoError(t, rows.Scan(&id, &doc))
		var fields map[string]json.RawMessage
		require.NoError(t, json.Unmarshal([]byte(doc), &fields))
		var accounts []any
		if json.Unmarshal(fields["accounts"], &accounts) != nil {
			continue // missing or not an array
		}
		k := "NULL"
		var committedAt any
		if raw, ok := fields["committedAt"]; ok {
			require.NoError(t, json.Unmarshal(raw, &committedAt))
		}
		switch v := committedAt.(type) {
		case float64:
			k = fmt.Sprint(v)
		case []any:
			k = "array"
		}
		for _, e := range accounts {
			switch e := e.(type) {
			case string:
				want = append(want, fmt.Sprintf("text %q|%s|%s", e, k, id))
			case bool:
				n := 0
				if e {
					n = 1
				}
				want = append(want, fmt.Sprintf("integer %d|%s|%s", n, k, id))
			}
		}
	}
	require.NoError(t, rows.Err())
	require.NoError(t, rows.Close())

	rows, err = db.QueryContext(t.Context(), fmt.Sprintf(
		`SELECT typeof(e), CAST(e AS TEXT), CASE WHEN k IS NULL THEN 'NULL' ELSE CAST(k AS TEXT) END, id FROM %q`, elements))
	require.NoError(t, err)
	defer rows.Close()
	var got []string
	for rows.Next() {
		var typ, e, k, id string
		require.NoError(t, rows.Scan(&typ, &e, &k, &id))
		if typ == "text" {
			e = fmt.Sprintf("%q", e)
		}
		if k != "NULL" && k != "array" {
			var f float64
			_, err := fmt.Sscan(k, &f)
			require.NoError(t, err)
			k = fmt.Sprint(f)
		}
		got = append(got, fmt.Sprintf("%s %s|%s|%s", typ, e, k, id))
	}
	require.NoError(t, rows.Err())
	slices.Sort(want)
	slices.Sort(got)
	assert.Equal(t, want, got, "%s: %s's elements", step, coll)
}

// assertKeyColumns asserts that coll's indexes have key columns (FerretDB's
// metadata/columns.go) and that each holds, in every row, what SQLite's
// -> gives for its field from the row's JSON (checkKeyColumns, which
// checks the elements tables too): the updates that skip the trigger's
// check, and those that write a changed value, leave none stale.
func assertKeyColumns(t *testing.T, step string, db *sql.DB, coll string) {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRowContext(t.Context(), `SELECT count(*) FROM _ferretdb_collections, json_each(settings, '$.indexes') AS i, `+
		`json_each(i.value, '$.twopc_columns') WHERE name = ?`, coll).Scan(&n))
	assert.NotZero(t, n, "%s: %s has key columns", step, coll)
	checkKeyColumns(t, step, db, coll)
}

// TestMultikeyIndexMatchesUnindexed: with the library's {accounts: 1,
// committedAt: 1} index, created before the documents or on them, the dev
// server returns for the statement reads, and for other equalities on
// accounts, the documents an unindexed copy returns, whatever accounts
// holds (an array, a scalar, nothing, an empty array, mixed types) and
// whatever committedAt holds, after inserts, updates ($push, $pull, $set
// and $unset of either field, replacements, upserts, multi-document
// updates through the front) and deletes; and the elements table always
// holds exactly the documents' elements.
func TestMultikeyIndexMatchesUnindexed(t *testing.T) {
	dir := t.TempDir()
	s := startServer(t, devserver.Config{Dir: dir})
	client := connect(t, s.URI())
	ctx := t.Context()
	db := client.Database("devserver")
	plain, before, after := db.Collection("mk_plain"), db.Collection("mk_before"), db.Collection("mk_after")
	_, err := before.Indexes().CreateOne(ctx, multikeyIndex)
	require.NoError(t, err)
	for _, coll := range []*mongo.Collection{plain, before, after} {
		_, err := coll.InsertMany(ctx, multikeyDocs())
		require.NoError(t, err)
	}
	_, err = after.Indexes().CreateOne(ctx, multikeyIndex) // on existing documents
	require.NoError(t, err)
	lite := sqliteDB(t, dir)

	// What MongoDB's documentation says these reads return: an array
	// matches by any of its elements (not by the fields of a document in
	// it), a scalar by itself, and a range of
	// dates matches a date in it or an array with dates meeting each bound.
	byID := options.Find().SetSort(bson.D{{Key: "_id", Value: 1}})
	// Sorted by _id: numbers, strings, then ObjectIDs.
	seven, oidText := `{"$numberInt":"7"}`, fmt.Sprintf(`{"$oid":"%s"}`, multikeyOID.Hex())
	assert.Equal(t, []string{seven, `"arr1"`, `"arrdup"`, `"carr"`, `"cnull"`, `"cnum"`, `"cstr"`, `"escaped"`, `"mixed"`, `"pending"`, `"scalar"`, oidText},
		idsOf(t, plain, bson.D{{Key: "accounts", Value: "a"}}, byID))
	assert.Equal(t, []string{seven, `"arrdup"`, `"carr"`, `"escaped"`, `"mixed"`, `"scalar"`, oidText},
		idsOf(t, plain, bson.D{{Key: "accounts", Value: "a"}, {Key: "committedAt", Value: bson.D{{Key: "$type", Value: "date"}, {Key: "$gte", Value: at(3)}, {Key: "$lte", Value: at(90)}}}}, byID))
	assert.Equal(t, []string{`"bool"`, `"mixed"`}, idsOf(t, plain, bson.D{{Key: "accounts", Value: true}}, byID))

	check := func(step string) {
		t.Helper()
		sameAnswers(t, step, plain, before, after)
		assertElements(t, step, lite, before.Name())
		assertElements(t, step, lite, after.Name())
		assertKeyColumns(t, step, lite, before.Name())
		assertKeyColumns(t, step, lite, after.Name())
	}
	check("inserted")

	set := func(doc bson.D) bson.D { return bson.D{{Key: "$set", Value: doc}} }
	unset := func(field string) bson.D { return bson.D{{Key: "$unset", Value: bson.D{{Key: field, Value: ""}}}} }
	id := func(v any) bson.D { return bson.D{{Key: "_id", Value: v}} }
	type result struct{ matched, modified, deleted, upserted int64 }
	one := func(filter, update any, opts ...options.Lister[options.UpdateOneOptions]) func(*mongo.Collection) (result, error) {
		return func(coll *mongo.Collection) (result, error) {
			r, err := coll.UpdateOne(ctx, filter, update, opts...)
			if err != nil {
				return result{}, err
			}
			up := int64(0)
			if r.UpsertedID != nil {
				up = 1
			}
			return result{matched: r.MatchedCount, modified: r.ModifiedCount, upserted: up}, nil
		}
	}
	many := func(filter, update any) func(*mongo.Collection) (result, error) {
		return func(coll *mongo.Collection) (result, error) {
			r, err := coll.UpdateMany(ctx, filter, update)
			if err != nil {
				return result{}, err
			}
			return result{matched: r.MatchedCount, modified: r.ModifiedCount}, nil
		}
	}
	steps := []struct {
		name  string
		write func(*mongo.Collection) (result, error)
	}{
		{"insert", func(coll *mongo.Collection) (result, error) {
			_, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "new"}, {Key: "accounts", Value: bson.A{"a", "d"}}, {Key: "committedAt", Value: at(20)}})
			return result{}, err
		}},
		{"$push an element", one(id("arr2"), bson.D{{Key: "$push", Value: bson.D{{Key: "accounts", Value: "a"}}}})},
		{"$pull an element", one(id("arr1"), bson.D{{Key: "$pull", Value: bson.D{{Key: "accounts", Value: "a"}}}})},
		{"$set a scalar to an array", one(id("scalar"), set(bson.D{{Key: "accounts", Value: bson.A{"a", "e"}}}))},
		{"$set an array to a scalar", one(id("arrdup"), set(bson.D{{Key: "accounts", Value: "a"}}))},
		{"$set a missing field", one(id("missing"), set(bson.D{{Key: "accounts", Value: bson.A{"a"}}}))},
		{"$push onto an empty array", one(id("empty"), bson.D{{Key: "$push", Value: bson.D{{Key: "accounts", Value: "a"}}}})},
		{"$unset the array", one(id("mixed"), unset("accounts"))},
		{"$set an array to empty", one(id("bool"), set(bson.D{{Key: "accounts", Value: bson.A{}}}))},
		{"commit: $set committedAt", one(id("pending"), set(bson.D{{Key: "committedAt", Value: at(21)}}))},
		{"$set committedAt from an array to a date", one(id("carr"), set(bson.D{{Key: "committedAt", Value: at(22)}}))},
		{"$set committedAt from a date to an array", one(id("new"), set(bson.D{{Key: "committedAt", Value: bson.A{at(23), at(91)}}}))},
		{"$unset committedAt", one(id("cnull"), unset("committedAt"))},
		{"$set another field", one(id("new"), set(bson.D{{Key: "other", Value: 1}}))},
		{"$addToSet", one(id("new"), bson.D{{Key: "$addToSet", Value: bson.D{{Key: "accounts", Value: "h"}}}})},
		{"$pullAll", one(id("arr2"), bson.D{{Key: "$pullAll", Value: bson.D{{Key: "accounts", Value: bson.A{"b", "c"}}}}})},
		{"upsert", one(id("up"), set(bson.D{{Key: "accounts", Value: bson.A{"a", "b"}}, {Key: "committedAt", Value: at(24)}}), options.UpdateOne().SetUpsert(true))},
		{"update many by an element", many(bson.D{{Key: "accounts", Value: "a"}}, set(bson.D{{Key: "touched", Value: true}}))},
		{"update many by an element and a range, changing the elements", many(
			bson.D{{Key: "accounts", Value: "b"}, {Key: "committedAt", Value: bson.D{{Key: "$type", Value: "date"}, {Key: "$lte", Value: at(120)}}}},
			bson.D{{Key: "$push", Value: bson.D{{Key: "accounts", Value: "a"}}}})},
		{"replace", func(coll *mongo.Collection) (result, error) {
			r, err := coll.ReplaceOne(ctx, id("arr2"), bson.D{{Key: "accounts", Value: bson.A{"g", "a"}}, {Key: "committedAt", Value: at(25)}})
			if err != nil {
				return result{}, err
			}
			return result{matched: r.MatchedCount, modified: r.ModifiedCount}, nil
		}},
		{"findAndModify by an element", func(coll *mongo.Collection) (result, error) {
			err := coll.FindOneAndUpdate(ctx, bson.D{{Key: "accounts", Value: "d"}}, bson.D{{Key: "$pull", Value: bson.D{{Key: "accounts", Value: "a"}}}}).Err()
			return result{}, err
		}},
		{"delete one", func(coll *mongo.Collection) (result, error) {
			r, err := coll.DeleteOne(ctx, id("escaped"))
			if err != nil {
				return result{}, err
			}
			return result{deleted: r.DeletedCount}, nil
		}},
		{"delete many by an element", func(coll *mongo.Collection) (result, error) {
			r, err := coll.DeleteMany(ctx, bson.D{{Key: "accounts", Value: "e"}})
			if err != nil {
				return result{}, err
			}
			return result{deleted: r.DeletedCount}, nil
		}},
	}
	for _, step := range steps {
		want, err := step.write(plain)
		require.NoError(t, err, step.name)
		for _, coll := range []*mongo.Collection{before, after} {
			got, err := step.write(coll)
			require.NoError(t, err, step.name)
			assert.Equal(t, want, got, "%s: %s", step.name, coll.Name())
		}
		check(step.name)
	}
}

// TestMultikeyIndexPlan: the library's statement reads ({accounts: key,
// committedAt: {$type: "date", $gte, $lte}}, C32 of the library's
// COMMANDS.md) are read by the index's elements table, searched by the
// element and the committedAt range, and then by the _id index, as MongoDB
// reads them by a multikey index scan: no table is scanned. Stock FerretDB
// v1.24 scanned the table; before this patch the dev server read the
// range of every array-valued entry, which is every transaction.
func TestMultikeyIndexPlan(t *testing.T) {
	s := startServer(t, devserver.Config{})
	coll := collection(t, connect(t, s.URI()), multikeyDocs()...)
	ctx := t.Context()
	_, err := coll.Indexes().CreateOne(ctx, multikeyIndex)
	require.NoError(t, err)

	date := bson.E{Key: "$type", Value: "date"}
	const (
		elements = `SEARCH _ferretdb_elements_\S+ USING COVERING INDEX _ferretdb_elements_\S+_ek `
		byID     = `SEARCH \S+ USING INDEX \S+__id_ \(<expr>=\?\)`
	)
	for _, tc := range []struct {
		filter bson.D
		search []string // regular expressions the plan matches
	}{
		{bson.D{{Key: "accounts", Value: "a"}, {Key: "committedAt", Value: bson.D{date}}},
			[]string{elements + `\(e=\? AND k>\? AND k<\?\)`, elements + `\(e=\? AND k=\?\)`, byID}},
		{bson.D{{Key: "accounts", Value: "a"}, {Key: "committedAt", Value: bson.D{date, {Key: "$lte", Value: at(10)}, {Key: "$gte", Value: at(2)}}}},
			[]string{elements + `\(e=\? AND k>\? AND k<\?\)`, elements + `\(e=\? AND k=\?\)`, byID}},
		{bson.D{{Key: "accounts", Value: "a"}},
			[]string{elements + `\(e=\?\)`, byID}},
		{bson.D{{Key: "accounts", Value: bson.D{{Key: "$in", Value: bson.A{"a", true}}}}, {Key: "committedAt", Value: bson.D{{Key: "$gte", Value: at(2)}}}},
			[]string{elements + `\(e=\? AND k>\? AND k<\?\)`, byID}},
		// A string whose JSON has escapes is scanned (see indexPushdown).
		{bson.D{{Key: "accounts", Value: "a<b&\"c\""}}, nil},
	} {
		for _, sort := range []bson.D{nil, {{Key: "committedAt", Value: 1}}, {{Key: "committedAt", Value: -1}}} {
			find := bson.D{{Key: "find", Value: coll.Name()}, {Key: "filter", Value: tc.filter}}
			if sort != nil {
				find = append(find, bson.E{Key: "sort", Value: sort}, bson.E{Key: "limit", Value: 2})
			}
			var plan bson.M
			require.NoError(t, coll.Database().RunCommand(ctx, bson.D{{Key: "explain", Value: find}}).Decode(&plan))
			steps := fmt.Sprint(plan["queryPlanner"])
			if tc.search == nil {
				assert.Contains(t, steps, "SCAN", "filter %v", tc.filter)
				continue
			}
			for _, re := range tc.search {
				assert.Regexp(t, re, steps, "filter %v", tc.filter)
			}
			assert.NotContains(t, steps, "SCAN", "filter %v", tc.filter)
		}
	}
}

// TestMultikeyIndexLifecycle: an index's elements table, its indexes and
// its triggers go with the index (dropIndexes) and with the collection
// (drop), are made again with the index, outlive a rename, a compaction
// (VACUUM, which may renumber rows) and a restart on the same data, and the
// answers stay those of an unindexed copy throughout.
func TestMultikeyIndexLifecycle(t *testing.T) {
	dir := t.TempDir()
	s := startServer(t, devserver.Config{Dir: dir})
	client := connect(t, s.URI())
	ctx := t.Context()
	db := client.Database("devserver")
	plain, coll := db.Collection("life_plain"), db.Collection("life")
	for _, c := range []*mongo.Collection{plain, coll} {
		_, err := c.InsertMany(ctx, multikeyDocs())
		require.NoError(t, err)
	}
	_, err := coll.Indexes().CreateOne(ctx, multikeyIndex)
	require.NoError(t, err)
	lite := sqliteDB(t, dir)
	table, elements := elementsTable(t, lite, "life", "accounts_1_committedAt_1")
	require.NotEmpty(t, elements)
	require.True(t, strings.HasPrefix(elements, "_ferretdb_elements_"+table+"_accounts_1_committedAt_1_"), elements)
	kept := []string{elements, elements + "_del", elements + "_ek", elements + "_id", elements + "_ins", elements + "_upd"}
	assert.Equal(t, kept, schemaNames(t, lite, "_ferretdb_elements_"))

	// write applies a change of the elements to both collections.
	n := 0
	write := func(c *mongo.Collection) {
		t.Helper()
		for _, c := range []*mongo.Collection{plain, c} {
			_, err := c.UpdateOne(ctx, bson.D{{Key: "_id", Value: fmt.Sprintf("other%02d", n)}},
				bson.D{{Key: "$push", Value: bson.D{{Key: "accounts", Value: "a"}}}})
			require.NoError(t, err)
			_, err = c.InsertOne(ctx, bson.D{{Key: "_id", Value: fmt.Sprintf("life%02d", n)}, {Key: "accounts", Value: bson.A{"a", "o7"}}, {Key: "committedAt", Value: at(200 + n)}})
			require.NoError(t, err)
		}
		n++
	}

	require.NoError(t, db.RunCommand(ctx, bson.D{{Key: "compact", Value: "life"}, {Key: "force", Value: true}}).Err())
	write(coll)
	sameAnswers(t, "compacted", plain, coll)
	assertElements(t, "compacted", lite, "life")

	require.NoError(t, client.Database("admin").RunCommand(ctx, bson.D{
		{Key: "renameCollection", Value: "devserver.life"}, {Key: "to", Value: "devserver.renamed"}}).Err())
	coll = db.Collection("renamed")
	write(coll)
	sameAnswers(t, "renamed", plain, coll)
	assertElements(t, "renamed", lite, "renamed")
	assert.Equal(t, kept, schemaNames(t, lite, "_ferretdb_elements_"))

	// restart stops the server, calls stopped, and starts it again on the
	// same data.
	restart := func(stopped func()) {
		t.Helper()
		require.NoError(t, client.Disconnect(ctx))
		require.NoError(t, s.Close())
		stopped()
		s = startServer(t, devserver.Config{Dir: dir})
		client = connect(t, s.URI())
		db = client.Database("devserver")
		plain, coll = db.Collection("life_plain"), db.Collection("renamed")
	}
	restart(func() {})
	write(coll)
	sameAnswers(t, "restarted", plain, coll)
	assertElements(t, "restarted", lite, "renamed")

	// Data kept from before elements tables: the index is as FerretDB
	// v1.24 made it (no elements table, no triggers, nothing in its
	// metadata); the server makes its elements table when it starts.
	restart(func() {
		stock(t, dir, "renamed")
		assert.Empty(t, schemaNames(t, lite, "_ferretdb_elements_"))
	})
	assert.Len(t, schemaNames(t, lite, "_ferretdb_elements_"), 6)
	assertElements(t, "made at start", lite, "renamed")
	write(coll)
	sameAnswers(t, "made at start", plain, coll)
	assertElements(t, "made at start", lite, "renamed")

	require.NoError(t, coll.Indexes().DropOne(ctx, "accounts_1_committedAt_1"))
	assert.Empty(t, schemaNames(t, lite, "_ferretdb_elements_"), "dropped with the index")
	write(coll) // no trigger is left to fail
	sameAnswers(t, "index dropped", plain, coll)

	_, err = coll.Indexes().CreateOne(ctx, multikeyIndex)
	require.NoError(t, err)
	assert.Len(t, schemaNames(t, lite, "_ferretdb_elements_"), 6)
	assertElements(t, "index created again", lite, "renamed")
	write(coll)
	sameAnswers(t, "index created again", plain, coll)
	assertElements(t, "index created again", lite, "renamed")

	require.NoError(t, coll.Drop(ctx))
	assert.Empty(t, schemaNames(t, lite, "_ferretdb_elements_"), "dropped with the collection")
}

// stock makes collection coll's indexes in the SQLite data of a stopped
// dev server in dir as FerretDB v1.24 made them: it drops their elements
// tables and triggers, the key columns' triggers and the columns, makes
// each index an expression index on the JSON column again, and drops
// their record in the collection's metadata.
func stock(t *testing.T, dir, coll string) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "devserver.sqlite"))
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	var text, table string
	require.NoError(t, db.QueryRowContext(t.Context(), `SELECT settings, table_name FROM _ferretdb_collections WHERE name = ?`, coll).Scan(&text, &table))
	var settings map[string]any
	require.NoError(t, json.Unmarshal([]byte(text), &settings))
	for _, suffix := range []string{"_upd", "_ins"} {
		_, err := db.ExecContext(t.Context(), fmt.Sprintf(`DROP TRIGGER IF EXISTS %q`, "_ferretdb_keys_"+table+suffix))
		require.NoError(t, err)
	}
	columns := map[string]bool{}
	for _, index := range settings["indexes"].([]any) {
		index := index.(map[string]any)
		if cols, ok := index["twopc_columns"].([]any); ok {
			name := table + "_" + index["name"].(string)
			_, err := db.ExecContext(t.Context(), fmt.Sprintf(`DROP INDEX %q`, name))
			require.NoError(t, err)
			var exprs []string
			for i, key := range index["key"].([]any) {
				exprs = append(exprs, fmt.Sprintf(`_ferretdb_sjson->%q`, key.(map[string]any)["field"]))
				columns[cols[i].(string)] = true
			}
			_, err = db.ExecContext(t.Context(), fmt.Sprintf(`CREATE INDEX %q ON %q (%s)`, name, table, strings.Join(exprs, ", ")))
			require.NoError(t, err)
		}
		delete(index, "twopc_columns")
		if elements, ok := index["twopc_elements"].(string); ok {
			for _, suffix := range []string{"_ins", "_upd", "_del"} {
				_, err := db.ExecContext(t.Context(), fmt.Sprintf(`DROP TRIGGER %q`, elements+suffix))
				require.NoError(t, err)
			}
			_, err := db.ExecContext(t.Context(), fmt.Sprintf(`DROP TABLE %q`, elements))
			require.NoError(t, err)
		}
		delete(index, "twopc_elements")
		delete(index, "twopc_elements_key")
	}
	for col := range columns {
		_, err := db.ExecContext(t.Context(), fmt.Sprintf(`ALTER TABLE %q DROP COLUMN %q`, table, col))
		require.NoError(t, err)
	}
	b, err := json.Marshal(settings)
	require.NoError(t, err)
	_, err = db.ExecContext(t.Context(), `UPDATE _ferretdb_collections SET settings = ? WHERE name = ?`, string(b), coll)
	require.NoError(t, err)
}
