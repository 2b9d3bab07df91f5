// Package tenant keeps the tenants of one smolvm data dir: their API keys
// (stored only as hashes), their quotas, and the identity a request
// carries in its context, which the runtime scopes every lookup by.
package tenant

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/internal/names"
	"smolvm.dev/smolvm/internal/store"
	"smolvm.dev/smolvm/sandbox"
)

// Admin is the name the server's own token (the single-token mode) goes
// by. It is no tenant: a request under it is not scoped, and sees every
// object. Objects it creates belong to no tenant ("").
const Admin = "admin"

// KeyPrefix starts every tenant key, so a leaked one is recognizable (and
// never mistaken for the admin token, which is plain hex).
const KeyPrefix = "smk_"

// Errors callers match with errors.Is.
var (
	ErrNotFound    = errdefs.New(errdefs.ErrNotFound, "no such tenant")
	ErrKeyNotFound = errdefs.New(errdefs.ErrNotFound, "no such key")
	ErrExists      = errdefs.New(errdefs.ErrAlreadyExists, "tenant exists")
	ErrInvalid     = errdefs.New(errdefs.ErrInvalid, "invalid tenant argument")
	// ErrQuota is a request a tenant's quota refuses; its message names
	// the limit.
	ErrQuota = errdefs.New(errdefs.ErrQuota, "tenant quota reached")
	// ErrAdminOnly is an admin operation asked for with a tenant's key.
	ErrAdminOnly = errdefs.New(errdefs.ErrDenied, "needs the admin token")
)

type ctxKey struct{}

// With returns ctx acting as tenant name. Admin (or "") leaves ctx
// unscoped.
func With(ctx context.Context, name string) context.Context {
	if name == "" || name == Admin {
		return ctx
	}
	return context.WithValue(ctx, ctxKey{}, name)
}

// Of returns the tenant ctx acts as, and false when it is unscoped (the
// admin token, or a local caller such as the CLI on its own data dir).
func Of(ctx context.Context) (string, bool) {
	name, ok := ctx.Value(ctxKey{}).(string)
	return name, ok
}

// Owns reports whether ctx may see an object owned by owner ("" for the
// admin's): an unscoped ctx sees everything.
func Owns(ctx context.Context, owner string) bool {
	name, scoped := Of(ctx)
	return !scoped || name == owner
}

// Owner is the owner ctx gives the objects it creates.
func Owner(ctx context.Context) string {
	name, _ := Of(ctx)
	return name
}

var schema = []string{
	`CREATE TABLE tenants (
		name TEXT PRIMARY KEY,
		quota TEXT NOT NULL,
		created_at INTEGER NOT NULL
	)`,
	`CREATE TABLE tenant_keys (
		id TEXT PRIMARY KEY,
		tenant TEXT NOT NULL REFERENCES tenants(name) ON DELETE CASCADE,
		hash TEXT NOT NULL UNIQUE,
		created_at INTEGER NOT NULL
	)`,
}

// Store is the tenants of one data dir. Every call reads the database, so
// a key added or removed by another process (smolvm tenant key rm while
// smolvm serve runs) takes effect at the next request.
type Store struct {
	st *store.Store
}

// Open applies the schema and returns the tenants of st.
func Open(ctx context.Context, st *store.Store) (*Store, error) {
	if err := st.Migrate(ctx, "tenant", schema); err != nil {
		return nil, err
	}
	return &Store{st: st}, nil
}

func checkName(name string) error {
	if err := names.Check(names.Tenant, name); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if name == Admin {
		return fmt.Errorf("%w: %q is the server's own token, not a tenant", ErrInvalid, Admin)
	}
	return nil
}

// checkQuota refuses a limit out of range (sandbox.Quota.Check), the
// error naming it.
func checkQuota(q sandbox.Quota) error {
	if err := q.Check(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// Add creates tenant name with quota q.
func (s *Store) Add(ctx context.Context, name string, q sandbox.Quota) (*sandbox.Tenant, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	if err := checkQuota(q); err != nil {
		return nil, err
	}
	b, _ := json.Marshal(q)
	now := store.Now()
	_, err := s.st.DB().ExecContext(ctx, `INSERT INTO tenants(name, quota, created_at) VALUES(?, ?, ?)`, name, string(b), now.UnixMilli())
	if err != nil {
		if strings.Contains(err.Error(), "UNIQUE") {
			return nil, fmt.Errorf("%w: %q", ErrExists, name)
		}
		return nil, fmt.Errorf("add tenant %s: %w", name, err)
	}
	return &sandbox.Tenant{Name: name, Quota: q, CreatedAt: now, Keys: []sandbox.TenantKey{}}, nil
}

// Remove deletes a tenant and revokes its keys at once. What it owns stays,
// visible to the admin token only.
func (s *Store) Remove(ctx context.Context, name string) error {
	if err := names.Check(names.Tenant, name); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return s.st.Tx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM tenant_keys WHERE tenant = ?`, name); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM tenants WHERE name = ?`, name)
		if err != nil {
			return fmt.Errorf("remove tenant %s: %w", name, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("%w: %q", ErrNotFound, name)
		}
		return nil
	})
}

