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

// twopc's dev server: the statements collection.go keeps (fsql's
// prepared.go), through a collection's life.

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/FerretDB/FerretDB/internal/backends"
	"github.com/FerretDB/FerretDB/internal/backends/sqlite/metadata"
	"github.com/FerretDB/FerretDB/internal/types"
	"github.com/FerretDB/FerretDB/internal/util/iterator"
	"github.com/FerretDB/FerretDB/internal/util/must"
	"github.com/FerretDB/FerretDB/internal/util/state"
	"github.com/FerretDB/FerretDB/internal/util/testutil"
)

func TestPreparedStatementsLifecycle(t *testing.T) {
	t.Parallel()

	ctx := testutil.Ctx(t)

	sp, err := state.NewProvider("")
	require.NoError(t, err)

	r, err := metadata.NewRegistry(testutil.TestSQLiteURI(t, ""), 100, testutil.Logger(t), sp)
	require.NoError(t, err)
	t.Cleanup(r.Close)

	dbName := testutil.DatabaseName(t)
	db := newDatabase(r, dbName)

	cName := testutil.CollectionName(t)
	coll := newCollection(r, dbName, cName)

	filter := func(i int) *types.Document {
		return must.NotFail(types.NewDocument("_id", types.ObjectID{byte(i)}, "state", "pending"))
	}

	// run inserts, reads by _id, updates and deletes, n of each.
	run := func(t *testing.T, n int) {
		t.Helper()

		for i := range n {
			doc := must.NotFail(types.NewDocument("_id", types.ObjectID{byte(i)}, "state", "pending", "accounts", must.NotFail(types.NewArray("a", "b"))))
			_, err := coll.InsertAll(ctx, &backends.InsertAllParams{Docs: []*types.Document{doc}})
			require.NoError(t, err)

			res, err := coll.Query(ctx, &backends.QueryParams{Filter: filter(i)})
			require.NoError(t, err)

			docs, err := iterator.ConsumeValues(res.Iter)
			require.NoError(t, err)
			require.Len(t, docs, 1)

			docs[0].Set("state", "applied")

			up, err := coll.UpdateAll(ctx, &backends.UpdateAllParams{Docs: docs})
			require.NoError(t, err)
			require.Equal(t, int32(1), up.Updated)
		}

		for i := range n {
			del, err := coll.DeleteAll(ctx, &backends.DeleteAllParams{IDs: []any{types.ObjectID{byte(i)}}})
			require.NoError(t, err)
			require.Equal(t, int32(1), del.Deleted)
		}
	}

	run(t, 10)

	sqlDB := r.DatabaseGetExisting(ctx, dbName)
	stats := sqlDB.PreparedStats()
	assert.Equal(t, 4, stats.Kept, "insert, read, update and delete")
	assert.Equal(t, int64(4), stats.Misses)
	assert.Equal(t, int64(36), stats.Hits)

	// An index forgets the table's statements; the writes then keep its
	// elements table (metadata/elements.go) by its triggers.
	_, err = coll.CreateIndexes(ctx, &backends.CreateIndexesParams{Indexes: []backends.IndexInfo{
		{Name: "accounts_1", Key: []backends.IndexKeyPair{{Field: "accounts"}}},
	}})
	require.NoError(t, err)
	assert.Equal(t, 0, sqlDB.PreparedStats().Kept)

	run(t, 10)
	assert.Equal(t, 7, sqlDB.PreparedStats().Kept,
		"and the update guarded by the key columns (metadata/columns.go), the read of the key columns and the update of one")

	res, err := coll.Query(ctx, &backends.QueryParams{Filter: must.NotFail(types.NewDocument("accounts", "a"))})
	require.NoError(t, err)

	docs, err := iterator.ConsumeValues(res.Iter)
	require.NoError(t, err)
	assert.Empty(t, docs)
	assert.Equal(t, 8, sqlDB.PreparedStats().Kept, "and the read by the index")

	_, err = coll.DropIndexes(ctx, &backends.DropIndexesParams{Indexes: []string{"accounts_1"}})
	require.NoError(t, err)
	assert.Equal(t, 0, sqlDB.PreparedStats().Kept)

	run(t, 3)
	assert.Equal(t, 4, sqlDB.PreparedStats().Kept)

	// Dropped and made again: the same table name, statements kept anew.
	require.NoError(t, db.DropCollection(ctx, &backends.DropCollectionParams{Name: cName}))
	assert.Equal(t, 0, sqlDB.PreparedStats().Kept)

	run(t, 3)
	assert.Equal(t, 4, sqlDB.PreparedStats().Kept)
}
