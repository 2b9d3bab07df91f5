// Package image stores OCI images as content-addressed layers shared by all sandboxes.
package image

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/internal/lazyre"
	"smolvm.dev/smolvm/internal/names"
	"smolvm.dev/smolvm/internal/store"
	"smolvm.dev/smolvm/sandbox"
)

// Errors callers test with errors.Is; they are always wrapped with detail.
var (
	ErrNotFound   = sandbox.ErrImageNotFound
	ErrInvalidRef = sandbox.ErrInvalidImageRef
	ErrCorrupt    = errdefs.New(errdefs.ErrCorrupt, "corrupt image")
	ErrDenied     = errdefs.New(errdefs.ErrDenied, "the registry refused the pull")
	ErrRegistry   = errdefs.New(errdefs.ErrUnavailable, "registry unavailable")
)

// Rootfs is what a backend stacks to build a sandbox's root filesystem.
type Rootfs struct {
	LowerDirs []string `json:"lowerDirs"`        // extracted layer directories, lowest first (host paths)
	Mounts    []Mount  `json:"mounts,omitempty"` // extra read-only bind mounts
}

// Mount is a read-only bind mount of a host path into the sandbox.
type Mount struct {
	Source      string `json:"source"`      // host path
	Destination string `json:"destination"` // path inside the sandbox
}

// Progress reports the state of one layer during Import or Pull; it is
// the contract's, so that a store elsewhere reports the same.
type Progress = sandbox.PullProgress

// Default limits on what one image may unpack to.
const (
	DefaultMaxSize    = 16 << 30
	DefaultMaxEntries = 1 << 20
)

// Store is the image store of one data directory. It is safe for concurrent
// use, also by several processes sharing the data directory.
type Store struct {
	st     *store.Store
	images string // <dataDir>/images
	layers string // <dataDir>/layers

	// MaxSize and MaxEntries bound the unpacked bytes and the number of tar
	// entries of one image, so a hostile image cannot fill the disk.
	MaxSize    int64
	MaxEntries int
}

var schema = []string{
	`CREATE TABLE images (
		id      TEXT PRIMARY KEY,
		config  TEXT NOT NULL,
		size    INTEGER NOT NULL,
		created INTEGER NOT NULL,
		source  TEXT NOT NULL
	)`,
	`CREATE TABLE image_layers (
		image_id TEXT NOT NULL REFERENCES images(id) ON DELETE CASCADE,
		position INTEGER NOT NULL,
		diff_id  TEXT NOT NULL,
		size     INTEGER NOT NULL,
		PRIMARY KEY (image_id, position)
	)`,
	`CREATE INDEX image_layers_diff_id ON image_layers(diff_id)`,
	`CREATE TABLE image_refs (
		ref      TEXT PRIMARY KEY,
		image_id TEXT NOT NULL REFERENCES images(id) ON DELETE CASCADE
	)`,
	`CREATE INDEX image_refs_image_id ON image_refs(image_id)`,
	// The whole OCI config as stored (history, exposed ports, …), which
	// Save exports; empty for images stored before it was kept.
	`ALTER TABLE images ADD COLUMN raw TEXT NOT NULL DEFAULT ''`,
}

// Open opens the image store in dataDir, registering its tables in st and
// generating the builtin host image if it is missing.
func Open(ctx context.Context, dataDir string, st *store.Store) (*Store, error) {
	s := &Store{
		st:         st,
		images:     filepath.Join(dataDir, "images"),
		layers:     filepath.Join(dataDir, "layers"),
		MaxSize:    DefaultMaxSize,
		MaxEntries: DefaultMaxEntries,
	}
	for _, d := range []string{s.images, filepath.Join(s.layers, "sha256")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("open image store: %w", err)
		}
	}
	if err := st.Migrate(ctx, "image", schema); err != nil {
		return nil, fmt.Errorf("open image store: %w", err)
	}
	removeStaleTemps(filepath.Join(s.layers, "sha256"))
	removeStaleTemps(filepath.Join(s.images, hostName))
	removeStaleTemps(s.images) // builds' (Build)
	if err := s.ensureHost(); err != nil {
		return nil, fmt.Errorf("open image store: %w", err)
	}
	return s, nil
}

var idPattern = lazyre.New(`^(sha256:)?[0-9a-f]{12,64}$`)

// IsID reports whether s is an image ID or a prefix of one that Get
// takes: 12 to 64 hex digits, with or without "sha256:".
func IsID(s string) bool { return idPattern().MatchString(s) }