// Get returns tenant name with its keys.
func (s *Store) Get(ctx context.Context, name string) (*sandbox.Tenant, error) {
	if err := names.Check(names.Tenant, name); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	ts, err := s.list(ctx, name)
	if err != nil {
		return nil, err
	}
	if len(ts) == 0 {
		return nil, fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	return ts[0], nil
}

// List returns every tenant with its keys, by name.
func (s *Store) List(ctx context.Context) ([]*sandbox.Tenant, error) { return s.list(ctx, "") }

func (s *Store) list(ctx context.Context, only string) ([]*sandbox.Tenant, error) {
	rows, err := s.st.DB().QueryContext(ctx, `SELECT name, quota, created_at FROM tenants WHERE ? = '' OR name = ? ORDER BY name`, only, only)
	if err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	defer rows.Close()
	out := []*sandbox.Tenant{}
	byName := map[string]*sandbox.Tenant{}
	for rows.Next() {
		var (
			t  = &sandbox.Tenant{Keys: []sandbox.TenantKey{}}
			q  string
			at int64
		)
		if err := rows.Scan(&t.Name, &q, &at); err != nil {
			return nil, err
		}
		if err := json.Unmarshal([]byte(q), &t.Quota); err != nil {
			return nil, fmt.Errorf("tenant %s: quota: %w", t.Name, err)
		}
		t.CreatedAt = time.UnixMilli(at).UTC()
		out = append(out, t)
		byName[t.Name] = t
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	krows, err := s.st.DB().QueryContext(ctx, `SELECT id, tenant, created_at FROM tenant_keys WHERE ? = '' OR tenant = ? ORDER BY created_at, id`, only, only)
	if err != nil {
		return nil, fmt.Errorf("list keys: %w", err)
	}
	defer krows.Close()
	for krows.Next() {
		var (
			k      sandbox.TenantKey
			tenant string
			at     int64
		)
		if err := krows.Scan(&k.ID, &tenant, &at); err != nil {
			return nil, err
		}
		k.CreatedAt = time.UnixMilli(at).UTC()
		if t := byName[tenant]; t != nil {
			t.Keys = append(t.Keys, k)
		}
	}
	return out, krows.Err()
}

// SetQuota replaces tenant name's quota. It applies to the next admission;
// nothing running is stopped.
func (s *Store) SetQuota(ctx context.Context, name string, q sandbox.Quota) (*sandbox.Tenant, error) {
	if err := names.Check(names.Tenant, name); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if err := checkQuota(q); err != nil {
		return nil, err
	}
	b, _ := json.Marshal(q)
	res, err := s.st.DB().ExecContext(ctx, `UPDATE tenants SET quota = ? WHERE name = ?`, string(b), name)
	if err != nil {
		return nil, fmt.Errorf("set quota of %s: %w", name, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return nil, fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	return s.Get(ctx, name)
}

// Quota returns tenant name's quota. A tenant removed while its requests
// run has the zero quota of nothing: every admission is refused.
func (s *Store) Quota(ctx context.Context, name string) (sandbox.Quota, error) {
	var q string
	err := s.st.DB().QueryRowContext(ctx, `SELECT quota FROM tenants WHERE name = ?`, name).Scan(&q)
	if errors.Is(err, sql.ErrNoRows) {
		return sandbox.Quota{}, fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	if err != nil {
		return sandbox.Quota{}, fmt.Errorf("quota of %s: %w", name, err)
	}
	var out sandbox.Quota
	if err := json.Unmarshal([]byte(q), &out); err != nil {
		return sandbox.Quota{}, fmt.Errorf("tenant %s: quota: %w", name, err)
	}
	return out, nil
}

// hash is what the store keeps of a key: SHA-256 is enough for a secret
// of 256 random bits (no dictionary to search).
func hash(secret string) string {
	h := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(h[:])
}

// AddKey makes a new key for tenant name and returns it with its secret,
// which is not stored and cannot be shown again.
func (s *Store) AddKey(ctx context.Context, name string) (sandbox.TenantKey, string, error) {
	if err := names.Check(names.Tenant, name); err != nil {
		return sandbox.TenantKey{}, "", fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	var raw [32]byte
	rand.Read(raw[:])
	secret := KeyPrefix + hex.EncodeToString(raw[:])
	var idb [6]byte
	rand.Read(idb[:])
	k := sandbox.TenantKey{ID: hex.EncodeToString(idb[:]), CreatedAt: store.Now()}
	err := s.st.Tx(ctx, func(tx *sql.Tx) error {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM tenants WHERE name = ?`, name).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("%w: %q", ErrNotFound, name)
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO tenant_keys(id, tenant, hash, created_at) VALUES(?, ?, ?, ?)`,
			k.ID, name, hash(secret), k.CreatedAt.UnixMilli())
		return err
	})
	if err != nil {
		return sandbox.TenantKey{}, "", fmt.Errorf("add key to %s: %w", name, err)
	}
	return k, secret, nil
}

// RemoveKey revokes key id of tenant name: the next request with it is
// refused.
func (s *Store) RemoveKey(ctx context.Context, name, id string) error {
	res, err := s.st.DB().ExecContext(ctx, `DELETE FROM tenant_keys WHERE id = ? AND tenant = ?`, id, name)
	if err != nil {
		return fmt.Errorf("remove key %s: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("%w: %q of tenant %q", ErrKeyNotFound, id, name)
	}
	return nil
}

// Resolve returns the tenant whose key secret is, or false. Only keys
// shaped like one reach the database.
func (s *Store) Resolve(ctx context.Context, secret string) (string, bool) {
	name, _, ok := s.ResolveKey(ctx, secret)
	return name, ok
}

// ResolveKey is Resolve that also returns the key's ID, for records that
// must end with the key (the console's sessions reference it).
func (s *Store) ResolveKey(ctx context.Context, secret string) (name, id string, ok bool) {
	if !strings.HasPrefix(secret, KeyPrefix) || len(secret) != len(KeyPrefix)+64 {
		return "", "", false
	}
	err := s.st.DB().QueryRowContext(ctx, `SELECT tenant, id FROM tenant_keys WHERE hash = ?`, hash(secret)).Scan(&name, &id)
	return name, id, err == nil
}

var _ sandbox.Tenants = (*Store)(nil)
