package devserver_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/twopc/twopc/examples/devserver"
)

// MongoDB's manual, the source of every expected reply below.
const (
	manualUpdateOutput  = "https://www.mongodb.com/docs/manual/reference/command/update/#output"
	manualUpdateFields  = "https://www.mongodb.com/docs/manual/reference/command/update/#command-fields (ordered)"
	manualUpdateUnique  = "https://www.mongodb.com/docs/manual/reference/command/update/#upsert-with-unique-index"
	manualUpdateStmts   = "https://www.mongodb.com/docs/manual/reference/command/update/#update-statements (upsert, multi)"
	manualUpdateLimits  = "https://www.mongodb.com/docs/manual/reference/command/update/#limits"
	manualSetOnInsert   = "https://www.mongodb.com/docs/manual/reference/operator/update/setOnInsert/#behavior"
	manualDeleteOutput  = "https://www.mongodb.com/docs/manual/reference/command/delete/#output"
	manualDeleteFields  = "https://www.mongodb.com/docs/manual/reference/command/delete/#command-fields (ordered, limit)"
	manualInsertOutput  = "https://www.mongodb.com/docs/manual/reference/command/insert/#output"
	manualInsertFields  = "https://www.mongodb.com/docs/manual/reference/command/insert/#command-fields (ordered)"
	manualUniqueIndex   = "https://www.mongodb.com/docs/manual/core/index-unique/#unique-indexes"
	manualBatchLimit    = "https://www.mongodb.com/docs/manual/reference/limits/#mongodb-limit-Write-Command-Batch-Limit-Size"
	manualCommandErrors = "https://www.mongodb.com/docs/manual/reference/method/db.runCommand/#response (ok: 0, errmsg, code)"
	manualBulkUnordered = "https://www.mongodb.com/docs/manual/reference/method/db.collection.bulkWrite/#ordered-vs-unordered-operations (unordered: the remaining operations continue after an error)"
)

// generatedID stands in a wanted upserted _id for one the server generates
// (an ObjectId).
const generatedID = "<generated ObjectId>"

// wantWrite is MongoDB's reply to a write command, as far as the tests
// check it, and what the collection holds afterwards.
type wantWrite struct {
	n, nModified int32
	upserted     map[int]any    // statement index → _id
	errors       []wantError    // in statement order
	ids          []any          // the collection's _ids afterwards, sorted; nil: not checked
	fields       map[any]bson.D // _id → fields the document must have afterwards
	absent       map[any]string // _id → a field the document must not have afterwards
	left         int64          // when ids is nil and left > 0: how many documents remain
}

type wantError struct {
	index int
	code  int32
}

// writeCase is one command of the conformance table, sent both with
// RunCommand (statements inline in the command body) and as the equivalent
// BulkWrite (the driver sends them as an OP_MSG document sequence).
type writeCase struct {
	name       string
	manual     []string // sections of MongoDB's manual the expected reply comes from
	command    string   // update, delete or insert
	ordered    bool
	setup      []any // documents in the collection before the command
	uniqueOn   string
	statements []bson.D // in the command's wire form: {q, u, upsert, multi}, {q, limit} or the document
	want       wantWrite
}

// stringIDs returns the _ids "0000".."n-1" as strings (FerretDB finds a string or
// ObjectId _id through its primary key, any other type by a scan).
func stringIDs(n int) []any {
	ids := make([]any, n)
	for i := range n {
		ids[i] = fmt.Sprintf("%04d", i)
	}
	return ids
}

func docsWithIDs(ids []any, fields ...bson.E) []any {
	docs := make([]any, len(ids))
	for i, id := range ids {
		docs[i] = append(bson.D{{Key: "_id", Value: id}}, fields...)
	}
	return docs
}

func upd(q, u bson.D, opts ...bson.E) bson.D {
	return append(bson.D{{Key: "q", Value: q}, {Key: "u", Value: u}}, opts...)
}

func del(q bson.D, limit int32) bson.D {
	return bson.D{{Key: "q", Value: q}, {Key: "limit", Value: limit}}
}

func id(v any) bson.D { return bson.D{{Key: "_id", Value: v}} }

func set(k string, v any) bson.D {
	return bson.D{{Key: "$set", Value: bson.D{{Key: k, Value: v}}}}
}

func incBy(k string, v int32) bson.D {
	return bson.D{{Key: "$inc", Value: bson.D{{Key: k, Value: v}}}}
}

var (
	upsert = bson.E{Key: "upsert", Value: true}
	multi  = bson.E{Key: "multi", Value: true}
)

