// Package vm runs each sandbox in its own virtual machine, with its own
// guest kernel, driving QEMU's microvm machine (KVM where /dev/kvm works,
// TCG otherwise).
package vm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"smolvm.dev/smolvm/internal/lazyre"
	"smolvm.dev/smolvm/runtime/backend"
	"smolvm.dev/smolvm/runtime/guest"
	"smolvm.dev/smolvm/sandbox"
)

// Config configures the backend.
type Config struct {
	// Cache holds what is built once and shared by sandboxes: the
	// uncompressed kernel, initramfs images, image and blank disks.
	Cache string
	// Kernel is a bzImage or ELF kernel with PVH entry; empty is the
	// newest /boot/vmlinuz-*. Modules is its modules directory; empty is
	// /lib/modules/<version from the kernel's file name>.
	Kernel, Modules string
	// QEMU is the qemu-system-x86_64 binary; Busybox a static busybox.
	QEMU, Busybox string
	// Accel is "kvm", "tcg" or empty: KVM if it works here, else TCG.
	Accel string
	// Warn, if set, is told once, at the first QEMU the backend launches
	// under TCG, that VMs run slowly: a command that runs no VM says
	// nothing.
	Warn func(string)
}

// Backend drives QEMU. A sandbox is a QEMU process and a relay process
// (guest.RelayFiles: the agent's port, and its run dir mirrored into the
// sandbox's) beside it, both found again through pid files in
// the sandbox's dir.
type Backend struct {
	cfg        Config
	kernel     string // uncompressed
	accel, cpu string
	bootCPU    time.Duration // see waitAgent; tests shorten it

	// tcgWarned says Warn once per backend (a pointer: tests copy a
	// Backend).
	tcgWarned *sync.Once

	// initrds are the initramfs images built, by the files they hold:
	// building one reads and hashes the agent, busybox and modules,
	// which cost each create (a restore's too) 50–150 ms here.
	initrds *initrds
}

type initrds struct {
	mu    sync.Mutex
	built map[initrdKey]string
}

// initrdKey names an initramfs by its agent's and busybox's files as
// they are now (a rebuilt agent is another key).
type initrdKey struct {
	agent, busybox    string
	agentSize, bbSize int64
	agentTime, bbTime time.Time
}

// initrd is initramfs for agent, built once per key.
func (b *Backend) initrd(agent string) (string, error) {
	a, err := os.Stat(agent)
	if err != nil {
		return "", fmt.Errorf("agent: %w", err)
	}
	bb, err := os.Stat(b.cfg.Busybox)
	if err != nil {
		return "", fmt.Errorf("busybox: %w", err)
	}
	k := initrdKey{agent, b.cfg.Busybox, a.Size(), bb.Size(), a.ModTime(), bb.ModTime()}
	b.initrds.mu.Lock()
	defer b.initrds.mu.Unlock()
	if path, ok := b.initrds.built[k]; ok {
		if _, err := os.Stat(path); err == nil {
			return path, nil
		}
	}
	path, err := initramfs(b.cfg.Cache, b.cfg.Busybox, b.cfg.Modules, agent)
	if err != nil {
		return "", err
	}
	b.initrds.built[k] = path
	return path, nil
}

var _ backend.Backend = (*Backend)(nil)

// Packages are the Debian packages the backend needs: QEMU, a kernel,
// a static busybox for the initramfs, mkfs.ext4 for disks and xz for the
// kernel's payload.
const Packages = "qemu-system-x86 linux-image-amd64 busybox-static e2fsprogs xz-utils"

// checkTools finds the programs the backend runs besides QEMU, so that a
// host lacking one hears which package to install before any sandbox,
// rather than from a create halfway through.
func checkTools(busybox string) error {
	var missing []string
	for _, t := range []struct{ bin, pkg string }{{"mkfs.ext4", "e2fsprogs"}, {"xz", "xz-utils"}} {
		if _, err := exec.LookPath(t.bin); err != nil {
			missing = append(missing, t.bin+" ("+t.pkg+")")
		}
	}
	if _, err := os.Stat(busybox); err != nil {
		missing = append(missing, busybox+" (busybox-static)")
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing %s: apt-get install %s", strings.Join(missing, ", "), Packages)
	}
	return nil
}

