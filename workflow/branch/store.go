package branch

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/internal/store"
)

// ErrRunNotFound is returned for a run ID the state database does not hold.
var ErrRunNotFound = errdefs.New(errdefs.ErrNotFound, "no such branch run")

// Store keeps runs, their branches and their merge-queue steps in the
// state database, each written as soon as it changes, so a killed smolvm
// loses no finished branch.
type Store struct{ db *sql.DB }

var schema = []string{
	`CREATE TABLE branch_runs (id TEXT PRIMARY KEY, created INTEGER NOT NULL, data TEXT NOT NULL)`,
	`CREATE TABLE branch_branches (run TEXT NOT NULL, k INTEGER NOT NULL, data TEXT NOT NULL, PRIMARY KEY (run, k))`,
	`CREATE TABLE branch_steps (run TEXT NOT NULL, n INTEGER NOT NULL, data TEXT NOT NULL, PRIMARY KEY (run, n))`,
}

// OpenStore applies the schema to st.
func OpenStore(ctx context.Context, st *store.Store) (*Store, error) {
	if err := st.Migrate(ctx, "branch", schema); err != nil {
		return nil, err
	}
	return &Store{db: st.DB()}, nil
}

func (s *Store) put(ctx context.Context, q string, key1 string, key2 int64, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = s.db.ExecContext(context.WithoutCancel(ctx), q, key1, key2, string(data))
	return err
}

// SaveRun writes r, replacing what was there.
func (s *Store) SaveRun(ctx context.Context, r *Run) error {
	err := s.put(ctx, `INSERT INTO branch_runs (id, created, data) VALUES (?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET data = excluded.data`, r.ID, r.Created.UnixMilli(), r)
	if err != nil {
		return fmt.Errorf("save branch run %s: %w", r.ID, err)
	}
	return nil
}

// SaveBranch writes b, replacing what was there.
func (s *Store) SaveBranch(ctx context.Context, b *Branch) error {
	err := s.put(ctx, `INSERT INTO branch_branches (run, k, data) VALUES (?, ?, ?)
		ON CONFLICT (run, k) DO UPDATE SET data = excluded.data`, b.Run, int64(b.K), b)
	if err != nil {
		return fmt.Errorf("save branch %d of %s: %w", b.K, b.Run, err)
	}
	return nil
}

// AddStep appends a merge-queue step to run's log.
func (s *Store) AddStep(ctx context.Context, run string, st *Step) error {
	err := s.db.QueryRowContext(context.WithoutCancel(ctx),
		`SELECT COALESCE(MAX(n), 0) + 1 FROM branch_steps WHERE run = ?`, run).Scan(&st.N)
	if err == nil {
		err = s.put(ctx, `INSERT INTO branch_steps (run, n, data) VALUES (?, ?, ?)`, run, int64(st.N), st)
	}
	if err != nil {
		return fmt.Errorf("save step of %s: %w", run, err)
	}
	return nil
}

// Run returns a run.
func (s *Store) Run(ctx context.Context, id string) (*Run, error) {
	r, err := store.Doc[Run](ctx, s.db, ErrRunNotFound, `SELECT data FROM branch_runs WHERE id = ?`, id)
	if err != nil {
		return nil, fmt.Errorf("branch run %s: %w", id, err)
	}
	return r, nil
}

// Runs lists the runs, newest first.
func (s *Store) Runs(ctx context.Context) ([]*Run, error) {
	return list[Run](ctx, s.db, `SELECT data FROM branch_runs ORDER BY created DESC`)
}

// Branches returns run's branches in order.
func (s *Store) Branches(ctx context.Context, run string) ([]*Branch, error) {
	return list[Branch](ctx, s.db, `SELECT data FROM branch_branches WHERE run = ? ORDER BY k`, run)
}

// Steps returns run's merge-queue steps in order.
func (s *Store) Steps(ctx context.Context, run string) ([]*Step, error) {
	return list[Step](ctx, s.db, `SELECT data FROM branch_steps WHERE run = ? ORDER BY n`, run)
}

func list[T any](ctx context.Context, db *sql.DB, q string, args ...any) ([]*T, error) {
	out, err := store.Docs[T](ctx, db, q, args...)
	if err != nil {
		return nil, fmt.Errorf("branch state: %w", err)
	}
	return out, nil
}
