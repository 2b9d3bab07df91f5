package manager

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/runtime/tenant"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/tests/testenv"
)

func newVolume(t *testing.T, ctx context.Context, m *testManager, name string, size int64) {
	t.Helper()
	if _, err := m.CreateVolume(ctx, sandbox.VolumeOptions{Name: name, Size: size}); err != nil {
		t.Fatal(err)
	}
}

// TestVolumes: a volume outlives its sandboxes, is shared read-write and
// read-only, holds its quota, refuses a remove while mounted, and its
// name is checked.
func TestVolumes(t *testing.T) {
	testenv.NeedRoot(t)
	m := newManager(t)
	ctx := context.Background()
	for _, bad := range []string{"", "..", "a/b", "../../etc", "-x", strings.Repeat("a", 64)} {
		if _, err := m.CreateVolume(ctx, sandbox.VolumeOptions{Name: bad}); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("create volume %q: %v, want invalid", bad, err)
		}
	}
	if _, err := m.CreateVolume(ctx, sandbox.VolumeOptions{Name: "tiny", Size: 1 << 20}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("a 1 MiB volume: %v, want invalid", err)
	}
	newVolume(t, ctx, m, "data", 16<<20)
	if _, err := m.CreateVolume(ctx, sandbox.VolumeOptions{Name: "data"}); !errors.Is(err, sandbox.ErrVolumeExists) {
		t.Errorf("second create: %v, want exists", err)
	}

	a := m.run(t, sandbox.Config{Volumes: []sandbox.VolumeMount{{Name: "data", Path: "/data"}}})
	if _, errb, exit := m.sh(t, a, "echo kept > /data/f && chmod 4755 /data/f"); exit.Code != 0 {
		t.Fatalf("write: %s", errb)
	}
	b := m.run(t, sandbox.Config{Volumes: []sandbox.VolumeMount{{Name: "data", Path: "/mnt", ReadOnly: true}}})
	if out, _, _ := m.sh(t, b, "cat /mnt/f"); out != "kept\n" {
		t.Errorf("the second sandbox reads %q", out)
	}
	if _, _, exit := m.sh(t, b, "echo x > /mnt/g"); exit.Code == 0 {
		t.Error("a read-only mount took a write")
	}
	// The quota: 32 MiB do not fit in 16, and the host's disk is not
	// what fills.
	if _, errb, exit := m.sh(t, a, "dd if=/dev/zero of=/data/big bs=1M count=32"); exit.Code == 0 || !strings.Contains(errb, "No space left") {
		t.Errorf("32 MiB into a 16 MiB volume: exit %d, %s", exit.Code, errb)
	}
	v, err := m.GetVolume(ctx, "data")
	if err != nil {
		t.Fatal(err)
	}
	users := []string{a.Name, b.Name}
	slices.Sort(users)
	if v.Size != 16<<20 || v.Used < 8<<20 || !slices.Equal(v.UsedBy, users) {
		t.Errorf("volume: %+v", v)
	}
	m.sh(t, a, "rm /data/big")

	if err := m.RemoveVolume(ctx, "data", false); !errors.Is(err, sandbox.ErrVolumeInUse) || !strings.Contains(err.Error(), a.Name) {
		t.Errorf("remove in use: %v", err)
	}
	for _, sb := range []*sandbox.Sandbox{a, b} {
		if err := m.Remove(ctx, sb.ID, true); err != nil {
			t.Fatal(err)
		}
	}
	// As after a host reboot: the host's mount is gone, and the next
	// sandbox mounts the volume again.
	hostMount := filepath.Join(m.dir, "volumes", "_", "data", "data")
	if err := unix.Unmount(hostMount, 0); err != nil {
		t.Fatal(err)
	}
	c := m.run(t, sandbox.Config{Volumes: []sandbox.VolumeMount{{Name: "data", Path: "/data"}}})
	// nosuid on the host: a sandbox's set-uid bit is kept in the file, but
	// the host never honours it.
	if out, _, _ := m.sh(t, c, "cat /data/f; stat -c %a /data/f"); out != "kept\n4755\n" {
		t.Errorf("after its sandboxes' removal: %q", out)
	}
	// A restart boots the sandbox anew, with its volume, mounted again
	// on the host if need be.
	if _, err := m.Stop(ctx, c.ID, 0); err != nil {
		t.Fatal(err)
	}
	if err := unix.Unmount(hostMount, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Start(ctx, c.ID); err != nil {
		t.Fatal(err)
	}
	if out, _, _ := m.sh(t, c, "cat /data/f"); out != "kept\n" {
		t.Errorf("after a restart: %q", out)
	}
	if _, err := m.Create(ctx, sandbox.CreateOptions{Config: sandbox.Config{Volumes: []sandbox.VolumeMount{{Name: "none", Path: "/x"}}}}); !errors.Is(err, sandbox.ErrVolumeNotFound) {
		t.Errorf("a missing volume: %v", err)
	}
	for _, p := range []string{"/", "/proc/x", "relative", "/a/../b", "/.smolvm/run"} {
		_, err := m.Create(ctx, sandbox.CreateOptions{Config: sandbox.Config{Volumes: []sandbox.VolumeMount{{Name: "data", Path: p}}}})
		if !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("mount at %q: %v", p, err)
		}
	}
	if err := m.RemoveVolume(ctx, "data", true); err != nil {
		t.Fatalf("forced remove: %v", err)
	}
	if _, err := m.GetVolume(ctx, "data"); !errors.Is(err, sandbox.ErrVolumeNotFound) {
		t.Errorf("after remove: %v", err)
	}
	if _, err := m.Stop(ctx, c.ID, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Start(ctx, c.ID); !errors.Is(err, sandbox.ErrVolumeNotFound) {
		t.Errorf("start after its volume's removal: %v", err)
	}
	if d, _ := os.ReadDir(filepath.Join(m.dir, "volumes", "_")); len(d) != 0 {
		t.Errorf("left after remove: %v", d)
	}
}

