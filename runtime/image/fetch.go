package image

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/internal/store"
	"smolvm.dev/smolvm/sandbox"
)

// PullOptions tune Pull.
type PullOptions = sandbox.PullOptions

// Annotations that name the images of an OCI layout.
const (
	annotationRefName   = "org.opencontainers.image.ref.name"
	annotationContainer = "io.containerd.image.name"
)

func defaultPlatform() v1.Platform {
	return v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
}

// Import stores the image in path, an OCI layout directory or a docker-save
// tarball. Without ref, the image is named by the archive's own tags, and
// an archive of several images or none named is refused.
func (s *Store) Import(ctx context.Context, path, ref string, progress func(Progress)) (*sandbox.Image, error) {
	var want string
	if ref != "" {
		var err error
		if want, err = Normalize(ref); err != nil {
			return nil, err
		}
	}
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s: no such file or directory", ErrNotFound, path)
	}
	if err != nil {
		return nil, fmt.Errorf("import %s: %w", path, err)
	}
	var img v1.Image
	var refs []string
	if fi.IsDir() {
		img, refs, err = fromLayout(path, want)
	} else {
		img, refs, err = fromTarball(path, want)
	}
	if err != nil {
		return nil, fmt.Errorf("import %s: %w", path, err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("import %s: %w", path, err)
	}
	stored, err := s.store(ctx, img, refs, "import "+abs, false, progress)
	if err != nil {
		return nil, fmt.Errorf("import %s: %w", path, err)
	}
	return stored, nil
}

// fromLayout selects the image of an OCI layout: the one named want (a
// normalized ref), or the only one.
func fromLayout(dir, want string) (v1.Image, []string, error) {
	if _, err := os.Stat(filepath.Join(dir, "index.json")); err != nil {
		return nil, nil, fmt.Errorf("%w: not an OCI layout: %v", ErrCorrupt, err)
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: OCI layout: %v", ErrCorrupt, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, nil, fmt.Errorf("%w: OCI layout index: %v", ErrCorrupt, err)
	}
	var names []string
	match := -1
	for i, d := range im.Manifests {
		n := layoutName(d)
		if n != "" {
			names = append(names, n)
		}
		if want != "" && n == want {
			match = i
		}
	}
	switch {
	case match >= 0:
	case len(im.Manifests) == 0:
		return nil, nil, fmt.Errorf("%w: OCI layout holds no image", ErrCorrupt)
	case len(im.Manifests) > 1 && want != "":
		return nil, nil, fmt.Errorf("%w: %s is not in the layout (it has %s)", ErrNotFound, want, describeNames(names))
	case len(im.Manifests) > 1:
		return nil, nil, fmt.Errorf("%w: the layout holds %d images (%s): choose one with a name", ErrInvalidRef, len(im.Manifests), describeNames(names))
	default:
		match = 0
	}
	refs := []string{want}
	if want == "" {
		n := layoutName(im.Manifests[match])
		if n == "" {
			return nil, nil, fmt.Errorf("%w: the image in the layout has no name: give one", ErrInvalidRef)
		}
		refs = []string{n}
	}
	img, err := layoutImage(idx, im.Manifests[match], defaultPlatform())
	if err != nil {
		return nil, nil, err
	}
	return img, refs, nil
}

// layoutName is the normalized name annotated on a layout entry, or "".
// org.opencontainers.image.ref.name is often a bare tag, which names no
// repository, so it counts only when it looks like a full reference.
func layoutName(d v1.Descriptor) string {
	n := d.Annotations[annotationContainer]
	if n == "" {
		n = d.Annotations[annotationRefName]
		if !strings.ContainsAny(n, "/:") {
			return ""
		}
	}
	ref, err := Normalize(n)
	if err != nil {
		return ""
	}
	return ref
}

func describeNames(names []string) string {
	if len(names) == 0 {
		return "no names"
	}
	return strings.Join(names, ", ")
}

// layoutImage resolves a layout entry to an image, choosing the platform
// from a multi-platform index.
func layoutImage(idx v1.ImageIndex, d v1.Descriptor, p v1.Platform) (v1.Image, error) {
	switch {
	case d.MediaType.IsImage():
		img, err := idx.Image(d.Digest)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
		return img, nil
	case d.MediaType.IsIndex():
		child, err := idx.ImageIndex(d.Digest)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
		im, err := child.IndexManifest()
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
		for _, cd := range im.Manifests {
			if cd.Platform != nil && cd.Platform.Satisfies(p) {
				return layoutImage(child, cd, p)
			}
		}
		return nil, fmt.Errorf("%w: no image for platform %s", ErrNotFound, p)
	}
	return nil, fmt.Errorf("%w: unsupported media type %q", ErrCorrupt, d.MediaType)
}

