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

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/exp/maps"

	"github.com/FerretDB/FerretDB/internal/backends"
	"github.com/FerretDB/FerretDB/internal/backends/sqlite/metadata/pool"
	"github.com/FerretDB/FerretDB/internal/util/fsql"
	"github.com/FerretDB/FerretDB/internal/util/lazyerrors"
	"github.com/FerretDB/FerretDB/internal/util/must"
	"github.com/FerretDB/FerretDB/internal/util/state"
)

const (
	// This prefix is reserved by SQLite for internal use,
	// see https://www.sqlite.org/lang_createtable.html.
	reservedTablePrefix = "sqlite_"

	// SQLite table name where FerretDB metadata is stored.
	metadataTableName = backends.ReservedPrefix + "collections"
)

// Parts of Prometheus metric names.
const (
	namespace = "ferretdb"
	subsystem = "sqlite_metadata"
)

// Registry provides access to SQLite databases and collections information.
//
// Exported methods are safe for concurrent use. Unexported methods are not.
type Registry struct {
	p         *pool.Pool
	l         *slog.Logger
	BatchSize int

	// rw protects colls but also acts like a global lock for the whole registry.
	// The latter effectively replaces transactions (see the sqlite backend package description for more info).
	// One global lock should be replaced by more granular locks – one per database or even one per collection.
	// But that requires some redesign.
	// TODO https://github.com/FerretDB/FerretDB/issues/2755
	rw    sync.RWMutex
	colls map[string]map[string]*Collection // database name -> collection name -> collection
}

// NewRegistry creates a registry for SQLite databases in the directory specified by SQLite URI.
func NewRegistry(u string, batchSize int, l *slog.Logger, sp *state.Provider) (*Registry, error) {
	p, initDBs, err := pool.New(u, l, sp)
	if err != nil {
		return nil, err
	}

	r := &Registry{
		p:         p,
		l:         l,
		BatchSize: batchSize,
		colls:     map[string]map[string]*Collection{},
	}

	for name, db := range initDBs {
		if err = r.initCollections(context.Background(), name, db); err != nil {
			r.Close()
			return nil, lazyerrors.Error(err)
		}
	}

	return r, nil
}

// Close closes the registry.
func (r *Registry) Close() {
	r.p.Close()
}

// initCollections loads collections metadata from the database during initialization.
func (r *Registry) initCollections(ctx context.Context, dbName string, db *fsql.DB) error {
	rows, err := db.QueryContext(ctx, fmt.Sprintf("SELECT name, table_name, settings FROM %q", metadataTableName))
	if err != nil {
		return lazyerrors.Error(err)
	}
	defer rows.Close()

	colls := map[string]*Collection{}

	for rows.Next() {
		var c Collection
		if err = rows.Scan(&c.Name, &c.TableName, &c.Settings); err != nil {
			return lazyerrors.Error(err)
		}

		colls[c.Name] = &c
	}

	if err = rows.Err(); err != nil {
		return lazyerrors.Error(err)
	}

	// twopc's dev server: indexes made before key columns were
	// (columns.go), by stock FerretDB or by an earlier dev server, are
	// made again on key columns, with an elements table if their first key
	// holds an array (elements.go), so that data kept from then is read
	// and written as new data is. If that fails, the index is read by its
	// expression, without an SQLite index (a scan).
	for _, c := range colls {
		var changed bool

		for i := range c.Settings.Indexes {
			index := &c.Settings.Indexes[i]
			if index.HasColumns() || index.Name == backends.DefaultIndexName {
				continue
			}

			changed = true

			if _, err = db.ExecContext(ctx, fmt.Sprintf("DROP INDEX IF EXISTS %q", c.TableName+"_"+index.Name)); err != nil {
				return lazyerrors.Error(err)
			}

			if err = dropElements(ctx, db, *index); err != nil {
				return lazyerrors.Error(err)
			}

			index.Elements, index.ElementsKey, index.Columns = "", "", nil

			if err = createIndex(ctx, db, c, index); err != nil {
				r.l.WarnContext(ctx, "sqlite.metadata: index not made on key columns", slog.String("table", c.TableName),
					slog.String("index", index.Name), slog.String("error", err.Error()))

				index.Elements, index.ElementsKey, index.Columns = "", "", nil

				continue
			}
		}

		if !changed {
			continue
		}

		q := fmt.Sprintf("UPDATE %q SET settings = ? WHERE table_name = ?", metadataTableName)
		if _, err = db.ExecContext(ctx, q, c.Settings, c.TableName); err != nil {
			return lazyerrors.Error(err)
		}
	}

	r.colls[dbName] = colls

	return nil
}