func conformanceCases() []writeCase {
	// 1,000 single-document statements, each by _id, over 10 documents:
	// FerretDB's cost per update grows with the collection.
	ten := stringIDs(10)
	var incEach []bson.D
	for i := range 1000 {
		incEach = append(incEach, upd(bson.D{{Key: "_id", Value: ten[i%10]}}, incBy("n", 1)))
	}
	var insert150 []bson.D
	for i := range 150 {
		v := int32(i)
		if i == 6 {
			v = 5 // a duplicate of the document before it
		}
		insert150 = append(insert150, id(v))
	}
	three := []any{id(int32(1)), id(int32(2)), id(int32(3))}
	counter := func(n int32) []any {
		return []any{bson.D{{Key: "_id", Value: int32(1)}, {Key: "n", Value: n}, {Key: "s", Value: "text"}}}
	}

	return []writeCase{
		// An upsert that matches nothing inserts: n counts it, nModified
		// does not, upserted names the statement by its index.
		// manualUpdateOutput: update.n, update.nModified, update.upserted.index.
		{
			name: "update: one upsert inserts", manual: []string{manualUpdateOutput},
			command: "update", ordered: true,
			statements: []bson.D{upd(id("a"), set("x", int32(1)), upsert)},
			want:       wantWrite{n: 1, upserted: map[int]any{0: "a"}, ids: []any{"a"}},
		},
		// upserted.index is the statement's index in updates, not a count
		// of upserts (FerretDB numbers them 0, 1, ...).
		// manualUpdateOutput: "update.upserted.index: An integer that
		// identifies the update with upsert:true statement in the updates
		// array, which uses a zero-based index."
		{
			name: "update: upserted index is the statement's", manual: []string{manualUpdateOutput},
			command: "update", ordered: true, setup: []any{id("a")},
			statements: []bson.D{
				upd(id("a"), set("x", int32(1)), upsert),
				upd(id("b"), set("x", int32(1)), upsert),
				upd(id("a"), set("x", int32(2))),
				upd(id("c"), set("x", int32(1)), upsert),
			},
			want: wantWrite{n: 4, nModified: 2, upserted: map[int]any{1: "b", 3: "c"}, ids: []any{"a", "b", "c"}},
		},
		// Three upserts of one _id with different filters, unordered: the
		// first inserts, the two others match nothing and their inserts
		// break _id's uniqueness. The server does not retry them as
		// updates: their filters are not equality matches on the unique
		// index's fields alone.
		// manualUpdateOutput (writeErrors.index), manualUpdateFields
		// (ordered: false goes on), manualUpdateUnique.
		{
			name: "update: three upserts of one _id, unordered", manual: []string{manualUpdateOutput, manualUpdateFields, manualUpdateUnique},
			command: "update", ordered: false,
			statements: []bson.D{
				upd(bson.D{{Key: "_id", Value: int32(7)}, {Key: "a", Value: int32(1)}}, set("x", int32(1)), upsert),
				upd(bson.D{{Key: "_id", Value: int32(7)}, {Key: "a", Value: int32(2)}}, set("x", int32(1)), upsert),
				upd(bson.D{{Key: "_id", Value: int32(7)}, {Key: "a", Value: int32(3)}}, set("x", int32(1)), upsert),
			},
			want: wantWrite{
				n: 1, upserted: map[int]any{0: int32(7)},
				errors: []wantError{{1, 11000}, {2, 11000}}, ids: []any{int32(7)},
				fields: map[any]bson.D{int32(7): {{Key: "a", Value: int32(1)}}},
			},
		},
		// The same, ordered: the command stops at the first error.
		// manualUpdateFields: "If true, then when an update statement
		// fails, return without performing the remaining update
		// statements."
		{
			name: "update: three upserts of one _id, ordered", manual: []string{manualUpdateOutput, manualUpdateFields, manualUpdateUnique},
			command: "update", ordered: true,
			statements: []bson.D{
				upd(bson.D{{Key: "_id", Value: int32(7)}, {Key: "a", Value: int32(1)}}, set("x", int32(1)), upsert),
				upd(bson.D{{Key: "_id", Value: int32(7)}, {Key: "a", Value: int32(2)}}, set("x", int32(1)), upsert),
				upd(bson.D{{Key: "_id", Value: int32(8)}}, set("x", int32(1)), upsert),
			},
			want: wantWrite{n: 1, upserted: map[int]any{0: int32(7)}, errors: []wantError{{1, 11000}}, ids: []any{int32(7)}},
		},
		// $inc of a string fails with TypeMismatch (14) at its own index;
		// ordered, the third statement does not run.
		// manualUpdateOutput (n, nModified, writeErrors), manualUpdateFields.
		{
			name: "update: second statement fails, ordered", manual: []string{manualUpdateOutput, manualUpdateFields},
			command: "update", ordered: true, setup: counter(0),
			statements: []bson.D{
				upd(id(int32(1)), incBy("n", 1)),
				upd(id(int32(1)), incBy("s", 1)),
				upd(id(int32(1)), incBy("n", 1)),
			},
			want: wantWrite{n: 1, nModified: 1, errors: []wantError{{1, 14}}, fields: map[any]bson.D{int32(1): {{Key: "n", Value: int32(1)}}}},
		},
		// Unordered, the third statement runs.
		{
			name: "update: second statement fails, unordered", manual: []string{manualUpdateOutput, manualUpdateFields},
			command: "update", ordered: false, setup: counter(0),
			statements: []bson.D{
				upd(id(int32(1)), incBy("n", 1)),
				upd(id(int32(1)), incBy("s", 1)),
				upd(id(int32(1)), incBy("n", 1)),
			},
			want: wantWrite{n: 2, nModified: 2, errors: []wantError{{1, 14}}, fields: map[any]bson.D{int32(1): {{Key: "n", Value: int32(2)}}}},
		},
		// A failing first statement is a write error at index 0, not a
		// command error: an unordered command goes on.
		{
			name: "update: first statement fails, unordered", manual: []string{manualUpdateOutput, manualUpdateFields},
			command: "update", ordered: false, setup: counter(0),
			statements: []bson.D{
				upd(id(int32(1)), incBy("s", 1)),
				upd(id(int32(1)), incBy("n", 1)),
			},
			want: wantWrite{n: 1, nModified: 1, errors: []wantError{{0, 14}}, fields: map[any]bson.D{int32(1): {{Key: "n", Value: int32(1)}}}},
		},
		// The library's group commit and move to done: an unordered bulk
		// of guarded single-document statements, each by _id, on
		// distinct documents. Every statement is tried even after one
		// fails (ordered: false, "If false, then when an update fails,
		// continue with the remaining update statements, if any"), n and
		// nModified are summed over the statements that matched, one
		// that matches nothing (a guard that no longer holds) is no
		// error, and each failure is reported at its own statement's
		// index.
		{
			name: "update: guarded statements by _id on distinct documents, unordered, two fail", manual: []string{manualUpdateOutput, manualUpdateFields, manualBulkUnordered},
			command: "update", ordered: false,
			setup: []any{
				bson.D{{Key: "_id", Value: "t0"}, {Key: "state", Value: "pending"}, {Key: "n", Value: int32(0)}},
				bson.D{{Key: "_id", Value: "t1"}, {Key: "state", Value: "pending"}, {Key: "n", Value: "text"}},
				bson.D{{Key: "_id", Value: "t2"}, {Key: "state", Value: "done"}, {Key: "n", Value: int32(0)}},
				bson.D{{Key: "_id", Value: "t3"}, {Key: "state", Value: "pending"}, {Key: "n", Value: "text"}},
				bson.D{{Key: "_id", Value: "t4"}, {Key: "state", Value: "pending"}, {Key: "n", Value: int32(0)}},
			},
			statements: []bson.D{
				upd(bson.D{{Key: "_id", Value: "t0"}, {Key: "state", Value: "pending"}}, incBy("n", 1)),
				upd(bson.D{{Key: "_id", Value: "t1"}, {Key: "state", Value: "pending"}}, incBy("n", 1)),
				upd(bson.D{{Key: "_id", Value: "t2"}, {Key: "state", Value: "pending"}}, incBy("n", 1)),
				upd(bson.D{{Key: "_id", Value: "t3"}, {Key: "state", Value: "pending"}}, incBy("n", 1)),
				upd(bson.D{{Key: "_id", Value: "t4"}, {Key: "state", Value: "pending"}}, incBy("n", 1)),
			},
			want: wantWrite{n: 2, nModified: 2, errors: []wantError{{1, 14}, {3, 14}}, fields: map[any]bson.D{
				"t0": {{Key: "n", Value: int32(1)}},
				"t2": {{Key: "n", Value: int32(0)}},
				"t4": {{Key: "n", Value: int32(1)}},
			}},
		},
		// A one-statement command that fails still reports n and nModified.
		{
			name: "update: only statement fails", manual: []string{manualUpdateOutput},
			command: "update", ordered: true, setup: counter(0),
			statements: []bson.D{upd(id(int32(1)), incBy("s", 1))},
			want:       wantWrite{errors: []wantError{{0, 14}}},
		},
		// multi: true updates every match; n counts matches, nModified
		// changes.
		// manualUpdateStmts (multi), manualUpdateOutput.
		{
			name: "update: multi true", manual: []string{manualUpdateStmts, manualUpdateOutput},
			command: "update", ordered: true,
			setup: []any{
				bson.D{{Key: "_id", Value: int32(1)}, {Key: "g", Value: int32(1)}},
				bson.D{{Key: "_id", Value: int32(2)}, {Key: "g", Value: int32(1)}, {Key: "x", Value: int32(1)}},
				bson.D{{Key: "_id", Value: int32(3)}, {Key: "g", Value: int32(1)}},
				bson.D{{Key: "_id", Value: int32(4)}, {Key: "g", Value: int32(2)}},
			},
			statements: []bson.D{upd(bson.D{{Key: "g", Value: int32(1)}}, set("x", int32(1)), multi)},
			want:       wantWrite{n: 3, nModified: 2, absent: map[any]string{int32(4): "x"}},
		},
		// "If both upsert and multi are true and no documents match the
		// query, the update operation inserts only a single document", its
		// _id generated.
		// manualUpdateStmts (upsert).
		{
			name: "update: multi upsert of no match inserts one", manual: []string{manualUpdateStmts, manualUpdateOutput},
			command: "update", ordered: true,
			statements: []bson.D{upd(bson.D{{Key: "g", Value: int32(9)}}, set("x", int32(1)), multi, upsert)},
			want:       wantWrite{n: 1, upserted: map[int]any{0: generatedID}},
		},
		// $setOnInsert acts when the upsert inserts, not when it matches.
		// manualSetOnInsert: "If an update operation with upsert: true
		// results in an insert of a document, then $setOnInsert assigns
		// the specified values ... If the update operation does not result
		// in an insert, $setOnInsert does nothing."
		{
			name: "update: $setOnInsert", manual: []string{manualSetOnInsert, manualUpdateOutput},
			command: "update", ordered: true, setup: []any{id("old")},
			statements: []bson.D{
				upd(id("old"), bson.D{{Key: "$setOnInsert", Value: bson.D{{Key: "fresh", Value: true}}}}, upsert),
				upd(id("new"), bson.D{{Key: "$setOnInsert", Value: bson.D{{Key: "fresh", Value: true}}}}, upsert),
			},
			want: wantWrite{
				n: 2, upserted: map[int]any{1: "new"}, ids: []any{"new", "old"},
				fields: map[any]bson.D{"new": {{Key: "fresh", Value: true}}},
				absent: map[any]string{"old": "fresh"},
			},
		},
		// A statement that matches nothing, without upsert: n 0, no
		// upserted, no error.
		{
			name: "update: empty match", manual: []string{manualUpdateOutput},
			command: "update", ordered: true, setup: []any{id("a")},
			statements: []bson.D{upd(id("zzz"), set("x", int32(1)))},
			want:       wantWrite{ids: []any{"a"}},
		},
		// A $set to the current value matches without modifying.
		// manualUpdateOutput: "n can be greater than nModified".
		{
			name: "update: no-op counts in n only", manual: []string{manualUpdateOutput},
			command: "update", ordered: true, setup: counter(5),
			statements: []bson.D{upd(id(int32(1)), set("n", int32(5)))},
			want:       wantWrite{n: 1},
		},
		// Updating a document to a value a unique index already holds is a
		// write error E11000 (FerretDB's SQLite backend reports it as an
		// InternalError; the front reports MongoDB's).
		// manualUniqueIndex, manualUpdateOutput.
		{
			name: "update: duplicate on a unique index", manual: []string{manualUniqueIndex, manualUpdateOutput, manualUpdateFields},
			command: "update", ordered: false, uniqueOn: "u",
			setup: []any{
				bson.D{{Key: "_id", Value: int32(1)}, {Key: "u", Value: int32(1)}},
				bson.D{{Key: "_id", Value: int32(2)}, {Key: "u", Value: int32(2)}},
			},
			statements: []bson.D{
				upd(id(int32(2)), set("u", int32(1))),
				upd(id(int32(2)), set("v", int32(1))),
				upd(id(int32(1)), set("u", int32(2))),
				upd(id(int32(1)), set("u", int32(3))),
			},
			want: wantWrite{
				n: 2, nModified: 2, errors: []wantError{{0, 11000}, {2, 11000}},
				fields: map[any]bson.D{int32(1): {{Key: "u", Value: int32(3)}}, int32(2): {{Key: "u", Value: int32(2)}, {Key: "v", Value: int32(1)}}},
			},
		},
		// An upsert whose insert breaks a unique index fails likewise.
		{
			name: "update: upsert duplicate on a unique index", manual: []string{manualUniqueIndex, manualUpdateOutput},
			command: "update", ordered: true, uniqueOn: "u",
			setup:      []any{bson.D{{Key: "_id", Value: int32(1)}, {Key: "u", Value: int32(1)}}},
			statements: []bson.D{upd(id(int32(2)), set("u", int32(1)), upsert)},
			want:       wantWrite{errors: []wantError{{0, 11000}}, ids: []any{int32(1)}},
		},
		// A command of 1,000 single-document (multi: false) statements,
		// each by _id: far more than FerretDB's 100 connections (such a
		// command used to hang), far fewer than MongoDB's limit of 100,000
		// statements.
		// manualUpdateLimits, manualBatchLimit, manualUpdateOutput.
		{
			name: "update: 1000 statements", manual: []string{manualUpdateLimits, manualBatchLimit, manualUpdateOutput},
			command: "update", ordered: true, setup: docsWithIDs(ten, bson.E{Key: "n", Value: int32(0)}),
			statements: incEach,
			want: wantWrite{
				n: 1000, nModified: 1000,
				fields: map[any]bson.D{ten[0]: {{Key: "n", Value: int32(100)}}, ten[9]: {{Key: "n", Value: int32(100)}}},
			},
		},

		// limit 0 deletes every match, limit 1 one; n sums them.
		// manualDeleteFields (limit), manualDeleteOutput (n).
		{
			name: "delete: limit 0 and 1", manual: []string{manualDeleteFields, manualDeleteOutput},
			command: "delete", ordered: true,
			setup: []any{
				bson.D{{Key: "_id", Value: int32(1)}, {Key: "g", Value: int32(1)}},
				bson.D{{Key: "_id", Value: int32(2)}, {Key: "g", Value: int32(1)}},
				bson.D{{Key: "_id", Value: int32(3)}, {Key: "g", Value: int32(2)}},
				bson.D{{Key: "_id", Value: int32(4)}, {Key: "g", Value: int32(2)}},
				bson.D{{Key: "_id", Value: int32(5)}, {Key: "g", Value: int32(3)}},
			},
			statements: []bson.D{
				del(bson.D{{Key: "g", Value: int32(1)}}, 0),
				del(bson.D{{Key: "g", Value: int32(2)}}, 1),
				del(bson.D{{Key: "g", Value: int32(9)}}, 0),
			},
			want: wantWrite{n: 3, left: 2, fields: map[any]bson.D{int32(5): {{Key: "g", Value: int32(3)}}}},
		},
		// An unknown query operator fails its statement with BadValue (2);
		// ordered, the command stops there.
		// manualDeleteOutput (writeErrors.index), manualDeleteFields (ordered).
		{
			name: "delete: second statement fails, ordered", manual: []string{manualDeleteOutput, manualDeleteFields},
			command: "delete", ordered: true, setup: three,
			statements: []bson.D{
				del(id(int32(1)), 1),
				del(bson.D{{Key: "$bogus", Value: int32(1)}}, 1),
				del(id(int32(2)), 1),
			},
			want: wantWrite{n: 1, errors: []wantError{{1, 2}}, ids: []any{int32(2), int32(3)}},
		},
		{
			name: "delete: second statement fails, unordered", manual: []string{manualDeleteOutput, manualDeleteFields},
			command: "delete", ordered: false, setup: three,
			statements: []bson.D{
				del(id(int32(1)), 1),
				del(bson.D{{Key: "$bogus", Value: int32(1)}}, 1),
				del(id(int32(2)), 1),
			},
			want: wantWrite{n: 2, errors: []wantError{{1, 2}}, ids: []any{int32(3)}},
		},

		// A duplicate _id: ordered stops, unordered goes on.
		// manualInsertOutput (n, writeErrors.index), manualInsertFields (ordered).
		{
			name: "insert: duplicate, ordered", manual: []string{manualInsertOutput, manualInsertFields},
			command: "insert", ordered: true, setup: []any{id(int32(2))},
			statements: []bson.D{id(int32(1)), id(int32(2)), id(int32(3))},
			want:       wantWrite{n: 1, errors: []wantError{{1, 11000}}, ids: []any{int32(1), int32(2)}},
		},
		{
			name: "insert: duplicate, unordered", manual: []string{manualInsertOutput, manualInsertFields},
			command: "insert", ordered: false, setup: []any{id(int32(2))},
			statements: []bson.D{id(int32(1)), id(int32(2)), id(int32(3)), id(int32(1))},
			want:       wantWrite{n: 2, errors: []wantError{{1, 11000}, {3, 11000}}, ids: []any{int32(1), int32(2), int32(3)}},
		},
		// Past FerretDB's insert batches of 100 documents: an ordered
		// insert still stops at its first error (FerretDB went on with the
		// next batch).
		{
			name: "insert: 150 documents, duplicate at 6, ordered", manual: []string{manualInsertOutput, manualInsertFields},
			command: "insert", ordered: true, statements: insert150,
			want: wantWrite{n: 6, errors: []wantError{{6, 11000}}, ids: []any{int32(0), int32(1), int32(2), int32(3), int32(4), int32(5)}},
		},
		{
			name: "insert: duplicate on a unique index", manual: []string{manualUniqueIndex, manualInsertOutput},
			command: "insert", ordered: false, uniqueOn: "u",
			statements: []bson.D{
				{{Key: "_id", Value: int32(1)}, {Key: "u", Value: int32(1)}},
				{{Key: "_id", Value: int32(2)}, {Key: "u", Value: int32(1)}},
				{{Key: "_id", Value: int32(3)}, {Key: "u", Value: int32(3)}},
			},
			want: wantWrite{n: 2, errors: []wantError{{1, 11000}}, ids: []any{int32(1), int32(3)}},
		},
	}
}