// fromTarball selects the image of a docker-save tarball: the one tagged
// want (a normalized ref), or the only one.
func fromTarball(path, want string) (v1.Image, []string, error) {
	opener := func() (io.ReadCloser, error) { return os.Open(path) }
	m, err := tarball.LoadManifest(opener)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: neither an OCI layout nor a docker-save tarball: %v", ErrCorrupt, err)
	}
	if len(m) == 0 {
		return nil, nil, fmt.Errorf("%w: docker-save tarball holds no image", ErrCorrupt)
	}
	var names []string
	var tag *name.Tag
	for _, d := range m {
		for _, t := range d.RepoTags {
			n, err := Normalize(t)
			if err != nil {
				return nil, nil, fmt.Errorf("%w: tag %q in manifest.json: %v", ErrCorrupt, t, err)
			}
			names = append(names, n)
			if n == want && len(m) > 1 {
				nt, err := name.NewTag(t)
				if err != nil {
					return nil, nil, fmt.Errorf("%w: tag %q in manifest.json: %v", ErrCorrupt, t, err)
				}
				tag = &nt
			}
		}
	}
	var refs []string
	switch {
	case tag != nil || (len(m) == 1 && want != ""):
		refs = []string{want}
	case len(m) > 1 && want != "":
		return nil, nil, fmt.Errorf("%w: %s is not in the tarball (it has %s)", ErrNotFound, want, describeNames(names))
	case len(m) > 1:
		return nil, nil, fmt.Errorf("%w: the tarball holds %d images (%s): choose one with a name", ErrInvalidRef, len(m), describeNames(names))
	case len(names) == 0:
		return nil, nil, fmt.Errorf("%w: the image in the tarball has no tag: give it a name", ErrInvalidRef)
	default:
		refs = names
	}
	img, err := tarball.Image(opener, tag)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: docker-save tarball: %v", ErrCorrupt, err)
	}
	return img, refs, nil
}

// Pull downloads ref from its registry and stores it.
func (s *Store) Pull(ctx context.Context, ref string, opts PullOptions) (*sandbox.Image, error) {
	var nopts []name.Option
	if opts.Insecure {
		nopts = append(nopts, name.Insecure)
	}
	r, err := parseRef(ref, nopts...)
	if err != nil {
		return nil, err
	}
	plat := defaultPlatform()
	if opts.Platform != "" {
		p, err := v1.ParsePlatform(opts.Platform)
		if err != nil {
			return nil, fmt.Errorf("pull %s: %w", ref, errdefs.New(errdefs.ErrInvalid, fmt.Sprintf("platform %q: %v", opts.Platform, err)))
		}
		plat = *p
	}
	img, err := remote.Image(r,
		remote.WithContext(ctx),
		remote.WithPlatform(plat),
		remote.WithAuthFromKeychain(authn.DefaultKeychain))
	if err != nil {
		var terr *transport.Error
		if errors.As(err, &terr) {
			switch terr.StatusCode {
			case http.StatusNotFound:
				return nil, fmt.Errorf("pull %s: %w: %s", ref, ErrNotFound, canonical(r))
			case http.StatusUnauthorized, http.StatusForbidden:
				return nil, fmt.Errorf("pull %s: %w: %w", ref, ErrDenied, err)
			}
		}
		if ctx.Err() == nil {
			// Unreachable, or failing: another try may work.
			err = fmt.Errorf("%w: %w", ErrRegistry, err)
		}
		return nil, fmt.Errorf("pull %s: %w", ref, err)
	}
	n := canonical(r)
	stored, err := s.store(ctx, img, []string{n}, "pull "+n, true, opts.Progress)
	if err != nil {
		return nil, fmt.Errorf("pull %s: %w", ref, err)
	}
	return stored, nil
}

// storable is what store reads of an image: a v1.Image, or a commit.
type storable interface {
	RawConfigFile() ([]byte, error)
	ConfigName() (v1.Hash, error)
	Layers() ([]v1.Layer, error)
}