// New returns a VM backend, preparing its kernel. Under TCG it works but
// is slow: Accel tells callers which one it got.
func New(cfg Config) (*Backend, error) {
	if cfg.Cache == "" {
		return nil, errors.New("vm backend: no cache directory")
	}
	if cfg.QEMU == "" {
		cfg.QEMU = "qemu-system-x86_64"
	}
	if cfg.Busybox == "" {
		cfg.Busybox = "/bin/busybox"
	}
	// A path: a pre-launched QEMU is exec'd by ramfd.Exec.
	qemu, err := exec.LookPath(cfg.QEMU)
	if err != nil {
		return nil, fmt.Errorf("vm backend: %w (install qemu-system-x86)", err)
	}
	cfg.QEMU = qemu
	if err := checkTools(cfg.Busybox); err != nil {
		return nil, fmt.Errorf("vm backend: %w", err)
	}
	if cfg.Kernel == "" {
		k, err := defaultKernel()
		if err != nil {
			return nil, fmt.Errorf("vm backend: %w", err)
		}
		cfg.Kernel = k
	}
	if cfg.Modules == "" {
		cfg.Modules = filepath.Join("/lib/modules", kernelVersion(cfg.Kernel))
	}
	b := &Backend{cfg: cfg, bootCPU: bootCPU, tcgWarned: &sync.Once{}, initrds: &initrds{built: map[initrdKey]string{}}}
	if b.accel, b.cpu, err = chooseAccel(cfg.Accel, ProbeKVM()); err != nil {
		return nil, fmt.Errorf("vm backend: %w", err)
	}
	if err := os.MkdirAll(cfg.Cache, 0o700); err != nil {
		return nil, fmt.Errorf("vm backend: %w", err)
	}
	if b.kernel, err = uncompressedKernel(cfg.Kernel, cfg.Cache); err != nil {
		return nil, fmt.Errorf("vm backend: %w", err)
	}
	return b, nil
}

// Name implements backend.Backend.
func (b *Backend) Name() string { return "vm" }

// Accel is the accelerator the backend's VMs run under: "kvm" or "tcg".
func (b *Backend) Accel() string { return b.accel }

// layout names the files a sandbox keeps under its Dir.
type layout struct{ dir string }

func (l layout) run() string      { return filepath.Join(l.dir, "run") }
func (l layout) launch() string   { return filepath.Join(l.dir, "vm.json") }
func (l layout) config() string   { return filepath.Join(l.dir, "config.img") }
func (l layout) disk() string     { return filepath.Join(l.dir, "disk.qcow2") }
func (l layout) blank() string    { return filepath.Join(l.dir, "blank.raw") }
func (l layout) ram() string      { return filepath.Join(l.dir, "ram") }
func (l layout) qemuPid() string  { return filepath.Join(l.dir, "qemu.pid") }
func (l layout) relayPid() string { return filepath.Join(l.dir, "relay.pid") }
func (l layout) serial() string   { return filepath.Join(l.dir, "serial.sock") }
func (l layout) agent() string    { return filepath.Join(l.dir, "agent.sock") }
func (l layout) qmp() string      { return filepath.Join(l.dir, "qmp.sock") }
func (l layout) standby() string  { return filepath.Join(l.dir, "standby.json") }
func (l layout) console() string  { return filepath.Join(l.dir, "console.log") }
func (l layout) qemuLog() string  { return filepath.Join(l.dir, "qemu.log") }
func (l layout) exitFile() string { return filepath.Join(l.run(), "exit.json") }
func (l layout) logFile() string  { return filepath.Join(l.run(), "main.log") }

// launch is what Create decided, for Start to boot.
type launch struct {
	Kernel, Initrd, Image string
	Memory                int64 // bytes
	CPUs                  int
	// CowRAM, set on a restored copy, is the checkpoint's RAM file, which
	// the copy maps privately (share=off): copies share its pages until
	// they write them, and the file never changes. Empty: the sandbox's
	// own RAM file, shared, which a checkpoint copies.
	CowRAM string `json:",omitempty"`
}

// Guest paths.
const (
	guestRun = "/.smolvm/run"
	// serialPort is the virtio-serial port the agent serves.
	serialPort = "smolvm.agent"
)

// defaultMemory is a VM's memory when the spec sets no limit.
const defaultMemory = 512 << 20

// Create implements backend.Backend: it builds (or finds) the image
// disk and initramfs, lays out the sandbox's dir, and pre-launches QEMU
// (see prelaunch), so that a restore into the sandbox (a restore target,
// a fork's copy) only loads the checkpoint.
func (b *Backend) Create(ctx context.Context, s *backend.Spec) error {
	ln, err := b.create(s)
	if err != nil {
		return fmt.Errorf("create %s: %w", s.ID, err)
	}
	if err := b.prelaunch(ctx, s, ln); err != nil {
		b.halt(s)
		return fmt.Errorf("create %s: pre-launch QEMU: %w", s.ID, err)
	}
	return nil
}

