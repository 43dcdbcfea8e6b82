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

package fsql

// twopc's dev server: tests of prepared.go.

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite" // register database/sql driver
)

// countingDriver wraps the SQLite driver and counts the statements it
// prepares: each PrepareContext, and each ExecContext or QueryContext of a
// connection (which prepares its statement, runs it and finalizes it).
// The driver's own BEGIN and COMMIT are not counted.
type countingDriver struct {
	driver.Driver
	prepares atomic.Int64
}

func (d *countingDriver) Open(name string) (driver.Conn, error) {
	c, err := d.Driver.Open(name)
	if err != nil {
		return nil, err
	}

	return &countingConn{Conn: c, d: d}, nil
}

type countingConn struct {
	driver.Conn
	d *countingDriver
}

func (c *countingConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	c.d.prepares.Add(1)
	return c.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, query)
}

func (c *countingConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	c.d.prepares.Add(1)
	return c.Conn.(driver.ExecerContext).ExecContext(ctx, query, args)
}

func (c *countingConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	c.d.prepares.Add(1)
	return c.Conn.(driver.QueryerContext).QueryContext(ctx, query, args)
}

func (c *countingConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	return c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
}

func (c *countingConn) ResetSession(ctx context.Context) error {
	return c.Conn.(driver.SessionResetter).ResetSession(ctx)
}

func (c *countingConn) IsValid() bool {
	return c.Conn.(driver.Validator).IsValid()
}

var (
	countingOnce sync.Once
	counting     *countingDriver
)

// openCounting opens a new SQLite database in a temporary directory through
// the counting driver, with a table t (id, v) of n rows and, if triggers,
// three triggers on its updates that write to another table, as the elements
// tables of the dev server's indexes do.
func openCounting(tb testing.TB, n int, triggers bool) (*DB, *countingDriver) {
	tb.Helper()

	countingOnce.Do(func() {
		db, err := sql.Open("sqlite", ":memory:")
		if err != nil {
			panic(err)
		}

		counting = &countingDriver{Driver: db.Driver()}
		_ = db.Close()

		sql.Register("sqlite-counting", counting)
	})

	uri := "file:" + filepath.Join(tb.TempDir(), "test.sqlite") + "?_pragma=journal_mode(wal)&_pragma=busy_timeout(10000)&_pragma=synchronous(off)"
	sqlDB, err := sql.Open("sqlite-counting", uri)
	require.NoError(tb, err)

	db := WrapDB(sqlDB, "test", slog.New(slog.NewTextHandler(io.Discard, nil)))
	tb.Cleanup(func() { require.NoError(tb, db.Close()) })

	ctx := context.Background()

	_, err = db.ExecContext(ctx, `CREATE TABLE t (id TEXT PRIMARY KEY, v TEXT NOT NULL)`)
	require.NoError(tb, err)

	_, err = db.ExecContext(ctx, `CREATE TABLE e (id TEXT, v TEXT)`)
	require.NoError(tb, err)

	if triggers {
		for i := range 3 {
			q := fmt.Sprintf(`CREATE TRIGGER t_%d AFTER UPDATE ON t WHEN json_valid(NEW.v) AND NEW.v->'$.a%d' IS NOT NULL BEGIN
				DELETE FROM e WHERE id = OLD.id;
				INSERT INTO e SELECT NEW.id, value FROM json_each(NEW.v, '$.a%d');
			END`, i, i, i)
			_, err = db.ExecContext(ctx, q)
			require.NoError(tb, err)
		}
	}

	for i := range n {
		_, err = db.ExecContext(ctx, `INSERT INTO t (id, v) VALUES (?, ?)`, fmt.Sprint(i), `{"n":0}`)
		require.NoError(tb, err)
	}

	return db, counting
}

// updateInTx updates row id of t as the SQLite backend's UpdateAll does,
// in a transaction, with a kept statement if prepared.
func updateInTx(ctx context.Context, db *DB, prepared bool, id, v string) error {
	const q = `UPDATE t SET v = ? WHERE id = ?`

	var stmt *sql.Stmt

	if prepared {
		var err error
		if stmt, err = db.Prepared(ctx, "t", q); err != nil {
			return err
		}
	}

	return db.InTransaction(ctx, func(tx *Tx) error {
		var res sql.Result
		var err error

		if prepared {
			res, err = tx.ExecPrepared(ctx, stmt, q, v, id)
		} else {
			res, err = tx.ExecContext(ctx, q, v, id)
		}

		if err != nil {
			return err
		}

		if n, _ := res.RowsAffected(); n != 1 {
			return fmt.Errorf("updated %d rows", n)
		}

		return nil
	})
}

