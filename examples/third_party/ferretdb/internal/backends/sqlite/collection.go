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

package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"

	sqlite3 "modernc.org/sqlite"
	sqlite3lib "modernc.org/sqlite/lib"

	"github.com/FerretDB/FerretDB/internal/backends"
	"github.com/FerretDB/FerretDB/internal/backends/sqlite/metadata"
	"github.com/FerretDB/FerretDB/internal/handler/sjson"
	"github.com/FerretDB/FerretDB/internal/types"
	"github.com/FerretDB/FerretDB/internal/util/fsql"
	"github.com/FerretDB/FerretDB/internal/util/lazyerrors"
	"github.com/FerretDB/FerretDB/internal/util/must"
)

// collection implements backends.Collection interface.
type collection struct {
	r      *metadata.Registry
	dbName string
	name   string
}

// newCollection creates a new Collection.
func newCollection(r *metadata.Registry, dbName, name string) backends.Collection {
	return backends.CollectionContract(&collection{
		r:      r,
		dbName: dbName,
		name:   name,
	})
}

// Query implements backends.Collection interface.
func (c *collection) Query(ctx context.Context, params *backends.QueryParams) (*backends.QueryResult, error) {
	db := c.r.DatabaseGetExisting(ctx, c.dbName)
	if db == nil {
		return &backends.QueryResult{
			Iter: newQueryIterator(ctx, nil, params.OnlyRecordIDs),
		}, nil
	}

	meta := c.r.CollectionGet(ctx, c.dbName, c.name)
	if meta == nil {
		return &backends.QueryResult{
			Iter: newQueryIterator(ctx, nil, params.OnlyRecordIDs),
		}, nil
	}

	q := prepareSelectClause(meta.TableName, params.Comment, meta.Capped(), params.OnlyRecordIDs)

	var whereClause string
	var args []any

	// that logic should exist in one place
	// TODO https://github.com/FerretDB/FerretDB/issues/3235
	//
	// twopc's dev server: see idPushdown and indexPushdown.
	whereClause, args, _ = pushdown(params.Filter, meta.Settings.Indexes)

	q += whereClause
	q += prepareOrderByClause(params.Sort)

	if params.Limit != 0 {
		q += ` LIMIT ?`
		args = append(args, params.Limit)
	}

	// twopc's dev server: the statement is kept (fsql's prepared.go).
	rows, err := db.QueryPrepared(ctx, meta.TableName, q, args...)
	if err != nil {
		return nil, lazyerrors.Error(err)
	}

	return &backends.QueryResult{
		Iter: newQueryIterator(ctx, rows, params.OnlyRecordIDs),
	}, nil
}

// InsertAll implements backends.Collection interface.
func (c *collection) InsertAll(ctx context.Context, params *backends.InsertAllParams) (*backends.InsertAllResult, error) {
	if _, err := c.r.CollectionCreate(ctx, &metadata.CollectionCreateParams{DBName: c.dbName, Name: c.name}); err != nil {
		return nil, lazyerrors.Error(err)
	}

	db := c.r.DatabaseGetExisting(ctx, c.dbName)
	meta := c.r.CollectionGet(ctx, c.dbName, c.name)

	// twopc's dev server: see needElements.
	if names := needElements(meta.Settings.Indexes, params.Docs); len(names) > 0 {
		if err := c.r.IndexesElements(ctx, c.dbName, c.name, names); err != nil {
			return nil, lazyerrors.Error(err)
		}
	}

	batchSize := c.r.BatchSize
	if batchSize < 1 {
		panic("batch-size should be greater or equal to 1")
	}

	// twopc's dev server: the statements (one per batch size: full
	// batches and the last one) are kept (fsql's prepared.go), and taken
	// before the transaction, which holds a connection.
	type insertBatch struct {
		stmt *sql.Stmt
		q    string
		args []any
	}

	var batches []insertBatch

	for docs := params.Docs; len(docs) > 0; {
		var batch []*types.Document

		i := min(batchSize, len(docs))
		batch, docs = docs[:i], docs[i:]

		q, args, err := prepareInsertStatement(meta.TableName, meta.Capped(), batch, metadata.KeyFields(meta.Settings.Indexes))
		if err != nil {
			return nil, lazyerrors.Error(err)
		}

		stmt, err := db.Prepared(ctx, meta.TableName, q)
		if err != nil {
			return nil, lazyerrors.Error(err)
		}

		batches = append(batches, insertBatch{stmt: stmt, q: q, args: args})
	}

	err := db.InTransaction(ctx, func(tx *fsql.Tx) error {
		for _, b := range batches {
			if _, err := tx.ExecPrepared(ctx, b.stmt, b.q, b.args...); err != nil {
				var se *sqlite3.Error
				if errors.As(err, &se) && se.Code() == sqlite3lib.SQLITE_CONSTRAINT_UNIQUE {
					return backends.NewError(backends.ErrorCodeInsertDuplicateID, err)
				}

				return lazyerrors.Error(err)
			}
		}

		return nil
	})
	if err != nil {
		return nil, err
	}

	return new(backends.InsertAllResult), nil
}

