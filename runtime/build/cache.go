package build

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"smolvm.dev/smolvm/internal/store"
	"smolvm.dev/smolvm/runtime/image"
	"smolvm.dev/smolvm/runtime/manager"
	"smolvm.dev/smolvm/sandbox"
)

// cache maps a step's key to the image it made: the key chains the
// parent's key, the instruction, and its inputs (copied files' content,
// build args in scope), so a changed step and every later one miss.
type cache struct{ st *store.Store }

var schema = []string{
	`CREATE TABLE build_cache (
		key      TEXT PRIMARY KEY,
		image_id TEXT NOT NULL,
		created  INTEGER NOT NULL
	)`,
}

func openCache(ctx context.Context, st *store.Store) (*cache, error) {
	if err := st.Migrate(ctx, "build", schema); err != nil {
		return nil, fmt.Errorf("open build cache: %w", err)
	}
	return &cache{st: st}, nil
}

// get returns the image a key made, or nil if there is none (never
// built, or its image removed since).
func (c *cache) get(ctx context.Context, images *image.Store, key string) (*sandbox.Image, error) {
	var id string
	err := c.st.DB().QueryRowContext(ctx, `SELECT image_id FROM build_cache WHERE key = ?`, key).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("build cache: %w", err)
	}
	img, err := images.Get(ctx, id)
	if errors.Is(err, image.ErrNotFound) {
		return nil, nil
	}
	return img, err
}

func (c *cache) put(ctx context.Context, key, imageID string) error {
	_, err := c.st.DB().ExecContext(ctx, `INSERT INTO build_cache(key, image_id, created) VALUES(?, ?, ?)
		ON CONFLICT(key) DO UPDATE SET image_id = excluded.image_id, created = excluded.created`,
		key, imageID, store.Now().UnixMilli())
	if err != nil {
		return fmt.Errorf("build cache: %w", err)
	}
	return nil
}

// cacheSource begins the source of a step's image: untagged, it is the
// build cache, which image listings hide (Cache).
const cacheSource = "build step "

// Cache reports whether img is only a cached build step's image.
func Cache(img sandbox.Image) bool {
	return len(img.Refs) == 0 && strings.HasPrefix(img.Source, cacheSource)
}

// chain is the key of a step after the step keyed parent.
func chain(parent string, parts ...string) string {
	h := sha256.New()
	h.Write([]byte(parent))
	for _, p := range parts {
		h.Write([]byte{0})
		h.Write([]byte(p))
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// Prune empties the build cache: every cached step's untagged image goes,
// with the layers no other image uses, unless a sandbox runs it. It
// returns how many images went.
func Prune(ctx context.Context, st *store.Store, images *image.Store) (int, error) {
	imgs, err := images.List(ctx)
	if err != nil {
		return 0, err
	}
	inUse := func(id string) (bool, error) { return manager.ImageInUse(ctx, st, id) }
	n := 0
	for _, img := range imgs {
		if !Cache(img) {
			continue
		}
		err := images.Remove(ctx, img.ID, inUse)
		if errors.Is(err, image.ErrNotFound) {
			continue
		}
		if err != nil {
			return n, fmt.Errorf("prune: %w", err)
		}
		n++
	}
	// Keys of removed images miss anyway (get); dropping them keeps the
	// table from growing.
	if _, err := st.DB().ExecContext(ctx, `DELETE FROM build_cache WHERE image_id NOT IN (SELECT id FROM images)`); err != nil {
		return n, fmt.Errorf("prune: %w", err)
	}
	return n, nil
}
