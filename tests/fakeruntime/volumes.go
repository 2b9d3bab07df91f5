package fakeruntime

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"smolvm.dev/smolvm/internal/names"
	"smolvm.dev/smolvm/internal/store"
	"smolvm.dev/smolvm/runtime/tenant"
	"smolvm.dev/smolvm/sandbox"
)

// The fake's volumes are directories under a test's temporary dir, with
// no quota: what the servers see of volumes, not how they are made.

var (
	_ sandbox.VolumeService = (*Runtime)(nil)
	_ sandbox.VolumeFiles   = (*Runtime)(nil)
)

func volumeKey(owner, name string) string { return owner + "/" + name }

func (r *Runtime) CreateVolume(ctx context.Context, o sandbox.VolumeOptions) (*sandbox.Volume, error) {
	if err := names.Check(names.Volume, o.Name); err != nil {
		return nil, err
	}
	if o.Size == 0 {
		o.Size = sandbox.DefaultVolumeSize
	}
	if o.Size < sandbox.MinVolumeSize || o.Size > sandbox.MaxVolumeSize {
		return nil, fmt.Errorf("%w: volume size %d", sandbox.ErrInvalid, o.Size)
	}
	owner := tenant.Owner(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.vols[volumeKey(owner, o.Name)]; ok {
		return nil, fmt.Errorf("volume %s: %w", o.Name, sandbox.ErrVolumeExists)
	}
	if err := os.MkdirAll(r.volumeDir(owner, o.Name), 0o700); err != nil {
		return nil, err
	}
	v := &sandbox.Volume{Name: o.Name, Size: o.Size, CreatedAt: store.Now(), Tenant: owner, UsedBy: []string{}}
	r.vols[volumeKey(owner, o.Name)] = v
	out := *v
	return &out, nil
}

func (r *Runtime) volumeDir(owner, name string) string {
	return filepath.Join(r.volDir, "_"+owner, name)
}

// volume returns ctx's tenant's volume name, with its users; r.mu held.
func (r *Runtime) volume(ctx context.Context, name string) (*sandbox.Volume, error) {
	if err := names.Check(names.Volume, name); err != nil {
		return nil, err
	}
	v, ok := r.vols[volumeKey(tenant.Owner(ctx), name)]
	if !ok {
		return nil, fmt.Errorf("volume %s: %w", name, sandbox.ErrVolumeNotFound)
	}
	return r.withUsers(v), nil
}

func (r *Runtime) withUsers(v *sandbox.Volume) *sandbox.Volume {
	out := *v
	out.UsedBy = []string{}
	for _, b := range r.boxes {
		if b.sb.Tenant == v.Tenant && slices.ContainsFunc(b.sb.Config.Volumes, func(m sandbox.VolumeMount) bool { return m.Name == v.Name }) {
			out.UsedBy = append(out.UsedBy, b.sb.Name)
		}
	}
	slices.Sort(out.UsedBy)
	return &out
}

func (r *Runtime) GetVolume(ctx context.Context, name string) (*sandbox.Volume, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.volume(ctx, name)
}

func (r *Runtime) ListVolumes(ctx context.Context) ([]*sandbox.Volume, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := []*sandbox.Volume{}
	for _, v := range r.vols {
		if tenant.Owns(ctx, v.Tenant) {
			out = append(out, r.withUsers(v))
		}
	}
	slices.SortFunc(out, func(a, b *sandbox.Volume) int { return strings.Compare(a.Tenant+"/"+a.Name, b.Tenant+"/"+b.Name) })
	return out, nil
}

func (r *Runtime) RemoveVolume(ctx context.Context, name string, force bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	v, err := r.volume(ctx, name)
	if err != nil {
		return err
	}
	if len(v.UsedBy) > 0 && !force {
		return fmt.Errorf("volume %s: %w by %s", name, sandbox.ErrVolumeInUse, strings.Join(v.UsedBy, ", "))
	}
	delete(r.vols, volumeKey(v.Tenant, name))
	return os.RemoveAll(r.volumeDir(v.Tenant, name))
}

func (r *Runtime) VolumeRoot(ctx context.Context, name string) (*os.Root, error) {
	r.mu.Lock()
	v, err := r.volume(ctx, name)
	r.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return os.OpenRoot(r.volumeDir(v.Tenant, name))
}