// HasID reports whether img's ID is id, or begins with it.
func HasID(img *sandbox.Image, id string) bool {
	return strings.HasPrefix(strings.TrimPrefix(img.ID, "sha256:"), strings.TrimPrefix(id, "sha256:"))
}

// Get finds an image by reference ("alpine" means
// docker.io/library/alpine:latest), by ID, or by a unique ID prefix of at
// least 12 hex digits. It knows the builtin image's ID too, which has no
// row in the images table: look images up by ID through Get, not SQL.
func (s *Store) Get(ctx context.Context, nameOrID string) (*sandbox.Image, error) {
	if nameOrID == hostName {
		return s.host()
	}
	if err := names.Check(names.Image, nameOrID); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidRef, err)
	}
	if idPattern().MatchString(nameOrID) {
		id, err := s.resolveID(ctx, nameOrID)
		if err != nil && !errors.Is(err, ErrNotFound) {
			return nil, err
		}
		if err == nil {
			return s.load(ctx, id)
		}
		// The builtin image is not stored, but records name it by ID too.
		if h, err := s.host(); err == nil && HasID(h, nameOrID) {
			return h, nil
		}
	}
	ref, err := Normalize(nameOrID)
	if err != nil {
		return nil, err
	}
	var id string
	err = s.st.DB().QueryRowContext(ctx, `SELECT image_id FROM image_refs WHERE ref = ?`, ref).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, nameOrID)
	}
	if err != nil {
		return nil, fmt.Errorf("get image %s: %w", nameOrID, err)
	}
	return s.load(ctx, id)
}