// UpdateAll implements backends.Collection interface.
func (c *collection) UpdateAll(ctx context.Context, params *backends.UpdateAllParams) (*backends.UpdateAllResult, error) {
	var res backends.UpdateAllResult
	db := c.r.DatabaseGetExisting(ctx, c.dbName)
	if db == nil {
		return &res, nil
	}

	meta := c.r.CollectionGet(ctx, c.dbName, c.name)
	if meta == nil {
		return &res, nil
	}

	// twopc's dev server: see needElements.
	if names := needElements(meta.Settings.Indexes, params.Docs); len(names) > 0 {
		if err := c.r.IndexesElements(ctx, c.dbName, c.name, names); err != nil {
			return nil, lazyerrors.Error(err)
		}
	}

	// twopc's dev server: only the JSON column is written; the key
	// columns whose values change are written by a trigger
	// (metadata/columns.go).
	q := fmt.Sprintf(`UPDATE %q SET %s = ? WHERE %s = ?`, meta.TableName, metadata.DefaultColumn, metadata.IDColumn)

	// twopc's dev server: the statement is kept (fsql's prepared.go),
	// and taken before the transaction, which holds a connection.
	stmt, err := db.Prepared(ctx, meta.TableName, q)
	if err != nil {
		return nil, lazyerrors.Error(err)
	}

	// twopc's dev server: the guarded update, first (see keyTexts).
	keys := metadata.UpdateKeyFields(meta.Settings.Indexes)

	var guardedStmt, storedStmt *sql.Stmt

	sqls := keysUpdateSQLFor(meta.TableName, keys)
	guarded, stored, ones, tag := sqls.guarded, sqls.stored, sqls.ones, sqls.tag

	// The update of the JSON column and of the i-th key column alone.
	oneStmts := make([]*sql.Stmt, len(keys))

	if len(keys) > 0 {
		for i := range keys {
			if oneStmts[i], err = db.Prepared(ctx, meta.TableName, ones[i]); err != nil {
				return nil, lazyerrors.Error(err)
			}
		}

		if guardedStmt, err = db.Prepared(ctx, meta.TableName, guarded); err != nil {
			return nil, lazyerrors.Error(err)
		}

		if storedStmt, err = db.Prepared(ctx, meta.TableName, stored); err != nil {
			return nil, lazyerrors.Error(err)
		}
	}

	err = db.InTransaction(ctx, func(tx *fsql.Tx) error {
		for _, doc := range params.Docs {
			b, err := sjson.Marshal(doc)
			if err != nil {
				return lazyerrors.Error(err)
			}

			id, _ := doc.Get("_id")
			must.NotBeZero(id)

			arg := string(must.NotFail(sjson.MarshalSingleValue(id)))

			if texts, ok := keyTexts(doc, keys); ok && guardedStmt != nil {
				version := fmt.Sprintf("%s%016x", tag, rand.Uint64())
				args := append([]any{string(b), version, arg}, texts...)

				r, err := tx.ExecPrepared(ctx, guardedStmt, guarded, args...)
				if err != nil {
					return lazyerrors.Error(err)
				}

				ra, err := r.RowsAffected()
				if err != nil {
					return lazyerrors.Error(err)
				}

				if ra > 0 {
					res.Updated += int32(ra)
					continue
				}

				// A key changed (or the document is gone). If one alone
				// did (a state move), the JSON column and that key column
				// are written together: the others hold their values, read
				// in this transaction, which holds the write lock since
				// the update above.
				if i, ok := oneChanged(tx.QueryRowPrepared(ctx, storedStmt, arg), texts); ok {
					r, err = tx.ExecPrepared(ctx, oneStmts[i], ones[i], string(b), version, texts[i], arg)
					if err != nil {
						return lazyerrors.Error(err)
					}

					if ra, err = r.RowsAffected(); err != nil {
						return lazyerrors.Error(err)
					}

					res.Updated += int32(ra)

					continue
				}
			}

			r, err := tx.ExecPrepared(ctx, stmt, q, string(b), arg)
			if err != nil {
				return lazyerrors.Error(err)
			}

			ra, err := r.RowsAffected()
			if err != nil {
				return lazyerrors.Error(err)
			}

			res.Updated += int32(ra)
		}

		return nil
	})
	if err != nil {
		return nil, lazyerrors.Error(err)
	}

	return &res, nil
}