// TestConformance sends each command of the table to the dev server, both
// with RunCommand (to see the raw reply) and as the collection's BulkWrite
// (to see what the driver makes of it), and checks MongoDB's documented
// reply and the collection's contents afterwards.
func TestConformance(t *testing.T) {
	s := startServer(t, devserver.Config{})
	db := connect(t, s.URI()).Database("conformance")
	for i, tc := range conformanceCases() {
		t.Run(tc.name, func(t *testing.T) {
			t.Run("RunCommand", func(t *testing.T) {
				coll := prepare(t, db, fmt.Sprintf("c%d-raw", i), tc)
				cmd := bson.D{
					{Key: tc.command, Value: coll.Name()},
					{Key: statementsField(tc.command), Value: tc.statements},
					{Key: "ordered", Value: tc.ordered},
				}
				raw, _ := rawReply(t, db, cmd)
				checkReply(t, tc, raw)
				checkContents(t, tc, coll)
			})
			t.Run("BulkWrite", func(t *testing.T) {
				coll := prepare(t, db, fmt.Sprintf("c%d-bulk", i), tc)
				res, err := coll.BulkWrite(t.Context(), models(t, tc), options.BulkWrite().SetOrdered(tc.ordered))
				checkBulkWrite(t, tc, res, err)
				checkContents(t, tc, coll)
			})
		})
	}
}

