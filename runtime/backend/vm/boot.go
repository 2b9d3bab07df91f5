package vm

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// bootModules are the modules the initramfs loads, with what they need
// (from modules.dep): Debian builds virtio, ext4 (and its crc32c) and
// overlayfs as modules; crc32c_generic must be loaded before ext4.
var bootModules = []string{"virtio_mmio", "virtio_console", "virtio_blk", "crc32c_generic", "ext4", "overlay"}

// kernelVersion is the version in a Debian kernel's file name
// (vmlinuz-6.1.0-48-amd64), which names its modules directory.
func kernelVersion(path string) string {
	base := filepath.Base(path)
	for _, p := range []string{"vmlinuz-", "vmlinux-"} {
		if v, ok := strings.CutPrefix(base, p); ok {
			return v
		}
	}
	return ""
}

// defaultKernel is the newest /boot/vmlinuz-*.
func defaultKernel() (string, error) {
	ks, _ := filepath.Glob("/boot/vmlinuz-*")
	if len(ks) == 0 {
		return "", fmt.Errorf("no kernel in /boot (install linux-image-amd64, or give one with --kernel)")
	}
	sort.Strings(ks)
	return ks[len(ks)-1], nil
}

// xzMagic starts the xz stream inside a bzImage.
var xzMagic = []byte{0xfd, '7', 'z', 'X', 'Z', 0}

// uncompressedKernel returns an ELF kernel QEMU can boot through PVH,
// extracting it from a bzImage into cache once (booting the compressed
// image costs seconds of decompression under TCG).
func uncompressedKernel(kernel, cache string) (string, error) {
	fi, err := os.Stat(kernel)
	if err != nil {
		return "", fmt.Errorf("kernel: %w", err)
	}
	// Keyed by the file's identity, not its content: every smolvm
	// command opens the backend, and hashing the kernel costs each one.
	key := sha256.Sum256([]byte(fmt.Sprintf("%s %d %d", kernel, fi.Size(), fi.ModTime().UnixNano())))
	out := filepath.Join(cache, "vmlinux-"+hex.EncodeToString(key[:8]))
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	p, err := os.ReadFile(kernel)
	if err != nil {
		return "", fmt.Errorf("kernel: %w", err)
	}
	if bytes.HasPrefix(p, []byte("\x7fELF")) {
		return kernel, nil
	}
	i := bytes.Index(p, xzMagic)
	if i < 0 {
		return "", fmt.Errorf("kernel %s: neither an ELF nor an xz-compressed bzImage", kernel)
	}
	tmp, err := os.CreateTemp(cache, "vmlinux-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	cmd := exec.Command("xz", "-dc", "--single-stream")
	cmd.Stdin, cmd.Stdout = bytes.NewReader(p[i:]), tmp
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("uncompress kernel %s: %v: %s", kernel, err, strings.TrimSpace(stderr.String()))
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		return "", err
	}
	return out, nil
}

// moduleFiles lists the module files to load, dependencies first, for
// the kernel whose modules are in dir.
func moduleFiles(dir string, names []string) ([]string, error) {
	f, err := os.Open(filepath.Join(dir, "modules.dep"))
	if err != nil {
		return nil, fmt.Errorf("kernel modules: %w", err)
	}
	defer f.Close()
	deps := map[string][]string{} // path → its dependencies
	byName := map[string]string{} // module name → path
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		mod, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		deps[mod] = strings.Fields(rest)
		name := strings.TrimSuffix(filepath.Base(mod), ".ko")
		byName[strings.ReplaceAll(name, "-", "_")] = mod
	}
	var order []string
	seen := map[string]bool{}
	var visit func(string)
	visit = func(mod string) {
		if seen[mod] {
			return
		}
		seen[mod] = true
		// modules.dep lists every dependency, nearest last.
		for i := len(deps[mod]) - 1; i >= 0; i-- {
			visit(deps[mod][i])
		}
		order = append(order, mod)
	}
	for _, n := range names {
		mod, ok := byName[n]
		if !ok {
			return nil, fmt.Errorf("kernel modules in %s: no %s (is it built in? compressed?)", dir, n)
		}
		visit(mod)
	}
	return order, nil
}