// keysUpdateSQL is twopc's dev server's patch: the statements of
// UpdateAll's updates by the key columns (see keyTexts) of a table.
type keysUpdateSQL struct {
	guarded string   // the update guarded by the key columns
	stored  string   // the read of the key columns
	ones    []string // the update of the JSON column and of one key column
	tag     string   // metadata.UpdateKeysTag and a colon
}

// keysUpdateSQLs holds the keysUpdateSQL of each table and key columns,
// by the table's name and the columns' tag: built once, not on each update.
var keysUpdateSQLs sync.Map

// keysUpdateSQLFor returns the keysUpdateSQL of table's key columns keys
// (metadata.UpdateKeyFields).
func keysUpdateSQLFor(table string, keys []metadata.KeyField) *keysUpdateSQL {
	tag := metadata.UpdateKeysTag(keys)
	if v, ok := keysUpdateSQLs.Load(table + "\x00" + tag); ok {
		return v.(*keysUpdateSQL) //nolint:forcetypeassert // only those are stored
	}

	res := &keysUpdateSQL{ones: make([]string, len(keys)), tag: tag + ":"}
	conds := make([]string, len(keys))
	cols := make([]string, len(keys))

	for i, k := range keys {
		conds[i] = fmt.Sprintf("%q IS ?", k.Column)
		cols[i] = fmt.Sprintf("%q", k.Column)
		res.ones[i] = fmt.Sprintf(`UPDATE %q SET %s = ?, %q = ?, %q = ? WHERE %s = ?`,
			table, metadata.DefaultColumn, metadata.KeysVersionColumn, k.Column, metadata.IDColumn)
	}

	res.guarded = fmt.Sprintf(`UPDATE %q SET %s = ?, %q = ? WHERE %s = ? AND %s`,
		table, metadata.DefaultColumn, metadata.KeysVersionColumn, metadata.IDColumn, strings.Join(conds, " AND "))
	res.stored = fmt.Sprintf(`SELECT %s FROM %q WHERE %s = ?`, strings.Join(cols, ", "), table, metadata.IDColumn)

	keysUpdateSQLs.Store(table+"\x00"+tag, res)

	return res
}

// oneChanged is twopc's dev server's patch: the index of the one key
// column whose stored value (row, UpdateAll's read of the key columns)
// differs from the new one (texts), and whether exactly one does.
func oneChanged(row *sql.Row, texts []any) (int, bool) {
	stored := make([]sql.NullString, len(texts))
	dest := make([]any, len(texts))

	for i := range stored {
		dest[i] = &stored[i]
	}

	if err := row.Scan(dest...); err != nil {
		return 0, false
	}

	changed := -1

	for i, t := range texts {
		s, isString := t.(string)
		if (t == nil && !stored[i].Valid) || (isString && stored[i].Valid && stored[i].String == s) {
			continue
		}

		if changed >= 0 {
			return 0, false
		}

		changed = i
	}

	return changed, changed >= 0
}

// keyTexts is twopc's dev server's patch: the values of doc's key columns
// keys (metadata.UpdateKeyFields) as SQLite's -> gives them from doc's
// JSON (nil for a missing field), and whether each is known. UpdateAll
// first tries an update guarded by the key columns holding these values
// already, which names no key column, so that SQLite maintains none of
// their indexes, and which tags the row so that the update trigger skips
// its check (metadata.UpdateKeysTag): an update that changes no indexed
// field parses no JSON beyond the _id index's. If the guard fails because
// one key changed (oneChanged), the JSON column and that key column are
// written by one update, tagged too. Otherwise (several keys changed, or a
// value is not known), the plain update runs, and the trigger writes the
// key columns that changed.
//
// A value is known only where the JSON text sjson writes for it is what
// SQLite's -> returns for it (it returns a string's or a number's text as
// it is in the document, and an array's elements joined by commas): a
// string whose JSON needs no escape, a boolean, a 32- or 64-bit integer, a
// date (an integer of milliseconds), an ObjectID (a string), null, or an
// array of those; a missing top-level field is NULL. Not a double, a
// document, or a dotted field. So a guard that holds means the columns
// hold the new document's values, which the trigger would have written.
// TestKeyTexts checks the texts against SQLite's.
func keyTexts(doc *types.Document, keys []metadata.KeyField) ([]any, bool) {
	if len(keys) == 0 {
		return nil, false
	}

	var scalar func(v any) (string, bool)
	scalar = func(v any) (string, bool) {
		switch v := v.(type) {
		case string:
			t := string(must.NotFail(sjson.MarshalSingleValue(v)))
			return t, len(t) == len(v)+2
		case bool, int32, int64, time.Time, types.ObjectID, types.NullType:
			return string(must.NotFail(sjson.MarshalSingleValue(v))), true
		}
		return "", false
	}

	res := make([]any, len(keys))

	for i, k := range keys {
		if strings.ContainsRune(k.Field, '.') {
			return nil, false
		}

		v, err := doc.Get(k.Field)
		if err != nil {
			res[i] = nil
			continue
		}

		if arr, isArray := v.(*types.Array); isArray {
			parts := make([]string, arr.Len())
			for j := 0; j < arr.Len(); j++ {
				var ok bool
				if parts[j], ok = scalar(must.NotFail(arr.Get(j))); !ok {
					return nil, false
				}
			}

			res[i] = "[" + strings.Join(parts, ",") + "]"

			continue
		}

		t, ok := scalar(v)
		if !ok {
			return nil, false
		}

		res[i] = t
	}

	return res, true
}