func statementsField(command string) string {
	switch command {
	case "update":
		return "updates"
	case "delete":
		return "deletes"
	default:
		return "documents"
	}
}

// prepare returns a fresh collection holding tc's setup documents and index.
func prepare(t *testing.T, db *mongo.Database, name string, tc writeCase) *mongo.Collection {
	t.Helper()
	coll := db.Collection(name)
	require.NoError(t, coll.Drop(t.Context()))
	if tc.uniqueOn != "" {
		_, err := coll.Indexes().CreateOne(t.Context(), mongo.IndexModel{
			Keys:    bson.D{{Key: tc.uniqueOn, Value: 1}},
			Options: options.Index().SetUnique(true),
		})
		require.NoError(t, err)
	}
	if len(tc.setup) > 0 {
		_, err := coll.InsertMany(t.Context(), tc.setup)
		require.NoError(t, err)
	}
	return coll
}

// rawReply runs cmd and returns the server's reply, whether it reports
// success, write errors or a command error.
func rawReply(t *testing.T, db *mongo.Database, cmd bson.D) (bson.Raw, error) {
	t.Helper()
	raw, err := db.RunCommand(t.Context(), cmd).Raw()
	var we mongo.WriteException
	var ce mongo.CommandError
	switch {
	case errors.As(err, &we):
		raw = we.Raw
	case errors.As(err, &ce):
		raw = ce.Raw
	case err != nil:
		require.NoError(t, err)
	}
	require.NotEmpty(t, raw, "no reply to %v", cmd)
	return raw, err
}