// create lays out s's dir and returns the launch it wrote.
func (b *Backend) create(s *backend.Spec) (launch, error) {
	if s.Rootfs.Upper != "" {
		// The guest writes to a disk image, which no host directory shows.
		return launch{}, fmt.Errorf("%w: writing through to a host directory (image builds)", sandbox.ErrUnsupported)
	}
	if s.Rootfs.Host {
		// Refused before imageDisk would size the host's /usr (7 s here)
		// to find it too big.
		return launch{}, fmt.Errorf("%w: the builtin host image shows the host's own /usr, which a VM cannot share: use the base image (smolvm image build base) or another OCI image", sandbox.ErrUnsupported)
	}
	// Read-only mounts are copied into the image disk; a volume must be
	// shared live, which would need a shared file system the guest and
	// the host write at once (virtiofs), which this backend has not.
	if slices.ContainsFunc(s.Rootfs.Mounts, func(m backend.Mount) bool { return m.Volume }) {
		return launch{}, fmt.Errorf("%w: volumes (use the gvisor backend)", sandbox.ErrUnsupported)
	}
	l := layout{s.Dir}
	if err := os.MkdirAll(l.run(), 0o700); err != nil {
		return launch{}, err
	}
	image, err := imageDisk(b.cfg.Cache, s.Rootfs)
	if err != nil {
		return launch{}, err
	}
	initrd, err := b.initrd(s.GuestBinary)
	if err != nil {
		return launch{}, err
	}
	size := s.Rootfs.WritableSize
	if size <= 0 {
		size = defaultDisk
	}
	blank, err := blankDisk(b.cfg.Cache, size)
	if err != nil {
		return launch{}, err
	}
	os.Remove(l.disk())
	if err := overlay(l.disk(), blank, "raw"); err != nil {
		return launch{}, err
	}
	if err := writeConfigDisk(l.config(), agentConfig(s)); err != nil {
		return launch{}, err
	}
	mem := s.Limits.Memory
	if mem <= 0 {
		mem = defaultMemory
	}
	ln := launch{Kernel: b.kernel, Initrd: initrd, Image: image, Memory: mem, CPUs: max(1, int(math.Ceil(s.Limits.CPUs)))}
	return ln, writeJSON(l.launch(), ln)
}

// writeConfigDisk writes v as JSON into a disk image (sectors, padded
// with spaces, which JSON ignores): the guest's init copies it into the
// agent's run dir. It is at least 64 KiB, past where the kernel's
// partition probes read (a smaller disk logs a misleading read error).
func writeConfigDisk(path string, v any) error {
	p, err := json.Marshal(v)
	if err != nil {
		return err
	}
	pad := (4096 - len(p)%4096) % 4096
	if len(p)+pad < 64<<10 {
		pad = 64<<10 - len(p)
	}
	return writeFileAtomic(path, append(p, bytes.Repeat([]byte(" "), pad)...))
}

// agentConfig is what the agent reads at boot, from its config disk.
func agentConfig(s *backend.Spec) guest.Config {
	return guest.Config{
		Serial:      serialPort,
		Env:         s.Env,
		Dir:         s.WorkDir,
		User:        s.User,
		Main:        s.Main,
		LogFile:     guestRun + "/main.log",
		ExitFile:    guestRun + "/exit.json",
		Deadline:    s.Deadline,
		IdleTimeout: s.IdleTimeout,
		Pids:        s.Limits.Pids,
		ResumeFile:  guestRun + "/resume.json",
		MachineID:   s.MachineID,
	}
}

// Run implements backend.Backend: a boot, with no QEMU pre-launched.
func (b *Backend) Run(ctx context.Context, s *backend.Spec) error {
	if _, err := b.create(s); err != nil {
		return fmt.Errorf("run %s: create: %w", s.ID, err)
	}
	return b.Start(ctx, s)
}

// Restart implements backend.Backend: the sandbox is made anew from its
// spec, writable disk included, as under gVisor.
func (b *Backend) Restart(ctx context.Context, s *backend.Spec) error {
	if err := b.Delete(ctx, s); err != nil {
		return fmt.Errorf("restart %s: %w", s.ID, err)
	}
	return b.Run(ctx, s)
}

// Start implements backend.Backend.
func (b *Backend) Start(ctx context.Context, s *backend.Spec) error {
	if err := b.start(ctx, s); err != nil {
		return fmt.Errorf("start %s: %w", s.ID, err)
	}
	return nil
}