// DatabaseList returns a sorted list of existing databases.
func (r *Registry) DatabaseList(ctx context.Context) []string {
	return r.p.List(ctx)
}

// DatabaseGetExisting returns a connection to existing database or nil if it doesn't exist.
func (r *Registry) DatabaseGetExisting(ctx context.Context, dbName string) *fsql.DB {
	return r.p.GetExisting(ctx, dbName)
}

// DatabaseGetOrCreate returns a connection to existing database or newly created database.
func (r *Registry) DatabaseGetOrCreate(ctx context.Context, dbName string) (*fsql.DB, error) {
	r.rw.Lock()
	defer r.rw.Unlock()

	return r.databaseGetOrCreate(ctx, dbName)
}

// databaseGetOrCreate returns a connection to existing database or newly created database.
//
// It does not hold the lock.
func (r *Registry) databaseGetOrCreate(ctx context.Context, dbName string) (*fsql.DB, error) {
	db, created, err := r.p.GetOrCreate(ctx, dbName)
	if err != nil {
		return nil, lazyerrors.Error(err)
	}

	if !created {
		return db, nil
	}

	q := fmt.Sprintf(
		"CREATE TABLE %q ("+
			"name TEXT NOT NULL UNIQUE CHECK(name != ''), "+
			"table_name TEXT NOT NULL UNIQUE CHECK(table_name != ''), "+
			"settings TEXT NOT NULL CHECK(settings != '')"+
			") STRICT",
		metadataTableName,
	)
	if _, err = db.ExecContext(ctx, q); err != nil {
		r.databaseDrop(ctx, dbName)
		return nil, lazyerrors.Error(err)
	}

	return db, nil
}

// DatabaseDrop drops the database.
//
// Returned boolean value indicates whether the database was dropped.
func (r *Registry) DatabaseDrop(ctx context.Context, dbName string) bool {
	r.rw.Lock()
	defer r.rw.Unlock()

	return r.databaseDrop(ctx, dbName)
}

// databaseDrop drops the database.
//
// Returned boolean value indicates whether the database was dropped.
//
// It does not hold the lock.
func (r *Registry) databaseDrop(ctx context.Context, dbName string) bool {
	delete(r.colls, dbName)

	return r.p.Drop(ctx, dbName)
}

// CollectionList returns a sorted copy of collections in the database.
//
// If database does not exist, no error is returned.
func (r *Registry) CollectionList(ctx context.Context, dbName string) ([]*Collection, error) {
	db := r.DatabaseGetExisting(ctx, dbName)
	if db == nil {
		return nil, nil
	}

	r.rw.RLock()

	res := make([]*Collection, 0, len(r.colls[dbName]))
	for _, c := range r.colls[dbName] {
		res = append(res, c.deepCopy())
	}

	r.rw.RUnlock()

	sort.Slice(res, func(i, j int) bool { return res[i].Name < res[j].Name })
	return res, nil
}

// CollectionCreateParams contains parameters for CollectionCreate.
type CollectionCreateParams struct {
	DBName          string
	Name            string
	CappedSize      int64
	CappedDocuments int64
	_               struct{} // prevent unkeyed literals
}

