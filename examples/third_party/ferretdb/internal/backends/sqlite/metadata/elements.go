// Copyright 2021 FerretDB Inc.
//
// Licensed under the Apache License, Version 2.0 (the "License");
// you may not use this file except in compliance with the License.
// You may obtain a copy of the License at
//
//     http://www.apache.org/licenses/LICENSE-2.0
//
// Unless required by applicable law or agreed to in writing, software
// distributed under the License is distributed on an "AS IS" BASIS,
// WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
// See the License for the specific language governing permissions and
// limitations under the License.

package metadata

// This file is twopc's dev server's patch: an index's elements table, the
// SQLite counterpart of MongoDB's multikey index for the elements of an
// array held by the index's first key.
//
// FerretDB's indexes are SQLite expression indexes on a field's JSON value,
// which for an array is the whole array, so an equality on one element
// ({accounts: key}) could only be read by the range of every array-valued
// entry. For a secondary index whose first key is a plain top-level field
// name (letters, digits and _), the registry keeps beside the expression
// index a table of (e, k, id) rows, one for each string or boolean element
// of every array the first key holds:
//
//   - e: the element, as SQLite's json_each gives it: the string's text
//     (SQLite decodes the JSON string), or 1 for true and 0 for false
//     (numbers and other types are not stored, so 1 and 0 mean booleans);
//   - k: the document's value of the index's second key, if the index has
//     one and its name is plain too: its JSON number (sjson stores a date
//     as an integer, its milliseconds since the epoch), the text 'array'
//     if it is an array, NULL otherwise (missing, or another type);
//   - id: the document's _id as the _id index holds it (IDColumn's value).
//
// Triggers on the collection's table keep it, in the same transaction as
// each write: after an insert, the new document's rows are added; after a
// delete, the old document's rows are removed; after an update that
// writes the key column (columns.go) of the first key or of the second one
// of a document that held or holds an array there, the old rows are
// replaced by the new ones (an update that writes neither fires nothing).
// The table is made and filled from the collection's documents when the
// index is created if a document then holds an array in its first key,
// or else before the first write of one (the sqlite package's
// needElements, Registry.IndexesElements), in the transaction that
// creates the triggers, and dropped with the index or the collection. A
// collection's rename keeps its table, so nothing changes then. Documents
// whose first key is missing, a scalar, a document or an empty array have
// no rows: the scalar ones are read by the index itself (see
// indexPushdown in the sqlite package).
//
// The table is keyed by _id, not by rowid: VACUUM (compact) may renumber
// the rowids of a table without an INTEGER PRIMARY KEY.

import (
	"context"
	"fmt"
	"hash/fnv"
	"regexp"
	"strings"

	"github.com/FerretDB/FerretDB/internal/backends"
	"github.com/FerretDB/FerretDB/internal/util/fsql"
	"github.com/FerretDB/FerretDB/internal/util/lazyerrors"
	"github.com/FerretDB/FerretDB/internal/util/must"
)

// ElementsArray is the k of an elements table's row whose document's
// second key holds an array: a read by a range of the second key must
// take these rows too, since MongoDB compares an array by its elements.
const ElementsArray = "array"

// plainField matches the field names an elements table is kept for: they
// are written into JSON paths and SQL without quoting concerns.
var plainField = regexp.MustCompile(`^[A-Za-z0-9_]+$`)

// elementsFields returns the index's first key and the second key (or "")
// an elements table would be kept for, and whether one is kept at all: a
// secondary index whose first key is a plain top-level field name. The
// second key is used only if it is plain too.
func elementsFields(index IndexInfo) (first, second string, ok bool) {
	if !index.HasColumns() || index.Key[0].Field == "_id" || !plainField.MatchString(index.Key[0].Field) {
		return "", "", false
	}

	if len(index.Key) > 1 && plainField.MatchString(index.Key[1].Field) {
		second = index.Key[1].Field
	}

	return index.Key[0].Field, second, true
}

