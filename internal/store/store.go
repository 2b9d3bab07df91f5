// Package store keeps smolvm's durable state in an embedded SQLite database.
package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"smolvm.dev/smolvm/errdefs"

	"modernc.org/sqlite" // pure-Go SQLite driver: keeps smolvm one static binary.
)

// FileName is the database file inside the data directory.
const FileName = "state.db"

// Store is an open state database. It is safe for concurrent use by many
// goroutines and by many smolvm processes at once: SQLite's WAL journal and
// busy timeout serialize writers without corrupting anything.
type Store struct {
	db *sql.DB
	// applied is each component's schema version as Open read it (and
	// Migrate raised it): a component already there needs no write
	// transaction, which every CLI command would otherwise take, waiting
	// for any other writer, for each component it opens.
	mu      sync.Mutex
	applied map[string]int
}

// Open opens (creating if needed) the database in dir. Each package that
// keeps tables applies its own schema with Migrate.
func Open(ctx context.Context, dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir %s: %w", dir, err)
	}
	path := filepath.Join(dir, FileName)
	if err := private(path); err != nil {
		return nil, err
	}
	// journal_size_limit bounds the WAL that keepWAL leaves between
	// commands. _txlock=immediate makes every transaction take the write lock up front,
	// so two CLIs racing on the same row wait instead of failing with
	// SQLITE_BUSY halfway through a read-modify-write.
	dsn := "file:" + path + "?_pragma=busy_timeout(15000)&_pragma=journal_mode(WAL)&_pragma=foreign_keys(1)&_pragma=synchronous(NORMAL)&_pragma=journal_size_limit(4194304)&_txlock=immediate"
	db := sql.OpenDB(keepWAL{dsn: dsn, d: &sqlite.Driver{}})
	s := &Store{db: db, applied: map[string]int{}}
	if err := s.readApplied(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return s, nil
}

// keepWAL opens connections that leave the -wal and -shm files in place
// when the last one closes (SQLITE_FCNTL_PERSIST_WAL; the WAL is
// checkpointed and emptied all the same). Otherwise every CLI command
// deleted both as it exited and the next one made them again: two
// unlinks, two creates and the index's initialisation per command.
type keepWAL struct {
	dsn string
	d   *sqlite.Driver
}

func (k keepWAL) Connect(context.Context) (driver.Conn, error) {
	c, err := k.d.Open(k.dsn)
	if err != nil {
		return nil, err
	}
	if fc, ok := c.(sqlite.FileControl); ok {
		if _, err := fc.FileControlPersistWAL("main", 1); err != nil {
			c.Close()
			return nil, fmt.Errorf("keep the WAL: %w", err)
		}
	}
	return c, nil
}

func (k keepWAL) Driver() driver.Driver { return k.d }

// private makes the database file, and its -wal and -shm files if they
// exist, readable by the owner only, creating the database file first if
// it is missing. SQLite makes a new file 0644 (less the umask), and the
// -wal and -shm files with the database file's mode, whenever it opens
// them later: so a database created 0600 keeps them 0600, and one that an
// older smolvm made is tightened here, with what it left beside it.
func private(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	f.Close()
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if err := os.Chmod(p, 0o600); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("open %s: %w", path, err)
		}
	}
	return nil
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// DB exposes the handle for packages that keep their own tables (registered
// through Migrate) next to the core ones.
func (s *Store) DB() *sql.DB { return s.db }

// readApplied makes the migrations table if it is missing and reads every
// component's version.
func (s *Store) readApplied(ctx context.Context) error {
	if _, err := s.db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS migrations (component TEXT PRIMARY KEY, applied INTEGER NOT NULL)`); err != nil {
		return err
	}
	rows, err := s.db.QueryContext(ctx, `SELECT component, applied FROM migrations`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var c string
		var n int
		if err := rows.Scan(&c, &n); err != nil {
			return err
		}
		s.applied[c] = n
	}
	return rows.Err()
}

// Migrate applies the statements of component's schema that have not been
// applied yet. Statements are append-only: a released statement is never
// edited, a change is a new statement at the end. A component already at
// its last statement costs no transaction.
func (s *Store) Migrate(ctx context.Context, component string, stmts []string) error {
	s.mu.Lock()
	applied := s.applied[component]
	s.mu.Unlock()
	if applied >= len(stmts) {
		return newer(component, applied, len(stmts))
	}
	err := s.Tx(ctx, func(tx *sql.Tx) error {
		err := tx.QueryRowContext(ctx, `SELECT applied FROM migrations WHERE component = ?`, component).Scan(&applied)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("migrate %s: %w", component, err)
		}
		if applied > len(stmts) {
			return newer(component, applied, len(stmts))
		}
		for i := applied; i < len(stmts); i++ {
			if _, err := tx.ExecContext(ctx, stmts[i]); err != nil {
				return fmt.Errorf("migrate %s step %d: %w", component, i+1, err)
			}
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO migrations(component, applied) VALUES(?, ?)
			ON CONFLICT(component) DO UPDATE SET applied = excluded.applied`, component, len(stmts))
		return err
	})
	if err == nil {
		s.mu.Lock()
		s.applied[component] = len(stmts)
		s.mu.Unlock()
	}
	return err
}

// newer refuses a database whose component is at a later schema than
// this smolvm's; nil when it is at the same one.
func newer(component string, applied, have int) error {
	if applied <= have {
		return nil
	}
	return fmt.Errorf("migrate %s: database is at schema %d, newer than this smolvm (%d): upgrade smolvm", component, applied, have)
}

// Tx runs fn in a write transaction, committing if fn returns nil.
func (s *Store) Tx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// Now is the store's clock, in UTC with the precision stored.
func Now() time.Time { return time.Now().UTC().Truncate(time.Millisecond) }

// Doc runs q, which selects one row of one JSON column, and decodes it.
// No row is an error wrapping notFound; a row that does not decode is
// errdefs.ErrCorrupt.
func Doc[T any](ctx context.Context, db *sql.DB, notFound error, q string, args ...any) (*T, error) {
	var data string
	err := db.QueryRowContext(ctx, q, args...).Scan(&data)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, notFound
	}
	if err != nil {
		return nil, err
	}
	v := new(T)
	if err := json.Unmarshal([]byte(data), v); err != nil {
		return nil, errdefs.New(errdefs.ErrCorrupt, err.Error())
	}
	return v, nil
}

// Docs runs q, which selects one JSON column, and decodes every row.
func Docs[T any](ctx context.Context, db *sql.DB, q string, args ...any) ([]*T, error) {
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*T
	for rows.Next() {
		var data string
		if err := rows.Scan(&data); err != nil {
			return nil, err
		}
		v := new(T)
		if err := json.Unmarshal([]byte(data), v); err != nil {
			return nil, errdefs.New(errdefs.ErrCorrupt, err.Error())
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// Querier is a *sql.DB or a *sql.Tx.
type Querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Strings runs q, which selects one text column, and returns every row's
// value.
func Strings(ctx context.Context, db Querier, q string, args ...any) ([]string, error) {
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}