// writeReply is a write command's reply as MongoDB documents it.
type writeReply struct {
	OK        float64 `bson:"ok"`
	N         *int32  `bson:"n"`
	NModified *int32  `bson:"nModified"`
	Upserted  []struct {
		Index int32         `bson:"index"`
		ID    bson.RawValue `bson:"_id"`
	} `bson:"upserted"`
	WriteErrors []struct {
		Index  int32  `bson:"index"`
		Code   int32  `bson:"code"`
		Errmsg string `bson:"errmsg"`
	} `bson:"writeErrors"`
	WriteConcernError bson.Raw `bson:"writeConcernError"`
}

func checkReply(t *testing.T, tc writeCase, raw bson.Raw) {
	t.Helper()
	msg := fmt.Sprintf("reply %s; MongoDB's: %v", raw, tc.manual)
	var got writeReply
	require.NoError(t, bson.Unmarshal(raw, &got), msg)
	assert.Equal(t, 1.0, got.OK, msg)
	if assert.NotNil(t, got.N, "n, %s", msg) {
		assert.Equal(t, tc.want.n, *got.N, "n, %s", msg)
	}
	if tc.command == "update" {
		if assert.NotNil(t, got.NModified, "nModified, %s", msg) {
			assert.Equal(t, tc.want.nModified, *got.NModified, "nModified, %s", msg)
		}
	} else {
		assert.Nil(t, got.NModified, "nModified is update's only, %s", msg)
	}

	gotUpserted := make(map[int]any)
	for _, u := range got.Upserted {
		gotUpserted[int(u.Index)] = u.ID
	}
	assert.Len(t, got.Upserted, len(tc.want.upserted), "upserted, %s", msg)
	for index, want := range tc.want.upserted {
		v, ok := gotUpserted[index].(bson.RawValue)
		if !assert.True(t, ok, "no upserted entry for statement %d, %s", index, msg) {
			continue
		}
		if want == generatedID {
			assert.Equal(t, bson.TypeObjectID, v.Type, "upserted %d, %s", index, msg)
			continue
		}
		assert.True(t, v.Equal(rawValue(t, want)), "upserted %d is %v, want %v, %s", index, v, want, msg)
	}
	if tc.want.upserted == nil {
		assert.Nil(t, raw.Lookup("upserted").Value, "no upserted field when nothing is upserted, %s", msg)
	}

	var gotErrors []wantError
	for _, we := range got.WriteErrors {
		gotErrors = append(gotErrors, wantError{int(we.Index), we.Code})
		assert.NotEmpty(t, we.Errmsg, "errmsg, %s", msg)
	}
	assert.Equal(t, tc.want.errors, gotErrors, "writeErrors, %s", msg)
	assert.Nil(t, got.WriteConcernError, msg)
}

