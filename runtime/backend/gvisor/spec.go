package gvisor

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"smolvm.dev/smolvm/runtime/backend"
	"smolvm.dev/smolvm/runtime/guest"
	"smolvm.dev/smolvm/sandbox"
)

// Paths inside the sandbox.
const (
	guestAgent  = sandbox.AgentPath
	guestRunDir = "/.smolvm/run"
)

// layout names the files a sandbox keeps under its Dir.
type layout struct{ dir string }

func (l layout) bundle() string    { return filepath.Join(l.dir, "bundle") }
func (l layout) rootfs() string    { return filepath.Join(l.dir, "rootfs") }
func (l layout) run() string       { return filepath.Join(l.dir, "run") }
func (l layout) runscRoot() string { return filepath.Join(l.dir, "runsc") }
func (l layout) upper() string     { return filepath.Join(l.dir, "upper") }
func (l layout) socket() string    { return filepath.Join(l.run(), "agent.sock") }
func (l layout) LogFile() string   { return filepath.Join(l.run(), "main.log") }
func (l layout) ExitFile() string  { return filepath.Join(l.run(), "exit.json") }
func (l layout) debugDir() string  { return filepath.Join(l.dir, "debug") }

// defaultCaps is docker's default capability set: root in the sandbox can
// own files and bind low ports, but not, say, load modules (gVisor would
// refuse anyway).
var defaultCaps = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD",
	"CAP_NET_RAW", "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP",
	"CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
}

// capabilities gives a process names in its bounding, effective and
// permitted sets.
func capabilities(names []string) *specs.LinuxCapabilities {
	return &specs.LinuxCapabilities{Bounding: names, Effective: names, Permitted: names}
}

// ociSpec builds the runtime spec. The agent is the container's process;
// the user's main command is handed to it in the agent config.
func ociSpec(s *backend.Spec, root string) *specs.Spec {
	l := layout{s.Dir}
	mounts := []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc"},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
		{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
		// gVisor's own cgroupfs (v2 with --in-sandbox-cgroup), where the
		// agent enforces the pids limit on guest processes.
		{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup"},
		{Destination: guestAgent, Type: "bind", Source: s.GuestBinary, Options: []string{"rbind", "ro"}},
		{Destination: guestRunDir, Type: "bind", Source: l.run(), Options: []string{"rbind", "rw", "nosuid", "nodev"}},
	}
	for _, m := range s.Rootfs.Mounts {
		// A volume's files are served by the gofer, which opens every
		// path component relative to the mount's root without following
		// symlinks: a link inside resolves in the sandbox's own tree.
		opts := []string{"rbind", "ro", "nodev"}
		if m.Volume {
			opts = []string{"bind", "ro", "nodev", "nosuid"}
		}
		if m.Writable {
			opts[1] = "rw"
		}
		mounts = append(mounts, specs.Mount{Destination: m.Destination, Type: "bind", Source: m.Source, Options: opts})
	}
	// The agent alone also holds CAP_SYS_ADMIN, to set a copy's hostname:
	// it drops it from its bounding set at start (guest.ReserveAdmin), so
	// no command it starts gets it, and a command cannot trace it (the
	// agent's permitted set is not a subset of the command's).
	caps := capabilities(append(slices.Clip(defaultCaps), "CAP_SYS_ADMIN"))
	res := &specs.LinuxResources{}
	if lim := s.Limits; lim.Memory > 0 {
		res.Memory = &specs.LinuxMemory{Limit: &lim.Memory}
	}
	// No CPU quota here: runsc's boot is a burst of parallel work that a
	// quota would throttle. limitCPU applies it once the agent answers.
	if s.Limits.Pids > 0 {
		// The host cgroup only backstops: the sentry's own threads and
		// systrap stubs count there, and hitting it kills the whole
		// sandbox. The user's limit is enforced inside (see agentConfig).
		res.Pids = &specs.LinuxPids{Limit: 4*s.Limits.Pids + 1024}
	}
	return &specs.Spec{
		Version: specs.Version,
		Process: &specs.Process{
			Args:         []string{guestAgent, guestRunDir + "/agent.json"},
			Env:          []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "GOMAXPROCS=1"},
			Cwd:          "/",
			Capabilities: caps,
			Rlimits:      []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: 1 << 20, Soft: 1 << 20}},
		},
		// The gofer serves the image read-only whatever this says; the
		// sandbox writes to the overlay (see overlayFlag). Readonly stays
		// unset: it wins over --overlay2, leaving even the overlay read-only.
		Root:     &specs.Root{Path: root},
		Hostname: s.Hostname,
		Mounts:   mounts,
		Linux: &specs.Linux{
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace}, {Type: specs.NetworkNamespace, Path: s.NetNS}, {Type: specs.IPCNamespace},
				{Type: specs.UTSNamespace}, {Type: specs.MountNamespace},
			},
			Resources:   res,
			CgroupsPath: cgroupPath(s.ID),
		},
	}
}

// cgroupParent holds every sandbox's cgroup, one level below each
// hierarchy's root.
const cgroupParent = "smolvm"

func cgroupPath(id string) string { return "/" + cgroupParent + "/" + id }

// agentConfig is what the agent reads at boot.
func agentConfig(s *backend.Spec) guest.Config {
	return guest.Config{
		Socket:      guestRunDir + "/agent.sock",
		Env:         s.Env,
		Dir:         s.WorkDir,
		User:        s.User,
		Main:        s.Main,
		LogFile:     guestRunDir + "/main.log",
		ExitFile:    guestRunDir + "/exit.json",
		Deadline:    s.Deadline,
		IdleTimeout: s.IdleTimeout,
		Pids:        s.Limits.Pids,
		ResumeFile:  guestRunDir + "/resume.json",
		MachineID:   s.MachineID,
	}
}

func writeJSON(path string, v any) error {
	p, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, p, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return os.Rename(tmp, path)
}
