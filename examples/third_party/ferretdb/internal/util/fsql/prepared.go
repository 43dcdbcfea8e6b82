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

// twopc's dev server: prepared statements kept by their SQL text
// (examples/third_party/README.md, "Since issue 49, prepared statements").
//
// Without them every ExecContext and QueryContext of the SQLite backend
// parsed and prepared its statement (and, for a write to a table with
// triggers, compiled every trigger) and finalized it afterwards. A cached
// *sql.Stmt is prepared by database/sql once on each connection it runs on,
// and the SQLite driver (modernc.org/sqlite since v1.41.0) keeps the
// SQLite statement of a prepared *sql.Stmt and resets it after each run.
// SQLite itself prepares a kept statement again if the schema changed since
// (sqlite3_prepare_v2), so a kept statement never runs on a stale schema;
// ForgetPrepared frees those of a table whose schema changed.

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/FerretDB/FerretDB/internal/util/logging"
)

// maxPrepared is the most statements a DB keeps. A statement's text holds
// its table and its shape (the number of placeholders of an IN list or of
// an insert's rows), so a workload keeps a handful per collection; past
// this many (shapes that hardly repeat) the DB forgets them all and
// starts again.
const maxPrepared = 512

// PreparedStats counts the statements run through a DB's kept ones.
type PreparedStats struct {
	// Hits counts the runs that found their statement kept.
	Hits int64
	// Misses counts the runs that prepared their statement to keep it.
	Misses int64
	// Kept is the number of statements kept now.
	Kept int
}

// preparedStmts is a DB's kept statements.
type preparedStmts struct {
	// rw is held for reading while a kept statement runs outside a
	// transaction (a closed *sql.Stmt would fail it), and for writing to
	// close some. A transaction's use needs no lock: database/sql
	// prepares a closed statement again on the transaction's connection.
	rw sync.RWMutex

	mu      sync.Mutex // guards m and retired
	m       map[string]*preparedStmt
	retired []*sql.Stmt // forgotten when m was full, to close

	hits, misses atomic.Int64
	hasRetired   atomic.Bool // retired is not empty
}

// preparedStmt is a kept statement and the table it was kept for.
type preparedStmt struct {
	stmt  *sql.Stmt
	table string
}

// get returns the kept statement of query, preparing it on sqlDB and
// keeping it for table if there is none.
func (p *preparedStmts) get(ctx context.Context, sqlDB *sql.DB, table, query string) (*sql.Stmt, error) {
	p.mu.Lock()
	ps := p.m[query]
	p.mu.Unlock()

	if ps != nil {
		p.hits.Add(1)
		return ps.stmt, nil
	}

	// Prepared outside mu: it takes a connection, which may have to wait.
	stmt, err := sqlDB.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}

	p.misses.Add(1)

	p.mu.Lock()
	defer p.mu.Unlock()

	if other := p.m[query]; other != nil {
		// Another caller kept it meanwhile: use that one.
		_ = stmt.Close()
		return other.stmt, nil
	}

	if len(p.m) >= maxPrepared {
		// Closed by the next closeRetired: the caller may hold rw.
		for _, ps := range p.m {
			p.retired = append(p.retired, ps.stmt)
		}

		p.m = nil
		p.hasRetired.Store(true)
	}

	if p.m == nil {
		p.m = map[string]*preparedStmt{}
	}

	p.m[query] = &preparedStmt{stmt: stmt, table: table}

	return stmt, nil
}

// forget closes and forgets the kept statements of table, or all if table
// is empty. It waits for the runs of those statements under way outside
// transactions.
func (p *preparedStmts) forget(table string) {
	p.rw.Lock()
	defer p.rw.Unlock()

	p.mu.Lock()
	defer p.mu.Unlock()

	for q, ps := range p.m {
		if table == "" || ps.table == table {
			_ = ps.stmt.Close()
			delete(p.m, q)
		}
	}

	for _, stmt := range p.retired {
		_ = stmt.Close()
	}

	p.retired = nil
	p.hasRetired.Store(false)
}

// closeRetired closes the statements forgotten when p was full, if any.
// The caller must not hold rw.
func (p *preparedStmts) closeRetired() {
	if !p.hasRetired.Load() {
		return
	}

	p.rw.Lock()
	defer p.rw.Unlock()

	p.mu.Lock()
	defer p.mu.Unlock()

	for _, stmt := range p.retired {
		_ = stmt.Close()
	}

	p.retired = nil
	p.hasRetired.Store(false)
}

// stats returns the counts of p.
func (p *preparedStmts) stats() PreparedStats {
	p.mu.Lock()
	defer p.mu.Unlock()

	return PreparedStats{
		Hits:   p.hits.Load(),
		Misses: p.misses.Load(),
		Kept:   len(p.m),
	}
}