func (b *Backend) start(ctx context.Context, s *backend.Spec) error {
	l := layout{s.Dir}
	var ln launch
	if err := readJSON(l.launch(), &ln); err != nil {
		return fmt.Errorf("not created: %w", err)
	}
	if ln.CowRAM != "" {
		// A boot needs no checkpoint's RAM (which may be gone).
		ln.CowRAM = ""
		if err := writeJSON(l.launch(), ln); err != nil {
			return err
		}
	}
	os.Remove(l.exitFile())
	// A pre-launched QEMU waits for a checkpoint and cannot boot.
	b.dropStandby(s)
	if err := b.startRelay(s); err != nil {
		return err
	}
	if err := b.startQEMU(s, ln, false); err != nil {
		return err
	}
	err := b.waitAgent(ctx, s)
	if !errors.Is(err, errIdle) {
		return err
	}
	// Seen a few times in CI on loaded TCG hosts, cause not found: init
	// hands over to the agent, then the guest sits idle and the agent
	// never answers. A second boot has always got past it.
	b.halt(s)
	note := fmt.Sprintf("%s: boot went idle, booting again: %v\n", time.Now().UTC().Format(time.RFC3339), err)
	if f, ferr := os.OpenFile(filepath.Join(s.Dir, "boot.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600); ferr == nil {
		f.WriteString(note)
		f.Close()
	}
	if err := b.startRelay(s); err != nil {
		return err
	}
	if err := b.startQEMU(s, ln, false); err != nil {
		return err
	}
	if err := b.waitAgent(ctx, s); err != nil {
		return fmt.Errorf("%w (and before a second boot: %v)", err, note)
	}
	return nil
}

// halt kills s's QEMU and relay.
func (b *Backend) halt(s *backend.Spec) {
	if pid, ok := b.qemu(s); ok {
		killWait(b, s, pid)
	}
	if pid, ok := b.relay(s); ok {
		unix.Kill(pid, unix.SIGKILL)
	}
}

// startRelay starts the host side of the agent's port. Its sockets are
// made here, before QEMU (which connects to one of them) starts. It runs
// as the sandbox's uid, with no groups, holding only what it serves: the
// two sockets and its run dir (which it reaches through that open
// directory: the sandbox's dir is root's), given to that uid.
func (b *Backend) startRelay(s *backend.Spec) error {
	l := layout{s.Dir}
	uid, err := sandboxUID(b.cfg.Cache, s.Dir)
	if err != nil {
		return err
	}
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	for _, path := range []string{l.serial(), l.agent()} {
		f, err := listenFile(path)
		if err != nil {
			return err
		}
		files = append(files, f)
	}
	if err := b.giveRun(s); err != nil {
		return err
	}
	run, err := os.Open(l.run())
	if err != nil {
		return err
	}
	files = append(files, run)
	logf, err := os.OpenFile(filepath.Join(s.Dir, "relay.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	// The run dir's path only names the relay (b.relay): it uses fd 5.
	cmd := exec.Command(s.GuestBinary, "relay", l.run())
	cmd.ExtraFiles = files
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// The relay outlives this process, as the sandbox does.
		Setsid:     true,
		Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{}},
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("relay, as uid %d (which must be able to run %s): %w", uid, s.GuestBinary, err)
	}
	pid := cmd.Process.Pid
	cmd.Process.Release()
	return os.WriteFile(l.relayPid(), []byte(strconv.Itoa(pid)), 0o600)
}

// giveRun gives s's run dir and the files in it to its uid, whose relay
// writes the mirrored files there and removes the identity once sent.
func (b *Backend) giveRun(s *backend.Spec) error {
	uid, err := sandboxUID(b.cfg.Cache, s.Dir)
	if err != nil {
		return err
	}
	l := layout{s.Dir}
	names, err := os.ReadDir(l.run())
	if err != nil {
		return err
	}
	for _, e := range names {
		if err := os.Lchown(filepath.Join(l.run(), e.Name()), uid, uid); err != nil {
			return err
		}
	}
	return os.Chown(l.run(), uid, uid)
}

// listenFile makes a listening Unix socket at path, 0600, as a file for
// a child process to serve.
func listenFile(path string) (*os.File, error) {
	os.Remove(path)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	ln.SetUnlinkOnClose(false)
	if err := os.Chmod(path, 0o600); err != nil {
		return nil, err
	}
	return ln.File()
}

// qemuArgs is QEMU's command line for s, whose uid it drops to once it
// has opened these files. A standby (see prelaunch) is given its RAM and
// writable disk later, over QMP (standby.go): they are a checkpoint's,
// unknown at launch.
func (b *Backend) qemuArgs(s *backend.Spec, ln launch, standby bool, uid int) []string {
	l := layout{s.Dir}
	cmdline := "console=ttyS0 quiet panic=-1 reboot=t cryptomgr.notests mitigations=off nokaslr pci=off " +
		"tsc=reliable " + tscFlags() + " smolvm.hostname=" + s.Hostname
	mem := strconv.FormatInt(ln.Memory>>20, 10) + "M"
	args := []string{
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-accel", b.accel, "-cpu", b.cpu,
		"-m", mem, "-smp", strconv.Itoa(ln.CPUs),
		"-serial", "file:" + l.console(),
		"-drive", "id=image,file=" + ln.Image + ",format=raw,if=none,readonly=on",
		"-device", "virtio-blk-device,drive=image,serial=smolvm-image",
		"-device", "virtio-blk-device,drive=disk,serial=smolvm-disk",
		"-device", "virtio-serial-device",
		"-chardev", "socket,id=agent,path=" + l.serial(),
		"-device", "virtserialport,chardev=agent,name=" + serialPort,
		"-drive", "id=config,file=" + l.config() + ",format=raw,if=none,readonly=on",
		"-device", "virtio-blk-device,drive=config,serial=smolvm-config",
		// The monitor's socket is made here (see startQEMU): fd 3.
		"-chardev", "socket,id=qmp,fd=3,server=on,wait=off", "-mon", "chardev=qmp,mode=control",
		// QEMU installs its seccomp filter (-sandbox) before -runas drops
		// root, and the drop is set*id calls: they must be allowed. Once
		// dropped, no uid can be regained (real, effective and saved are
		// all the new one).
		"-runas", fmt.Sprintf("%d:%d", uid, uid),
		"-sandbox", "on,obsolete=deny,spawn=deny,resourcecontrol=deny,elevateprivileges=allow",
	}
	if standby {
		// Stopped before the machine is built (-preconfig), so that the
		// RAM object and the disk can still be added. A QEMU that loads a
		// checkpoint never reads the kernel (the guest's is in the RAM
		// file): skipping it saves its reading.
		return append(args, "-M", "microvm", "-preconfig", "-incoming", "defer")
	}
	return append(args,
		"-kernel", ln.Kernel, "-initrd", ln.Initrd, "-append", cmdline,
		// Guest RAM in a file of the sandbox's, shared, so that a
		// checkpoint is that file and a small device-state stream.
		"-object", "memory-backend-file,id=mem,size="+mem+",mem-path="+l.ram()+",share=on",
		"-M", "microvm,memory-backend=mem",
		// Opened read-write at once: by default QEMU reopens the file
		// read-only for a migration and read-write after, by its path,
		// which it can no longer open once it has dropped root.
		"-drive", "id=disk,file="+l.disk()+",format=qcow2,if=none,file.auto-read-only=off")
}

// tscFlags tell the guest the TSC's rate, which it otherwise calibrates,
// slowly and sometimes forever, under TCG.
func tscFlags() string {
	p, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(p), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "cpu MHz" {
			mhz, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil || mhz <= 0 {
				return ""
			}
			khz := int64(mhz * 1000)
			// lpj is loops per jiffy at the kernel's HZ (250 on Debian).
			return fmt.Sprintf("tsc_early_khz=%d lpj=%d", khz, khz*1000/250)
		}
	}
	return ""
}