func rawValue(t *testing.T, v any) bson.RawValue {
	t.Helper()
	typ, data, err := bson.MarshalValue(v)
	require.NoError(t, err)
	return bson.RawValue{Type: typ, Value: data}
}

// models returns tc's statements as the driver's write models.
func models(t *testing.T, tc writeCase) []mongo.WriteModel {
	t.Helper()
	var out []mongo.WriteModel
	for _, s := range tc.statements {
		switch tc.command {
		case "update":
			upsert, _ := lookup(s, "upsert").(bool)
			if multi, _ := lookup(s, "multi").(bool); multi {
				out = append(out, mongo.NewUpdateManyModel().SetFilter(lookup(s, "q")).SetUpdate(lookup(s, "u")).SetUpsert(upsert))
			} else {
				out = append(out, mongo.NewUpdateOneModel().SetFilter(lookup(s, "q")).SetUpdate(lookup(s, "u")).SetUpsert(upsert))
			}
		case "delete":
			if lookup(s, "limit") == int32(1) {
				out = append(out, mongo.NewDeleteOneModel().SetFilter(lookup(s, "q")))
			} else {
				out = append(out, mongo.NewDeleteManyModel().SetFilter(lookup(s, "q")))
			}
		case "insert":
			out = append(out, mongo.NewInsertOneModel().SetDocument(s))
		default:
			t.Fatalf("unknown command %q", tc.command)
		}
	}
	return out
}

