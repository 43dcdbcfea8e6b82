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

// This file is twopc's dev server's patch: the key columns, which hold the
// values a collection's secondary indexes read, so that an update
// maintains only the indexes whose values it changes (issue 49 of twopc).
//
// Stock FerretDB v1.24 makes each index an SQLite expression index on the
// JSON column (_ferretdb_sjson->"field"). Every update rewrites that
// column, and SQLite maintains an index during an UPDATE whenever the
// statement's SET list names a column the index reads, whatever the values:
// every update maintained every index (and fired every "AFTER UPDATE"
// trigger of the elements tables, elements.go). MongoDB maintains only the
// index keys that changed.
//
// So each key of a secondary index (every index but _id's own) has a
// column of the collection's table, its key column (KeyColumn), holding
// exactly the value the expression index read: the JSON text SQLite's ->
// gives for the field (NULL if it is missing), in a column of type ANY, so
// that comparisons mean what they meant on the expression. The SQLite
// index is made on the key columns; indexes that share a field share its
// column. The columns are written:
//
//   - by the collection's inserts (collection.go's InsertAll), in the
//     INSERT itself;
//   - on an update, by collection.go's UpdateAll, which knows the new
//     values of most fields (keyTexts): an update guarded by the key
//     columns holding them already writes the JSON column alone; if one
//     key changed, one update writes the JSON column and that key column.
//     Either tags the row (KeysVersionColumn, UpdateKeysTag);
//   - otherwise, by the trigger "_ferretdb_keys_<table>_upd": AFTER
//     UPDATE OF _ferretdb_sjson, unless the statement tagged the row, if
//     a key column no longer holds its field's value, an UPDATE of that
//     column alone, for that row, and only if its value changed (but
//     _id's, which an update never changes).
//
//     So an update that changes no indexed field names no key column,
//     and SQLite maintains no index but those on the JSON column (_id's);
//     a state move maintains the indexes on state;
//   - by the trigger "_ferretdb_keys_<table>_ins", AFTER INSERT, the same
//     way, for an insert whose statement was made before a key column was
//     (an insert racing an index's creation): otherwise it does nothing.
//
// The columns are added (ALTER TABLE ... ADD COLUMN) and filled, and the
// triggers made again for the columns in use, in the transaction that
// makes an index; dropping the last index reading a column stops its
// upkeep and sets it to NULL (the column stays: a statement made before
// would still name it).

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"

	"github.com/FerretDB/FerretDB/internal/backends"
	"github.com/FerretDB/FerretDB/internal/util/fsql"
	"github.com/FerretDB/FerretDB/internal/util/lazyerrors"
	"github.com/FerretDB/FerretDB/internal/util/must"
)

// KeyColumn returns the name of the key column of an index key on field.
func KeyColumn(field string) string {
	h := fnv.New32a()
	must.NotFail(h.Write([]byte(field)))

	clean := strings.Map(func(r rune) rune {
		if r < 128 && (r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return r
		}
		return '_'
	}, field)

	return fmt.Sprintf("%skey_%s_%08x", backends.ReservedPrefix, clean, h.Sum32())
}

// KeyExpr returns the SQL expression of field's value as an index reads
// it, from the JSON column of row (NEW, OLD, a table alias, or "" for the
// table's own): the same value as stock FerretDB's index expression
// (_ferretdb_sjson->"a"->"b" for a.b), written with string literals.
func KeyExpr(row, field string) string {
	expr := DefaultColumn
	if row != "" {
		expr = row + "." + expr
	}

	for _, f := range strings.Split(field, ".") {
		label := f
		if (strings.HasPrefix(f, "[") || strings.HasPrefix(f, "$")) && !strings.Contains(f, `"`) {
			// SQLite reads a right operand of -> that starts so as a
			// path ("[1]": the array's element 1), not as a label.
			label = `$."` + f + `"`
		}
		expr += "->'" + strings.ReplaceAll(label, "'", "''") + "'"
	}

	return expr
}

// KeyField is a key column and the field whose value it holds.
type KeyField struct {
	Column string
	Field  string
}

// KeysVersionColumn is the column UpdateAll's guarded update sets (see
// UpdateKeysTag): the update trigger skips the check of the key columns
// for a row whose value it has just changed to one with the trigger's tag.
const KeysVersionColumn = backends.ReservedPrefix + "keys_version"

// UpdateKeyFields returns the key columns of indexes an update may change:
// KeyFields but _id's.
func UpdateKeyFields(indexes []IndexInfo) []KeyField {
	return slices.DeleteFunc(KeyFields(indexes), func(k KeyField) bool { return k.Field == "_id" })
}