// startQEMU starts QEMU, on its own: the VM outlives this process.
// Whether it came up is for waitAgent to see. A standby starts through
// ramfd.Exec, so that its checkpoint's RAM file can be handed to it at
// the restore (standby.go).
func (b *Backend) startQEMU(s *backend.Spec, ln launch, standby bool) error {
	if b.accel == AccelTCG && b.cfg.Warn != nil {
		b.tcgWarned.Do(func() {
			b.cfg.Warn("no usable /dev/kvm: this VM runs under TCG emulation, slowly (fine for tests)")
		})
	}
	l := layout{s.Dir}
	logf, err := os.OpenFile(l.qemuLog(), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	uid, err := sandboxUID(b.cfg.Cache, s.Dir)
	if err != nil {
		return err
	}
	// QEMU would make these 0644 (its own mode, less the umask).
	made := []string{l.console()}
	if !standby {
		made = append(made, l.ram())
	}
	for _, f := range made {
		if err := private(f); err != nil {
			return err
		}
	}
	// Made here, 0600, rather than by QEMU with its umask.
	mon, err := listenFile(l.qmp())
	if err != nil {
		return err
	}
	defer mon.Close()
	files := []*os.File{mon}
	args := append([]string{b.cfg.QEMU}, b.qemuArgs(s, ln, standby, uid)...)
	if standby {
		args = append([]string{s.GuestBinary, "qemu"}, args...)
		// Its dir, by which it opens its disks at the restore (qemuDir).
		dir, err := os.Open(s.Dir)
		if err != nil {
			return err
		}
		defer dir.Close()
		files = append(files, dir)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.ExtraFiles = files
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("qemu: %w", err)
	}
	// Reaped here if it ends while this process lives; init reaps it
	// otherwise.
	go cmd.Wait()
	return os.WriteFile(l.qemuPid(), []byte(strconv.Itoa(cmd.Process.Pid)), 0o600)
}

// private makes the file at path, if missing, and makes it root's alone.
func private(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	err = f.Chmod(0o600)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// A boot's budget. Under TCG a boot takes 8–11 s of QEMU's CPU time here,
// but on a loaded host QEMU may get a sliver of a core and take minutes
// of wall time (CI's first such failure: a 2-minute wall limit hit while
// other tests loaded the machine). So a wait for the agent gives up on
// CPU time spent without an answer (bootCPU: the guest stalled), and only
// then on wall time (bootWall: the host is too starved to boot at all).
const (
	bootCPU  = 60 * time.Second
	bootWall = 5 * time.Minute
)

// errStalled is a guest that spent bootCPU without its agent answering.
var errStalled = errors.New("the guest stalled")

// errIdle is a guest whose init started the agent, then sat idle for
// idleWall (QEMU used under idleCPU meanwhile) without the agent
// answering. A booting or busy guest under TCG keeps QEMU on the CPU.
var errIdle = errors.New("the guest went idle without its agent answering")

const (
	idleWall = 60 * time.Second
	idleCPU  = time.Second
)

// idleWatch tells a guest gone idle (errIdle) from one still working or
// merely starved: the window restarts whenever QEMU has used idleCPU.
type idleWatch struct {
	from time.Time
	cpu  time.Duration
}

// idle takes a sample: the time, QEMU's CPU time so far, and whether
// init has started the agent. It reports whether the guest has been idle
// for idleWall since the agent started.
func (w *idleWatch) idle(now time.Time, cpu time.Duration, started bool) bool {
	if !started || w.from.IsZero() || cpu-w.cpu >= idleCPU {
		w.from, w.cpu = now, cpu
		return false
	}
	return now.Sub(w.from) >= idleWall
}

// waitAgent returns once the agent answers, or early once the main
// process has ended (a run of a short command).
func (b *Backend) waitAgent(ctx context.Context, s *backend.Spec) error {
	l := layout{s.Dir}
	ctx, cancel := context.WithTimeout(ctx, bootWall)
	defer cancel()
	c := b.Guest(s)
	start, cpu0 := time.Now(), time.Duration(-1)
	var (
		watch   idleWatch
		started bool
		checked time.Time
	)
	for {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		err := c.Ping(pctx)
		pcancel()
		if err == nil {
			return nil
		}
		if _, err := os.Stat(l.exitFile()); err == nil {
			return nil
		}
		pid, ok := b.qemu(s)
		if !ok {
			return fmt.Errorf("the VM stopped before its agent answered%s", b.bootError(s))
		}
		used := time.Duration(0)
		if cpu, ok := cpuTime(pid); ok {
			if cpu0 < 0 {
				cpu0 = cpu
			}
			used = cpu - cpu0
			if time.Since(checked) >= time.Second {
				checked = time.Now()
				if !started {
					p, _ := os.ReadFile(l.console())
					started = bytes.Contains(p, []byte("smolvm init: starting the agent"))
				}
				if watch.idle(checked, cpu, started) {
					_, relay := b.relay(s)
					return fmt.Errorf("agent did not answer: %w for %v (QEMU used %v of CPU in %v, load %s, relay running %t)%s",
						errIdle, idleWall, used.Round(time.Second), time.Since(start).Round(time.Second), loadAvg(), relay, b.bootError(s))
				}
			}
		}
		if used > b.bootCPU {
			return fmt.Errorf("agent did not answer: %w (QEMU used %v of CPU in %v, load %s)%s",
				errStalled, used.Round(time.Second), time.Since(start).Round(time.Second), loadAvg(), b.bootError(s))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("agent did not answer: %w (QEMU used %v of CPU in %v, load %s)%s",
				ctx.Err(), used.Round(time.Second), time.Since(start).Round(time.Second), loadAvg(), b.bootError(s))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// cpuTime is the CPU time process pid has used.
func cpuTime(pid int) (time.Duration, bool) {
	p, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	i := bytes.LastIndexByte(p, ')')
	if i < 0 || len(p) < i+2 {
		return 0, false
	}
	f := strings.Fields(string(p[i+2:]))
	if len(f) <= 12 {
		return 0, false
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	// In clock ticks, 100 a second on Linux.
	return time.Duration(ut+st) * (time.Second / 100), true
}

// loadAvg is the host's 1-minute load average, for boot failures.
func loadAvg() string {
	p, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Fields(string(p) + " ?")[0]
}

// bootError is the agent's, QEMU's or the relay's last words, or the end
// of the guest's console (where init reports its stages).
func (b *Backend) bootError(s *backend.Spec) string {
	l := layout{s.Dir}
	for _, f := range []string{filepath.Join(l.run(), "agent.err"), l.qemuLog(), filepath.Join(s.Dir, "relay.log")} {
		if p, err := os.ReadFile(f); err == nil && len(bytes.TrimSpace(p)) > 0 {
			return ": " + lastLine(string(p))
		}
	}
	p, _ := os.ReadFile(l.console())
	if len(bytes.TrimSpace(p)) == 0 {
		return "" // the guest never ran (a standby), or printed nothing
	}
	lines := strings.Split(strings.TrimSpace(string(p)), "\n")
	return "; console ends:\n" + strings.Join(lines[max(0, len(lines)-20):], "\n")
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return s
}

// qemu returns the pid of s's QEMU, if it runs.
func (b *Backend) qemu(s *backend.Spec) (int, bool) {
	dir := []byte(s.Dir)
	return livePid(layout{s.Dir}.qemuPid(), func(cmdline []byte) bool { return bytes.Contains(cmdline, dir) })
}

// relay returns the pid of s's relay, if it runs.
func (b *Backend) relay(s *backend.Spec) (int, bool) {
	return livePid(layout{s.Dir}.relayPid(), func(cmdline []byte) bool {
		return bytes.HasSuffix(cmdline, []byte("\x00relay\x00"+layout{s.Dir}.run()+"\x00"))
	})
}

// livePid reads a pid file and reports whether that process still runs
// and is ours, as ours tells from its command line (pids are reused).
func livePid(pidFile string, ours func(cmdline []byte) bool) (int, bool) {
	p, err := os.ReadFile(pidFile)
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(p)))
	if err != nil || pid <= 0 {
		return 0, false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !ours(cmdline) {
		return 0, false
	}
	if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		// A zombie has ended.
		if i := bytes.LastIndexByte(stat, ')'); i > 0 && len(stat) > i+2 && stat[i+2] == 'Z' {
			return 0, false
		}
	}
	return pid, true
}

// Guest implements backend.Backend.
func (b *Backend) Guest(s *backend.Spec) *guest.Client {
	return guest.NewClient(guest.UnixDialer(layout{s.Dir}.agent()))
}

// Exec implements backend.Backend.
func (b *Backend) Exec(ctx context.Context, s *backend.Spec, p sandbox.Process, stdio sandbox.Stdio) (sandbox.Exit, error) {
	return b.Guest(s).Exec(ctx, p, stdio)
}

// Signal implements backend.Backend. SIGKILL ends the VM from outside;
// other signals go through the agent, which is PID 1 inside.
func (b *Backend) Signal(ctx context.Context, s *backend.Spec, sig syscall.Signal, all bool) error {
	if sig == unix.SIGKILL {
		if pid, ok := b.qemu(s); ok {
			unix.Kill(pid, unix.SIGKILL)
		}
		return nil
	}
	if err := b.Guest(s).Signal(ctx, sig, all); err != nil {
		return fmt.Errorf("signal %s: %w", s.ID, err)
	}
	return nil
}

// Stats implements backend.Backend: the QEMU process's, which holds the
// guest's memory.
func (b *Backend) Stats(ctx context.Context, s *backend.Spec) (*sandbox.Stats, error) {
	st := &sandbox.Stats{}
	var ln launch
	if readJSON(layout{s.Dir}.launch(), &ln) == nil {
		st.MemoryLimit = ln.Memory
	}
	pid, ok := b.qemu(s)
	if !ok {
		return st, nil
	}
	st.ProcessesAlive = true
	// Resident is what only this VM holds (pages mapped once: its own
	// RAM file's, and the pages a copy wrote); Memory adds the pages it
	// shares, such as its checkpoint's RAM that copies map copy-on-write.
	if p, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid)); err == nil {
		for _, line := range strings.Split(string(p), "\n") {
			k, v, _ := strings.Cut(line, ":")
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			switch k {
			case "Rss":
				st.MemoryBytes = kb << 10
			case "Private_Clean", "Private_Dirty":
				st.ResidentBytes += kb << 10
			}
		}
	}
	if cpu, ok := cpuTime(pid); ok {
		st.CPUNanos = int64(cpu)
	}
	return st, nil
}

// State implements backend.Backend. What runs is what the pid files
// name and still lives, so a QEMU killed behind smolvm's back shows as
// stopped.
func (b *Backend) State(ctx context.Context, s *backend.Spec) (backend.Status, error) {
	l := layout{s.Dir}
	if _, err := os.Stat(l.launch()); errors.Is(err, fs.ErrNotExist) {
		return backend.StatusMissing, nil
	}
	if _, err := os.Stat(l.standby()); err == nil {
		// A pre-launched QEMU that died while it waited leaves a sandbox
		// nothing can restore into: a pool drops such a target.
		if _, ok := b.qemu(s); !ok {
			return backend.StatusStopped, nil
		}
		return backend.StatusCreated, nil
	}
	if _, err := os.Stat(l.qemuPid()); errors.Is(err, fs.ErrNotExist) {
		return backend.StatusCreated, nil
	}
	if _, ok := b.qemu(s); !ok {
		return backend.StatusStopped, nil
	}
	if _, err := os.Stat(b.pausedFile(s)); err == nil {
		return backend.StatusPaused, nil
	}
	return backend.StatusRunning, nil
}

func (b *Backend) pausedFile(s *backend.Spec) string { return filepath.Join(s.Dir, "paused") }

// MainExit implements backend.Backend. A VM whose guest recorded no exit
// was ended from outside: by a signal QEMU caught and logged (SIGTERM,
// SIGINT, SIGHUP: 128+N), or else killed (no exit, which the manager
// reports as 137).
func (b *Backend) MainExit(ctx context.Context, s *backend.Spec) (*backend.Exit, error) {
	l := layout{s.Dir}
	e, err := backend.ReadExit(l.exitFile())
	if err != nil {
		return nil, fmt.Errorf("exit of %s: %w", s.ID, err)
	}
	if e != nil {
		return e, nil
	}
	if _, alive := b.qemu(s); alive {
		return nil, nil
	}
	return qemuSignalExit(l.qemuLog()), nil
}

// qemuSignalRE is what QEMU logs when a signal ends it.
var qemuSignalRE = lazyre.New(`terminating on signal (\d+)`)

// qemuSignalExit is the exit of a QEMU that logged (to logPath) the
// signal that ended it, or nil.
func qemuSignalExit(logPath string) *backend.Exit {
	p, err := os.ReadFile(logPath)
	if err != nil {
		return nil
	}
	m := qemuSignalRE().FindSubmatch(p)
	if m == nil {
		return nil
	}
	sig, err := strconv.Atoi(string(m[1]))
	if err != nil || sig <= 0 || sig > 64 {
		return nil
	}
	fi, err := os.Stat(logPath)
	if err != nil {
		return nil
	}
	return &backend.Exit{At: fi.ModTime(), Exit: sandbox.Exit{Code: 128 + sig, Signal: sig,
		Reason: "VM ended by " + unix.SignalName(syscall.Signal(sig))}}
}

// MainLog implements backend.Backend.
func (b *Backend) MainLog(ctx context.Context, s *backend.Spec, follow bool) (io.ReadCloser, error) {
	return backend.MainLogReader(ctx, layout{s.Dir}.logFile(), follow, func() (bool, error) {
		st, err := b.State(ctx, s)
		return st == backend.StatusRunning || st == backend.StatusPaused || st == backend.StatusCreated, err
	}), nil
}

// Stop implements backend.Backend: SIGTERM to the agent, which stops
// everything and ends the VM, then SIGKILL to QEMU after timeout.
func (b *Backend) Stop(ctx context.Context, s *backend.Spec, timeout time.Duration) error {
	pid, ok := b.qemu(s)
	if !ok {
		return nil
	}
	if st, _ := b.State(ctx, s); st == backend.StatusRunning {
		sctx, cancel := context.WithTimeout(ctx, timeout)
		b.Guest(s).Signal(sctx, unix.SIGTERM, false)
		cancel()
		for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if _, ok := b.qemu(s); !ok {
				return nil
			}
		}
	}
	if !killWait(b, s, pid) {
		return fmt.Errorf("stop %s: QEMU still running after SIGKILL", s.ID)
	}
	return nil
}

// killWait kills s's QEMU and waits (up to 2 s) for it to be gone.
func killWait(b *Backend, s *backend.Spec, pid int) bool {
	unix.Kill(pid, unix.SIGKILL)
	for range 200 {
		if _, ok := b.qemu(s); !ok {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

// Delete implements backend.Backend.
func (b *Backend) Delete(ctx context.Context, s *backend.Spec) error {
	b.halt(s)
	releaseUID(b.cfg.Cache, s.Dir)
	if err := os.RemoveAll(s.Dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete %s: %w", s.ID, err)
	}
	return nil
}

// Sweep implements backend.Backend. A VM keeps nothing on the host that a
// delete could leave without its directory: QEMU runs in no cgroup of
// smolvm's, and a held uid whose directory is gone is taken over by the
// next sandbox that probes it (holdUID).
func (b *Backend) Sweep(context.Context, func(string) bool) ([]string, error) { return nil, nil }

func writeJSON(path string, v any) error { return writeJSONAs(path, v, -1) }

// writeJSONAs is writeJSON of a file owned by uid (and its group), or
// root's if uid < 0.
func writeJSONAs(path string, v any, uid int) error {
	p, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAs(path, p, uid)
}

func readJSON(path string, v any) error {
	p, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(p, v)
}