// DeleteAll implements backends.Collection interface.
func (c *collection) DeleteAll(ctx context.Context, params *backends.DeleteAllParams) (*backends.DeleteAllResult, error) {
	db := c.r.DatabaseGetExisting(ctx, c.dbName)
	if db == nil {
		return &backends.DeleteAllResult{Deleted: 0}, nil
	}

	meta := c.r.CollectionGet(ctx, c.dbName, c.name)
	if meta == nil {
		return &backends.DeleteAllResult{Deleted: 0}, nil
	}

	// TODO https://github.com/FerretDB/FerretDB/issues/3888

	var column string
	var placeholders []string
	var args []any

	if params.RecordIDs == nil {
		placeholders = make([]string, len(params.IDs))
		args = make([]any, len(params.IDs))

		for i, id := range params.IDs {
			placeholders[i] = "?"
			args[i] = string(must.NotFail(sjson.MarshalSingleValue(id)))
		}

		column = metadata.IDColumn
	} else {
		placeholders = make([]string, len(params.RecordIDs))
		args = make([]any, len(params.RecordIDs))

		for i, id := range params.RecordIDs {
			placeholders[i] = "?"
			args[i] = id
		}

		column = metadata.RecordIDColumn
	}

	q := fmt.Sprintf(`DELETE FROM %q WHERE %s IN (%s)`, meta.TableName, column, strings.Join(placeholders, ", "))

	// twopc's dev server: the statement is kept (fsql's prepared.go).
	res, err := db.ExecPrepared(ctx, meta.TableName, q, args...)
	if err != nil {
		return nil, lazyerrors.Error(err)
	}

	ra, err := res.RowsAffected()
	if err != nil {
		return nil, lazyerrors.Error(err)
	}

	return &backends.DeleteAllResult{
		Deleted: int32(ra),
	}, nil
}

// Explain implements backends.Collection interface.
func (c *collection) Explain(ctx context.Context, params *backends.ExplainParams) (*backends.ExplainResult, error) {
	db := c.r.DatabaseGetExisting(ctx, c.dbName)
	if db == nil {
		return &backends.ExplainResult{
			QueryPlanner: must.NotFail(types.NewDocument()),
		}, nil
	}

	meta := c.r.CollectionGet(ctx, c.dbName, c.name)
	if meta == nil {
		return &backends.ExplainResult{
			QueryPlanner: must.NotFail(types.NewDocument()),
		}, nil
	}

	selectClause := prepareSelectClause(meta.TableName, "", meta.Capped(), false)

	var filterPushdown bool
	var whereClause string
	var args []any

	// that logic should exist in one place
	// TODO https://github.com/FerretDB/FerretDB/issues/3235
	//
	// twopc's dev server: see idPushdown and indexPushdown.
	whereClause, args, filterPushdown = pushdown(params.Filter, meta.Settings.Indexes)

	orderByClause := prepareOrderByClause(params.Sort)
	sortPushdown := orderByClause != ""

	q := `EXPLAIN QUERY PLAN ` + selectClause + whereClause + orderByClause

	var limitPushdown bool

	if params.Limit != 0 {
		q += ` LIMIT ?`
		args = append(args, params.Limit)
		limitPushdown = true
	}

	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, lazyerrors.Error(err)
	}

	defer rows.Close()

	queryPlan, err := types.NewArray()
	if err != nil {
		return nil, lazyerrors.Error(err)
	}

	for rows.Next() {
		var id int32
		var parent int32
		var notused int32
		var detail string

		// SQLite query plan can be interpreted as a tree.
		// Each row of query plan represents a node of this tree,
		// it contains node id, parent id, auxiliary integer field, and a description.
		// See https://www.sqlite.org/eqp.html for further details.
		if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
			return nil, lazyerrors.Error(err)
		}

		queryPlan.Append(fmt.Sprintf("id=%d parent=%d notused=%d detail=%s", id, parent, notused, detail))
	}

	return &backends.ExplainResult{
		QueryPlanner:   must.NotFail(types.NewDocument("Plan", queryPlan)),
		FilterPushdown: filterPushdown,
		SortPushdown:   sortPushdown,
		LimitPushdown:  limitPushdown,
	}, nil
}

