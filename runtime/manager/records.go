package manager

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"smolvm.dev/smolvm/internal/store"
	"smolvm.dev/smolvm/runtime/backend"
	"smolvm.dev/smolvm/runtime/snapshot"
	"smolvm.dev/smolvm/runtime/tenant"
	"smolvm.dev/smolvm/sandbox"
)

var schema = []string{
	`CREATE TABLE sandboxes (
		id TEXT PRIMARY KEY,
		name TEXT NOT NULL UNIQUE,
		image TEXT NOT NULL,
		image_id TEXT NOT NULL,
		backend TEXT NOT NULL,
		state TEXT NOT NULL,
		config TEXT NOT NULL,
		spec TEXT NOT NULL,
		created_at INTEGER NOT NULL,
		started_at INTEGER,
		finished_at INTEGER,
		expires_at INTEGER,
		exit_code INTEGER,
		reason TEXT NOT NULL DEFAULT ''
	)`,
	`CREATE INDEX sandboxes_image ON sandboxes(image_id)`,
	`ALTER TABLE sandboxes ADD COLUMN snapshot TEXT NOT NULL DEFAULT ''`,
	`ALTER TABLE sandboxes ADD COLUMN forked_from TEXT NOT NULL DEFAULT ''`,
	`CREATE INDEX sandboxes_snapshot ON sandboxes(snapshot)`,
	`ALTER TABLE sandboxes ADD COLUMN pool TEXT NOT NULL DEFAULT ''`,
	`CREATE INDEX sandboxes_pool ON sandboxes(pool, state)`,
	`CREATE TABLE pools (
		name TEXT PRIMARY KEY,
		image TEXT NOT NULL,
		size INTEGER NOT NULL,
		memory_budget INTEGER NOT NULL,
		config TEXT NOT NULL,
		created_at INTEGER NOT NULL
	)`,
	// Removed sandboxes, so lookups can say "expired at …" or "removed
	// at …" rather than "never existed" (see notFound).
	`CREATE TABLE sandbox_tombstones (
		id TEXT PRIMARY KEY,
		name TEXT NOT NULL,
		expired INTEGER NOT NULL,
		reason TEXT NOT NULL,
		ended_at INTEGER NOT NULL,
		removed_at INTEGER NOT NULL
	)`,
	`CREATE INDEX sandbox_tombstones_name ON sandbox_tombstones(name)`,
	`ALTER TABLE pools ADD COLUMN targets INTEGER NOT NULL DEFAULT 0`,
	`ALTER TABLE pools ADD COLUMN backend TEXT NOT NULL DEFAULT ''`,
	// A hot pool holds copies restored from snapshot, paused.
	`ALTER TABLE pools ADD COLUMN snapshot TEXT NOT NULL DEFAULT ''`,
	`ALTER TABLE pools ADD COLUMN hot INTEGER NOT NULL DEFAULT 0`,
	// The tenant (runtime/tenant) that owns a sandbox, pool or tombstone;
	// '' is the admin's.
	`ALTER TABLE sandboxes ADD COLUMN tenant TEXT NOT NULL DEFAULT ''`,
	`ALTER TABLE pools ADD COLUMN tenant TEXT NOT NULL DEFAULT ''`,
	`ALTER TABLE sandbox_tombstones ADD COLUMN tenant TEXT NOT NULL DEFAULT ''`,
	// Templates (templates.go): the row is a sandbox.Template as JSON;
	// the columns are what lookups and the in-use checks filter by.
	`CREATE TABLE templates (
		tenant TEXT NOT NULL,
		name TEXT NOT NULL,
		public INTEGER NOT NULL,
		snapshot TEXT NOT NULL,
		image_id TEXT NOT NULL,
		doc TEXT NOT NULL,
		PRIMARY KEY (tenant, name)
	)`,
	`CREATE INDEX templates_snapshot ON templates(snapshot)`,
}

const columns = `id, name, image, image_id, backend, state, config, spec, created_at, started_at, finished_at, expires_at, exit_code, reason, snapshot, forked_from, pool, tenant`

// record is a Sandbox plus the backend spec needed to act on it.
type record struct {
	sandbox.Sandbox
	spec backend.Spec
	// be is the backend the record names (see bind); nil in a listed
	// record if this manager has none by that name.
	be backend.Backend
	// pool names the pool a ready, unclaimed sandbox waits in; such
	// sandboxes are not listed.
	pool string
	// target names the pool a restore target was taken from, to refill.
	target string
}

type scanner interface{ Scan(...any) error }