// MayHaveElements reports whether an elements table may be kept for index.
func (index IndexInfo) MayHaveElements() bool {
	_, _, ok := elementsFields(index)
	return ok
}

// jsonPath returns the SQL literal of the JSON path of a plain top-level field.
func jsonPath(field string) string {
	return `'$."` + field + `"'`
}

// elementsKeyExpr returns the SQL expression of an elements row's k for the
// document in row (NEW, OLD or a table alias): see the file's comment.
func elementsKeyExpr(row, second string) string {
	if second == "" {
		return "NULL"
	}

	doc := row + "." + DefaultColumn
	p := jsonPath(second)

	return fmt.Sprintf(
		`(CASE json_type(%[1]s, %[2]s) WHEN 'integer' THEN json_extract(%[1]s, %[2]s) `+
			`WHEN 'real' THEN json_extract(%[1]s, %[2]s) WHEN 'array' THEN '%[3]s' END)`,
		doc, p, ElementsArray,
	)
}

// elementsSelect returns the SELECT of the elements rows of the documents
// of row (a table alias, or NEW, with from naming the tables to read).
func elementsSelect(row, from, first, second string) string {
	doc := row + "." + DefaultColumn
	return fmt.Sprintf(
		`SELECT j.value, %s, %s->'_id' FROM %s json_each(%s, %s) AS j `+
			`WHERE json_type(%s, %s) = 'array' AND j.type IN ('text', 'true', 'false')`,
		elementsKeyExpr(row, second), doc, from, doc, jsonPath(first), doc, jsonPath(first),
	)
}

// elementsNames returns the names of the elements table of the index named
// indexName on tableName, of its two indexes and of its three triggers, the
// attempt-th candidate (see createElements).
func elementsNames(tableName, indexName string, attempt uint32) []string {
	h := fnv.New32a()
	must.NotFail(h.Write([]byte(tableName + "\x00" + indexName)))

	clean := func(s string) string {
		return strings.Map(func(r rune) rune {
			if r < 128 && (r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
				return r
			}
			return '_'
		}, s)
	}

	table := fmt.Sprintf("%selements_%s_%s_%08x", backends.ReservedPrefix, clean(tableName), clean(indexName), h.Sum32()+attempt)

	return []string{table, table + "_ek", table + "_id", table + "_ins", table + "_upd", table + "_del"}
}