// Stats implements backends.Collection interface.
func (c *collection) Stats(ctx context.Context, params *backends.CollectionStatsParams) (*backends.CollectionStatsResult, error) {
	db := c.r.DatabaseGetExisting(ctx, c.dbName)
	if db == nil {
		return nil, backends.NewError(
			backends.ErrorCodeCollectionDoesNotExist,
			lazyerrors.Errorf("no ns %s.%s", c.dbName, c.name),
		)
	}

	coll := c.r.CollectionGet(ctx, c.dbName, c.name)
	if coll == nil {
		return nil, backends.NewError(
			backends.ErrorCodeCollectionDoesNotExist,
			lazyerrors.Errorf("no ns %s.%s", c.dbName, c.name),
		)
	}
	stats, err := collectionsStats(ctx, db, []*metadata.Collection{coll}, params.Refresh)
	if err != nil {
		return nil, lazyerrors.Error(err)
	}

	placeholders := make([]string, 0, len(coll.Settings.Indexes))
	args := make([]any, 0, len(coll.Settings.Indexes))
	indexMap := map[string]string{}

	for _, index := range coll.Settings.Indexes {
		placeholders = append(placeholders, "?")
		args = append(args, coll.TableName+"_"+index.Name)
		indexMap[coll.TableName+"_"+index.Name] = index.Name
	}

	q := fmt.Sprintf(`
		SELECT
			name,
			pgsize
		FROM dbstat
		WHERE name IN (%s) AND aggregate = TRUE`,
		strings.Join(placeholders, ", "),
	)

	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, lazyerrors.Error(err)
	}

	defer rows.Close()

	indexSizes := make([]backends.IndexSize, len(indexMap))
	var i int

	for rows.Next() {
		var name string
		var size int64

		if err = rows.Scan(&name, &size); err != nil {
			return nil, lazyerrors.Error(err)
		}

		indexName, ok := indexMap[name]
		if !ok {
			// new index have been created since fetching metadata
			continue
		}

		indexSizes[i] = backends.IndexSize{
			Name: indexName,
			Size: size,
		}
		i++
	}

	if rows.Err() != nil {
		return nil, lazyerrors.Error(rows.Err())
	}

	return &backends.CollectionStatsResult{
		CountDocuments:  stats.countDocuments,
		SizeTotal:       stats.sizeTables + stats.sizeIndexes,
		SizeIndexes:     stats.sizeIndexes,
		SizeCollection:  stats.sizeTables,
		IndexSizes:      indexSizes,
		SizeFreeStorage: stats.sizeFreeStorage,
	}, nil
}

// Compact implements backends.Collection interface.
func (c *collection) Compact(ctx context.Context, params *backends.CompactParams) (*backends.CompactResult, error) {
	db := c.r.DatabaseGetExisting(ctx, c.dbName)
	if db == nil {
		return nil, backends.NewError(
			backends.ErrorCodeDatabaseDoesNotExist,
			lazyerrors.Errorf("no ns %s.%s", c.dbName, c.name),
		)
	}

	coll := c.r.CollectionGet(ctx, c.dbName, c.name)
	if coll == nil {
		return nil, backends.NewError(
			backends.ErrorCodeCollectionDoesNotExist,
			lazyerrors.Errorf("no ns %s.%s", c.dbName, c.name),
		)
	}

	q := `PRAGMA incremental_vacuum`
	if params != nil && params.Full {
		q = `VACUUM`
	}

	if _, err := db.ExecContext(ctx, q); err != nil {
		return nil, lazyerrors.Error(err)
	}

	return new(backends.CompactResult), nil
}

// ListIndexes implements backends.Collection interface.
func (c *collection) ListIndexes(ctx context.Context, params *backends.ListIndexesParams) (*backends.ListIndexesResult, error) {
	db := c.r.DatabaseGetExisting(ctx, c.dbName)
	if db == nil {
		return nil, backends.NewError(
			backends.ErrorCodeCollectionDoesNotExist,
			lazyerrors.Errorf("no ns %s.%s", c.dbName, c.name),
		)
	}

	coll := c.r.CollectionGet(ctx, c.dbName, c.name)
	if coll == nil {
		return nil, backends.NewError(
			backends.ErrorCodeCollectionDoesNotExist,
			lazyerrors.Errorf("no ns %s.%s", c.dbName, c.name),
		)
	}

	res := backends.ListIndexesResult{
		Indexes: make([]backends.IndexInfo, len(coll.Settings.Indexes)),
	}

	for i, index := range coll.Settings.Indexes {
		res.Indexes[i] = backends.IndexInfo{
			Name:   index.Name,
			Unique: index.Unique,
			Key:    make([]backends.IndexKeyPair, len(index.Key)),
		}

		for j, key := range index.Key {
			res.Indexes[i].Key[j] = backends.IndexKeyPair{
				Field:      key.Field,
				Descending: key.Descending,
			}
		}
	}

	sort.Slice(res.Indexes, func(i, j int) bool {
		return res.Indexes[i].Name < res.Indexes[j].Name
	})

	return &res, nil
}

