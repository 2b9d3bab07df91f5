package manager

import (
	"context"
	"fmt"
	"os"
	"slices"

	"smolvm.dev/smolvm/internal/store"
	"smolvm.dev/smolvm/runtime/backend"
	"smolvm.dev/smolvm/runtime/tenant"
	"smolvm.dev/smolvm/sandbox"
)

// A volume belongs to the tenant that creates it; every lookup is by the
// caller's tenant and name, so another tenant's volume is not found, as
// one that never existed. An unscoped caller (the admin, the local CLI)
// has its own volumes and lists everyone's.

// CreateVolume implements sandbox.VolumeService.
func (m *Manager) CreateVolume(ctx context.Context, o sandbox.VolumeOptions) (*sandbox.Volume, error) {
	owner, q, _, err := m.quotaOf(ctx)
	if err != nil {
		return nil, err
	}
	v, err := m.volumes.Create(ctx, owner, o, q.VolumeBytes, tenant.ErrQuota)
	if err != nil {
		return nil, err
	}
	v.UsedBy = []string{}
	return v, nil
}

// GetVolume implements sandbox.VolumeService.
func (m *Manager) GetVolume(ctx context.Context, name string) (*sandbox.Volume, error) {
	v, err := m.volumes.Get(ctx, tenant.Owner(ctx), name)
	if err != nil {
		return nil, err
	}
	if v.UsedBy, err = m.volumeUsers(ctx, v.Tenant, v.Name); err != nil {
		return nil, err
	}
	return v, nil
}

// ListVolumes implements sandbox.VolumeService.
func (m *Manager) ListVolumes(ctx context.Context) ([]*sandbox.Volume, error) {
	owner, scoped := tenant.Of(ctx)
	vs, err := m.volumes.List(ctx, owner, !scoped)
	if err != nil {
		return nil, err
	}
	for _, v := range vs {
		if v.UsedBy, err = m.volumeUsers(ctx, v.Tenant, v.Name); err != nil {
			return nil, err
		}
	}
	return vs, nil
}

// VolumeRoot opens ctx's tenant's volume name, mounted on the host, as an
// os.Root: the host-side reader and writer of its files (E2B's content
// API). Links a sandbox made there resolve within the volume, and one
// that leads out of it is refused, never followed onto the host.
func (m *Manager) VolumeRoot(ctx context.Context, name string) (*os.Root, error) {
	src, err := m.volumes.Mount(ctx, tenant.Owner(ctx), name)
	if err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(src)
	if err != nil {
		return nil, fmt.Errorf("volume %s: %w", name, err)
	}
	return root, nil
}

// RemoveVolume implements sandbox.VolumeService.
func (m *Manager) RemoveVolume(ctx context.Context, name string, force bool) error {
	owner := tenant.Owner(ctx)
	return m.volumes.Remove(ctx, owner, name, force, func(ctx context.Context) ([]string, error) {
		return m.volumeUsers(ctx, owner, name)
	})
}

// volumeUsers names the sandboxes of owner, in any state (pool members
// and copies being made included), whose config mounts volume name.
func (m *Manager) volumeUsers(ctx context.Context, owner, name string) ([]string, error) {
	users, err := store.Strings(ctx, m.st.DB(), `SELECT s.name FROM sandboxes s WHERE s.tenant = ? AND EXISTS
		(SELECT 1 FROM json_each(s.config, '$.volumes') v WHERE json_extract(v.value, '$.name') = ?) ORDER BY s.name`, owner, name)
	if err != nil {
		return nil, fmt.Errorf("volume %s: sandboxes: %w", name, err)
	}
	if users == nil {
		users = []string{}
	}
	return users, nil
}

// mountVolumes puts r's volumes into its spec, each mounted on the host
// (again, after a reboot). r's record must be written first (see
// volume.Store.Mount). A volume removed since r was made (a restore of an
// old snapshot, a start) fails here as not found. runsc refuses a restore
// whose mounts differ from the checkpoint's (destinations and options,
// not sources): a copy mounts its source's volumes at the same paths and
// modes, from the same config.
func (m *Manager) mountVolumes(ctx context.Context, r *record) error {
	r.spec.Rootfs.Mounts = slices.DeleteFunc(r.spec.Rootfs.Mounts, func(mt backend.Mount) bool { return mt.Volume })
	for _, v := range r.Config.Volumes {
		src, err := m.volumes.Mount(ctx, r.Tenant, v.Name)
		if err != nil {
			return err
		}
		r.spec.Rootfs.Mounts = append(r.spec.Rootfs.Mounts, backend.Mount{Source: src, Destination: v.Path, Volume: true, Writable: !v.ReadOnly})
	}
	return nil
}