// store extracts img's layers and registers it under refs. On failure it
// leaves nothing behind: layers it extracted that no image uses are
// deleted again.
func (s *Store) store(ctx context.Context, img storable, refs []string, source string, remote bool, progress func(Progress)) (*sandbox.Image, error) {
	raw, err := img.RawConfigFile()
	if err != nil {
		return nil, fmt.Errorf("%w: config: %v", ErrCorrupt, err)
	}
	sum := sha256.Sum256(raw)
	id := "sha256:" + hex.EncodeToString(sum[:])
	if want, err := img.ConfigName(); err != nil {
		return nil, fmt.Errorf("%w: config: %v", ErrCorrupt, err)
	} else if want.String() != id {
		return nil, fmt.Errorf("%w: config is %s, not %s as the manifest says", ErrCorrupt, id, want)
	}
	cf, err := v1.ParseConfigFile(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("%w: config: %v", ErrCorrupt, err)
	}
	layers, err := img.Layers()
	if err != nil {
		return nil, fmt.Errorf("%w: layers: %v", ErrCorrupt, err)
	}
	diffIDs := cf.RootFS.DiffIDs
	if len(layers) != len(diffIDs) {
		return nil, fmt.Errorf("%w: %d layers but %d diffIDs in the config", ErrCorrupt, len(layers), len(diffIDs))
	}
	srcs := make([]layerSource, len(layers))
	for i, l := range layers {
		if diffIDs[i].Algorithm != "sha256" {
			return nil, fmt.Errorf("%w: unsupported diffID %s", ErrCorrupt, diffIDs[i])
		}
		srcs[i] = layerSource{layer: l, diffID: diffIDs[i], remote: remote}
	}
	cfg, err := json.Marshal(sandbox.ImageConfig{
		Env:        cf.Config.Env,
		Entrypoint: cf.Config.Entrypoint,
		Cmd:        cf.Config.Cmd,
		WorkingDir: cf.Config.WorkingDir,
		User:       cf.Config.User,
		Labels:     cf.Config.Labels,
	})
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}

	b := &budget{bytes: s.MaxSize, entries: s.MaxEntries}
	var made []string
	sizes := make([]int64, len(srcs))
	ensure := func(i int) error {
		size, ok, err := s.ensureLayer(ctx, srcs[i], progress, b)
		if ok {
			made = append(made, srcs[i].diffID.String())
		}
		sizes[i] = size
		return err
	}
	for i := range srcs {
		if err := ensure(i); err != nil {
			return nil, s.abandon(made, err)
		}
	}

	unlock, err := s.lock()
	if err != nil {
		return nil, s.abandon(made, err)
	}
	err = s.register(ctx, id, string(cfg), string(raw), source, refs, srcs, sizes, ensure)
	unlock()
	if err != nil {
		return nil, s.abandon(made, err)
	}
	return s.load(ctx, id)
}

// register records an image under refs. It runs under the store lock, so
// no removal runs meanwhile; a layer that a removal deleted between its
// extraction and now is extracted again first.
func (s *Store) register(ctx context.Context, id, cfg, raw, source string, refs []string, srcs []layerSource, sizes []int64, ensure func(int) error) error {
	for i, src := range srcs {
		if _, err := os.Lstat(s.layerDir(src.diffID.String())); err != nil {
			if err := ensure(i); err != nil {
				return err
			}
		}
	}
	var total int64
	for _, n := range sizes {
		total += n
	}
	return s.st.Tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO images(id, config, size, created, source, raw) VALUES(?, ?, ?, ?, ?, ?)
			ON CONFLICT(id) DO NOTHING`, id, cfg, total, store.Now().UnixMilli(), source, raw)
		if err != nil {
			return fmt.Errorf("register %s: %w", id, err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("register %s: %w", id, err)
		} else if n == 1 {
			for i, src := range srcs {
				_, err := tx.ExecContext(ctx, `INSERT INTO image_layers(image_id, position, diff_id, size) VALUES(?, ?, ?, ?)`,
					id, i, src.diffID.String(), sizes[i])
				if err != nil {
					return fmt.Errorf("register %s: %w", id, err)
				}
			}
		}
		for _, ref := range refs {
			_, err := tx.ExecContext(ctx, `INSERT INTO image_refs(ref, image_id) VALUES(?, ?)
				ON CONFLICT(ref) DO UPDATE SET image_id = excluded.image_id`, ref, id)
			if err != nil {
				return fmt.Errorf("tag %s: %w", ref, err)
			}
		}
		return nil
	})
}

// abandon deletes the layers a failed store extracted, unless another image
// has come to use them, and returns err.
func (s *Store) abandon(made []string, err error) error {
	if len(made) == 0 {
		return err
	}
	unlock, lerr := s.lock()
	if lerr != nil {
		return errors.Join(err, lerr)
	}
	defer unlock()
	// The caller's context may be what failed; cleanup must still run.
	unused, qerr := unusedLayers(context.Background(), s.st.DB(), made)
	if qerr != nil {
		return errors.Join(err, fmt.Errorf("clean up layers: %w", qerr))
	}
	for _, d := range unused {
		if derr := s.deleteLayer(d); derr != nil {
			return errors.Join(err, derr)
		}
	}
	return err
}