// CreateIndexes implements backends.Collection interface.
func (c *collection) CreateIndexes(ctx context.Context, params *backends.CreateIndexesParams) (*backends.CreateIndexesResult, error) { //nolint:lll // for readability
	indexes := make([]metadata.IndexInfo, len(params.Indexes))
	for i, index := range params.Indexes {
		indexes[i] = metadata.IndexInfo{
			Name:   index.Name,
			Key:    make([]metadata.IndexKeyPair, len(index.Key)),
			Unique: index.Unique,
		}

		for j, key := range index.Key {
			indexes[i].Key[j] = metadata.IndexKeyPair{
				Field:      key.Field,
				Descending: key.Descending,
			}
		}
	}

	err := c.r.IndexesCreate(ctx, c.dbName, c.name, indexes)
	if err != nil {
		return nil, lazyerrors.Error(err)
	}

	return new(backends.CreateIndexesResult), nil
}

// DropIndexes implements backends.Collection interface.
func (c *collection) DropIndexes(ctx context.Context, params *backends.DropIndexesParams) (*backends.DropIndexesResult, error) {
	err := c.r.IndexesDrop(ctx, c.dbName, c.name, params.Indexes)
	if err != nil {
		return nil, lazyerrors.Error(err)
	}

	return new(backends.DropIndexesResult), nil
}

// check interfaces
var (
	_ backends.Collection = (*collection)(nil)
)

// needElements is twopc's dev server's patch: the names of the indexes
// that may have an elements table but have none yet (metadata/elements.go),
// whose first key one of docs holds an array in. An index's elements table
// is made when its index is, if a document then holds an array in its
// first key, or else before the first write of one: a field that never
// holds an array (the library's state) never has one, and its writes fire
// no elements trigger. Until then, the index is read without (see
// indexPushdown), which is right, as no document holds an array there.
func needElements(indexes []metadata.IndexInfo, docs []*types.Document) []string {
	var names []string

	for _, index := range indexes {
		if index.Elements != "" || !index.MayHaveElements() {
			continue
		}

		for _, doc := range docs {
			if v, _ := doc.Get(index.Key[0].Field); v != nil {
				if _, isArray := v.(*types.Array); isArray {
					names = append(names, index.Name)
					break
				}
			}
		}
	}

	return names
}

// idPushdown is twopc's dev server's patch: the rows a filter can match,
// read by the _id index as MongoDB reads them, whatever the filter's other
// fields. A top-level _id that is a string or an ObjectID names one row;
// {_id: {$in: [...]}} of such values names those rows; a top-level $or
// each of whose clauses has such a top-level _id names the union of the
// clauses' rows (MongoDB plans each clause of an $or apart, each on the
// _id index). The handler applies the whole filter to the rows read, so
// a superset of the matches is all this must give. ok is false, and the
// clause empty, for any other filter: the collection is scanned.
func idPushdown(filter *types.Document) (where string, args []any, ok bool) {
	ids, ok := idsOf(filter)
	if !ok || len(ids) == 0 {
		return "", nil, false
	}
	placeholders := make([]string, len(ids))
	args = make([]any, len(ids))
	for i, v := range ids {
		placeholders[i] = "?"
		args[i] = string(must.NotFail(sjson.MarshalSingleValue(v)))
	}
	if len(ids) == 1 {
		return fmt.Sprintf(` WHERE %s = ?`, metadata.IDColumn), args, true
	}
	return fmt.Sprintf(` WHERE %s IN (%s)`, metadata.IDColumn, strings.Join(placeholders, ", ")), args, true
}