// lookup returns the value of key in d, or nil.
func lookup(d bson.D, key string) any {
	for _, e := range d {
		if e.Key == key {
			return e.Value
		}
	}
	return nil
}

// checkBulkWrite checks what the driver makes of the reply: the counts, the
// upserted _ids keyed by statement index and the write errors' indexes.
// The driver (v2.9.3, mongo/bulk_write.go) makes MatchedCount the reply's n
// less the upserted entries (except when an ordered bulk write stops at a
// write error: it returns before subtracting, bulk_write.go:81-94),
// ModifiedCount its nModified, and keys UpsertedIDs by upserted.index.
func checkBulkWrite(t *testing.T, tc writeCase, res *mongo.BulkWriteResult, err error) {
	t.Helper()
	msg := fmt.Sprintf("MongoDB's reply: %v", tc.manual)
	if len(tc.want.errors) == 0 {
		require.NoError(t, err, msg)
	} else {
		var bwe mongo.BulkWriteException
		require.ErrorAs(t, err, &bwe, msg)
		var got []wantError
		for _, we := range bwe.WriteErrors {
			got = append(got, wantError{we.Index, int32(we.Code)})
		}
		assert.Equal(t, tc.want.errors, got, "BulkWriteException.WriteErrors, %s", msg)
	}
	require.NotNil(t, res, msg)
	switch tc.command {
	case "update":
		matched := int64(tc.want.n)
		if !tc.ordered || len(tc.want.errors) == 0 {
			matched -= int64(len(tc.want.upserted))
		}
		assert.Equal(t, matched, res.MatchedCount, "MatchedCount, %s", msg)
		assert.Equal(t, int64(tc.want.nModified), res.ModifiedCount, "ModifiedCount, %s", msg)
		assert.Equal(t, int64(len(tc.want.upserted)), res.UpsertedCount, "UpsertedCount, %s", msg)
		assert.Len(t, res.UpsertedIDs, len(tc.want.upserted), "UpsertedIDs, %s", msg)
		for index, want := range tc.want.upserted {
			got, ok := res.UpsertedIDs[int64(index)]
			if !assert.True(t, ok, "UpsertedIDs has no statement %d: %v, %s", index, res.UpsertedIDs, msg) {
				continue
			}
			if want == generatedID {
				assert.IsType(t, bson.ObjectID{}, got, "UpsertedIDs[%d], %s", index, msg)
				continue
			}
			assert.Equal(t, want, got, "UpsertedIDs[%d], %s", index, msg)
		}
	case "delete":
		assert.Equal(t, int64(tc.want.n), res.DeletedCount, "DeletedCount, %s", msg)
	case "insert":
		assert.Equal(t, int64(tc.want.n), res.InsertedCount, "InsertedCount, %s", msg)
	}
}

