package e2b

import (
	"cmp"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"

	"smolvm.dev/smolvm/internal/store"
	"smolvm.dev/smolvm/sandbox"
)

// State keeps what E2B adds to smolvm: each sandbox's Info, and the key
// its envd tokens are derived from (envdToken). smolvm serve keeps it in
// its SQLite store (OpenState); a cluster gateway, which has no local
// state and runs as replicas, on its Sandbox objects (kube/gateway).
type State interface {
	// Key is the key envd tokens are derived from: the same for as long
	// as the tokens handed out must work, for every server sharing them.
	Key(ctx context.Context) ([]byte, error)
	// Info returns sandbox id's state; false if it has none.
	Info(ctx context.Context, id string) (Info, bool, error)
	SaveInfo(ctx context.Context, id string, in Info) error
	// AllInfo returns the state of every sandbox that has some.
	AllInfo(ctx context.Context) (map[string]Info, error)
	DeleteInfo(ctx context.Context, id string) error
}

// Info is what E2B adds to a smolvm sandbox.
type Info struct {
	Metadata map[string]string
	// Template is the templateID E2B's create (or the source's, for a
	// fork) named: "base", a pool, a snapshot. "" for a sandbox made
	// otherwise (the CLI, the native API, a cluster's node daemon).
	Template string
}

// templateID is the template E2B reports for sb: the one its create
// named, not the image that maps to ("base" is the builtin image,
// "host"), else its image.
func (in Info) templateID(sb *sandbox.Sandbox) string {
	return cmp.Or(in.Template, sb.Image)
}

// E2B's own state per sandbox, kept beside the sandbox records so that a
// restarted server still knows each sandbox's metadata and envd token.
var schema = []string{
	`CREATE TABLE e2b_sandboxes (
		id TEXT PRIMARY KEY,
		metadata TEXT NOT NULL,
		envd_token TEXT NOT NULL
	)`,
	// The key envd tokens are derived from (access.go). envd_token is
	// no longer read: it holds the derived token, for an older smolvm.
	`CREATE TABLE e2b_keys (
		name TEXT PRIMARY KEY,
		key BLOB NOT NULL
	)`,
	// The template E2B's create named, which E2B's answers report.
	`ALTER TABLE e2b_sandboxes ADD COLUMN template TEXT NOT NULL DEFAULT ''`,
}

// stored is State in a SQLite store.
type stored struct {
	st  *store.Store
	key []byte
}

// tokenKey names the key in e2b_keys that envd tokens are derived from.
const tokenKey = "envd"

// OpenState returns E2B's state in st (the manager's store), with the
// envd token key made at the first start and kept, so that tokens
// outlive a restart.
func OpenState(ctx context.Context, st *store.Store) (State, error) {
	if err := st.Migrate(ctx, "e2b", schema); err != nil {
		return nil, fmt.Errorf("e2b: %w", err)
	}
	var fresh [32]byte
	rand.Read(fresh[:])
	if _, err := st.DB().ExecContext(ctx, `INSERT INTO e2b_keys (name, key) VALUES (?, ?) ON CONFLICT (name) DO NOTHING`, tokenKey, fresh[:]); err != nil {
		return nil, fmt.Errorf("e2b: make the envd token key: %w", err)
	}
	s := &stored{st: st}
	if err := st.DB().QueryRowContext(ctx, `SELECT key FROM e2b_keys WHERE name = ?`, tokenKey).Scan(&s.key); err != nil {
		return nil, fmt.Errorf("e2b: read the envd token key: %w", err)
	}
	return s, nil
}

func (s *stored) Key(context.Context) ([]byte, error) { return s.key, nil }

func (s *stored) SaveInfo(ctx context.Context, id string, in Info) error {
	md, err := json.Marshal(in.Metadata)
	if err != nil {
		return err
	}
	_, err = s.st.DB().ExecContext(ctx,
		`INSERT INTO e2b_sandboxes (id, metadata, envd_token, template) VALUES (?, ?, ?, ?)
		 ON CONFLICT (id) DO UPDATE SET metadata = excluded.metadata, envd_token = excluded.envd_token, template = excluded.template`,
		id, string(md), envdToken(s.key, id), in.Template)
	if err != nil {
		return fmt.Errorf("save e2b state of %s: %w", id, err)
	}
	return nil
}

func (s *stored) Info(ctx context.Context, id string) (Info, bool, error) {
	var md, tmpl string
	err := s.st.DB().QueryRowContext(ctx, `SELECT metadata, template FROM e2b_sandboxes WHERE id = ?`, id).Scan(&md, &tmpl)
	if errors.Is(err, sql.ErrNoRows) {
		return Info{}, false, nil
	}
	if err != nil {
		return Info{}, false, fmt.Errorf("load e2b state of %s: %w", id, err)
	}
	in := Info{Template: tmpl}
	if err := json.Unmarshal([]byte(md), &in.Metadata); err != nil {
		return Info{}, false, fmt.Errorf("e2b state of %s: metadata: %w", id, err)
	}
	return in, true, nil
}

func (s *stored) AllInfo(ctx context.Context) (map[string]Info, error) {
	rows, err := s.st.DB().QueryContext(ctx, `SELECT id, metadata, template FROM e2b_sandboxes`)
	if err != nil {
		return nil, fmt.Errorf("list e2b state: %w", err)
	}
	defer rows.Close()
	out := map[string]Info{}
	for rows.Next() {
		var id, md, tmpl string
		if err := rows.Scan(&id, &md, &tmpl); err != nil {
			return nil, err
		}
		in := Info{Template: tmpl}
		if json.Unmarshal([]byte(md), &in.Metadata) == nil {
			out[id] = in
		}
	}
	return out, rows.Err()
}

func (s *stored) DeleteInfo(ctx context.Context, id string) error {
	_, err := s.st.DB().ExecContext(ctx, `DELETE FROM e2b_sandboxes WHERE id = ?`, id)
	return err
}

// loadInfo returns a sandbox's E2B state. A sandbox made outside the E2B
// API (the CLI, the native API, a cluster's node daemon) gets fresh state
// on first use, its labels as metadata, so that Sandbox.connect works for
// it too.
func (h *Handler) loadInfo(ctx context.Context, sb *sandbox.Sandbox) (Info, error) {
	in, ok, err := h.st.Info(ctx, sb.ID)
	switch {
	case err != nil:
		return Info{}, err
	case !ok:
		in = Info{Metadata: maps.Clone(sb.Config.Labels)}
		if in.Metadata == nil {
			in.Metadata = map[string]string{}
		}
		return in, h.st.SaveInfo(ctx, sb.ID, in)
	}
	if in.Metadata == nil {
		in.Metadata = map[string]string{}
	}
	return in, nil
}
