package image

import (
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"smolvm.dev/smolvm/sandbox"
)

// Commit stores an image made of parent's layers (none for a nil parent)
// and then the layer tarballs at the paths in layers (uncompressed, as
// WriteLayer writes them), with cf as its config; Commit fills in cf's
// RootFS. Without refs the image is stored untagged (a build's cache).
// Like Import, it stores all or nothing.
func (s *Store) Commit(ctx context.Context, parent *sandbox.Image, layers []string, cf v1.ConfigFile, refs []string, source string) (*sandbox.Image, error) {
	if parent != nil && parent.Builtin {
		return nil, fmt.Errorf("%w: the builtin image %s cannot be a parent: it mounts the host's files", ErrInvalidRef, hostName)
	}
	var c commit
	if parent != nil {
		for _, d := range parent.Layers {
			h, err := v1.NewHash(d)
			if err != nil {
				return nil, fmt.Errorf("commit: %w: layer %s: %v", ErrCorrupt, d, err)
			}
			c.layers = append(c.layers, &storedLayer{diffID: h, dir: s.layerDir(d)})
		}
	}
	for _, p := range layers {
		l, err := tarball.LayerFromFile(p, tarball.WithCompressionLevel(gzip.NoCompression))
		if err != nil {
			return nil, fmt.Errorf("commit: layer %s: %w", p, err)
		}
		c.layers = append(c.layers, l)
	}
	cf.RootFS = v1.RootFS{Type: "layers"}
	for _, l := range c.layers {
		d, err := l.DiffID()
		if err != nil {
			return nil, fmt.Errorf("commit: %w", err)
		}
		cf.RootFS.DiffIDs = append(cf.RootFS.DiffIDs, d)
	}
	var err error
	if c.raw, err = json.Marshal(cf); err != nil {
		return nil, fmt.Errorf("commit: %w", err)
	}
	norm := make([]string, len(refs))
	for i, r := range refs {
		if norm[i], err = Normalize(r); err != nil {
			return nil, err
		}
	}
	img, err := s.store(ctx, &c, norm, source, false, nil)
	if err != nil {
		return nil, fmt.Errorf("commit: %w", err)
	}
	return img, nil
}

// commit is an image made here: its config and its layers.
type commit struct {
	raw    []byte
	layers []v1.Layer
}

func (c *commit) RawConfigFile() ([]byte, error) { return c.raw, nil }
func (c *commit) Layers() ([]v1.Layer, error)    { return c.layers, nil }
func (c *commit) ConfigName() (v1.Hash, error) {
	sum := sha256.Sum256(c.raw)
	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}, nil
}

// storedLayer is a layer already extracted in the store. Committing an
// image on top of it never reads it unless a removal deleted it meanwhile
// (register), when it is the tar of whatever is left: then the commit fails
// on the diffID.
type storedLayer struct {
	diffID v1.Hash
	dir    string
}

func (l *storedLayer) DiffID() (v1.Hash, error)            { return l.diffID, nil }
func (l *storedLayer) Digest() (v1.Hash, error)            { return l.diffID, nil }
func (l *storedLayer) Size() (int64, error)                { return -1, nil }
func (l *storedLayer) MediaType() (types.MediaType, error) { return types.OCIUncompressedLayer, nil }
func (l *storedLayer) Compressed() (io.ReadCloser, error)  { return l.Uncompressed() }
func (l *storedLayer) Uncompressed() (io.ReadCloser, error) {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(WriteLayer(pw, l.dir, nil)) }()
	return pr, nil
}
