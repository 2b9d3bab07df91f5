// Package build builds images from Dockerfiles: each RUN in a sandbox of
// the image so far, each step's files an OCI layer in the image store, and
// each step cached by what it depends on.
package build

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"

	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/runtime/image"
	"smolvm.dev/smolvm/runtime/manager"
	"smolvm.dev/smolvm/sandbox"
)

// Errors callers test with errors.Is; they are wrapped with the line.
var (
	// ErrDockerfile is a Dockerfile that does not parse, or an instruction
	// or flag this builder does not support.
	ErrDockerfile = errdefs.New(errdefs.ErrInvalid, "bad Dockerfile")
	// ErrStep is a step that failed: a RUN that exited non-zero, a COPY
	// whose source is missing.
	ErrStep = errdefs.New(errdefs.ErrInvalid, "build step failed")
)

// Options configure a build (sandbox.BuildOptions, where the servers,
// which link no runtime, name them).
type Options = sandbox.BuildOptions

// Builder builds images into a manager's image store.
type Builder struct {
	m      *manager.Manager
	images *image.Store
	cache  *cache
	// scratch holds each step's upper directory and layer tarball; it is
	// on the data dir's filesystem, as the overlay's work dir must be.
	scratch string
}

// New returns a builder over m, whose data dir is dataDir.
func New(ctx context.Context, m *manager.Manager, dataDir string) (*Builder, error) {
	c, err := openCache(ctx, m.Store())
	if err != nil {
		return nil, err
	}
	scratch := filepath.Join(dataDir, "build")
	if err := os.MkdirAll(scratch, 0o700); err != nil {
		return nil, fmt.Errorf("build: %w", err)
	}
	// A build killed mid-step leaves its directories, and a view's mount:
	// unmounted first, so that removing never reaches an image's layers.
	for _, p := range image.StaleTemps(scratch) {
		unix.Unmount(p, unix.MNT_DETACH)
		removeAll(p)
	}
	return &Builder{m: m, images: m.Images(), cache: c, scratch: scratch}, nil
}

// Build builds the target stage of o.Dockerfile and stores it under
// o.Tags. A failed build stores no tag and no half-made layer; the steps
// that succeeded stay cached.
func (b *Builder) Build(ctx context.Context, o Options) (*sandbox.Image, error) {
	if o.Name == "" {
		o.Name = "Dockerfile"
	}
	plan, err := parse(o)
	if err != nil {
		return nil, err
	}
	ign, err := readIgnore(o.Context)
	if err != nil {
		return nil, err
	}
	r := &run{b: b, o: o, plan: plan, ignore: ign, p: newProgress(o.Progress), done: map[int]*state{}}
	st, err := r.stage(ctx, plan.target)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	n := r.p.begin("exporting to image")
	source := o.Context
	if abs, err := filepath.Abs(source); err == nil {
		source = abs
	}
	img, err := b.commit(ctx, st, o.Tags, "build "+source)
	if err != nil {
		return nil, err
	}
	r.p.logf(n, "writing image %s", img.ID)
	for _, t := range img.Refs {
		r.p.logf(n, "naming to %s", t)
	}
	r.p.done(n, start)
	return img, nil
}

// commit stores st as an image under refs, its config as built.
func (b *Builder) commit(ctx context.Context, st *state, refs []string, source string) (*sandbox.Image, error) {
	// Dated by its last step: a rebuild that changed nothing is the same
	// image, not a new one leaving the last untagged.
	cf := st.cf
	if cf.Created = lastCreated(&cf); cf.Created.IsZero() {
		cf.Created = v1.Time{Time: time.Now().UTC()}
	}
	img, err := b.images.Commit(ctx, st.base, nil, cf, refs, source)
	if err != nil {
		return nil, fmt.Errorf("build: %w", err)
	}
	return img, nil
}

// tail is the last lines of output, for an error message.
func tail(b []byte, n int) string {
	b = bytes.TrimRight(b, "\n")
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == '\n' {
			if n--; n == 0 {
				return string(b[i+1:])
			}
		}
	}
	return string(b)
}

// removeAll is os.RemoveAll whose failure only costs disk space.
func removeAll(dir string) {
	if err := os.RemoveAll(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		fmt.Fprintf(os.Stderr, "smolvm: build: clean up %s: %v\n", dir, err)
	}
}