// Capped returns true if capped collection creation is requested.
func (ccp *CollectionCreateParams) Capped() bool {
	return ccp.CappedSize > 0 // TODO https://github.com/FerretDB/FerretDB/issues/3631
}

// CollectionCreate creates a collection in the database.
// Database will be created automatically if needed.
//
// Returned boolean value indicates whether the collection was created.
// If collection already exists, (false, nil) is returned.
func (r *Registry) CollectionCreate(ctx context.Context, params *CollectionCreateParams) (bool, error) {
	r.rw.Lock()
	defer r.rw.Unlock()

	return r.collectionCreate(ctx, params)
}

// collectionCreate creates a collection in the database.
// Database will be created automatically if needed.
//
// Returned boolean value indicates whether the collection was created.
// If collection already exists, (false, nil) is returned.
//
// It does not hold the lock.
func (r *Registry) collectionCreate(ctx context.Context, params *CollectionCreateParams) (bool, error) {
	dbName, collectionName := params.DBName, params.Name

	db, err := r.databaseGetOrCreate(ctx, dbName)
	if err != nil {
		return false, lazyerrors.Error(err)
	}

	colls := r.colls[dbName]
	if colls != nil && colls[collectionName] != nil {
		return false, nil
	}

	h := fnv.New32a()
	must.NotFail(h.Write([]byte(collectionName)))
	s := h.Sum32()

	var tableName string
	list := maps.Values(colls)

	for {
		tableName = fmt.Sprintf("%s_%08x", strings.ToLower(collectionName), s)
		if strings.HasPrefix(tableName, reservedTablePrefix) {
			tableName = "_" + tableName
		}

		if !slices.ContainsFunc(list, func(c *Collection) bool { return c.TableName == tableName }) {
			break
		}

		// table already exists, generate a new table name by incrementing the hash
		s++
	}

	q := fmt.Sprintf("CREATE TABLE %q (", tableName)

	if params.Capped() {
		q += fmt.Sprintf("%s INTEGER PRIMARY KEY, ", RecordIDColumn)
	}

	q += fmt.Sprintf("%[1]s TEXT NOT NULL CHECK(%[1]s != '')) STRICT", DefaultColumn)

	if _, err = db.ExecContext(ctx, q); err != nil {
		return false, lazyerrors.Error(err)
	}

	// twopc's dev server: the statements kept for a table of this name
	// dropped before, if any (fsql's prepared.go).
	defer db.ForgetPrepared(tableName)

	q = fmt.Sprintf("INSERT INTO %q (name, table_name, settings) VALUES (?, ?, ?)", metadataTableName)
	if _, err = db.ExecContext(ctx, q, collectionName, tableName, "{}"); err != nil {
		_, _ = db.ExecContext(ctx, fmt.Sprintf("DROP TABLE %q", tableName))
		return false, lazyerrors.Error(err)
	}

	if r.colls[dbName] == nil {
		r.colls[dbName] = map[string]*Collection{}
	}
	r.colls[dbName][collectionName] = &Collection{
		Name:      collectionName,
		TableName: tableName,
		Settings: Settings{
			UUID:            uuid.NewString(),
			CappedSize:      params.CappedSize,
			CappedDocuments: params.CappedDocuments,
		},
	}

	err = r.indexesCreate(ctx, dbName, collectionName, []IndexInfo{{
		Name:   backends.DefaultIndexName,
		Key:    []IndexKeyPair{{Field: "_id"}},
		Unique: true,
	}})
	if err != nil {
		_, _ = r.collectionDrop(ctx, dbName, collectionName)
		return false, lazyerrors.Error(err)
	}

	return true, nil
}

// CollectionGet returns a copy of collection metadata.
// It can be safely modified by a caller.
//
// If database or collection does not exist, nil is returned.
func (r *Registry) CollectionGet(ctx context.Context, dbName, collectionName string) *Collection {
	r.rw.RLock()
	defer r.rw.RUnlock()

	return r.collectionGet(dbName, collectionName)
}