func scanRecord(row scanner) (*record, error) {
	var (
		r                      record
		cfg, spec              string
		created                int64
		started, finished, exp sql.NullInt64
		code                   sql.NullInt64
	)
	err := row.Scan(&r.ID, &r.Name, &r.Image, &r.ImageID, &r.Backend, &r.State, &cfg, &spec,
		&created, &started, &finished, &exp, &code, &r.Reason, &r.Snapshot, &r.ForkedFrom, &r.pool, &r.Tenant)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(cfg), &r.Config); err != nil {
		return nil, fmt.Errorf("sandbox %s: config: %w", r.ID, err)
	}
	if err := json.Unmarshal([]byte(spec), &r.spec); err != nil {
		return nil, fmt.Errorf("sandbox %s: spec: %w", r.ID, err)
	}
	r.CreatedAt = time.UnixMilli(created).UTC()
	r.StartedAt, r.FinishedAt, r.ExpiresAt = msTime(started), msTime(finished), msTime(exp)
	if code.Valid {
		c := int(code.Int64)
		r.ExitCode = &c
	}
	return &r, nil
}

func msTime(v sql.NullInt64) *time.Time {
	if !v.Valid {
		return nil
	}
	t := time.UnixMilli(v.Int64).UTC()
	return &t
}

func msVal(t *time.Time) any {
	if t == nil {
		return nil
	}
	return t.UnixMilli()
}

func insert(ctx context.Context, st *store.Store, r *record) error {
	cfg, err := json.Marshal(r.Config)
	if err != nil {
		return err
	}
	spec, err := json.Marshal(r.spec)
	if err != nil {
		return err
	}
	_, err = st.DB().ExecContext(ctx, `INSERT INTO sandboxes (`+columns+`) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`,
		r.ID, r.Name, r.Image, r.ImageID, r.Backend, r.State, string(cfg), string(spec),
		r.CreatedAt.UnixMilli(), msVal(r.StartedAt), msVal(r.FinishedAt), msVal(r.ExpiresAt), exitVal(r.ExitCode), r.Reason, r.Snapshot, r.ForkedFrom, r.pool, r.Tenant)
	return nameErr(r, err)
}

// nameErr tells a taken name from other failures to write r.
func nameErr(r *record, err error) error {
	if err != nil && strings.Contains(err.Error(), "UNIQUE constraint failed: sandboxes.name") {
		return fmt.Errorf("%w: %q", sandbox.ErrNameInUse, r.Name)
	}
	return err
}

func exitVal(c *int) any {
	if c == nil {
		return nil
	}
	return *c
}

// update writes the mutable fields of r.
func update(ctx context.Context, st *store.Store, r *record) error {
	cfg, err := json.Marshal(r.Config)
	if err != nil {
		return err
	}
	spec, err := json.Marshal(r.spec)
	if err != nil {
		return err
	}
	_, err = st.DB().ExecContext(ctx, `UPDATE sandboxes SET name=?, image=?, config=?, created_at=?, state=?, spec=?, started_at=?, finished_at=?, expires_at=?, exit_code=?, reason=?, snapshot=?, forked_from=?, pool=?, tenant=? WHERE id=?`,
		r.Name, r.Image, string(cfg), r.CreatedAt.UnixMilli(), r.State, string(spec), msVal(r.StartedAt), msVal(r.FinishedAt), msVal(r.ExpiresAt), exitVal(r.ExitCode), r.Reason, r.Snapshot, r.ForkedFrom, r.pool, r.Tenant, r.ID)
	return nameErr(r, err)
}

// execer is a database or a transaction.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// deleteRecord forgets a sandbox record; removeRecord buries it first
// when the sandbox really existed.
func deleteRecord(ctx context.Context, db execer, id string) error {
	_, err := db.ExecContext(ctx, `DELETE FROM sandboxes WHERE id=?`, id)
	return err
}

// bind sets r's backend: the one its record names.
func (m *Manager) bind(r *record) error {
	be, err := m.backends.Get(r.Backend)
	if err != nil {
		return fmt.Errorf("sandbox %s: %w", r.Name, err)
	}
	r.be = be
	return nil
}

// lookup finds a sandbox by exact name, exact ID, or unique ID prefix,
// with its backend.
func (m *Manager) lookup(ctx context.Context, ref string) (*record, error) {
	r, err := lookup(ctx, m.st, ref)
	if err != nil {
		return nil, err
	}
	if err := m.bind(r); err != nil {
		return nil, err
	}
	return r, nil
}

// listRecords is listRecords with each record's backend, where this
// manager has it (a nil be otherwise).
func (m *Manager) listRecords(ctx context.Context, pool string, all bool) ([]*record, error) {
	rs, err := listRecords(ctx, m.st, pool, all)
	for _, r := range rs {
		m.bind(r)
	}
	return rs, err
}