// createElements creates, fills and starts keeping the elements table of
// index on c's table (see the file's comment), if one is kept for it, and
// records it in index. All of it is done in one transaction: a write to
// the collection commits either before it, and is in the table by the
// fill, or after it, and is in it by the triggers.
func createElements(ctx context.Context, db *fsql.DB, c *Collection, index *IndexInfo) error {
	first, second, ok := elementsFields(*index)
	if !ok {
		return nil
	}

	// Names no table, index or trigger has yet (SQLite's names are
	// case-insensitive, and a collection's table is its name in lower
	// case). The registry's lock, held by the caller, keeps other
	// collections and indexes from being made meanwhile.
	var names []string

	for attempt := uint32(0); ; attempt++ {
		names = elementsNames(c.TableName, index.Name, attempt)

		placeholders := make([]string, len(names))
		args := make([]any, len(names))

		for i, n := range names {
			placeholders[i] = "lower(?)"
			args[i] = n
		}

		q := fmt.Sprintf(`SELECT count(*) FROM sqlite_schema WHERE lower(name) IN (%s)`, strings.Join(placeholders, ", "))

		var taken int
		if err := db.QueryRowContext(ctx, q, args...).Scan(&taken); err != nil {
			return lazyerrors.Error(err)
		}

		if taken == 0 {
			break
		}
	}

	// The transaction begins with a write, so it holds SQLite's write lock
	// from its first statement: the fill reads every write committed
	// before it, and the triggers see every write after it.
	return db.InTransaction(ctx, func(tx *fsql.Tx) error {
		table, ekIndex, idIndex, ins, upd, del := names[0], names[1], names[2], names[3], names[4], names[5]
		doc := func(row string) string { return row + "." + DefaultColumn }
		p1 := jsonPath(first)

		// The key columns of the first key, and of the second if k holds it.
		cols := index.Columns[:1]
		if second != "" {
			cols = index.Columns[:2]
		}

		quoted := make([]string, len(cols))
		changed := make([]string, len(cols))

		for i, col := range cols {
			quoted[i] = fmt.Sprintf("%q", col)
			changed[i] = fmt.Sprintf("OLD.%[1]q IS NOT NEW.%[1]q", col)
		}

		qs := []string{
			// No column types: e keeps SQLite's type (text for a string,
			// integer for a boolean), so that a string never equals a boolean.
			fmt.Sprintf(`CREATE TABLE %q (e, k, id)`, table),
			fmt.Sprintf(`CREATE INDEX %q ON %q (e, k, id)`, ekIndex, table),
			fmt.Sprintf(`CREATE INDEX %q ON %q (id)`, idIndex, table),
			fmt.Sprintf(
				`CREATE TRIGGER %q AFTER INSERT ON %q WHEN json_type(%s, %s) = 'array' BEGIN `+
					`INSERT INTO %q (e, k, id) %s; END`,
				ins, c.TableName, doc("NEW"), p1,
				table, elementsSelect("NEW", "", first, second),
			),
			fmt.Sprintf(
				`CREATE TRIGGER %q AFTER DELETE ON %q WHEN json_type(%s, %s) = 'array' BEGIN `+
					`DELETE FROM %q WHERE id = %s->'_id'; END`,
				del, c.TableName, doc("OLD"), p1,
				table, doc("OLD"),
			),
			// Fired only by a statement that writes a key column it reads
			// (columns.go): the upkeep of the key columns writes one only
			// when its value changes, and the _id of a document never does.
			fmt.Sprintf(
				`CREATE TRIGGER %q AFTER UPDATE OF %s ON %q `+
					`WHEN (json_type(OLD.%[4]q) = 'array' OR json_type(NEW.%[4]q) = 'array') `+
					`AND (%[5]s) BEGIN `+
					`DELETE FROM %[6]q WHERE id = %[7]s->'_id'; `+
					`INSERT INTO %[6]q (e, k, id) %[8]s; END`,
				upd, strings.Join(quoted, ", "), c.TableName, index.Columns[0],
				strings.Join(changed, " OR "),
				table, doc("OLD"), elementsSelect("NEW", "", first, second),
			),
			fmt.Sprintf(`INSERT INTO %q (e, k, id) %s`, table, elementsSelect("t", fmt.Sprintf("%q AS t,", c.TableName), first, second)),
		}

		for _, q := range qs {
			if _, err := tx.ExecContext(ctx, q); err != nil {
				return lazyerrors.Error(err)
			}
		}

		index.Elements = table
		index.ElementsKey = second

		return nil
	})
}

// dropElements drops index's elements table, if it has one, and the
// triggers that keep it; the collection's own table is left as it is.
func dropElements(ctx context.Context, db *fsql.DB, index IndexInfo) error {
	if index.Elements == "" {
		return nil
	}

	table := index.Elements

	return db.InTransaction(ctx, func(tx *fsql.Tx) error {
		for _, suffix := range []string{"_ins", "_upd", "_del"} {
			if _, err := tx.ExecContext(ctx, fmt.Sprintf(`DROP TRIGGER IF EXISTS %q`, table+suffix)); err != nil {
				return lazyerrors.Error(err)
			}
		}

		if _, err := tx.ExecContext(ctx, fmt.Sprintf(`DROP TABLE IF EXISTS %q`, table)); err != nil {
			return lazyerrors.Error(err)
		}

		return nil
	})
}