// resolveID expands a full ID or unique prefix to a stored image ID.
func (s *Store) resolveID(ctx context.Context, prefix string) (string, error) {
	if !strings.HasPrefix(prefix, "sha256:") {
		prefix = "sha256:" + prefix
	}
	rows, err := s.st.DB().QueryContext(ctx, `SELECT id FROM images WHERE substr(id, 1, ?) = ? LIMIT 2`, len(prefix), prefix)
	if err != nil {
		return "", fmt.Errorf("get image %s: %w", prefix, err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return "", fmt.Errorf("get image %s: %w", prefix, err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return "", fmt.Errorf("get image %s: %w", prefix, err)
	}
	switch len(ids) {
	case 0:
		return "", fmt.Errorf("%w: %s", ErrNotFound, prefix)
	case 1:
		return ids[0], nil
	}
	return "", fmt.Errorf("%w: ID prefix %s matches several images", ErrInvalidRef, prefix)
}

// load reads one image row with its layers and refs.
func (s *Store) load(ctx context.Context, id string) (*sandbox.Image, error) {
	db := s.st.DB()
	img := &sandbox.Image{ID: id}
	var cfg string
	var created int64
	err := db.QueryRowContext(ctx, `SELECT config, size, created, source FROM images WHERE id = ?`, id).
		Scan(&cfg, &img.Size, &created, &img.Source)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("load image %s: %w", id, err)
	}
	img.Created = time.UnixMilli(created).UTC()
	if err := json.Unmarshal([]byte(cfg), &img.Config); err != nil {
		return nil, fmt.Errorf("load image %s config: %w", id, err)
	}
	if img.Layers, err = store.Strings(ctx, db, `SELECT diff_id FROM image_layers WHERE image_id = ? ORDER BY position`, id); err != nil {
		return nil, fmt.Errorf("load image %s layers: %w", id, err)
	}
	if img.Refs, err = store.Strings(ctx, db, `SELECT ref FROM image_refs WHERE image_id = ? ORDER BY ref`, id); err != nil {
		return nil, fmt.Errorf("load image %s refs: %w", id, err)
	}
	if img.Layers == nil {
		img.Layers = []string{}
	}
	if img.Refs == nil {
		img.Refs = []string{} // an untagged image, left when its ref moved to a newer one
	}
	return img, nil
}

// List returns the builtin host image followed by all stored images, newest
// first.
func (s *Store) List(ctx context.Context) ([]sandbox.Image, error) {
	host, err := s.host()
	if err != nil {
		return nil, err
	}
	ids, err := store.Strings(ctx, s.st.DB(), `SELECT id FROM images ORDER BY created DESC, id`)
	if err != nil {
		return nil, fmt.Errorf("list images: %w", err)
	}
	out := []sandbox.Image{*host}
	for _, id := range ids {
		img, err := s.load(ctx, id)
		if errors.Is(err, ErrNotFound) {
			continue // removed since the listing
		}
		if err != nil {
			return nil, err
		}
		out = append(out, *img)
	}
	return out, nil
}

// Remove untags a reference; when an image loses its last reference, or is
// named by ID, it is deleted with every layer no other image uses. inUse
// reports whether a sandbox uses an image; such an image is not deleted.
func (s *Store) Remove(ctx context.Context, nameOrID string, inUse func(id string) (bool, error)) error {
	img, err := s.Get(ctx, nameOrID)
	if err != nil {
		return err
	}
	if img.Builtin {
		return fmt.Errorf("remove %s: the builtin image cannot be removed", nameOrID)
	}
	// A name removes that ref, and the image only with its last one; an ID
	// removes the image with all its refs.
	var untag string
	if ref, err := Normalize(nameOrID); err == nil && slices.Contains(img.Refs, ref) {
		untag = ref
	}
	if untag != "" && len(img.Refs) > 1 {
		_, err := s.st.DB().ExecContext(ctx, `DELETE FROM image_refs WHERE ref = ? AND image_id = ?`, untag, img.ID)
		if err != nil {
			return fmt.Errorf("untag %s: %w", untag, err)
		}
		return nil
	}
	if used, err := inUse(img.ID); err != nil {
		return fmt.Errorf("remove %s: %w", nameOrID, err)
	} else if used {
		return fmt.Errorf("remove %s: image %s is in use by a sandbox", nameOrID, shortID(img.ID))
	}

	unlock, err := s.lock()
	if err != nil {
		return fmt.Errorf("remove %s: %w", nameOrID, err)
	}
	defer unlock()
	var unused []string
	err = s.st.Tx(ctx, func(tx *sql.Tx) error {
		if untag != "" {
			// A concurrent import may have tagged the image again meanwhile:
			// then only our ref goes.
			if _, err := tx.ExecContext(ctx, `DELETE FROM image_refs WHERE ref = ? AND image_id = ?`, untag, img.ID); err != nil {
				return err
			}
			var n int
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM image_refs WHERE image_id = ?`, img.ID).Scan(&n); err != nil {
				return err
			}
			if n > 0 {
				return nil
			}
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM images WHERE id = ?`, img.ID); err != nil {
			return err
		}
		var err error
		unused, err = unusedLayers(ctx, tx, img.Layers)
		return err
	})
	if err != nil {
		return fmt.Errorf("remove %s: %w", nameOrID, err)
	}
	for _, d := range unused {
		if err := s.deleteLayer(d); err != nil {
			return fmt.Errorf("remove %s: %w", nameOrID, err)
		}
	}
	return nil
}

// unusedLayers returns those of diffIDs that no stored image references.
func unusedLayers(ctx context.Context, q store.Querier, diffIDs []string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, d := range diffIDs {
		if seen[d] {
			continue
		}
		seen[d] = true
		var used bool
		if err := q.QueryRowContext(ctx, `SELECT EXISTS(SELECT 1 FROM image_layers WHERE diff_id = ?)`, d).Scan(&used); err != nil {
			return nil, err
		}
		if !used {
			out = append(out, d)
		}
	}
	return out, nil
}

// Rootfs returns the directories and mounts that make up img's root
// filesystem.
func (s *Store) Rootfs(img *sandbox.Image) Rootfs {
	if img.Builtin {
		return s.hostRootfs()
	}
	var r Rootfs
	for _, l := range s.Layers(img) {
		r.LowerDirs = append(r.LowerDirs, l.Dir)
	}
	return r
}

// Layer is a layer of an image as extracted on the host.
type Layer struct {
	DiffID string // empty for the builtin image's generated root
	Dir    string
}

// Layers returns img's layers, lowest first. A layer repeated higher up is
// left out: its upper copy shadows it entirely, and overlayfs does not
// take the same lower directory twice.
func (s *Store) Layers(img *sandbox.Image) []Layer {
	if img.Builtin {
		return []Layer{{Dir: s.hostRoot()}}
	}
	var out []Layer
	for i, d := range img.Layers {
		if !slices.Contains(img.Layers[i+1:], d) {
			out = append(out, Layer{DiffID: d, Dir: s.layerDir(d)})
		}
	}
	return out
}

// shortID is the 12-hex-digit form of an ID shown to users.
func shortID(id string) string {
	h := strings.TrimPrefix(id, "sha256:")
	if len(h) > 12 {
		h = h[:12]
	}
	return h
}

var _ sandbox.Images = (*Store)(nil)