// idsOf returns the _id values filter is limited to (see idPushdown), and
// whether it is limited to a list of them.
func idsOf(filter *types.Document) ([]any, bool) {
	if filter == nil {
		return nil, false
	}
	scalar := func(v any) bool {
		switch v.(type) {
		case string, types.ObjectID:
			return true
		}
		return false
	}
	if filter.Has("_id") {
		v, _ := filter.Get("_id")
		if scalar(v) {
			return []any{v}, true
		}
		if d, isDoc := v.(*types.Document); isDoc && d.Len() == 1 && d.Has("$in") {
			in, _ := d.Get("$in")
			arr, isArr := in.(*types.Array)
			if !isArr || arr.Len() == 0 || arr.Len() > 1000 {
				return nil, false
			}
			ids := make([]any, 0, arr.Len())
			for i := 0; i < arr.Len(); i++ {
				x, _ := arr.Get(i)
				if !scalar(x) {
					return nil, false
				}
				ids = append(ids, x)
			}
			return ids, true
		}
	}
	if filter.Has("$or") {
		v, _ := filter.Get("$or")
		arr, isArr := v.(*types.Array)
		if !isArr || arr.Len() == 0 || arr.Len() > 1000 {
			return nil, false
		}
		var ids []any
		for i := 0; i < arr.Len(); i++ {
			x, _ := arr.Get(i)
			clause, isDoc := x.(*types.Document)
			if !isDoc || !clause.Has("_id") {
				return nil, false
			}
			id, _ := clause.Get("_id")
			if !scalar(id) {
				return nil, false
			}
			ids = append(ids, id)
		}
		return ids, true
	}
	return nil, false
}

// pushdown is twopc's dev server's patch: the WHERE clause that reads the
// rows filter can match by an index, as MongoDB plans them: by the _id
// index (idPushdown), else by the first key of another index
// (indexPushdown); ok is false, and the clause empty, if neither applies.
func pushdown(filter *types.Document, indexes []metadata.IndexInfo) (where string, args []any, ok bool) {
	if where, args, ok = idPushdown(filter); ok {
		return where, args, ok
	}
	return indexPushdown(filter, indexes)
}

// indexPushdown is twopc's dev server's patch: a filter whose top-level
// field is the first key of an index of the collection (other than _id's),
// and whose value there is a string or a boolean, or {$in: [...]} of those
// alone, reads only the rows of those values by that index, as MongoDB
// reads them by an index scan: recovery's and the low-water mark's reads
// of the transactions collection by {state, ...} and {fences, ...}, and
// the statements' reads by {accounts, committedAt}. The handler applies
// the whole filter to the rows read, so the clause need only keep every
// row that can match: those whose value is one of the listed ones, and
// those whose value is an array holding one (MongoDB's equality matches
// an array by an element, a multikey index scan). The first term is on
// the index's first key column (metadata/columns.go; its expression for
// an index without), so SQLite searches the index for it. For the second,
// an index with an elements table (metadata/elements.go) gives the _ids
// of the documents whose array holds one of the values, within the range
// the filter sets on the index's second key if it sets one
// (elementsRange), and SQLite reads those by the _id index; an index
// without one (whose first key has held no array yet, or on a field name
// that is not plain) gives the range of every array-valued entry, the
// JSON texts that begin with "[".
func indexPushdown(filter *types.Document, indexes []metadata.IndexInfo) (where string, args []any, ok bool) {
	if filter == nil {
		return "", nil, false
	}

	// The first index whose first key the filter names, but one with an
	// elements table before one without, and one whose second key the
	// filter sets a range on before others.
	var best *metadata.IndexInfo
	var bestScore int
	var values []any

	for i, index := range indexes {
		if len(index.Key) == 0 || index.Key[0].Field == "_id" || strings.ContainsRune(index.Key[0].Field, '.') {
			continue
		}
		field := index.Key[0].Field
		if !filter.Has(field) {
			continue
		}
		v, _ := filter.Get(field)
		vs, ok := equalities(v)
		if v == types.Null {
			// {field: null}: the documents without the field, or with it
			// null, or an array (which may hold a null): see nullPushdown.
			vs, ok = nil, true
		}
		if !ok {
			continue
		}
		score := 1
		if index.Elements != "" {
			score = 2
			if _, _, ok := elementsRange(filter, index.ElementsKey); ok {
				score = 3
			}
		}
		if score > bestScore {
			best, bestScore, values = &indexes[i], score, vs
		}
	}
	if best == nil {
		return "", nil, false
	}

	// The index's key column (metadata/columns.go), which holds what the
	// expression does; the expression for an index without.
	expr := fmt.Sprintf("%s->%q", metadata.DefaultColumn, best.Key[0].Field)
	if best.HasColumns() {
		expr = fmt.Sprintf("%q", best.Columns[0])
	}
	if values == nil {
		return nullPushdown(expr), nil, true
	}
	placeholders := make([]string, len(values))
	for i, x := range values {
		placeholders[i] = "?"
		args = append(args, string(must.NotFail(sjson.MarshalSingleValue(x))))
	}
	in := strings.Join(placeholders, ", ")

	if best.Elements == "" {
		return fmt.Sprintf(` WHERE (%s IN (%s) OR (%s >= '[' AND %s < '\'))`, expr, in, expr, expr), args, true
	}

	// The elements table holds a string as its text and a boolean as 1
	// or 0 (json_each's values).
	elementArgs := make([]any, len(values))
	for i, x := range values {
		switch x := x.(type) {
		case bool:
			elementArgs[i] = int64(0)
			if x {
				elementArgs[i] = int64(1)
			}
		default:
			elementArgs[i] = x
		}
	}
	elements := fmt.Sprintf(`SELECT id FROM %q WHERE e IN (%s)`, best.Elements, in)
	args = append(args, elementArgs...)
	if lo, hi, ok := elementsRange(filter, best.ElementsKey); ok {
		// Two searches of the table's (e, k) index: the second key in the
		// range, or an array.
		elements = fmt.Sprintf(`%s AND k >= ? AND k <= ? UNION ALL %s AND k = '%s'`,
			elements, elements, metadata.ElementsArray)
		args = append(args, lo, hi)
		args = append(args, elementArgs...)
	}

	return fmt.Sprintf(` WHERE (%s IN (%s) OR %s IN (%s))`, expr, in, metadata.IDColumn, elements), args, true
}

