package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"runtime"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/sandbox"
)

// Save formats: an OCI image layout as a tar (skopeo's oci-archive), or a
// docker-save tarball (docker load, skopeo's docker-archive).
const (
	FormatOCI    = "oci"
	FormatDocker = "docker"
)

// ConfigFile returns img's whole OCI config: as stored, or, for an image
// stored before the whole config was kept, made from what was.
func (s *Store) ConfigFile(ctx context.Context, img *sandbox.Image) (*v1.ConfigFile, error) {
	if img.Builtin {
		return nil, fmt.Errorf("%w: the builtin image %s has no OCI config: it mounts the host's files", ErrInvalidRef, hostName)
	}
	var raw string
	if err := s.st.DB().QueryRowContext(ctx, `SELECT raw FROM images WHERE id = ?`, img.ID).Scan(&raw); err != nil {
		return nil, fmt.Errorf("config of %s: %w", shortID(img.ID), err)
	}
	if raw != "" {
		cf, err := v1.ParseConfigFile(bytes.NewReader([]byte(raw)))
		if err != nil {
			return nil, fmt.Errorf("%w: config of %s: %v", ErrCorrupt, shortID(img.ID), err)
		}
		return cf, nil
	}
	c := img.Config
	return &v1.ConfigFile{
		Architecture: runtime.GOARCH, OS: "linux",
		Config: v1.Config{Env: c.Env, Entrypoint: c.Entrypoint, Cmd: c.Cmd, WorkingDir: c.WorkingDir, User: c.User, Labels: c.Labels},
	}, nil
}

// Save writes the image nameOrID to w in format (FormatOCI or
// FormatDocker). Its layers are written anew from their extracted
// directories (WriteLayer), gzip-compressed: a layer smolvm built keeps its
// diffID, one pulled from elsewhere may get a new one, and the config's
// diffIDs follow.
func (s *Store) Save(ctx context.Context, nameOrID string, w io.Writer, format string) error {
	img, err := s.Get(ctx, nameOrID)
	if err != nil {
		return err
	}
	cf, err := s.ConfigFile(ctx, img)
	if err != nil {
		return err
	}
	mt := types.DockerLayer
	if format == FormatOCI {
		mt = types.OCILayer
	} else if format != FormatDocker {
		return fmt.Errorf("save %s: %w", nameOrID, errdefs.New(errdefs.ErrInvalid, fmt.Sprintf("format %q: want oci or docker", format)))
	}
	v, err := s.v1Image(img, cf, mt)
	if err != nil {
		return fmt.Errorf("save %s: %w", nameOrID, err)
	}
	if format == FormatDocker {
		err = tarball.Write(saveTag(img, nameOrID), v, w)
	} else {
		err = writeOCIArchive(w, v, saveName(img, nameOrID))
	}
	if err != nil {
		return fmt.Errorf("save %s: %w", nameOrID, err)
	}
	return nil
}

// v1Image is img as go-containerregistry writes it, its layers of media
// type mt.
func (s *Store) v1Image(img *sandbox.Image, cf *v1.ConfigFile, mt types.MediaType) (v1.Image, error) {
	var layers []v1.Layer
	for _, d := range img.Layers {
		dir := s.layerDir(d)
		l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
			pr, pw := io.Pipe()
			go func() { pw.CloseWithError(WriteLayer(pw, dir, nil)) }()
			return pr, nil
		}, tarball.WithMediaType(mt), tarball.WithCompressionLevel(gzip.BestSpeed))
		if err != nil {
			return nil, fmt.Errorf("layer %s: %w", d, err)
		}
		layers = append(layers, l)
	}
	base := empty.Image
	if mt == types.OCILayer {
		base = mutate.ConfigMediaType(mutate.MediaType(base, types.OCIManifestSchema1), types.OCIConfigJSON)
	}
	v, err := mutate.AppendLayers(base, layers...)
	if err != nil {
		return nil, err
	}
	c := *cf
	c.RootFS = v1.RootFS{Type: "layers"}
	for _, l := range layers {
		d, err := l.DiffID()
		if err != nil {
			return nil, err
		}
		c.RootFS.DiffIDs = append(c.RootFS.DiffIDs, d)
	}
	return mutate.ConfigFile(v, &c)
}

// saveName is the name an archive gives the image: the one asked for if
// it is a name, else the image's first.
func saveName(img *sandbox.Image, asked string) string {
	if n, err := Normalize(asked); err == nil && !IsID(asked) {
		return n
	}
	if len(img.Refs) > 0 {
		return img.Refs[0]
	}
	return ""
}

// saveTag is saveName as docker-save's RepoTags takes it, or nil.
func saveTag(img *sandbox.Image, asked string) name.Reference {
	if t, err := name.NewTag(saveName(img, asked)); err == nil {
		return t
	}
	return nil
}

// writeOCIArchive writes v as an OCI image layout in a tar: oci-layout,
// index.json, then the blobs, each written once.
func writeOCIArchive(w io.Writer, v v1.Image, ref string) error {
	manifest, err := v.RawManifest()
	if err != nil {
		return err
	}
	desc, err := partialDescriptor(v, manifest, ref)
	if err != nil {
		return err
	}
	index, err := json.Marshal(v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex, Manifests: []v1.Descriptor{desc}})
	if err != nil {
		return err
	}
	cfg, err := v.RawConfigFile()
	if err != nil {
		return err
	}
	cfgName, err := v.ConfigName()
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	files := []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
		{blobPath(desc.Digest), manifest},
		{blobPath(cfgName), cfg},
	}
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.data)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		if _, err := tw.Write(f.data); err != nil {
			return err
		}
	}
	layers, err := v.Layers()
	if err != nil {
		return err
	}
	seen := map[v1.Hash]bool{}
	for _, l := range layers {
		if err := writeBlob(tw, l, seen); err != nil {
			return err
		}
	}
	return tw.Close()
}

// partialDescriptor describes v's manifest for index.json.
func partialDescriptor(v v1.Image, manifest []byte, ref string) (v1.Descriptor, error) {
	d, err := v.Digest()
	if err != nil {
		return v1.Descriptor{}, err
	}
	mt, err := v.MediaType()
	if err != nil {
		return v1.Descriptor{}, err
	}
	desc := v1.Descriptor{MediaType: mt, Digest: d, Size: int64(len(manifest))}
	if ref != "" {
		desc.Annotations = map[string]string{annotationRefName: ref, annotationContainer: ref}
	}
	return desc, nil
}

func blobPath(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }

// writeBlob writes a layer's compressed blob unless it was written already.
func writeBlob(tw *tar.Writer, l v1.Layer, seen map[v1.Hash]bool) error {
	d, err := l.Digest()
	if err != nil {
		return err
	}
	if seen[d] {
		return nil
	}
	seen[d] = true
	size, err := l.Size()
	if err != nil {
		return err
	}
	rc, err := l.Compressed()
	if err != nil {
		return err
	}
	defer rc.Close()
	if err := tw.WriteHeader(&tar.Header{Name: blobPath(d), Mode: 0o644, Size: size, Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	_, err = io.CopyN(tw, rc, size)
	return err
}
