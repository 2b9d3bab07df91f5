package image

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"smolvm.dev/smolvm/sandbox"
)

// hostName names the builtin image that runs the host's own /usr.
const hostName = "host"

// hostConfig is the run configuration of the builtin image.
var hostConfig = sandbox.ImageConfig{
	Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root"},
	WorkingDir: "/",
}

// hostFiles are the synthetic contents of the builtin image's /etc. Nothing
// else of the host's /etc is copied, so no host secret can leak into it.
var hostFiles = map[string]string{
	"etc/passwd": "root:x:0:0:root:/root:/bin/sh\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n" +
		"sandbox:x:1000:1000:sandbox:/home/sandbox:/bin/sh\n",
	"etc/group":       "root:x:0:\nnogroup:x:65534:\nsandbox:x:1000:\n",
	"etc/hosts":       "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n",
	"etc/resolv.conf": "# Sandboxes have no network.\n",
	// hosts: files alone (as it once was) never asked DNS, even with a
	// network.
	"etc/nsswitch.conf": "passwd: files\ngroup: files\nshadow: files\n" +
		"hosts: files dns\nnetworks: files\nprotocols: files\nservices: files\n",
}

// hostDirs are the empty directories of the builtin image, with modes.
var hostDirs = []struct {
	path string
	mode os.FileMode
}{
	{"proc", 0o555}, {"dev", 0o755}, {"sys", 0o555}, {"tmp", 0o1777},
	{"root", 0o700}, {"home", 0o755}, {"home/sandbox", 0o755}, {"run", 0o755},
	{"var", 0o755}, {"var/tmp", 0o1777}, {"mnt", 0o755}, {"usr", 0o755},
}

// hostTopDirs may be symlinks into /usr (a merged-/usr host) or real
// directories that are then bind-mounted like /usr.
var hostTopDirs = []string{"bin", "sbin", "lib", "lib32", "lib64", "libx32"}

func (s *Store) hostRoot() string { return filepath.Join(s.images, hostName, "rootfs") }

// ensureHost generates the builtin image's root directory if it is missing.
// It is built aside and renamed into place, so it is either whole or absent.
func (s *Store) ensureHost() error {
	root := s.hostRoot()
	if _, err := os.Lstat(root); err == nil {
		return nil
	}
	parent := filepath.Dir(root)
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return fmt.Errorf("host image: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, tempName())
	if err != nil {
		return fmt.Errorf("host image: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := buildHostRoot(tmp, "/"); err != nil {
		return fmt.Errorf("host image: %w", err)
	}
	if err := os.Rename(tmp, root); err != nil {
		if _, serr := os.Lstat(root); serr != nil {
			return fmt.Errorf("host image: %w", err)
		}
		// Another process generated it meanwhile.
	}
	return syncDir(parent)
}

// buildHostRoot writes the builtin image's root directory into dir, shaped
// after the host root hostRoot.
func buildHostRoot(dir, hostRoot string) error {
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	if err := os.Mkdir(filepath.Join(dir, "etc"), 0o755); err != nil {
		return err
	}
	for _, d := range hostDirs {
		p := filepath.Join(dir, d.path)
		if err := os.Mkdir(p, d.mode); err != nil {
			return err
		}
		// Mkdir applies the umask and never sets the sticky bit.
		if err := os.Chmod(p, d.mode); err != nil {
			return err
		}
	}
	if err := os.Chown(filepath.Join(dir, "home/sandbox"), 1000, 1000); err != nil {
		return err
	}
	files := map[string]string{}
	for k, v := range hostFiles {
		files[k] = v
	}
	// os-release only names the distribution; it is usually a symlink into
	// /usr, so its content is copied.
	if b, err := os.ReadFile(filepath.Join(hostRoot, "etc/os-release")); err == nil {
		files["etc/os-release"] = string(b)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	for _, n := range hostTopDirs {
		fi, err := os.Lstat(filepath.Join(hostRoot, n))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		p := filepath.Join(dir, n)
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(filepath.Join(hostRoot, n))
			if err != nil {
				return err
			}
			target = strings.TrimPrefix(target, "/")
			if !strings.HasPrefix(target, "usr/") {
				continue // points outside /usr: nothing of it is mounted
			}
			if err := os.Symlink(target, p); err != nil {
				return err
			}
		case fi.IsDir():
			if err := os.Mkdir(p, 0o755); err != nil {
				return err
			}
		}
	}
	if err := buildAlternatives(dir, hostRoot); err != nil {
		return err
	}
	return nil
}

// buildAlternatives recreates the host's /etc/alternatives symlinks (Debian
// programs such as vi or java resolve through them) when they point into
// the mounted directories. Only the links are made: no file content of the
// host's /etc is read.
func buildAlternatives(dir, hostRoot string) error {
	entries, err := os.ReadDir(filepath.Join(hostRoot, "etc/alternatives"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	alt := filepath.Join(dir, "etc/alternatives")
	if err := os.Mkdir(alt, 0o755); err != nil {
		return err
	}
	for _, e := range entries {
		if e.Type()&fs.ModeSymlink == 0 {
			continue
		}
		target, err := os.Readlink(filepath.Join(hostRoot, "etc/alternatives", e.Name()))
		if err != nil {
			return err
		}
		if !hostVisible(target) {
			continue
		}
		if err := os.Symlink(target, filepath.Join(alt, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// hostVisible reports whether an absolute host path lies in a directory the
// builtin image mounts.
func hostVisible(p string) bool {
	if !filepath.IsAbs(p) {
		return false
	}
	top, _, _ := strings.Cut(strings.TrimPrefix(filepath.Clean(p), "/"), "/")
	return top == "usr" || slices.Contains(hostTopDirs, top)
}

// host returns the builtin image, regenerating its root if it went missing.
func (s *Store) host() (*sandbox.Image, error) {
	if err := s.ensureHost(); err != nil {
		return nil, err
	}
	fi, err := os.Stat(s.hostRoot())
	if err != nil {
		return nil, fmt.Errorf("host image: %w", err)
	}
	cfg, err := json.Marshal(hostConfig)
	if err != nil {
		return nil, fmt.Errorf("host image: %w", err)
	}
	sum := sha256.Sum256(cfg)
	return &sandbox.Image{
		ID:      "sha256:" + hex.EncodeToString(sum[:]),
		Refs:    []string{hostName},
		Layers:  []string{},
		Config:  hostConfig,
		Created: fi.ModTime().UTC(),
		Source:  "builtin",
		Builtin: true,
	}, nil
}

// hostRootfs stacks the generated root under the host's /usr and those
// top-level directories that are real directories on this host.
func (s *Store) hostRootfs() Rootfs {
	root := s.hostRoot()
	r := Rootfs{
		LowerDirs: []string{root},
		Mounts:    []Mount{{Source: "/usr", Destination: "/usr"}},
	}
	for _, n := range hostTopDirs {
		if fi, err := os.Lstat(filepath.Join(root, n)); err == nil && fi.IsDir() {
			r.Mounts = append(r.Mounts, Mount{Source: "/" + n, Destination: "/" + n})
		}
	}
	return r
}
