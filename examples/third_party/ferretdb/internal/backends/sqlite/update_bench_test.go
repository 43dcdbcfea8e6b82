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
	"database/sql"
	"fmt"
	"log/slog"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/FerretDB/FerretDB/internal/backends"
	"github.com/FerretDB/FerretDB/internal/backends/sqlite/metadata"
	"github.com/FerretDB/FerretDB/internal/types"
	"github.com/FerretDB/FerretDB/internal/util/must"
	"github.com/FerretDB/FerretDB/internal/util/state"
	"github.com/FerretDB/FerretDB/internal/util/testutil"
)

// BenchmarkUpdateAllIndexes is twopc's dev server's patch: what the
// backend's UpdateAll of one transaction document of the library's shape
// costs (the SQLite statement and its triggers, without the handler and the
// wire), on a collection with no index but _id's (indexes=none) or with
// the library's three indexes on its log (indexes=all), for an update that
// changes no indexed field (update=claim: claim and lastModified) and for
// a state move (update=state: state and lastModified). See
// metadata/columns.go. As on the dev server, SQLite does not flush
// commits (synchronous=OFF).
func BenchmarkUpdateAllIndexes(b *testing.B) {
	const n = 64

	for _, indexes := range []string{"none", "all"} {
		for _, update := range []string{"claim", "state"} {
			b.Run(fmt.Sprintf("indexes=%s/update=%s", indexes, update), func(b *testing.B) {
				ctx := testutil.Ctx(b)

				sp, err := state.NewProvider("")
				require.NoError(b, err)

				be, err := NewBackend(&NewBackendParams{
					URI: "file:" + b.TempDir() + "/?_pragma=synchronous(OFF)", L: slog.New(slog.DiscardHandler), P: sp, BatchSize: 100,
				})
				require.NoError(b, err)
				b.Cleanup(be.Close)

				db, err := be.Database("bench")
				require.NoError(b, err)

				coll, err := db.Collection("transactions")
				require.NoError(b, err)

				if indexes == "all" {
					key := func(fields ...string) []backends.IndexKeyPair {
						res := make([]backends.IndexKeyPair, len(fields))
						for i, f := range fields {
							res[i] = backends.IndexKeyPair{Field: f}
						}

						return res
					}

					_, err = coll.CreateIndexes(ctx, &backends.CreateIndexesParams{Indexes: []backends.IndexInfo{
						{Name: "state_1_created_1", Key: key("state", "created")},
						{Name: "accounts_1_committedAt_1", Key: key("accounts", "committedAt")},
						{Name: "accounts_1_created_1__id_1", Key: key("accounts", "created", "_id")},
					}})
					require.NoError(b, err)
				}

				now := time.Now().Truncate(time.Millisecond)
				docs := make([]*types.Document, n)

				for i := range docs {
					docs[i] = must.NotFail(types.NewDocument(
						"_id", types.NewObjectID(),
						"source", fmt.Sprintf("account-%04d", i),
						"destination", fmt.Sprintf("account-%04d", i+1),
						"value", int64(100),
						"state", "pending",
						"lastModified", now,
						"application", "bench-p0-w01",
						"claim", types.NewObjectID(),
						"created", now,
						"leaseMs", int64(30000),
						"accounts", must.NotFail(types.NewArray(
							fmt.Sprintf("0123456789abcdef0123456789abcdef:account-%04d", i),
							fmt.Sprintf("0123456789abcdef0123456789abcdef:account-%04d", i+1),
						)),
					))
				}

				_, err = coll.InsertAll(ctx, &backends.InsertAllParams{Docs: docs})
				require.NoError(b, err)

				// The process's CPU time is reported too (cpu-ns/op): on
				// a shared machine it varies less than the elapsed time.
				cpu := func() int64 {
					var ru syscall.Rusage
					require.NoError(b, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))

					return ru.Utime.Nano() + ru.Stime.Nano()
				}
				start := cpu()

				b.ResetTimer()

				for i := range b.N {
					doc := docs[i%n].DeepCopy()
					docs[i%n] = doc

					if update == "state" {
						doc.Set("state", [2]string{"applied", "pending"}[(i/n)%2])
					} else {
						doc.Set("claim", types.NewObjectID())
					}

					doc.Set("lastModified", now.Add(time.Duration(i)*time.Millisecond))

					res, err := coll.UpdateAll(ctx, &backends.UpdateAllParams{Docs: []*types.Document{doc}})
					if err != nil {
						b.Fatal(err)
					}

					if res.Updated != 1 {
						b.Fatalf("updated %d", res.Updated)
					}
				}

				b.StopTimer()
				b.ReportMetric(float64(cpu()-start)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}

// TestKeyTexts is twopc's dev server's patch: the key column values
// keyTexts computes for a document are those SQLite's -> gives, which the
// key columns hold, for every value it knows; it knows none it should not.
func TestKeyTexts(t *testing.T) {
	ctx := testutil.Ctx(t)

	sp, err := state.NewProvider("")
	require.NoError(t, err)

	r, err := metadata.NewRegistry(testutil.TestSQLiteURI(t, ""), 100, testutil.Logger(t), sp)
	require.NoError(t, err)
	t.Cleanup(r.Close)

	dbName, cName := testutil.DatabaseName(t), testutil.CollectionName(t)
	coll := newCollection(r, dbName, cName)

	oid := types.ObjectID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	date := time.Date(2026, 1, 2, 3, 4, 5, 6_000_000, time.UTC)
	values := map[string]any{
		"s":   "pending",
		"u":   "réglé",
		"e":   "a<b&\"c\"",
		"b":   true,
		"i32": int32(-7),
		"i64": int64(1) << 60,
		"d":   date,
		"o":   oid,
		"n":   types.Null,
		"a":   must.NotFail(types.NewArray("x", "y", true, int32(1), date, oid, types.Null)),
		"ae":  must.NotFail(types.NewArray()),
		"f":   1.5,
		"doc": must.NotFail(types.NewDocument("k", "v")),
		"ad":  must.NotFail(types.NewArray(must.NotFail(types.NewDocument("k", "v")))),
	}
	known := map[string]bool{"s": true, "u": true, "b": true, "i32": true, "i64": true, "d": true, "o": true, "n": true, "a": true, "ae": true, "m": true}

	var keys []metadata.KeyField
	var indexes []backends.IndexInfo

	for field := range known {
		indexes = append(indexes, backends.IndexInfo{Name: field + "_1", Key: []backends.IndexKeyPair{{Field: field}}})
	}

	for field := range values {
		if !known[field] {
			indexes = append(indexes, backends.IndexInfo{Name: field + "_1", Key: []backends.IndexKeyPair{{Field: field}}})
		}
	}

	_, err = coll.CreateIndexes(ctx, &backends.CreateIndexesParams{Indexes: indexes})
	require.NoError(t, err)

	doc := must.NotFail(types.NewDocument("_id", "k"))
	for field, v := range values {
		doc.Set(field, v)
	}

	_, err = coll.InsertAll(ctx, &backends.InsertAllParams{Docs: []*types.Document{doc}})
	require.NoError(t, err)

	meta := r.CollectionGet(ctx, dbName, cName)
	sqlDB := r.DatabaseGetExisting(ctx, dbName)

	for _, k := range metadata.UpdateKeyFields(meta.Settings.Indexes) {
		keys = append(keys, k)

		texts, ok := keyTexts(doc, []metadata.KeyField{k})
		assert.Equal(t, known[k.Field], ok, "%s known", k.Field)

		var stored, computed sql.NullString
		q := fmt.Sprintf(`SELECT %q, %s FROM %q`, k.Column, metadata.KeyExpr("", k.Field), meta.TableName)
		require.NoError(t, sqlDB.QueryRowContext(ctx, q).Scan(&stored, &computed))
		assert.Equal(t, computed, stored, "%s stored", k.Field)

		if ok {
			want := any(nil)
			if stored.Valid {
				want = stored.String
			}

			assert.Equal(t, want, texts[0], "%s text", k.Field)
		}
	}

	_, ok := keyTexts(doc, keys)
	assert.False(t, ok, "not all known")
}

// TestUpdatePaths is twopc's dev server's patch: UpdateAll writes a
// document of the library's shape by the guarded update when no key
// changes, by the update of the JSON column and one key column when one
// does, and by the plain update (and the trigger) when two do; each leaves
// the key columns holding the document's values.
func TestUpdatePaths(t *testing.T) {
	ctx := testutil.Ctx(t)

	sp, err := state.NewProvider("")
	require.NoError(t, err)

	r, err := metadata.NewRegistry(testutil.TestSQLiteURI(t, ""), 100, testutil.Logger(t), sp)
	require.NoError(t, err)
	t.Cleanup(r.Close)

	dbName, cName := testutil.DatabaseName(t), testutil.CollectionName(t)
	coll := newCollection(r, dbName, cName)

	key := func(fields ...string) []backends.IndexKeyPair {
		res := make([]backends.IndexKeyPair, len(fields))
		for i, f := range fields {
			res[i] = backends.IndexKeyPair{Field: f}
		}

		return res
	}

	_, err = coll.CreateIndexes(ctx, &backends.CreateIndexesParams{Indexes: []backends.IndexInfo{
		{Name: "state_1_created_1", Key: key("state", "created")},
		{Name: "accounts_1_committedAt_1", Key: key("accounts", "committedAt")},
		{Name: "accounts_1_created_1__id_1", Key: key("accounts", "created", "_id")},
	}})
	require.NoError(t, err)

	now := time.Now().Truncate(time.Millisecond)
	doc := must.NotFail(types.NewDocument(
		"_id", types.NewObjectID(), "state", "pending", "lastModified", now, "claim", types.NewObjectID(),
		"created", now, "accounts", must.NotFail(types.NewArray("a", "b")),
	))

	_, err = coll.InsertAll(ctx, &backends.InsertAllParams{Docs: []*types.Document{doc}})
	require.NoError(t, err)

	meta := r.CollectionGet(ctx, dbName, cName)
	sqlDB := r.DatabaseGetExisting(ctx, dbName)
	tag := metadata.UpdateKeysTag(metadata.UpdateKeyFields(meta.Settings.Indexes))

	version := func() string {
		var v sql.NullString
		q := fmt.Sprintf(`SELECT %q FROM %q`, metadata.KeysVersionColumn, meta.TableName)
		require.NoError(t, sqlDB.QueryRowContext(ctx, q).Scan(&v))

		return v.String
	}

	update := func(name string, set ...any) string {
		t.Helper()

		doc = doc.DeepCopy()
		for i := 0; i < len(set); i += 2 {
			doc.Set(set[i].(string), set[i+1])
		}

		res, err := coll.UpdateAll(ctx, &backends.UpdateAllParams{Docs: []*types.Document{doc}})
		require.NoError(t, err)
		require.EqualValues(t, 1, res.Updated, name)

		for _, k := range metadata.KeyFields(meta.Settings.Indexes) {
			var stale int
			q := fmt.Sprintf(`SELECT count(*) FROM %q WHERE %q IS NOT %s`, meta.TableName, k.Column, metadata.KeyExpr("", k.Field))
			require.NoError(t, sqlDB.QueryRowContext(ctx, q).Scan(&stale))
			assert.Zero(t, stale, "%s: %s", name, k.Field)
		}

		return version()
	}

	v1 := update("claim", "claim", types.NewObjectID(), "lastModified", now.Add(time.Second))
	assert.True(t, strings.HasPrefix(v1, tag+":"), "claim: guarded, %q", v1)

	v2 := update("state move", "state", "applied")
	assert.True(t, strings.HasPrefix(v2, tag+":"), "state move: one key column, %q", v2)
	assert.NotEqual(t, v1, v2)

	v3 := update("commit and state", "state", "done", "committedAt", now)
	assert.Equal(t, v2, v3, "two keys: the plain update")

	v4 := update("a double", "claim", 1.5)
	assert.True(t, strings.HasPrefix(v4, tag+":"), "claim: guarded, %q", v4)

	v5 := update("a key not known", "state", 2.5)
	assert.Equal(t, v4, v5, "a double in a key: the plain update")
}