// UpdateKeysTag returns the tag of the key columns keys (UpdateKeyFields):
// eight hexadecimal digits. UpdateAll's guarded update, which checks that
// each of keys already holds the new document's value, sets
// KeysVersionColumn to the tag, a colon and a value of its own; the update
// trigger, made for the same columns, skips its check for such a row. A
// writer whose columns are not the trigger's (its metadata read before an
// index was made) has another tag, and is checked.
func UpdateKeysTag(keys []KeyField) string {
	h := fnv.New32a()
	for _, k := range keys {
		must.NotFail(h.Write([]byte(k.Column + "\x00" + k.Field + "\x00")))
	}

	return fmt.Sprintf("%08x", h.Sum32())
}

// HasColumns reports whether index is read from key columns (see the
// file's comment): every index made by this patch but _id's.
func (index IndexInfo) HasColumns() bool {
	return len(index.Columns) == len(index.Key) && len(index.Key) > 0
}

// KeyFields returns the key columns indexes read, each once, in the order
// of the indexes and their keys.
func KeyFields(indexes []IndexInfo) []KeyField {
	var res []KeyField

	for _, index := range indexes {
		if !index.HasColumns() {
			continue
		}

		for i, col := range index.Columns {
			if !slices.ContainsFunc(res, func(k KeyField) bool { return k.Column == col }) {
				res = append(res, KeyField{Column: col, Field: index.Key[i].Field})
			}
		}
	}

	return res
}

// keysTriggers returns the names of the triggers that keep the key columns
// of tableName.
func keysTriggers(tableName string) (upd, ins string) {
	t := backends.ReservedPrefix + "keys_" + tableName
	return t + "_upd", t + "_ins"
}

// setKeysTriggers makes the triggers that keep the key columns keys of c's
// table again (none if there are none).
func setKeysTriggers(ctx context.Context, tx *fsql.Tx, c *Collection, keys []KeyField) error {
	upd, ins := keysTriggers(c.TableName)

	for _, name := range []string{upd, ins} {
		if _, err := tx.ExecContext(ctx, fmt.Sprintf(`DROP TRIGGER IF EXISTS %q`, name)); err != nil {
			return lazyerrors.Error(err)
		}
	}

	if len(keys) == 0 {
		return nil
	}

	// The WHEN clause and the body of a trigger keeping keys.
	clauses := func(keys []KeyField) (string, string) {
		when := make([]string, len(keys))
		set := make([]string, len(keys))

		for i, k := range keys {
			expr := KeyExpr("NEW", k.Field)
			when[i] = fmt.Sprintf(`NEW.%q IS NOT (%s)`, k.Column, expr)
			set[i] = fmt.Sprintf(`%q = (%s)`, k.Column, expr)
		}

		// Every key column in one UPDATE: written one at a time, a unique
		// index over two of them would be checked on a row holding the
		// new value of one and the old value of the other (another
		// document's pair, a false duplicate key), where MongoDB checks
		// the document as the update leaves it. This path (the plain
		// update, or a row written from outdated metadata) so maintains
		// every key column's index; UpdateAll's guarded and one-column
		// updates, which carry the library's writes, only those changed.
		body := fmt.Sprintf(`UPDATE %q SET %s WHERE rowid = NEW.rowid;`, c.TableName, strings.Join(set, ", "))

		return strings.Join(when, " OR "), body
	}

	when, body := clauses(keys)
	q := fmt.Sprintf(`CREATE TRIGGER %q AFTER INSERT ON %q WHEN %s BEGIN %s END`, ins, c.TableName, when, body)

	if _, err := tx.ExecContext(ctx, q); err != nil {
		return lazyerrors.Error(err)
	}

	// An update never changes a document's _id (UpdateAll finds the row
	// by it): the update trigger does not check it.
	keys = slices.DeleteFunc(slices.Clone(keys), func(k KeyField) bool { return k.Field == "_id" })
	if len(keys) == 0 {
		return nil
	}

	// A row UpdateAll's guarded update has just written with this
	// trigger's tag holds the new values already (UpdateKeysTag): the
	// check, which parses the document's JSON, is skipped. The AND is
	// evaluated left to right, and stops at the first false term.
	when, body = clauses(keys)
	when = fmt.Sprintf(`NOT (NEW.%[1]q IS NOT OLD.%[1]q AND substr(NEW.%[1]q, 1, 9) IS '%[2]s:') AND (%[3]s)`,
		KeysVersionColumn, UpdateKeysTag(keys), when)
	q = fmt.Sprintf(`CREATE TRIGGER %q AFTER UPDATE OF %s ON %q WHEN %s BEGIN %s END`, upd, DefaultColumn, c.TableName, when, body)

	if _, err := tx.ExecContext(ctx, q); err != nil {
		return lazyerrors.Error(err)
	}

	return nil
}

// tableColumns returns the names of the columns of c's table.
func tableColumns(ctx context.Context, tx *fsql.Tx, c *Collection) ([]string, error) {
	rows, err := tx.QueryContext(ctx, `SELECT name FROM pragma_table_info(?)`, c.TableName)
	if err != nil {
		return nil, lazyerrors.Error(err)
	}
	defer rows.Close()

	var res []string

	for rows.Next() {
		var name string
		if err = rows.Scan(&name); err != nil {
			return nil, lazyerrors.Error(err)
		}

		res = append(res, name)
	}

	if err = rows.Err(); err != nil {
		return nil, lazyerrors.Error(err)
	}

	return res, nil
}