// readV reads row id of t with a kept statement.
func readV(ctx context.Context, db *DB, id string) (string, error) {
	rows, err := db.QueryPrepared(ctx, "t", `SELECT v FROM t WHERE id = ?`, id)
	if err != nil {
		return "", err
	}

	defer rows.Close()

	var v string
	if rows.Next() {
		err = rows.Scan(&v)
	}

	if err == nil {
		err = rows.Err()
	}

	return v, err
}

func TestPreparedOncePerConnection(t *testing.T) {
	ctx := context.Background()
	db, d := openCounting(t, 10, true)

	start := d.prepares.Load()

	for i := range 100 {
		require.NoError(t, updateInTx(ctx, db, true, fmt.Sprint(i%10), fmt.Sprintf(`{"n":%d,"a0":["x"]}`, i)))

		v, err := readV(ctx, db, fmt.Sprint(i%10))
		require.NoError(t, err)
		assert.Equal(t, fmt.Sprintf(`{"n":%d,"a0":["x"]}`, i), v)
	}

	// Two statements, each prepared on the few connections it ran on.
	conns := db.sqlDB.Stats().OpenConnections
	prepares := d.prepares.Load() - start
	assert.LessOrEqual(t, prepares, int64(2*conns), "%d connections", conns)

	stats := db.PreparedStats()
	assert.Equal(t, int64(2), stats.Misses)
	assert.Equal(t, int64(198), stats.Hits)
	assert.Equal(t, 2, stats.Kept)
}