// TestVolumeEscape: links made in a volume resolve inside the sandbox
// that follows them, never on the host, through exec, the files API and
// cp.
func TestVolumeEscape(t *testing.T) {
	testenv.NeedRoot(t)
	m := newManager(t)
	ctx := context.Background()
	newVolume(t, ctx, m, "v", 16<<20)
	secret := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secret, []byte("host only"), 0o600)
	// Beside the volume's own directory on the host, too.
	beside := filepath.Join(m.dir, "volumes", "_", "beside")
	os.WriteFile(beside, []byte("host only"), 0o600)
	t.Cleanup(func() { os.Remove(beside) })

	a := m.run(t, sandbox.Config{Volumes: []sandbox.VolumeMount{{Name: "v", Path: "/v"}}})
	if _, errb, exit := m.sh(t, a, "ln -s / /v/root && ln -s .. /v/up && ln -s ../../beside /v/up2 && ln -s "+secret+" /v/secret"); exit.Code != 0 {
		t.Fatal(errb)
	}
	b := m.run(t, sandbox.Config{Volumes: []sandbox.VolumeMount{{Name: "v", Path: "/w", ReadOnly: true}}})
	for _, p := range []string{"/w/root" + secret, "/w/secret", "/w/up/beside", "/w/up2", "/w/up/../beside", "/w/../../beside"} {
		if out, _, _ := m.sh(t, b, "cat "+p); strings.Contains(out, "host only") {
			t.Errorf("cat %s in a second sandbox reached the host: %q", p, out)
		}
		rc, err := m.ReadFile(ctx, b.ID, p)
		if err == nil {
			body := make([]byte, 64)
			n, _ := rc.Read(body)
			rc.Close()
			if strings.Contains(string(body[:n]), "host only") {
				t.Errorf("files API %s reached the host", p)
			}
		}
	}
	dst := t.TempDir()
	if err := m.CopyOut(ctx, b.ID, "/w", dst); err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{"root", "secret", "up"} {
		fi, err := os.Lstat(filepath.Join(dst, "w", l))
		if err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Errorf("cp of %s: %v, %v: want the link itself", l, fi, err)
		}
	}
	if _, err := os.ReadFile(secret); err != nil {
		t.Fatal(err)
	}
}

// TestVolumeTenants: another tenant's volume answers as a missing one,
// to every operation and to a sandbox that names it; names are per
// tenant.
func TestVolumeTenants(t *testing.T) {
	testenv.NeedRoot(t)
	m := newManager(t)
	for n, q := range map[string]sandbox.Quota{"a": {VolumeBytes: 24 << 20}, "b": {}} {
		if _, err := m.Tenants().Add(context.Background(), n, q); err != nil {
			t.Fatal(err)
		}
	}
	ta, tb := tenant.With(context.Background(), "a"), tenant.With(context.Background(), "b")
	newVolume(t, ta, m, "mine", 8<<20)
	newVolume(t, tb, m, "same", 8<<20)
	newVolume(t, ta, m, "same", 8<<20)
	want := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, sandbox.ErrVolumeNotFound) || !strings.HasSuffix(err.Error(), "volume mine: no such volume") {
			t.Errorf("%s of another tenant's volume: %v", what, err)
		}
	}
	_, err := m.GetVolume(tb, "mine")
	want("get", err)
	want("rm", m.RemoveVolume(tb, "mine", true))
	_, err = m.Create(tb, sandbox.CreateOptions{Config: sandbox.Config{Volumes: []sandbox.VolumeMount{{Name: "mine", Path: "/m"}}}})
	want("mount", err)
	vs, err := m.ListVolumes(tb)
	if err != nil || len(vs) != 1 || vs[0].Name != "same" || vs[0].Tenant != "b" {
		t.Errorf("b's list: %+v, %v", vs, err)
	}
	all, err := m.ListVolumes(context.Background())
	if err != nil || len(all) != 3 {
		t.Errorf("the admin's list: %d, %v", len(all), err)
	}
	if _, err := m.GetVolume(ta, "mine"); err != nil {
		t.Errorf("a's own: %v", err)
	}
	// a holds 16 MiB of its 24: 16 more are over the quota, 8 fit.
	if _, err := m.CreateVolume(ta, sandbox.VolumeOptions{Name: "more", Size: 16 << 20}); !errors.Is(err, errdefs.ErrQuota) {
		t.Errorf("over the volume quota: %v", err)
	}
	newVolume(t, ta, m, "fits", 8<<20)
}