// createIndex makes index on c's table, on its key columns (see the file's
// comment), and records them in index: in one transaction, which begins
// with a write and so holds SQLite's write lock throughout, the columns
// not yet kept are added or filled, the triggers made again for them, and
// the index made. Then it makes the index's elements table if a document
// holds an array in its first key (elements.go).
func createIndex(ctx context.Context, db *fsql.DB, c *Collection, index *IndexInfo) error {
	columns := make([]string, len(index.Key))
	for i, key := range index.Key {
		columns[i] = KeyColumn(key.Field)
	}

	err := db.InTransaction(ctx, func(tx *fsql.Tx) error {
		kept := KeyFields(c.Settings.Indexes)

		// The first statement is a write, so that the transaction holds
		// the write lock before it reads the table's columns: a write to
		// the collection commits before the fill, or after the triggers.
		q := fmt.Sprintf(`UPDATE %q SET settings = settings WHERE table_name = ?`, metadataTableName)
		if _, err := tx.ExecContext(ctx, q, c.TableName); err != nil {
			return lazyerrors.Error(err)
		}

		existing, err := tableColumns(ctx, tx, c)
		if err != nil {
			return lazyerrors.Error(err)
		}

		if !slices.Contains(existing, KeysVersionColumn) {
			q = fmt.Sprintf(`ALTER TABLE %q ADD COLUMN %q ANY`, c.TableName, KeysVersionColumn)
			if _, err = tx.ExecContext(ctx, q); err != nil {
				return lazyerrors.Error(err)
			}
		}

		keys := slices.Clone(kept)

		for i, col := range columns {
			if slices.ContainsFunc(keys, func(k KeyField) bool { return k.Column == col }) {
				continue
			}

			keys = append(keys, KeyField{Column: col, Field: index.Key[i].Field})

			if !slices.Contains(existing, col) {
				q = fmt.Sprintf(`ALTER TABLE %q ADD COLUMN %q ANY`, c.TableName, col)
				if _, err = tx.ExecContext(ctx, q); err != nil {
					return lazyerrors.Error(err)
				}

				existing = append(existing, col)
			}

			q = fmt.Sprintf(`UPDATE %q SET %q = (%s)`, c.TableName, col, KeyExpr("", index.Key[i].Field))
			if _, err = tx.ExecContext(ctx, q); err != nil {
				return lazyerrors.Error(err)
			}
		}

		if err = setKeysTriggers(ctx, tx, c, keys); err != nil {
			return lazyerrors.Error(err)
		}

		q = "CREATE "
		if index.Unique {
			q += "UNIQUE "
		}

		parts := make([]string, len(columns))
		for i, col := range columns {
			parts[i] = fmt.Sprintf("%q", col)
			if index.Key[i].Descending {
				parts[i] += " DESC"
			}
		}

		q += fmt.Sprintf("INDEX %q ON %q (%s)", c.TableName+"_"+index.Name, c.TableName, strings.Join(parts, ", "))
		if _, err = tx.ExecContext(ctx, q); err != nil {
			return lazyerrors.Error(err)
		}

		return nil
	})
	if err != nil {
		return err
	}

	index.Columns = columns

	first, _, ok := elementsFields(*index)
	if !ok {
		return nil
	}

	var arrays int

	q := fmt.Sprintf(`SELECT count(*) FROM (SELECT 1 FROM %q WHERE json_type(%q) = 'array' LIMIT 1)`, c.TableName, KeyColumn(first))
	if err = db.QueryRowContext(ctx, q).Scan(&arrays); err != nil {
		return lazyerrors.Error(err)
	}

	if arrays == 0 {
		return nil
	}

	return createElements(ctx, db, c, index)
}

// dropKeys stops the upkeep of the key columns that only dropped read, of
// the indexes left in c, and sets them to NULL.
func dropKeys(ctx context.Context, db *fsql.DB, c *Collection, dropped IndexInfo) error {
	if !dropped.HasColumns() {
		return nil
	}

	keys := KeyFields(c.Settings.Indexes)

	return db.InTransaction(ctx, func(tx *fsql.Tx) error {
		if err := setKeysTriggers(ctx, tx, c, keys); err != nil {
			return lazyerrors.Error(err)
		}

		for _, col := range dropped.Columns {
			if slices.ContainsFunc(keys, func(k KeyField) bool { return k.Column == col }) {
				continue
			}

			q := fmt.Sprintf(`UPDATE %q SET %q = NULL WHERE %q IS NOT NULL`, c.TableName, col, col)
			if _, err := tx.ExecContext(ctx, q); err != nil {
				return lazyerrors.Error(err)
			}
		}

		return nil
	})
}