// exec runs query's kept statement (see get) with args.
func (p *preparedStmts) exec(ctx context.Context, sqlDB *sql.DB, table, query string, args []any) (sql.Result, error) {
	p.rw.RLock()
	defer p.rw.RUnlock()

	stmt, err := p.get(ctx, sqlDB, table, query)
	if err != nil {
		return nil, err
	}

	return stmt.ExecContext(ctx, args...)
}

// query runs query's kept statement (see get) with args.
func (p *preparedStmts) query(ctx context.Context, sqlDB *sql.DB, table, query string, args []any) (*sql.Rows, error) {
	p.rw.RLock()
	defer p.rw.RUnlock()

	stmt, err := p.get(ctx, sqlDB, table, query)
	if err != nil {
		return nil, err
	}

	// The rows keep the statement open until they are closed, even if
	// it is closed meanwhile.
	return stmt.QueryContext(ctx, args...)
}

// Prepared returns the statement of query kept for table (a table name the
// query reads or writes; see ForgetPrepared), preparing and keeping it if
// there is none, to run in a transaction with [Tx.ExecPrepared]. Get it
// before the transaction begins: preparing takes a connection of the pool.
//
// The statement is the DB's: do not close it.
func (db *DB) Prepared(ctx context.Context, table, query string) (*sql.Stmt, error) {
	stmt, err := db.stmts.get(ctx, db.sqlDB, table, query)
	db.stmts.closeRetired()

	return stmt, err
}

// ExecPrepared is ExecContext with the statement of query kept for table
// (see Prepared).
func (db *DB) ExecPrepared(ctx context.Context, table, query string, args ...any) (sql.Result, error) {
	start := time.Now()

	res, err := db.stmts.exec(ctx, db.sqlDB, table, query, args)
	logExec(ctx, db.l, query, args, res, start, err)
	db.stmts.closeRetired()

	return res, err
}

// QueryPrepared is QueryContext with the statement of query kept for table
// (see Prepared).
func (db *DB) QueryPrepared(ctx context.Context, table, query string, args ...any) (*Rows, error) {
	start := time.Now()

	rows, err := db.stmts.query(ctx, db.sqlDB, table, query, args)
	logExec(ctx, db.l, query, args, nil, start, err)
	db.stmts.closeRetired()

	return wrapRows(rows), err
}

// ForgetPrepared closes and forgets the statements kept for table, or all
// of the DB's if table is empty. Call it when a table's schema changed
// (created, dropped or renamed; an index or trigger made or dropped): a
// kept statement would still run right (SQLite prepares it again), but
// those of a dropped table would be kept for nothing.
func (db *DB) ForgetPrepared(table string) {
	db.stmts.forget(table)
}

// PreparedStats returns the counts of the DB's kept statements.
func (db *DB) PreparedStats() PreparedStats {
	return db.stmts.stats()
}

// ExecPrepared is ExecContext with stmt, a statement of the transaction's
// DB (see [DB.Prepared]), run on the transaction's connection. The
// transaction prepares it there once, if the DB has not yet.
func (tx *Tx) ExecPrepared(ctx context.Context, stmt *sql.Stmt, query string, args ...any) (sql.Result, error) {
	start := time.Now()

	txStmt := tx.stmts[stmt]
	if txStmt == nil {
		// Closed with the transaction.
		txStmt = tx.sqlTx.StmtContext(ctx, stmt)

		if tx.stmts == nil {
			tx.stmts = map[*sql.Stmt]*sql.Stmt{}
		}

		tx.stmts[stmt] = txStmt
	}

	res, err := txStmt.ExecContext(ctx, args...)

	logExec(ctx, tx.l, query, args, res, start, err)

	return res, err
}

// QueryRowPrepared is QueryRowContext with stmt, a statement of the
// transaction's DB (see [DB.Prepared]), run on the transaction's
// connection, as ExecPrepared runs one.
func (tx *Tx) QueryRowPrepared(ctx context.Context, stmt *sql.Stmt, args ...any) *sql.Row {
	txStmt := tx.stmts[stmt]
	if txStmt == nil {
		// Closed with the transaction.
		txStmt = tx.sqlTx.StmtContext(ctx, stmt)

		if tx.stmts == nil {
			tx.stmts = map[*sql.Stmt]*sql.Stmt{}
		}

		tx.stmts[stmt] = txStmt
	}

	return txStmt.QueryRowContext(ctx, args...)
}

// logExec logs a statement's run at the debug level, as ExecContext does,
// if that level is enabled.
func logExec(ctx context.Context, l *slog.Logger, query string, args []any, res sql.Result, start time.Time, err error) {
	if !l.Enabled(ctx, slog.LevelDebug) {
		return
	}

	fields := []any{slog.Any("args", args)}

	if res != nil {
		ra, _ := res.RowsAffected()
		fields = append(fields, slog.Int64("rows", ra))
	}

	fields = append(fields, slog.Duration("time", time.Since(start)), logging.Error(err))
	l.With(fields...).DebugContext(ctx, fmt.Sprintf("<<< %s", query))
}