// collectionGet returns a copy of collection metadata.
// It can be safely modified by a caller.
//
// If database or collection does not exist, nil is returned.
//
// It does not hold the lock.
func (r *Registry) collectionGet(dbName, collectionName string) *Collection {
	colls := r.colls[dbName]
	if colls == nil {
		return nil
	}

	return colls[collectionName].deepCopy()
}

// CollectionDrop drops a collection in the database.
//
// Returned boolean value indicates whether the collection was dropped.
// If database or collection did not exist, (false, nil) is returned.
func (r *Registry) CollectionDrop(ctx context.Context, dbName, collectionName string) (bool, error) {
	r.rw.Lock()
	defer r.rw.Unlock()

	return r.collectionDrop(ctx, dbName, collectionName)
}

// collectionDrop drops a collection in the database.
//
// Returned boolean value indicates whether the collection was dropped.
// If database or collection did not exist, (false, nil) is returned.
//
// It does not hold the lock.
func (r *Registry) collectionDrop(ctx context.Context, dbName, collectionName string) (bool, error) {
	db := r.DatabaseGetExisting(ctx, dbName)
	if db == nil {
		return false, nil
	}

	c := r.collectionGet(dbName, collectionName)
	if c == nil {
		return false, nil
	}

	q := fmt.Sprintf("DELETE FROM %q WHERE name = ?", metadataTableName)
	if _, err := db.ExecContext(ctx, q, collectionName); err != nil {
		return false, lazyerrors.Error(err)
	}

	q = fmt.Sprintf("DROP TABLE %q", c.TableName)
	if _, err := db.ExecContext(ctx, q); err != nil {
		return false, lazyerrors.Error(err)
	}

	// twopc's dev server: the statements kept for the table (fsql's
	// prepared.go).
	db.ForgetPrepared(c.TableName)

	// twopc's dev server: the elements tables of its indexes (elements.go);
	// dropping the table above dropped the triggers that kept them.
	for _, index := range c.Settings.Indexes {
		if err := dropElements(ctx, db, index); err != nil {
			return false, lazyerrors.Error(err)
		}
	}

	delete(r.colls[dbName], collectionName)

	return true, nil
}

// CollectionRename renames a collection in the database.
//
// The collection name is updated, but original table name is kept.
//
// Returned boolean value indicates whether the collection was renamed.
// If database or collection did not exist, (false, nil) is returned.
func (r *Registry) CollectionRename(ctx context.Context, dbName, oldCollectionName, newCollectionName string) (bool, error) {
	db := r.DatabaseGetExisting(ctx, dbName)
	if db == nil {
		return false, nil
	}

	r.rw.Lock()
	defer r.rw.Unlock()

	c := r.collectionGet(dbName, oldCollectionName)
	if c == nil {
		return false, nil
	}

	q := fmt.Sprintf(`UPDATE %q SET name = ? WHERE table_name = ?`, metadataTableName)
	if _, err := db.ExecContext(ctx, q, newCollectionName, c.TableName); err != nil {
		return false, lazyerrors.Error(err)
	}

	c.Name = newCollectionName
	r.colls[dbName][newCollectionName] = c
	delete(r.colls[dbName], oldCollectionName)

	// twopc's dev server: the statements kept for the table (fsql's
	// prepared.go); the table keeps its name, so they would still run.
	db.ForgetPrepared(c.TableName)

	return true, nil
}

// IndexesCreate creates indexes in the collection.
//
// Existing indexes with given names are ignored.
func (r *Registry) IndexesCreate(ctx context.Context, dbName, collectionName string, indexes []IndexInfo) error {
	r.rw.Lock()
	defer r.rw.Unlock()

	return r.indexesCreate(ctx, dbName, collectionName, indexes)
}

