package e2b

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"

	"smolvm.dev/smolvm/sandbox"
)

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

// info is what E2B adds to a smolvm sandbox (its envd token is derived
// from its ID: envdToken).
type info struct {
	Metadata map[string]string
	// Template is the templateID E2B's create (or the source's, for a
	// fork) named: "base", a pool, a snapshot. "" for a sandbox made
	// otherwise (the CLI, the native API, a cluster's node daemon).
	Template string
}

// templateID is the template E2B reports for sb: the one its create
// named, not the image that maps to ("base" is the builtin image,
// "host"), else its image.
func (in info) templateID(sb *sandbox.Sandbox) string {
	return cmp.Or(in.Template, sb.Image)
}

func (h *Handler) saveInfo(ctx context.Context, id string, in info) error {
	md, err := json.Marshal(in.Metadata)
	if err != nil {
		return err
	}
	_, err = h.st.DB().ExecContext(ctx,
		`INSERT INTO e2b_sandboxes (id, metadata, envd_token, template) VALUES (?, ?, ?, ?)
		 ON CONFLICT (id) DO UPDATE SET metadata = excluded.metadata, envd_token = excluded.envd_token, template = excluded.template`,
		id, string(md), h.envdToken(id), in.Template)
	if err != nil {
		return fmt.Errorf("save e2b state of %s: %w", id, err)
	}
	return nil
}

// loadInfo returns a sandbox's E2B state. A sandbox made outside the E2B
// API (the CLI, the native API, a cluster's node daemon) gets fresh state
// on first use, its labels as metadata, so that Sandbox.connect works for
// it too.
func (h *Handler) loadInfo(ctx context.Context, sb *sandbox.Sandbox) (info, error) {
	id := sb.ID
	var md, tmpl string
	err := h.st.DB().QueryRowContext(ctx, `SELECT metadata, template FROM e2b_sandboxes WHERE id = ?`, id).Scan(&md, &tmpl)
	if errors.Is(err, sql.ErrNoRows) {
		in := info{Metadata: maps.Clone(sb.Config.Labels)}
		if in.Metadata == nil {
			in.Metadata = map[string]string{}
		}
		return in, h.saveInfo(ctx, id, in)
	}
	if err != nil {
		return info{}, fmt.Errorf("load e2b state of %s: %w", id, err)
	}
	in := info{Template: tmpl}
	if err := json.Unmarshal([]byte(md), &in.Metadata); err != nil {
		return info{}, fmt.Errorf("e2b state of %s: metadata: %w", id, err)
	}
	if in.Metadata == nil {
		in.Metadata = map[string]string{}
	}
	return in, nil
}

// allInfo returns the metadata and template of every sandbox that has
// E2B state (not its envd token).
func (h *Handler) allInfo(ctx context.Context) (map[string]info, error) {
	rows, err := h.st.DB().QueryContext(ctx, `SELECT id, metadata, template FROM e2b_sandboxes`)
	if err != nil {
		return nil, fmt.Errorf("list e2b state: %w", err)
	}
	defer rows.Close()
	out := map[string]info{}
	for rows.Next() {
		var id, md, tmpl string
		if err := rows.Scan(&id, &md, &tmpl); err != nil {
			return nil, err
		}
		in := info{Template: tmpl}
		if json.Unmarshal([]byte(md), &in.Metadata) == nil {
			out[id] = in
		}
	}
	return out, rows.Err()
}

func (h *Handler) deleteInfo(ctx context.Context, id string) error {
	_, err := h.st.DB().ExecContext(ctx, `DELETE FROM e2b_sandboxes WHERE id = ?`, id)
	return err
}