// initScript is the initramfs's /init. It loads the modules, puts the
// image disk (read-only) under the sandbox's writable disk with
// overlayfs, copies the agent's config from its disk into the run dir
// (which the agent mirrors to the host) and hands PID 1 to the agent. Disks are found by serial, not by probe order.
// /proc is mounted before busybox --install, which links to /proc/self/exe.
const initScript = `#!/bin/busybox sh
export PATH=/bin
busybox mkdir -p /proc /sys /dev /lower /upper /newroot
busybox mount -t proc proc /proc
busybox --install -s /bin
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
# Stages go to the console (with the guest's uptime), so that a boot that
# stalls or crawls says how far it got.
stage() { echo "smolvm init: $* at $(cut -d' ' -f1 /proc/uptime /newroot/proc/uptime 2>/dev/null)s"; }
# init exiting ends the VM (panic=-1 and QEMU's -no-reboot).
fail() { stage "$*"; exit 1; }
for m in $(cat /modules); do insmod /lib/modules/$m || echo "smolvm: insmod $m failed"; done
stage "modules loaded"
# A serial is read from the device: under a starved TCG the read can
# fail, so look again for a while rather than boot without a disk.
for try in $(seq 50); do
	for d in /sys/block/vd*; do
		case $(cat $d/serial 2>/dev/null) in
		smolvm-image) image=/dev/${d##*/} ;;
		smolvm-disk) disk=/dev/${d##*/} ;;
		smolvm-config) config=/dev/${d##*/} ;;
		esac
	done
	[ -n "$image" ] && [ -n "$disk" ] && [ -n "$config" ] && break
	sleep 0.2
done
[ -n "$image" ] && [ -n "$disk" ] && [ -n "$config" ] || fail "disks missing: image=$image disk=$disk config=$config"
mount -t ext4 -o ro,noload "$image" /lower || fail "mount image $image"
mount -t ext4 "$disk" /upper || fail "mount disk $disk"
mkdir -p /upper/upper /upper/work
mount -t overlay overlay -o lowerdir=/lower,upperdir=/upper/upper,workdir=/upper/work /newroot || fail "overlay"
mkdir -p /newroot/.smolvm /newroot/proc /newroot/sys /newroot/dev /newroot/tmp
mount -t tmpfs -o mode=755,size=64m smolvm /newroot/.smolvm
cp /agent /newroot/.smolvm/agent
mkdir /newroot/.smolvm/run
cat "$config" > /newroot/.smolvm/run/agent.json || fail "read config $config"
host=$(sed -n 's/.*smolvm.hostname=\([^ ]*\).*/\1/p' /proc/cmdline)
echo "${host:-sandbox}" > /proc/sys/kernel/hostname
ip link set lo up
umount /proc /sys
mount --move /dev /newroot/dev
mount -t proc proc /newroot/proc
mount -t sysfs sys /newroot/sys
mount -t cgroup2 cgroup /newroot/sys/fs/cgroup
mkdir -p /newroot/dev/pts /newroot/dev/shm
mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts /newroot/dev/pts
mount -t tmpfs -o mode=1777,size=64m shm /newroot/dev/shm
stage "starting the agent"
exec switch_root /newroot /.smolvm/agent /.smolvm/run/agent.json
`

// initramfs returns an initramfs (newc cpio) holding busybox, the boot
// modules of the kernel whose modules are in modDir, the agent and
// initScript, building it into cache once per distinct content. The
// archive is reproducible: fixed order, owners and times.
func initramfs(cache, busybox, modDir, agent string) (string, error) {
	mods, err := moduleFiles(modDir, bootModules)
	if err != nil {
		return "", err
	}
	type file struct {
		name string
		mode uint32
		data []byte
	}
	var files []file
	add := func(name, src string, mode uint32) error {
		p, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		files = append(files, file{name, mode, p})
		return nil
	}
	if err := add("bin/busybox", busybox, 0o755); err != nil {
		return "", fmt.Errorf("busybox: %w", err)
	}
	if err := add("agent", agent, 0o755); err != nil {
		return "", fmt.Errorf("agent: %w", err)
	}
	var list []string
	for _, m := range mods {
		base := filepath.Base(m)
		if err := add("lib/modules/"+base, filepath.Join(modDir, m), 0o644); err != nil {
			return "", err
		}
		list = append(list, base)
	}
	files = append(files, file{"modules", 0o644, []byte(strings.Join(list, "\n") + "\n")})
	files = append(files, file{"init", 0o755, []byte(initScript)})

	var buf bytes.Buffer
	w := cpioWriter{w: &buf}
	for _, d := range []string{"bin", "lib", "lib/modules"} {
		w.entry(d, 0o40755, nil)
	}
	for _, f := range files {
		w.entry(f.name, 0o100000|f.mode, f.data)
	}
	w.entry("TRAILER!!!", 0, nil)
	sum := sha256.Sum256(buf.Bytes())
	out := filepath.Join(cache, "initramfs-"+hex.EncodeToString(sum[:8])+".cpio")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	if err := writeFileAtomic(out, buf.Bytes()); err != nil {
		return "", err
	}
	return out, nil
}

// cpioWriter writes the newc format the kernel unpacks.
type cpioWriter struct {
	w   io.Writer
	ino int
}

func (c *cpioWriter) entry(name string, mode uint32, data []byte) {
	c.ino++
	nlink := 1
	if mode&0o40000 != 0 {
		nlink = 2
	}
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, mode, 0, 0, nlink, 0, len(data), 0, 0, 0, 0, len(name)+1, 0)
	c.w.Write([]byte(hdr))
	c.w.Write(append([]byte(name), 0))
	c.pad(len(hdr) + len(name) + 1)
	c.w.Write(data)
	c.pad(len(data))
}

func (c *cpioWriter) pad(n int) {
	if r := n % 4; r != 0 {
		c.w.Write(make([]byte, 4-r))
	}
}

func writeFileAtomic(path string, p []byte) error { return writeFileAs(path, p, -1) }

// writeFileAs writes p to path atomically, the file owned by uid (and its
// group) before it appears, or root's if uid < 0.
func writeFileAs(path string, p []byte, uid int) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(p)
	if err == nil && uid >= 0 {
		err = tmp.Chown(uid, uid)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
