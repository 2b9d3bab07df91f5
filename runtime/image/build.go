package image

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/sandbox"
)

// RecipeLabel is the image label that holds the digest of the recipe an
// image was built from: Build reuses an image whose label matches.
const RecipeLabel = "dev.smolvm.recipe"

// ErrBuild is a recipe that did not build (mmdebstrap missing or failed).
var ErrBuild = errdefs.New(errdefs.ErrUnavailable, "image build failed")

// checkRecipe refuses what mmdebstrap would read as an option or a list.
func checkRecipe(r sandbox.Recipe) error {
	if r.Suite == "" || len(r.Sources) == 0 || r.Variant == "" {
		return fmt.Errorf("%w: recipe %s: a suite, a variant and apt sources are required", sandbox.ErrInvalid, r.Name)
	}
	for _, p := range append(append([]string{r.Suite, r.Variant}, r.Packages...), r.Exclude...) {
		if strings.ContainsAny(p, ", \t\n") || strings.HasPrefix(p, "-") {
			return fmt.Errorf("%w: recipe %s: %q is not a package, suite, variant or glob", sandbox.ErrInvalid, r.Name, p)
		}
	}
	return nil
}

// BuildOptions tune Build.
type BuildOptions struct {
	Progress func(Progress)
	// Cache, if set, is a directory that keeps the root filesystem
	// tarball by recipe digest, so that the same recipe builds into
	// another store (a test's) without mmdebstrap.
	Cache string
}

// Build returns the image of recipe r, stored under r.Name: the one
// stored already if its RecipeLabel is r's digest, otherwise built now by
// mmdebstrap and stored as a one-layer image through the same path as
// Import. Building downloads the packages from r.Sources (minutes).
// built reports whether mmdebstrap ran.
func (s *Store) Build(ctx context.Context, r sandbox.Recipe, o BuildOptions) (img *sandbox.Image, built bool, err error) {
	ref, err := Normalize(r.Name)
	if err != nil {
		return nil, false, err
	}
	if err := checkRecipe(r); err != nil {
		return nil, false, err
	}
	digest := r.Digest()
	if img, err := s.Get(ctx, ref); err == nil && img.Config.Labels[RecipeLabel] == digest {
		return img, false, nil
	} else if err != nil && !errors.Is(err, ErrNotFound) {
		return nil, false, fmt.Errorf("build %s: %w", r.Name, err)
	}
	rootfs, built, err := s.rootfs(ctx, r, o.Cache)
	if err != nil {
		return nil, false, fmt.Errorf("build %s: %w", r.Name, err)
	}
	if o.Cache == "" {
		defer os.RemoveAll(filepath.Dir(rootfs))
	}
	// Uncompressed and never compressed: the store reads the layer
	// uncompressed, and the digest go-containerregistry insists on
	// computing is then a copy, not a gzip of hundreds of megabytes.
	layer, err := tarball.LayerFromFile(rootfs, tarball.WithCompressionLevel(gzip.NoCompression))
	if err != nil {
		return nil, false, fmt.Errorf("build %s: %w", r.Name, err)
	}
	v, err := mutate.AppendLayers(empty.Image, layer)
	if err == nil {
		v, err = mutate.Config(v, v1.Config{Env: r.Env, Labels: map[string]string{RecipeLabel: digest}})
	}
	if err == nil {
		v, err = mutate.CreatedAt(v, v1.Time{Time: time.Unix(r.Epoch, 0).UTC()})
	}
	if err != nil {
		return nil, false, fmt.Errorf("build %s: %w", r.Name, err)
	}
	img, err = s.store(ctx, v, []string{ref}, "build "+digest, false, o.Progress)
	if err != nil {
		return nil, false, fmt.Errorf("build %s: %w", r.Name, err)
	}
	return img, built, nil
}

// rootfs returns the path of r's root filesystem tarball: kept in cache
// if there is one, otherwise made by mmdebstrap (built), into cache or a
// temporary directory of its own.
func (s *Store) rootfs(ctx context.Context, r sandbox.Recipe, cache string) (path string, built bool, err error) {
	dir := cache
	if cache != "" {
		path = filepath.Join(cache, strings.TrimPrefix(r.Digest(), "sha256:")+".tar")
		if _, err := os.Stat(path); err == nil {
			return path, false, nil
		}
		if err := os.MkdirAll(cache, 0o700); err != nil {
			return "", false, err
		}
		removeStaleTemps(cache)
	} else {
		dir = s.images
	}
	tmp, err := os.MkdirTemp(dir, tempName())
	if err != nil {
		return "", false, err
	}
	out := filepath.Join(tmp, "rootfs.tar")
	if err := mmdebstrap(ctx, r, out, filepath.Join(tmp, "mmdebstrap.log")); err != nil {
		os.RemoveAll(tmp)
		return "", false, err
	}
	if cache == "" {
		return out, true, nil
	}
	defer os.RemoveAll(tmp)
	// Whole or absent: concurrent builds each rename their own.
	return path, true, os.Rename(out, path)
}

// mmdebstrap writes r's root filesystem to out as a tarball; its output
// goes to logPath, whose tail an error quotes.
func mmdebstrap(ctx context.Context, r sandbox.Recipe, out, logPath string) error {
	bin, err := exec.LookPath("mmdebstrap")
	if err != nil {
		return fmt.Errorf("%w: mmdebstrap is not installed (apt-get install mmdebstrap)", ErrBuild)
	}
	args := []string{"--mode=root", "--format=tar", "--variant=" + r.Variant}
	if len(r.Packages) > 0 {
		args = append(args, "--include="+strings.Join(r.Packages, ","))
	}
	for _, g := range r.Exclude {
		args = append(args, "--dpkgopt=path-exclude="+g)
	}
	args = append(append(args, r.Suite, out), r.Sources...)
	log, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH="+strconv.FormatInt(r.Epoch, 10))
	cmd.Stdout, cmd.Stderr = log, log
	// SIGTERM, not SIGKILL: mmdebstrap then unmounts what it mounted in
	// its chroot and removes it.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = time.Minute
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%w: mmdebstrap: %v: %s", ErrBuild, err, tail(logPath, 2000))
	}
	return nil
}

// tail is the last n bytes of a file, for an error message.
func tail(path string, n int64) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if int64(len(b)) > n {
		b = b[int64(len(b))-n:]
	}
	return strings.TrimSpace(string(b))
}