// lookup finds a sandbox by exact ID, exact name, or unique ID prefix,
// among those ctx's tenant owns (all of them for an unscoped ctx). This is
// where tenants are kept apart: another tenant's sandbox is not found,
// with the very error of one that never existed. An ID wins over a name
// spelled like it (names may be 12 hex digits), so that a sandbox's ID
// always reaches it.
func lookup(ctx context.Context, st *store.Store, ref string) (*record, error) {
	if err := validName(ref); err != nil {
		return nil, err
	}
	owner, scoped := tenant.Of(ctx)
	r, err := scanRecord(st.DB().QueryRowContext(ctx, `SELECT `+columns+` FROM sandboxes WHERE (name=? OR id=?) AND (NOT ? OR tenant=?) ORDER BY id=? DESC LIMIT 1`, ref, ref, scoped, owner, ref))
	if err == nil {
		return r, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return nil, err
	}
	if len(ref) >= 4 && isHex(ref) {
		rows, err := st.DB().QueryContext(ctx, `SELECT `+columns+` FROM sandboxes WHERE id LIKE ? AND (NOT ? OR tenant=?) LIMIT 2`, ref+"%", scoped, owner)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		var found []*record
		for rows.Next() {
			r, err := scanRecord(rows)
			if err != nil {
				return nil, err
			}
			found = append(found, r)
		}
		if len(found) == 1 {
			return found[0], nil
		}
		if len(found) > 1 {
			return nil, fmt.Errorf("%w: %q matches more than one sandbox ID", sandbox.ErrNotFound, ref)
		}
	}
	return nil, notFound(ctx, st, ref)
}

func isHex(s string) bool {
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// ImageInUse reports whether any sandbox, in any state, or any template
// was made from the image with this ID. Image removal (and the build
// cache's prune) asks before deleting layers.
func ImageInUse(ctx context.Context, st *store.Store, imageID string) (bool, error) {
	if err := st.Migrate(ctx, "sandbox", schema); err != nil {
		return false, err
	}
	var n int
	err := st.DB().QueryRowContext(ctx, `SELECT (SELECT COUNT(*) FROM sandboxes WHERE image_id = ?) + (SELECT COUNT(*) FROM templates WHERE image_id = ?)`, imageID, imageID).Scan(&n)
	return n > 0, err
}

// SnapshotInUse reports whether a sandbox, in any state, was restored
// from the snapshot with this ID; snapshot rm keeps such a snapshot so
// that every sandbox's lineage stays resolvable. A snapshot a hot pool
// holds copies of, or a template's started state, is refused with an
// error naming the pool or the template.
func SnapshotInUse(ctx context.Context, st *store.Store, snapshotID string) (bool, error) {
	if err := st.Migrate(ctx, "sandbox", schema); err != nil {
		return false, err
	}
	var pool, owner string
	err := st.DB().QueryRowContext(ctx, `SELECT name, tenant FROM pools WHERE snapshot = ? ORDER BY name LIMIT 1`, snapshotID).Scan(&pool, &owner)
	if err == nil && !tenant.Owns(ctx, owner) {
		// The admin's pool of a tenant's snapshot: no name to a tenant.
		return false, fmt.Errorf("%w: a hot pool holds copies of it", snapshot.ErrInUse)
	}
	if err == nil {
		return false, fmt.Errorf("%w: hot pool %s holds copies of it: remove the pool first (smolvm pool rm %s)", snapshot.ErrInUse, pool, pool)
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return false, err
	}
	var tmpl string
	err = st.DB().QueryRowContext(ctx, `SELECT name, tenant FROM templates WHERE snapshot = ? ORDER BY name LIMIT 1`, snapshotID).Scan(&tmpl, &owner)
	if err == nil && !tenant.Owns(ctx, owner) {
		return false, fmt.Errorf("%w: it is a template's started state", snapshot.ErrInUse)
	}
	if err == nil {
		return false, fmt.Errorf("%w: it is template %s's started state: remove the template (smolvm template rm %s)", snapshot.ErrInUse, tmpl, tmpl)
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return false, err
	}
	var n int
	err = st.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM sandboxes WHERE snapshot = ?`, snapshotID).Scan(&n)
	return n > 0, err
}

// listRecords lists the sandboxes of pool ("" for those not in a pool), or
// all of them when all is set.
func listRecords(ctx context.Context, st *store.Store, pool string, all bool) ([]*record, error) {
	rows, err := st.DB().QueryContext(ctx, `SELECT `+columns+` FROM sandboxes WHERE ? OR pool = ? ORDER BY created_at, id`, all, pool)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*record
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// SnapshotInUse reports whether a sandbox of this Manager's data dir
// depends on the snapshot with this ID.
func (m *Manager) SnapshotInUse(ctx context.Context, snapshotID string) (bool, error) {
	return SnapshotInUse(ctx, m.st, snapshotID)
}