// TestPreparedSchemaChange checks that a kept statement runs on the schema
// of the moment, forgotten or not: SQLite prepares it again.
func TestPreparedSchemaChange(t *testing.T) {
	ctx := context.Background()
	db, _ := openCounting(t, 3, false)

	require.NoError(t, updateInTx(ctx, db, true, "1", `{"a0":["x","y"]}`))

	// A trigger made after the statement was kept fires.
	_, err := db.ExecContext(ctx, `CREATE TRIGGER t_x AFTER UPDATE ON t BEGIN INSERT INTO e SELECT NEW.id, value FROM json_each(NEW.v, '$.a0'); END`)
	require.NoError(t, err)

	require.NoError(t, updateInTx(ctx, db, true, "1", `{"a0":["z"]}`))

	var n int
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM e WHERE id = '1' AND v = 'z'`).Scan(&n))
	assert.Equal(t, 1, n)

	// The table dropped and made again, with another column first.
	_, err = db.ExecContext(ctx, `DROP TABLE t`)
	require.NoError(t, err)

	_, err = readV(ctx, db, "1")
	require.ErrorContains(t, err, "no such table")

	_, err = db.ExecContext(ctx, `CREATE TABLE t (x INTEGER, v TEXT NOT NULL, id TEXT PRIMARY KEY)`)
	require.NoError(t, err)

	_, err = db.ExecContext(ctx, `INSERT INTO t (x, v, id) VALUES (7, 'w', '1')`)
	require.NoError(t, err)

	v, err := readV(ctx, db, "1")
	require.NoError(t, err)
	assert.Equal(t, "w", v)

	// Forgotten while a transaction holds one: both still run.
	stmt, err := db.Prepared(ctx, "t", `UPDATE t SET v = ? WHERE id = ?`)
	require.NoError(t, err)

	err = db.InTransaction(ctx, func(tx *Tx) error {
		db.ForgetPrepared("t")

		_, err := tx.ExecPrepared(ctx, stmt, `UPDATE t SET v = ? WHERE id = ?`, "u", "1")
		return err
	})
	require.NoError(t, err)

	db.ForgetPrepared("t")

	err = db.InTransaction(ctx, func(tx *Tx) error {
		_, err := tx.ExecPrepared(ctx, stmt, `UPDATE t SET v = ? WHERE id = ?`, "s", "1")
		return err
	})
	require.NoError(t, err)

	v, err = readV(ctx, db, "1")
	require.NoError(t, err)
	assert.Equal(t, "s", v)
	assert.Equal(t, 1, db.PreparedStats().Kept)
}

// TestPreparedWhileRowsOpen checks that a kept query runs while rows of the
// same statement are open, and writes go on meanwhile: each runs on a
// connection of its own.
func TestPreparedWhileRowsOpen(t *testing.T) {
	ctx := context.Background()
	db, _ := openCounting(t, 5, true)

	const q = `SELECT id, v FROM t ORDER BY id`

	outer, err := db.QueryPrepared(ctx, "t", q)
	require.NoError(t, err)

	var read int

	for outer.Next() {
		var id, v string
		require.NoError(t, outer.Scan(&id, &v))

		inner, err := db.QueryPrepared(ctx, "t", q)
		require.NoError(t, err)

		var n int
		for inner.Next() {
			n++
		}

		require.NoError(t, inner.Err())
		require.NoError(t, inner.Close())
		assert.Equal(t, 5, n)

		require.NoError(t, updateInTx(ctx, db, true, id, `{"a1":["q"]}`))

		read++
	}

	require.NoError(t, outer.Err())
	require.NoError(t, outer.Close())
	assert.Equal(t, 5, read)

	v, err := readV(ctx, db, "4")
	require.NoError(t, err)
	assert.Equal(t, `{"a1":["q"]}`, v)
}

// TestPreparedConcurrent runs kept statements from several goroutines while
// others forget them and change the schema.
func TestPreparedConcurrent(t *testing.T) {
	ctx := context.Background()
	db, _ := openCounting(t, 16, true)

	const n = 200

	var wg sync.WaitGroup

	errs := make(chan error, 8)

	for g := range 4 {
		wg.Add(1)

		go func() {
			defer wg.Done()

			for i := range n {
				id := fmt.Sprint((g*n + i) % 16)

				if err := updateInTx(ctx, db, true, id, fmt.Sprintf(`{"a2":["%d"]}`, i)); err != nil {
					errs <- err
					return
				}

				if _, err := readV(ctx, db, id); err != nil {
					errs <- err
					return
				}
			}
		}()
	}

	wg.Add(1)

	go func() {
		defer wg.Done()

		for i := range n / 4 {
			db.ForgetPrepared("t")

			q := fmt.Sprintf(`CREATE INDEX t_%d ON t (v)`, i)
			if i%2 == 1 {
				q = fmt.Sprintf(`DROP INDEX t_%d`, i-1)
			}

			if _, err := db.ExecContext(ctx, q); err != nil {
				errs <- err
				return
			}
		}
	}()

	wg.Wait()
	close(errs)

	for err := range errs {
		t.Error(err)
	}

	stats := db.PreparedStats()
	assert.Equal(t, int64(4*n*2), stats.Hits+stats.Misses)
}

// TestPreparedFull checks that statements past maxPrepared run, and that
// the DB then keeps the latest ones.
func TestPreparedFull(t *testing.T) {
	ctx := context.Background()
	db, _ := openCounting(t, 1, false)

	for i := range maxPrepared + 10 {
		rows, err := db.QueryPrepared(ctx, "t", fmt.Sprintf(`SELECT v FROM t WHERE id = ? AND %d = %d`, i, i), "0")
		require.NoError(t, err)
		require.True(t, rows.Next())
		require.NoError(t, rows.Close())
	}

	stats := db.PreparedStats()
	assert.Equal(t, int64(maxPrepared+10), stats.Misses)
	assert.Equal(t, 10, stats.Kept)
}

// BenchmarkPreparedUpdate measures an update by primary key in a
// transaction, as the SQLite backend's UpdateAll runs it, prepared for
// each run (as before prepared.go) or kept, on a table without and with
// three triggers; prepares/op counts the driver's preparations (not its
// BEGIN and COMMIT).
func BenchmarkPreparedUpdate(b *testing.B) {
	for _, triggers := range []bool{false, true} {
		for _, prepared := range []bool{false, true} {
			b.Run(fmt.Sprintf("triggers=%t/kept=%t", triggers, prepared), func(b *testing.B) {
				ctx := context.Background()
				db, d := openCounting(b, 64, triggers)

				start := d.prepares.Load()

				b.ResetTimer()

				for i := range b.N {
					if err := updateInTx(ctx, db, prepared, fmt.Sprint(i%64), fmt.Sprintf(`{"n":%d}`, i)); err != nil {
						b.Fatal(err)
					}
				}

				b.StopTimer()
				b.ReportMetric(float64(d.prepares.Load()-start)/float64(b.N), "prepares/op")
			})
		}
	}
}