// checkContents checks the collection after the command.
func checkContents(t *testing.T, tc writeCase, coll *mongo.Collection) {
	t.Helper()
	if tc.want.ids != nil {
		var docs []bson.Raw
		cur, err := coll.Find(t.Context(), bson.D{})
		require.NoError(t, err)
		require.NoError(t, cur.All(t.Context(), &docs))
		var got []any
		for _, d := range docs {
			var v any
			require.NoError(t, d.Lookup("_id").Unmarshal(&v))
			got = append(got, v)
		}
		slices.SortFunc(got, func(a, b any) int { return compareIDs(a, b) })
		assert.Equal(t, tc.want.ids, got, "_ids in the collection afterwards")
	} else if tc.want.left > 0 {
		n, err := coll.CountDocuments(t.Context(), bson.D{})
		require.NoError(t, err)
		assert.Equal(t, tc.want.left, n, "documents left in the collection")
	}
	for docID, fields := range tc.want.fields {
		raw, err := coll.FindOne(t.Context(), bson.D{{Key: "_id", Value: docID}}).Raw()
		require.NoError(t, err, "document %v", docID)
		for _, f := range fields {
			assert.True(t, raw.Lookup(f.Key).Equal(rawValue(t, f.Value)), "document %v: %s is %v, want %v", docID, f.Key, raw.Lookup(f.Key), f.Value)
		}
	}
	for docID, field := range tc.want.absent {
		raw, err := coll.FindOne(t.Context(), bson.D{{Key: "_id", Value: docID}}).Raw()
		require.NoError(t, err, "document %v", docID)
		_, err = raw.LookupErr(field)
		assert.Error(t, err, "document %v must have no %s: %s", docID, field, raw)
	}
}

// compareIDs orders the _ids the tests use: int32s, then strings.
func compareIDs(a, b any) int {
	ai, aInt := a.(int32)
	bi, bInt := b.(int32)
	switch {
	case aInt && bInt:
		return int(ai) - int(bi)
	case aInt:
		return -1
	case bInt:
		return 1
	}
	as, _ := a.(string)
	bs, _ := b.(string)
	switch {
	case as < bs:
		return -1
	case as > bs:
		return 1
	}
	return 0
}

// TestConformanceCommandError checks that a command whose own fields are
// refused gets MongoDB's reply to a command error, {ok: 0, errmsg, code},
// and that none of its statements runs.
// manualCommandErrors; manualDeleteFields: ordered is a boolean.
func TestConformanceCommandError(t *testing.T) {
	s := startServer(t, devserver.Config{})
	coll := collection(t, connect(t, s.URI()), id(int32(1)), id(int32(2)))

	raw, err := rawReply(t, coll.Database(), bson.D{
		{Key: "delete", Value: coll.Name()},
		{Key: "deletes", Value: bson.A{del(id(int32(1)), 1), del(id(int32(2)), 1)}},
		{Key: "ordered", Value: "yes"},
	})
	var ce mongo.CommandError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, int32(14), ce.Code, "TypeMismatch, as MongoDB: %s", raw)
	ok, _ := raw.Lookup("ok").AsFloat64OK()
	assert.Zero(t, ok)
	assert.NotEmpty(t, raw.Lookup("errmsg").StringValue())
	_, err = raw.LookupErr("writeErrors")
	assert.Error(t, err, "a command error has no writeErrors: %s", raw)

	n, err := coll.CountDocuments(t.Context(), bson.D{})
	require.NoError(t, err)
	assert.Equal(t, int64(2), n, "no statement of a refused command runs")
}