// indexesCreate creates indexes in the collection.
//
// Existing indexes with given names are ignored.
//
// It does not hold the lock.
func (r *Registry) indexesCreate(ctx context.Context, dbName, collectionName string, indexes []IndexInfo) error {
	_, err := r.collectionCreate(ctx, &CollectionCreateParams{DBName: dbName, Name: collectionName})
	if err != nil {
		return lazyerrors.Error(err)
	}

	db := r.DatabaseGetExisting(ctx, dbName)
	if db == nil {
		panic("database does not exist")
	}

	c := r.collectionGet(dbName, collectionName)
	if c == nil {
		panic("collection does not exist")
	}

	created := make([]string, 0, len(indexes))

	// twopc's dev server: the statements kept for the table (fsql's
	// prepared.go), if an index is made, for a new index changes its reads
	// (collection.go's pushdown) and its writes (the elements table's
	// triggers).
	var changed bool

	defer func() {
		if changed {
			db.ForgetPrepared(c.TableName)
		}
	}()

	for _, index := range indexes {
		if slices.ContainsFunc(c.Settings.Indexes, func(i IndexInfo) bool { return index.Name == i.Name }) {
			continue
		}

		changed = true

		// twopc's dev server: an index other than _id's is made on key
		// columns, with an elements table if its first key holds an array
		// (columns.go, elements.go).
		if index.Name != backends.DefaultIndexName {
			if err := createIndex(ctx, db, c, &index); err != nil {
				_, _ = db.ExecContext(ctx, fmt.Sprintf("DROP INDEX IF EXISTS %q", c.TableName+"_"+index.Name))
				_ = dropElements(ctx, db, index)
				_ = dropKeys(ctx, db, c, index)
				_ = r.indexesDrop(ctx, dbName, collectionName, created)
				return lazyerrors.Error(err)
			}

			created = append(created, index.Name)
			c.Settings.Indexes = append(c.Settings.Indexes, index)

			continue
		}

		q := "CREATE "

		if index.Unique {
			q += "UNIQUE "
		}

		q += "INDEX %q ON %q (%s)"

		columns := make([]string, len(index.Key))
		for i, key := range index.Key {
			fields := strings.Split(key.Field, ".")
			for j, f := range fields {
				fields[j] = fmt.Sprintf("%q", f)
			}

			columns[i] = fmt.Sprintf("%s->%s", DefaultColumn, strings.Join(fields, "->"))
			if key.Descending {
				columns[i] += " DESC"
			}
		}

		q = fmt.Sprintf(
			q,
			c.TableName+"_"+index.Name,
			c.TableName,
			strings.Join(columns, ", "),
		)

		if _, err := db.ExecContext(ctx, q); err != nil {
			_ = r.indexesDrop(ctx, dbName, collectionName, created)
			return lazyerrors.Error(err)
		}

		created = append(created, index.Name)
		c.Settings.Indexes = append(c.Settings.Indexes, index)
	}

	q := fmt.Sprintf("UPDATE %q SET settings = ? WHERE table_name = ?", metadataTableName)
	if _, err := db.ExecContext(ctx, q, c.Settings, c.TableName); err != nil {
		_ = r.indexesDrop(ctx, dbName, collectionName, created)
		return lazyerrors.Error(err)
	}

	r.colls[dbName][collectionName] = c

	return nil
}

// IndexesDrop removes given connection's indexes.
//
// Non-existing indexes are ignored.
//
// If database or collection does not exist, nil is returned.
func (r *Registry) IndexesDrop(ctx context.Context, dbName, collectionName string, indexNames []string) error {
	r.rw.Lock()
	defer r.rw.Unlock()

	return r.indexesDrop(ctx, dbName, collectionName, indexNames)
}

