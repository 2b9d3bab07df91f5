package image

import (
	"archive/tar"
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"golang.org/x/sys/unix"
	"smolvm.dev/smolvm/tests/testenv"
)

func TestImportLayout(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	src := imageOf(t, "/bin/app",
		layerOf(t, dir("bin/"), file("bin/app", "#!/bin/sh\necho hi\n")),
		layerOf(t, dir("srv/"), file("srv/data", "12345")))
	path := writeLayout(t, map[string]v1.Image{"example.com/team/app:1.0": src})

	img, err := s.Import(ctx, path, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	wantID, _ := src.ConfigName()
	if img.ID != wantID.String() {
		t.Errorf("ID = %s, want %s", img.ID, wantID)
	}
	if !slices.Equal(img.Refs, []string{"example.com/team/app:1.0"}) {
		t.Errorf("Refs = %v", img.Refs)
	}
	if !slices.Equal(img.Layers, diffIDs(t, src)) {
		t.Errorf("Layers = %v, want %v", img.Layers, diffIDs(t, src))
	}
	if !slices.Equal(img.Config.Cmd, []string{"/bin/app"}) || img.Config.WorkingDir != "/srv" ||
		img.Config.User != "1000" || !slices.Contains(img.Config.Env, "GREETING=hi") || img.Config.Labels["test"] != "yes" {
		t.Errorf("Config = %+v", img.Config)
	}
	if want := int64(len("#!/bin/sh\necho hi\n") + len("12345")); img.Size != want {
		t.Errorf("Size = %d, want %d", img.Size, want)
	}
	if !strings.HasPrefix(img.Source, "import /") {
		t.Errorf("Source = %q", img.Source)
	}

	rootfs := s.Rootfs(img)
	if len(rootfs.LowerDirs) != 2 || len(rootfs.Mounts) != 0 {
		t.Fatalf("Rootfs = %+v", rootfs)
	}
	if got := readFile(t, filepath.Join(rootfs.LowerDirs[0], "bin/app")); got != "#!/bin/sh\necho hi\n" {
		t.Errorf("bin/app = %q", got)
	}
	if got := readFile(t, filepath.Join(rootfs.LowerDirs[1], "srv/data")); got != "12345" {
		t.Errorf("srv/data = %q", got)
	}

	for _, q := range []string{"example.com/team/app:1.0", img.ID, strings.TrimPrefix(img.ID, "sha256:")[:12]} {
		got, err := s.Get(ctx, q)
		if err != nil {
			t.Errorf("Get(%q): %v", q, err)
		} else if got.ID != img.ID {
			t.Errorf("Get(%q) = %s", q, got.ID)
		}
	}
	list, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || !list[0].Builtin || list[1].ID != img.ID {
		t.Errorf("List = %+v", list)
	}
}

func TestImportLayoutChoosesByName(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	a := imageOf(t, "a", layerOf(t, file("a", "a")))
	b := imageOf(t, "b", layerOf(t, file("b", "b")))
	path := writeLayout(t, map[string]v1.Image{"example.com/a:1": a, "example.com/b:1": b})

	if _, err := s.Import(ctx, path, "", nil); !errors.Is(err, ErrInvalidRef) {
		t.Errorf("import of an ambiguous layout: err = %v, want ErrInvalidRef", err)
	}
	if _, err := s.Import(ctx, path, "example.com/c:1", nil); !errors.Is(err, ErrNotFound) {
		t.Errorf("import of a missing name: err = %v, want ErrNotFound", err)
	}
	img, err := s.Import(ctx, path, "example.com/b:1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(img.Config.Cmd, []string{"b"}) {
		t.Errorf("imported %v, want image b", img.Config.Cmd)
	}

	unnamed := writeLayout(t, map[string]v1.Image{"": a})
	if _, err := s.Import(ctx, unnamed, "", nil); !errors.Is(err, ErrInvalidRef) {
		t.Errorf("import of an unnamed image without a name: err = %v, want ErrInvalidRef", err)
	}
	img, err = s.Import(ctx, unnamed, "smolvm.local/mine", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(img.Refs, []string{"smolvm.local/mine:latest"}) {
		t.Errorf("Refs = %v", img.Refs)
	}
}

func TestImportDockerSave(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	src := imageOf(t, "sh",
		layerOf(t, dir("etc/"), file("etc/os-release", "ID=test\n")),
		layerOf(t, file("etc/motd", "hello\n")))
	path := writeDockerSave(t, src, "alpine:3.20", "example.com/alpine:stable")

	var events []Progress
	img, err := s.Import(ctx, path, "", func(p Progress) { events = append(events, p) })
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(img.Refs, []string{"docker.io/library/alpine:3.20", "example.com/alpine:stable"}) {
		t.Errorf("Refs = %v", img.Refs)
	}
	got, err := s.Get(ctx, "alpine:3.20")
	if err != nil || got.ID != img.ID {
		t.Fatalf("Get(alpine:3.20) = %v, %v", got, err)
	}
	if got := readFile(t, filepath.Join(s.Rootfs(img).LowerDirs[1], "etc/motd")); got != "hello\n" {
		t.Errorf("etc/motd = %q", got)
	}
	var done int
	for _, e := range events {
		if e.Status == "done" {
			done++
		}
	}
	if done != 2 {
		t.Errorf("progress: %d layers done, want 2: %+v", done, events)
	}

	// Renaming on import replaces the archive's own tags.
	img, err = s.Import(ctx, path, "renamed", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(img.Refs, "docker.io/library/renamed:latest") {
		t.Errorf("Refs = %v", img.Refs)
	}
}

func TestPullWhiteoutsAndOverlay(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	reg := startRegistry(t)
	base := layerOf(t,
		dir("a/"), file("a/gone", "lower"), file("a/kept", "lower"),
		dir("d/"), file("d/old", "lower"))
	upper := layerOf(t,
		dir("a/"), file("a/.wh.gone", ""),
		dir("d/"), file("d/.wh..wh..opq", ""), file("d/new", "upper"))
	ref := reg + "/test/whiteout:v1"
	push(t, ref, imageOf(t, "sh", base, upper))

	var events []Progress
	var mu sync.Mutex
	img, err := s.Pull(ctx, ref, PullOptions{Progress: func(p Progress) {
		mu.Lock()
		events = append(events, p)
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(img.Refs, []string{ref}) || img.Source != "pull "+ref {
		t.Errorf("Refs = %v, Source = %q", img.Refs, img.Source)
	}
	var downloading bool
	for _, e := range events {
		if e.Status == "downloading" && e.Total > 0 {
			downloading = true
		}
	}
	if !downloading {
		t.Errorf("no downloading progress with a total: %+v", events)
	}

	rootfs := s.Rootfs(img)
	up := rootfs.LowerDirs[1]
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(up, "a/gone"), &st); err != nil {
		t.Fatalf("whiteout: %v", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != 0 {
		t.Errorf("a/gone: mode %o rdev %d, want a 0:0 character device", st.Mode, st.Rdev)
	}
	if _, err := os.Lstat(filepath.Join(up, "a/.wh.gone")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("OCI whiteout file left in place: %v", err)
	}
	buf := make([]byte, 8)
	n, err := unix.Getxattr(filepath.Join(up, "d"), opaqueXattr, buf)
	if err != nil || string(buf[:n]) != "y" {
		t.Errorf("d opaque xattr = %q, %v", buf[:n], err)
	}
	if _, err := os.Lstat(filepath.Join(up, "d/.wh..wh..opq")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("opaque marker file left in place: %v", err)
	}

	// Stack the layers as the backend does and check what the sandbox sees.
	mnt := t.TempDir()
	opts := "lowerdir=" + rootfs.LowerDirs[1] + ":" + rootfs.LowerDirs[0]
	if err := unix.Mount("overlay", mnt, "overlay", unix.MS_RDONLY, opts); err != nil {
		if errors.Is(err, unix.EPERM) {
			t.Skipf("mount overlay: %v", err)
		}
		t.Fatalf("mount overlay: %v", err)
	}
	defer unix.Unmount(mnt, unix.MNT_DETACH)
	for path, want := range map[string]string{"a/gone": "", "a/kept": "lower", "d/old": "", "d/new": "upper"} {
		b, err := os.ReadFile(filepath.Join(mnt, path))
		switch {
		case want == "" && !errors.Is(err, os.ErrNotExist):
			t.Errorf("%s visible through the overlay: %q, %v", path, b, err)
		case want != "" && string(b) != want:
			t.Errorf("%s = %q, %v; want %q", path, b, err, want)
		}
	}
	if err := os.WriteFile(filepath.Join(mnt, "a/new"), nil, 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("write to the read-only overlay: %v", err)
	}
}

func TestLayerSharing(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	base := layerOf(t, dir("usr/"), file("usr/base", "shared"))
	one := imageOf(t, "one", base, layerOf(t, file("one", "1")))
	two := imageOf(t, "two", base, layerOf(t, file("two", "2")))

	a, err := s.Import(ctx, writeDockerSave(t, one, "one"), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	var before unix.Stat_t
	if err := unix.Stat(filepath.Join(s.layerDir(a.Layers[0]), "usr/base"), &before); err != nil {
		t.Fatal(err)
	}
	var statuses []string
	b, err := s.Import(ctx, writeLayout(t, map[string]v1.Image{"two:latest": two}), "", func(p Progress) {
		if p.Layer == a.Layers[0] {
			statuses = append(statuses, p.Status)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if a.Layers[0] != b.Layers[0] {
		t.Fatalf("base layers differ: %s, %s", a.Layers[0], b.Layers[0])
	}
	if !slices.Equal(statuses, []string{"exists"}) {
		t.Errorf("base layer progress on second import = %v, want [exists]", statuses)
	}
	var after unix.Stat_t
	if err := unix.Stat(filepath.Join(s.layerDir(b.Layers[0]), "usr/base"), &after); err != nil {
		t.Fatal(err)
	}
	if before.Ino != after.Ino {
		t.Error("shared layer was extracted again")
	}
	if b.Size != int64(len("shared")+len("2")) {
		t.Errorf("Size of second image = %d", b.Size)
	}
	if got := len(storeEntries(t, s)); got != 3+2 {
		t.Errorf("store holds %v, want 3 layers and 2 images", storeEntries(t, s))
	}
}

func TestCorruptRejected(t *testing.T) {
	ctx := context.Background()
	good := layerOf(t, file("good", "fine"))
	bad := layerOf(t, file("bad", "content"))
	img := imageOf(t, "x", good, bad)
	// A config whose second diffID does not match the layer's content.
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.RootFS.DiffIDs[1] = v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("ab", 32)}
	lying, err := mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}

	garbage := filepath.Join(t.TempDir(), "garbage.tar")
	if err := os.WriteFile(garbage, []byte("this is not a tar archive at all, not even close"), 0o644); err != nil {
		t.Fatal(err)
	}
	truncated := filepath.Join(t.TempDir(), "truncated.tar")
	full, err := os.ReadFile(writeDockerSave(t, imageOf(t, "y", layerOf(t, file("big", strings.Repeat("x", 10000)))), "y:1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(truncated, full[:len(full)-6000], 0o644); err != nil {
		t.Fatal(err)
	}
	emptyLayout := t.TempDir()

	for name, path := range map[string]string{
		"diffID mismatch (layout)":      writeLayout(t, map[string]v1.Image{"x:1": lying}),
		"diffID mismatch (docker-save)": writeDockerSave(t, lying, "x:1"),
		"not a tarball":                 garbage,
		"truncated tarball":             truncated,
		"not a layout":                  emptyLayout,
	} {
		t.Run(name, func(t *testing.T) {
			s, _ := newStore(t)
			_, err := s.Import(ctx, path, "", nil)
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("err = %v, want ErrCorrupt", err)
			}
			if left := storeEntries(t, s); len(left) != 0 {
				t.Errorf("left behind: %v", left)
			}
		})
	}

	t.Run("shared layer of a failed import stays", func(t *testing.T) {
		s, _ := newStore(t)
		ok, err := s.Import(ctx, writeLayout(t, map[string]v1.Image{"ok:1": imageOf(t, "ok", good)}), "", nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Import(ctx, writeLayout(t, map[string]v1.Image{"x:1": lying}), "", nil); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("err = %v, want ErrCorrupt", err)
		}
		if left := storeEntries(t, s); !slices.Equal(left, []string{"layer " + strings.TrimPrefix(ok.Layers[0], "sha256:"), "image " + ok.ID}) {
			t.Errorf("store holds %v", left)
		}
	})
}

func TestLimits(t *testing.T) {
	ctx := context.Background()
	img := imageOf(t, "x", layerOf(t, file("a", "aaaa"), file("b", "bbbb"), file("c", "cccc")))
	path := writeLayout(t, map[string]v1.Image{"x:1": img})
	for name, set := range map[string]func(*Store){
		"entries": func(s *Store) { s.MaxEntries = 2 },
		"bytes":   func(s *Store) { s.MaxSize = 10 },
	} {
		t.Run(name, func(t *testing.T) {
			s, _ := newStore(t)
			set(s)
			if _, err := s.Import(ctx, path, "", nil); !errors.Is(err, ErrCorrupt) {
				t.Errorf("err = %v, want ErrCorrupt", err)
			}
			if left := storeEntries(t, s); len(left) != 0 {
				t.Errorf("left behind: %v", left)
			}
		})
	}
}

func TestBadRefs(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	path := writeLayout(t, map[string]v1.Image{"": imageOf(t, "x", layerOf(t, file("a", "a")))})
	for _, ref := range []string{"Upper/Case", "bad ref", "a:b:c", "x@sha256:nothex", ""} {
		if _, err := s.Get(ctx, ref); !errors.Is(err, ErrInvalidRef) {
			t.Errorf("Get(%q): err = %v, want ErrInvalidRef", ref, err)
		}
		if ref == "" {
			continue // an empty name on import means the archive's own
		}
		if _, err := s.Import(ctx, path, ref, nil); !errors.Is(err, ErrInvalidRef) {
			t.Errorf("Import(name %q): err = %v, want ErrInvalidRef", ref, err)
		}
		if _, err := s.Pull(ctx, ref, PullOptions{}); !errors.Is(err, ErrInvalidRef) {
			t.Errorf("Pull(%q): err = %v, want ErrInvalidRef", ref, err)
		}
	}
	for _, ref := range []string{"nothere", "example.com/nothere:1", "0123456789abcdef"} {
		if _, err := s.Get(ctx, ref); !errors.Is(err, ErrNotFound) {
			t.Errorf("Get(%q): err = %v, want ErrNotFound", ref, err)
		}
		if err := s.Remove(ctx, ref, neverInUse); !errors.Is(err, ErrNotFound) {
			t.Errorf("Remove(%q): err = %v, want ErrNotFound", ref, err)
		}
	}
	if _, err := s.Import(ctx, filepath.Join(t.TempDir(), "missing.tar"), "", nil); !errors.Is(err, ErrNotFound) {
		t.Errorf("Import of a missing file: err = %v, want ErrNotFound", err)
	}
	reg := startRegistry(t)
	if _, err := s.Pull(ctx, reg+"/no/such:image", PullOptions{}); !errors.Is(err, ErrNotFound) {
		t.Errorf("Pull of a missing image: err = %v, want ErrNotFound", err)
	}
	if len(storeEntries(t, s)) != 0 {
		t.Errorf("left behind: %v", storeEntries(t, s))
	}
}

func neverInUse(string) (bool, error) { return false, nil }

func TestRemove(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	base := layerOf(t, file("base", "base"))
	a, err := s.Import(ctx, writeDockerSave(t, imageOf(t, "a", base, layerOf(t, file("a", "a"))), "a:1", "a:2"), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Import(ctx, writeDockerSave(t, imageOf(t, "b", base, layerOf(t, file("b", "b"))), "b:1"), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	exists := func(diffID string) bool {
		_, err := os.Lstat(s.layerDir(diffID))
		return err == nil
	}

	// Untagging one of two refs keeps the image.
	if err := s.Remove(ctx, "a:1", func(string) (bool, error) { t.Error("inUse asked for an untag"); return true, nil }); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, a.ID); err != nil || !slices.Equal(got.Refs, []string{"docker.io/library/a:2"}) {
		t.Fatalf("after untag: %v, %v", got, err)
	}

	// An image in use is not deleted.
	err = s.Remove(ctx, "a:2", func(id string) (bool, error) { return id == a.ID, nil })
	if err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("remove of an image in use: %v", err)
	}
	if _, err := s.Get(ctx, "a:2"); err != nil {
		t.Fatalf("image in use lost its ref: %v", err)
	}

	if err := s.Remove(ctx, "a:2", neverInUse); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, a.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("removed image still found: %v", err)
	}
	if !exists(a.Layers[0]) || exists(a.Layers[1]) {
		t.Errorf("after removing a: shared layer present=%v, own layer present=%v", exists(a.Layers[0]), exists(a.Layers[1]))
	}
	if err := s.Remove(ctx, strings.TrimPrefix(b.ID, "sha256:")[:12], neverInUse); err != nil {
		t.Fatal(err)
	}
	if left := storeEntries(t, s); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
	if err := s.Remove(ctx, "host", neverInUse); err == nil {
		t.Error("the builtin image was removed")
	}
}

func TestConcurrentPulls(t *testing.T) {
	ctx := context.Background()
	dataDir := t.TempDir()
	reg := startRegistry(t)
	ref := reg + "/test/concurrent:1"
	var layers []v1.Layer
	for i := range 3 {
		layers = append(layers, layerOf(t, file(strings.Repeat("f", i+1), strings.Repeat("data", 50000))))
	}
	src := imageOf(t, "c", layers...)
	push(t, ref, src)

	var wg sync.WaitGroup
	ids := make([]string, 4)
	errs := make([]error, 4)
	for i := range 4 {
		s := openStore(t, dataDir) // a store per goroutine, as separate processes have
		wg.Go(func() {
			img, err := s.Pull(ctx, ref, PullOptions{})
			errs[i] = err
			if err == nil {
				ids[i] = img.ID
			}
		})
	}
	wg.Wait()
	want, _ := src.ConfigName()
	for i := range 4 {
		if errs[i] != nil || ids[i] != want.String() {
			t.Errorf("pull %d: %s, %v", i, ids[i], errs[i])
		}
	}
	s := openStore(t, dataDir)
	left := storeEntries(t, s)
	if len(left) != 4 {
		t.Errorf("store holds %v, want 3 layers and 1 image", left)
	}
	img, err := s.Get(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range s.Rootfs(img).LowerDirs {
		if _, err := os.Stat(d); err != nil {
			t.Error(err)
		}
	}
}

func TestMaliciousLayers(t *testing.T) {
	ctx := context.Background()
	for name, entries := range map[string][]entry{
		"dot-dot":                 {file("../../evil", "x")},
		"dot-dot inside":          {dir("a/"), file("a/../../../evil", "x")},
		"symlink then write":      {symlink("link", "/OUTSIDE"), file("link/evil", "x")},
		"relative symlink escape": {symlink("up", "../../.."), file("up/evil", "x")},
		"symlink parent dir":      {symlink("d", "/OUTSIDE"), dir("d/sub/"), file("d/sub/evil", "x")},
		"hard link outside":       {hardlink("evil", "../../../OUTSIDE/secret")},
		"hard link via symlink":   {symlink("link", "/OUTSIDE"), hardlink("evil", "link/secret")},
	} {
		t.Run(name, func(t *testing.T) {
			s, dataDir := newStore(t)
			outside := t.TempDir()
			if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o600); err != nil {
				t.Fatal(err)
			}
			for i := range entries {
				entries[i].name = strings.ReplaceAll(entries[i].name, "/OUTSIDE", outside)
				entries[i].link = strings.ReplaceAll(entries[i].link, "/OUTSIDE", outside)
			}
			path := writeLayout(t, map[string]v1.Image{"evil:1": imageOf(t, "x", layerOf(t, entries...))})
			_, err := s.Import(ctx, path, "", nil)
			if !errors.Is(err, ErrCorrupt) {
				t.Errorf("err = %v, want ErrCorrupt", err)
			}
			for _, root := range []string{filepath.Dir(dataDir), outside} {
				filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
					if err == nil && d.Name() == "evil" {
						t.Errorf("escaped entry written: %s", p)
					}
					return nil
				})
			}
			des, err := os.ReadDir(outside)
			if err != nil || len(des) != 1 {
				t.Errorf("outside dir now holds %v (%v)", des, err)
			}
			if left := storeEntries(t, s); len(left) != 0 {
				t.Errorf("left behind: %v", left)
			}
		})
	}
}

func TestExtractKeepsMetadata(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	suid := file("usr/bin/su", "binary")
	suid.mode = 0o4755
	owned := file("home/u/notes", "n")
	owned.uid, owned.gid = 1234, 5678
	dev := entry{name: "dev/sda", typ: tar.TypeBlock, mode: 0o600}
	img, err := s.Import(ctx, writeLayout(t, map[string]v1.Image{"meta:1": imageOf(t, "x", layerOf(t,
		suid, owned, dev,
		symlink("abs", "/etc/passwd"),
		file("orig", "same"), hardlink("linked", "orig"),
	))}), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	root := s.Rootfs(img).LowerDirs[0]
	fi, err := os.Stat(filepath.Join(root, "usr/bin/su"))
	if err != nil || fi.Mode()&os.ModeSetuid == 0 || fi.Mode().Perm() != 0o755 {
		t.Errorf("setuid file: %v, %v", fi.Mode(), err)
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(root, "home/u/notes"), &st); err != nil || st.Uid != 1234 || st.Gid != 5678 {
		t.Errorf("owner = %d:%d, %v", st.Uid, st.Gid, err)
	}
	if !fi.ModTime().Equal(testTime) {
		t.Errorf("mtime = %v, want %v", fi.ModTime(), testTime)
	}
	if _, err := os.Lstat(filepath.Join(root, "dev/sda")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("device node extracted: %v", err)
	}
	if target, err := os.Readlink(filepath.Join(root, "abs")); err != nil || target != "/etc/passwd" {
		t.Errorf("abs -> %q, %v", target, err)
	}
	var a, b unix.Stat_t
	if unix.Stat(filepath.Join(root, "orig"), &a) != nil || unix.Stat(filepath.Join(root, "linked"), &b) != nil || a.Ino != b.Ino {
		t.Errorf("hard link not preserved")
	}
}

func TestHostImage(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	img, err := s.Get(ctx, "host")
	if err != nil {
		t.Fatal(err)
	}
	if !img.Builtin || len(img.Layers) != 0 || img.Config.WorkingDir != "/" || img.Config.Cmd != nil ||
		!slices.Contains(img.Config.Env, "HOME=/root") {
		t.Errorf("host image = %+v", img)
	}
	rootfs := s.Rootfs(img)
	if len(rootfs.LowerDirs) != 1 || !slices.Contains(rootfs.Mounts, Mount{Source: "/usr", Destination: "/usr"}) {
		t.Fatalf("Rootfs = %+v", rootfs)
	}
	root := rootfs.LowerDirs[0]

	want := []string{"group", "hosts", "nsswitch.conf", "passwd", "resolv.conf"}
	if _, err := os.Stat("/etc/os-release"); err == nil {
		want = append(want, "os-release")
	}
	if _, err := os.Stat("/etc/alternatives"); err == nil {
		want = append(want, "alternatives")
	}
	slices.Sort(want)
	des, err := os.ReadDir(filepath.Join(root, "etc"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range des {
		got = append(got, d.Name())
	}
	if !slices.Equal(got, want) {
		t.Errorf("/etc holds %v, want %v", got, want)
	}
	// alternatives may only hold links, never content of the host's /etc.
	filepath.WalkDir(filepath.Join(root, "etc/alternatives"), func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			t.Errorf("regular file in alternatives: %s", p)
		}
		return nil
	})
	if passwd := readFile(t, filepath.Join(root, "etc/passwd")); !strings.Contains(passwd, "sandbox:x:1000:1000:") ||
		strings.Count(passwd, "\n") != 3 {
		t.Errorf("passwd = %q", passwd)
	}
	if des, err := os.ReadDir(filepath.Join(root, "root")); err != nil || len(des) != 0 {
		t.Errorf("/root holds %v, %v", des, err)
	}
	for _, d := range []string{"proc", "dev", "sys", "tmp", "home/sandbox", "run", "var/tmp", "mnt", "usr"} {
		if fi, err := os.Lstat(filepath.Join(root, d)); err != nil || !fi.IsDir() {
			t.Errorf("%s: %v", d, err)
		}
	}
	for _, n := range hostTopDirs {
		hostFi, hostErr := os.Lstat("/" + n)
		fi, err := os.Lstat(filepath.Join(root, n))
		switch {
		case hostErr != nil:
			if err == nil {
				t.Errorf("/%s made but absent on the host", n)
			}
		case hostFi.Mode()&os.ModeSymlink != 0:
			hostT, _ := os.Readlink("/" + n)
			gotT, err := os.Readlink(filepath.Join(root, n))
			if err != nil || strings.TrimPrefix(hostT, "/") != gotT {
				t.Errorf("/%s -> %q, host has %q (%v)", n, gotT, hostT, err)
			}
		default:
			if err != nil || !fi.IsDir() || !slices.Contains(rootfs.Mounts, Mount{Source: "/" + n, Destination: "/" + n}) {
				t.Errorf("/%s is a directory on the host but not mounted: %+v, %v", n, rootfs.Mounts, err)
			}
		}
	}

	// A missing root is regenerated, with the same ID.
	if err := os.RemoveAll(root); err != nil {
		t.Fatal(err)
	}
	again, err := s.Get(ctx, "host")
	if err != nil {
		t.Fatal(err)
	}
	if again.ID != img.ID {
		t.Errorf("ID changed: %s, %s", again.ID, img.ID)
	}
	if _, err := os.Stat(filepath.Join(root, "etc/passwd")); err != nil {
		t.Errorf("root not regenerated: %v", err)
	}
}

func TestHostRootNonMergedUsr(t *testing.T) {
	testenv.NeedRoot(t)
	fake := t.TempDir()
	for _, d := range []string{"usr/bin", "usr/lib", "bin", "lib", "etc"} {
		if err := os.MkdirAll(filepath.Join(fake, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("usr/sbin", filepath.Join(fake, "sbin")); err != nil {
		t.Fatal(err)
	}
	images := t.TempDir()
	out := filepath.Join(images, hostName, "rootfs")
	if err := os.MkdirAll(out, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := buildHostRoot(out, fake); err != nil {
		t.Fatal(err)
	}
	for n, wantDir := range map[string]bool{"bin": true, "lib": true} {
		if fi, err := os.Lstat(filepath.Join(out, n)); err != nil || fi.IsDir() != wantDir {
			t.Errorf("%s: %v, %v", n, fi, err)
		}
	}
	if target, err := os.Readlink(filepath.Join(out, "sbin")); err != nil || target != "usr/sbin" {
		t.Errorf("sbin -> %q, %v", target, err)
	}
	if _, err := os.Lstat(filepath.Join(out, "lib64")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("lib64 made though the host has none: %v", err)
	}
	s := &Store{images: images}
	want := []Mount{{"/usr", "/usr"}, {"/bin", "/bin"}, {"/lib", "/lib"}}
	if got := s.hostRootfs().Mounts; !slices.Equal(got, want) {
		t.Errorf("Mounts = %v, want %v", got, want)
	}
}

func TestNormalize(t *testing.T) {
	for in, want := range map[string]string{
		"alpine":                        "docker.io/library/alpine:latest",
		"alpine:3.20":                   "docker.io/library/alpine:3.20",
		"docker.io/library/alpine":      "docker.io/library/alpine:latest",
		"index.docker.io/user/app:1":    "docker.io/user/app:1",
		"smolvm.local/myimg":            "smolvm.local/myimg:latest",
		"localhost:5000/a/b:c":          "localhost:5000/a/b:c",
		"example.com/x@sha256:" + hex64: "example.com/x@sha256:" + hex64,
	} {
		got, err := Normalize(in)
		if err != nil || got != want {
			t.Errorf("Normalize(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

var hex64 = strings.Repeat("0123456789abcdef", 4)

func FuzzCleanPath(f *testing.F) {
	for _, s := range []string{"a/b", "../x", "/abs/../../x", "a/../../b", "./", ".", "", "a//b/./c/..", "..", "/.."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		p, err := cleanPath(name)
		if err != nil {
			return
		}
		if p == ".." || strings.HasPrefix(p, "../") || strings.HasPrefix(p, "/") || p == "" {
			t.Errorf("cleanPath(%q) = %q", name, p)
		}
		for _, c := range strings.Split(p, "/") {
			if c == ".." || (c == "." && p != ".") || c == "" {
				t.Errorf("cleanPath(%q) = %q has component %q", name, p, c)
			}
		}
	})
}

func TestImportDiskFull(t *testing.T) {
	ctx := context.Background()
	dataDir := t.TempDir()
	layers := filepath.Join(dataDir, "layers")
	if err := os.MkdirAll(layers, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", layers, "tmpfs", 0, "size=4m"); err != nil {
		t.Skipf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(layers, unix.MNT_DETACH) })
	s := openStore(t, dataDir)
	small := imageOf(t, "/bin/app", layerOf(t, dir("bin/"), file("bin/app", "#!/bin/sh\necho hi\n")))
	kept, err := s.Import(ctx, writeLayout(t, map[string]v1.Image{"kept:1": small}), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	before := storeEntries(t, s)
	used := func() uint64 {
		var fs unix.Statfs_t
		if err := unix.Statfs(layers, &fs); err != nil {
			t.Fatal(err)
		}
		return (fs.Blocks - fs.Bfree) * uint64(fs.Bsize)
	}
	usedBefore := used()

	// Random bytes, so nothing compresses them away: 8 MiB cannot fit in 4.
	big := make([]byte, 8<<20)
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	huge := imageOf(t, "/bin/app",
		layerOf(t, dir("srv/"), file("srv/a", "first layer fits")),
		layerOf(t, dir("srv/"), file("srv/big", string(big))))
	_, err = s.Import(ctx, writeLayout(t, map[string]v1.Image{"huge:1": huge}), "", nil)
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "no space left") {
		t.Fatalf("import onto a full disk: %v", err)
	}
	if after := storeEntries(t, s); !slices.Equal(after, before) {
		t.Errorf("the failed import left %v (before: %v)", after, before)
	}
	if u := used(); u > usedBefore+64<<10 {
		t.Errorf("%d bytes used after the failed import, %d before", u, usedBefore)
	}
	if _, err := s.Get(ctx, "huge:1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("the failed image is listed: %v", err)
	}
	got, err := s.Get(ctx, "kept:1")
	if err != nil || got.ID != kept.ID {
		t.Fatalf("the image imported before: %+v %v", got, err)
	}
	if b := readFile(t, filepath.Join(s.Rootfs(got).LowerDirs[0], "bin/app")); b != "#!/bin/sh\necho hi\n" {
		t.Errorf("its file after the failed import: %q", b)
	}
}