// nullPushdown is the clause that reads by the index's expression expr
// the documents MongoDB's {field: null} matches: those without the field
// (expr is SQL NULL: -> found no key), those where it is null (its JSON
// text, 'null'), and every document where it is an array, which matches
// if an element is null (kept whole, as equalities' clauses keep arrays;
// the handler applies the whole filter to what it reads). Each term is on
// the index's expression, so SQLite searches the index for each.
func nullPushdown(expr string) string {
	return fmt.Sprintf(` WHERE (%s IS NULL OR %s = 'null' OR (%s >= '[' AND %s < '\'))`, expr, expr, expr, expr)
}

// elementsRange returns the range [lo, hi] of milliseconds since the epoch
// that a date in field must be in to match filter, and whether filter sets
// one: if field's condition is a date (an equality), or a document of
// operators among which $type "date", or $gt, $gte, $lt or $lte a date
// (the others are ignored: the conditions are ANDed, so they can only
// narrow what matches). Each of those matches only a date, or an array
// (MongoDB compares an array by its elements), never a missing field or
// another type; a date is stored by sjson as an integer of milliseconds,
// the elements table's k (metadata/elements.go), and the bounds are taken
// inclusive, so the range keeps every date that can match.
func elementsRange(filter *types.Document, field string) (lo, hi int64, ok bool) {
	if field == "" || !filter.Has(field) {
		return 0, 0, false
	}
	lo, hi = math.MinInt64, math.MaxInt64
	v, _ := filter.Get(field)
	switch v := v.(type) {
	case time.Time:
		ms := v.UnixMilli()
		return ms, ms, true
	case *types.Document:
		if v.Len() == 0 {
			return 0, 0, false
		}
		iter := v.Iterator()
		defer iter.Close()
		for {
			op, x, err := iter.Next()
			if err != nil {
				break
			}
			if !strings.HasPrefix(op, "$") {
				// A document to compare with: no range.
				return 0, 0, false
			}
			switch op {
			case "$type":
				if s, isString := x.(string); isString && s == "date" {
					ok = true
				}
			case "$gt", "$gte":
				if t, isTime := x.(time.Time); isTime {
					lo, ok = max(lo, t.UnixMilli()), true
				}
			case "$lt", "$lte":
				if t, isTime := x.(time.Time); isTime {
					hi, ok = min(hi, t.UnixMilli()), true
				}
			}
		}
		return lo, hi, ok
	}
	return 0, 0, false
}

// equalities returns the values a filter's field value v is an equality
// to: v itself if a string or a boolean, or the elements of {$in: [...]}
// if that is all v holds and they are all strings or booleans.
func equalities(v any) ([]any, bool) {
	scalar := func(x any) bool {
		switch x := x.(type) {
		case bool:
			return true
		case string:
			// Only a string whose JSON needs no escape: SQLite's ->
			// writes its own escapes (it leaves <, > and & alone, where
			// sjson writes \u003c), so an escaped string might not be
			// equal as text to the stored one, and the document would
			// be missed. Others go to the table scan.
			return len(must.NotFail(sjson.MarshalSingleValue(x))) == len(x)+2
		}
		return false
	}
	if scalar(v) {
		return []any{v}, true
	}
	d, isDoc := v.(*types.Document)
	if !isDoc || d.Len() != 1 || !d.Has("$in") {
		return nil, false
	}
	in, _ := d.Get("$in")
	arr, isArr := in.(*types.Array)
	if !isArr || arr.Len() == 0 || arr.Len() > 100 {
		return nil, false
	}
	values := make([]any, 0, arr.Len())
	for i := 0; i < arr.Len(); i++ {
		x, _ := arr.Get(i)
		if !scalar(x) {
			return nil, false
		}
		values = append(values, x)
	}
	return values, true
}