// indexesDrop removes given connection's indexes.
//
// Non-existing indexes are ignored.
//
// If database or collection does not exist, nil is returned.
//
// It does not hold the lock.
func (r *Registry) indexesDrop(ctx context.Context, dbName, collectionName string, indexNames []string) error {
	c := r.collectionGet(dbName, collectionName)
	if c == nil {
		return nil
	}

	db := r.DatabaseGetExisting(ctx, dbName)
	if db == nil {
		return nil
	}

	// twopc's dev server: the statements kept for the table (fsql's
	// prepared.go), if an index is dropped, as in indexesCreate.
	var changed bool

	defer func() {
		if changed {
			db.ForgetPrepared(c.TableName)
		}
	}()

	for _, name := range indexNames {
		i := slices.IndexFunc(c.Settings.Indexes, func(i IndexInfo) bool { return name == i.Name })
		if i < 0 {
			continue
		}

		changed = true

		q := fmt.Sprintf("DROP INDEX %q", c.TableName+"_"+name)
		if _, err := db.ExecContext(ctx, q); err != nil {
			return lazyerrors.Error(err)
		}

		// twopc's dev server: and its elements table (elements.go), and
		// the upkeep of the key columns no other index reads (columns.go).
		dropped := c.Settings.Indexes[i]
		if err := dropElements(ctx, db, dropped); err != nil {
			return lazyerrors.Error(err)
		}

		c.Settings.Indexes = slices.Delete(c.Settings.Indexes, i, i+1)

		if err := dropKeys(ctx, db, c, dropped); err != nil {
			return lazyerrors.Error(err)
		}
	}

	q := fmt.Sprintf("UPDATE %q SET settings = ? WHERE table_name = ?", metadataTableName)
	if _, err := db.ExecContext(ctx, q, c.Settings, c.TableName); err != nil {
		return lazyerrors.Error(err)
	}

	r.colls[dbName][collectionName] = c

	return nil
}

// IndexesElements is twopc's dev server's patch: it makes the elements
// tables of the named indexes of the collection that have none
// (elements.go), before a write puts an array in their first key.
func (r *Registry) IndexesElements(ctx context.Context, dbName, collectionName string, indexNames []string) error {
	r.rw.Lock()
	defer r.rw.Unlock()

	db := r.DatabaseGetExisting(ctx, dbName)
	c := r.collectionGet(dbName, collectionName)

	if db == nil || c == nil {
		return nil
	}

	var changed bool

	for i := range c.Settings.Indexes {
		index := &c.Settings.Indexes[i]
		if index.Elements != "" || !slices.Contains(indexNames, index.Name) {
			continue
		}

		if err := createElements(ctx, db, c, index); err != nil {
			return lazyerrors.Error(err)
		}

		changed = changed || index.Elements != ""
	}

	if !changed {
		return nil
	}

	// The statements kept for the table read the index without it.
	defer db.ForgetPrepared(c.TableName)

	q := fmt.Sprintf("UPDATE %q SET settings = ? WHERE table_name = ?", metadataTableName)
	if _, err := db.ExecContext(ctx, q, c.Settings, c.TableName); err != nil {
		return lazyerrors.Error(err)
	}

	r.colls[dbName][collectionName] = c

	return nil
}

// Describe implements prometheus.Collector.
func (r *Registry) Describe(ch chan<- *prometheus.Desc) {
	prometheus.DescribeByCollect(r, ch)
}

// Collect implements prometheus.Collector.
func (r *Registry) Collect(ch chan<- prometheus.Metric) {
	r.p.Collect(ch)

	r.rw.RLock()
	defer r.rw.RUnlock()

	ch <- prometheus.MustNewConstMetric(
		prometheus.NewDesc(
			prometheus.BuildFQName(namespace, subsystem, "databases"),
			"The current number of database in the registry.",
			nil, nil,
		),
		prometheus.GaugeValue,
		float64(len(r.colls)),
	)

	for db, colls := range r.colls {
		ch <- prometheus.MustNewConstMetric(
			prometheus.NewDesc(
				prometheus.BuildFQName(namespace, subsystem, "collections"),
				"The current number of collections in the registry.",
				[]string{"db"}, nil,
			),
			prometheus.GaugeValue,
			float64(len(colls)),
			db,
		)
	}
}

// check interfaces
var (
	_ prometheus.Collector = (*Registry)(nil)
)