// TestVolumeCopies: a checkpoint holds no volume's files; a fork's copies
// and a restore mount the same volume, shared; a restore fails once a file
// it held open is gone, and as not found once its volume is.
func TestVolumeCopies(t *testing.T) {
	testenv.NeedRoot(t)
	m := newManager(t)
	ctx := context.Background()
	newVolume(t, ctx, m, "shared", 16<<20)
	src := m.run(t, sandbox.Config{Volumes: []sandbox.VolumeMount{{Name: "shared", Path: "/s"}}})
	// An open file on the volume across the checkpoint.
	m.sh(t, src, "echo before > /s/f; (exec 3</s/f; sleep 1000) >/dev/null 2>&1 &")
	copies, err := m.Fork(ctx, src.ID, sandbox.ForkOptions{N: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, errb, exit := m.sh(t, copies[0], "cat /s/f && echo from-copy > /s/g"); exit.Code != 0 {
		t.Fatalf("in the copy: %s", errb)
	}
	if out, _, _ := m.sh(t, src, "cat /s/g"); out != "from-copy\n" {
		t.Errorf("the source sees %q: the copy's volume is not the same", out)
	}
	snap, err := m.Checkpoint(ctx, src.ID, sandbox.CheckpointOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m.sh(t, src, "echo after > /s/h")
	r, err := m.Restore(ctx, snap.ID, sandbox.RestoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if out, _, _ := m.sh(t, r, "cat /s/h"); out != "after\n" {
		t.Errorf("the restore sees %q: the volume was copied into the snapshot", out)
	}
	// gVisor reopens a checkpoint's open files by path: once one is gone,
	// the restore fails (docs/volumes.md), and leaves nothing behind.
	m.sh(t, src, "rm /s/f")
	if _, err := m.Restore(ctx, snap.ID, sandbox.RestoreOptions{}); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("restore without a file it held open: %v", err)
	}
	for _, sb := range []*sandbox.Sandbox{src, copies[0], r} {
		m.Remove(ctx, sb.ID, true)
	}
	if err := m.RemoveVolume(ctx, "shared", false); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Restore(ctx, snap.ID, sandbox.RestoreOptions{}); !errors.Is(err, sandbox.ErrVolumeNotFound) {
		t.Errorf("restore without its volume: %v", err)
	}
}

// TestVolumeRecover: a create or remove cut short by a crash is finished
// by the next open: its record left creating (before any file, or with
// its file system made and mounted) or removing (still mounted), its
// files and mount go.
func TestVolumeRecover(t *testing.T) {
	testenv.NeedRoot(t)
	m := newManager(t)
	ctx := context.Background()
	newVolume(t, ctx, m, "half", 8<<20)
	newVolume(t, ctx, m, "gone", 8<<20)
	newVolume(t, ctx, m, "kept", 8<<20)
	db := m.st.DB()
	db.Exec(`UPDATE volumes SET state = 'creating' WHERE name = 'half'`)
	db.Exec(`UPDATE volumes SET state = 'removing' WHERE name = 'gone'`)
	db.Exec(`INSERT INTO volumes (tenant, name, size, state, created_at) VALUES ('', 'nofiles', 8388608, 'creating', 0)`)
	m2 := openManager(t, m.dir)
	vs, err := m2.ListVolumes(ctx)
	if err != nil || len(vs) != 1 || vs[0].Name != "kept" || vs[0].Used == 0 {
		t.Fatalf("after recovery: %+v %v", vs, err)
	}
	var left int
	db.QueryRow(`SELECT count(*) FROM volumes`).Scan(&left)
	if left != 1 {
		t.Errorf("%d records left, want kept's", left)
	}
	for _, n := range []string{"half", "gone", "nofiles"} {
		if _, err := os.Stat(filepath.Join(m.dir, "volumes", "_", n)); !os.IsNotExist(err) {
			t.Errorf("%s's files: %v", n, err)
		}
	}
}
