package sandbox

import (
	"context"
	"fmt"
	"os"
	"path"
	"strings"
	"time"

	"smolvm.dev/smolvm/errdefs"
)

// Volume is a named persistent file system of one tenant, with a size
// quota. It outlives the sandboxes that mount it, and several sandboxes
// may mount it at once.
type Volume struct {
	Name string `json:"name"`
	// Size is the quota in bytes: writes beyond it fail with ENOSPC.
	Size int64 `json:"size"`
	// Used is how many bytes its files take, when it is mounted on the
	// host (0 otherwise).
	Used      int64     `json:"used"`
	CreatedAt time.Time `json:"created_at"`
	// Tenant owns the volume; "" is the admin.
	Tenant string `json:"tenant,omitempty"`
	// UsedBy names the sandboxes (stopped ones included) whose config
	// mounts it.
	UsedBy []string `json:"used_by"`
}

// VolumeMount is a volume mounted into a sandbox: Config.Volumes.
type VolumeMount struct {
	Name     string `json:"name"`
	Path     string `json:"path"`
	ReadOnly bool   `json:"read_only,omitempty"`
}

// VolumeOptions are a new volume's settings.
type VolumeOptions struct {
	Name string `json:"name"`
	// Size is the quota in bytes; 0 is DefaultVolumeSize.
	Size int64 `json:"size,omitempty"`
}

// Volume sizes: the default, and the bounds a quota must fall in (ext4
// with a journal needs a few MiB).
const (
	DefaultVolumeSize int64 = 1 << 30
	MinVolumeSize     int64 = 8 << 20
	MaxVolumeSize     int64 = 4 << 40
)

// MaxVolumeMounts bounds the volumes one sandbox mounts.
const MaxVolumeMounts = 16

var (
	ErrVolumeNotFound = errdefs.New(errdefs.ErrNotFound, "no such volume")
	ErrVolumeExists   = errdefs.New(errdefs.ErrAlreadyExists, "volume already exists")
	// ErrVolumeInUse is a remove of a volume that sandboxes mount,
	// without force.
	ErrVolumeInUse = errdefs.New(errdefs.ErrConflict, "volume in use")
)

// VolumeService manages volumes; *manager.Manager and *client.Client
// implement it.
type VolumeService interface {
	CreateVolume(ctx context.Context, o VolumeOptions) (*Volume, error)
	GetVolume(ctx context.Context, name string) (*Volume, error)
	ListVolumes(ctx context.Context) ([]*Volume, error)
	// RemoveVolume deletes a volume and its files; one that a sandbox
	// mounts needs force.
	RemoveVolume(ctx context.Context, name string, force bool) error
}

// VolumeFiles reaches a volume's files from the host, for a server that
// serves them (E2B's volume content API).
type VolumeFiles interface {
	// VolumeRoot opens ctx's tenant's volume name as an os.Root: a link
	// in it that leads out of the volume is refused, never followed.
	VolumeRoot(ctx context.Context, name string) (*os.Root, error)
}

// ParseVolumeMount parses NAME:/path[:ro|:rw], the --volume flag.
func ParseVolumeMount(s string) (VolumeMount, error) {
	parts := strings.Split(s, ":")
	bad := func(why string) (VolumeMount, error) {
		return VolumeMount{}, fmt.Errorf("%w: --volume %q: %s (want NAME:/path[:ro])", ErrInvalid, s, why)
	}
	if len(parts) < 2 || len(parts) > 3 {
		return bad("not NAME:/path")
	}
	v := VolumeMount{Name: parts[0], Path: parts[1]}
	if len(parts) == 3 {
		switch parts[2] {
		case "ro":
			v.ReadOnly = true
		case "rw":
		default:
			return bad("the mode must be ro or rw")
		}
	}
	return v, nil
}

// CheckVolumeMounts checks a config's volume mounts: absolute, clean
// paths that are not / nor smolvm's own, each path once, and at most
// MaxVolumeMounts. The names are checked where they are looked up.
func CheckVolumeMounts(vs []VolumeMount) error {
	if len(vs) > MaxVolumeMounts {
		return fmt.Errorf("%w: %d volumes: at most %d", ErrInvalid, len(vs), MaxVolumeMounts)
	}
	seen := map[string]bool{}
	for _, v := range vs {
		switch {
		case !path.IsAbs(v.Path) || path.Clean(v.Path) != v.Path || strings.ContainsRune(v.Path, 0):
			return fmt.Errorf("%w: volume %q: mount path %q must be absolute and clean", ErrInvalid, v.Name, v.Path)
		case v.Path == "/" || v.Path == "/proc" || v.Path == "/dev" || v.Path == "/sys" ||
			strings.HasPrefix(v.Path, "/proc/") || strings.HasPrefix(v.Path, "/dev/") || strings.HasPrefix(v.Path, "/sys/") ||
			v.Path == "/.smolvm" || strings.HasPrefix(v.Path, "/.smolvm/"):
			return fmt.Errorf("%w: volume %q: cannot mount over %s", ErrInvalid, v.Name, v.Path)
		case seen[v.Path]:
			return fmt.Errorf("%w: two volumes at %s", ErrInvalid, v.Path)
		}
		seen[v.Path] = true
	}
	return nil
}
