package snapshot

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"smolvm.dev/smolvm/internal/store"
	"smolvm.dev/smolvm/sandbox"
)

// TestMain doubles as the crashing process of TestGCAfterCrash.
func TestMain(m *testing.M) {
	if dataDir := os.Getenv("SNAPSHOT_TEST_CRASH_IN"); dataDir != "" {
		crashWhileStaging(dataDir)
	}
	if dataDir := os.Getenv("SNAPSHOT_TEST_CRASH_SEALING"); dataDir != "" {
		crashWhileSealing(dataDir)
	}
	os.Exit(m.Run())
}

// stageForCrash opens the store in dataDir as a crashing process does and
// begins a snapshot holding pages.img of size bytes.
func stageForCrash(dataDir string, size int) *Staging {
	ctx := context.Background()
	st, err := store.Open(ctx, dataDir)
	if err != nil {
		panic(err)
	}
	s, err := Open(ctx, dataDir, st)
	if err != nil {
		panic(err)
	}
	g, err := s.Begin(ctx)
	if err != nil {
		panic(err)
	}
	if err := os.WriteFile(filepath.Join(g.Dir(), "pages.img"), bytes.Repeat([]byte("p"), size), 0o600); err != nil {
		panic(err)
	}
	return g
}

// crashWhileStaging begins a snapshot, writes part of it, prints the
// staging directory and dies without cleaning up.
func crashWhileStaging(dataDir string) {
	fmt.Println(stageForCrash(dataDir, 4096).Dir())
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}

// crashWhileSealing commits a 64 MiB snapshot, prints its ID and dies
// while the seal (hashing 64 MiB, then syncfs) is still running.
func crashWhileSealing(dataDir string) {
	snap, err := stageForCrash(dataDir, 64<<20).Commit(context.Background(), "sealing", "", sandbox.Lineage{}, nil)
	if err != nil {
		panic(err)
	}
	fmt.Println(snap.ID)
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}

func openStore(t *testing.T, dataDir string) *Store {
	t.Helper()
	st, err := store.Open(t.Context(), dataDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	s, err := Open(t.Context(), dataDir, st)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// stage begins a snapshot holding files (name → content).
func stage(t *testing.T, s *Store, files map[string]string) *Staging {
	t.Helper()
	g, err := s.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		p := filepath.Join(g.Dir(), name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return g
}

// commit commits a snapshot holding files and returns it once sealed.
func commit(t *testing.T, s *Store, name string, files map[string]string) *sandbox.Snapshot {
	t.Helper()
	snap, err := stage(t, s, files).Commit(t.Context(), name, "sha256:img", sandbox.Lineage{Sandbox: "sb1", SandboxName: "dev"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return sealed(t, s, snap.ID)
}

// sealed waits for the store's seals and returns snapshot id as stored.
func sealed(t *testing.T, s *Store, id string) *sandbox.Snapshot {
	t.Helper()
	s.Wait()
	snap, err := s.Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if !snap.Durable {
		t.Fatalf("snapshot %s is not durable after its seal", id)
	}
	return snap
}

// entries lists the snapshots directory, so tests see every leftover.
func entries(t *testing.T, dataDir string) []string {
	t.Helper()
	des, err := os.ReadDir(filepath.Join(dataDir, "snapshots"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, de := range des {
		if de.Name() != lockName {
			out = append(out, de.Name())
		}
	}
	return out
}

func TestCommitGetList(t *testing.T) {
	dataDir := t.TempDir()
	s := openStore(t, dataDir)
	ctx := t.Context()
	files := map[string]string{"checkpoint.img": "state", "pages.img": strings.Repeat("page", 5000), "sub/x": "x", "a.b": "dot"}
	g := stage(t, s, files)
	lin := sandbox.Lineage{Sandbox: "0123abcd", SandboxName: "dev", Parent: "sha256:feed"}
	meta := map[string]any{"cmd": []string{"sh"}, "cpus": 2.0}
	early, err := g.Commit(ctx, "first", "sha256:img1", lin, meta)
	if err != nil {
		t.Fatal(err)
	}
	g.Abort() // a no-op after Commit
	// Commit returns before the seal: listed with sizes, usable, not
	// durable, no digest or checksums yet.
	if early.Durable || early.Digest != "" || len(early.Files) != 4 || early.Files[0].SHA256 != "" || early.Size == 0 {
		t.Errorf("snapshot as committed: %+v, want listed files with sizes and no hashes", early)
	}
	if _, err := s.Verify(ctx, early); err != nil {
		t.Errorf("Verify before the seal: %v", err)
	}
	snap := sealed(t, s, early.ID)

	// The digest is that of the sha256sum listing of the files, by name.
	list := exec.Command("sh", "-c", "sha256sum a.b checkpoint.img pages.img sub/x | sha256sum")
	list.Dir = filepath.Join(dataDir, "snapshots", snap.ID)
	out, err := list.Output()
	if err != nil {
		t.Fatalf("sha256sum in the snapshot dir: %v", err)
	}
	if want := "sha256:" + strings.Fields(string(out))[0]; snap.Digest != want {
		t.Errorf("digest = %s, want %s", snap.Digest, want)
	}
	var names []string
	var size int64
	for _, f := range snap.Files {
		names = append(names, f.Name)
		content := files[f.Name]
		sum := sha256.Sum256([]byte(content))
		if f.Size != int64(len(content)) || f.SHA256 != hex.EncodeToString(sum[:]) || f.CRC32C != crc32.Checksum([]byte(content), crcTable) {
			t.Errorf("file %+v, want content %q", f, content)
		}
		size += f.Size
	}
	if want := []string{"a.b", "checkpoint.img", "pages.img", "sub/x"}; !slices.Equal(names, want) {
		t.Errorf("files %v, want %v", names, want)
	}
	if snap.Size != size || snap.Name != "first" || snap.Lineage != lin || snap.ImageID != "sha256:img1" || time.Since(snap.Created) > time.Minute {
		t.Errorf("snapshot %+v", snap)
	}
	var gotMeta map[string]any
	if err := json.Unmarshal(snap.Meta, &gotMeta); err != nil || gotMeta["cpus"] != 2.0 {
		t.Errorf("meta %s: %v", snap.Meta, err)
	}
	if e := entries(t, dataDir); !slices.Equal(e, []string{snap.ID}) {
		t.Errorf("snapshots dir holds %v after the seal, want only the snapshot", e)
	}

	second := commit(t, s, "", map[string]string{"checkpoint.img": "other"})
	hexID := strings.TrimPrefix(snap.ID, "sha256:")
	for _, q := range []string{"first", snap.ID, hexID, hexID[:12], hexID[:6], "sha256:" + hexID[:8]} {
		got, err := s.Get(ctx, q)
		if err != nil {
			t.Errorf("Get(%s): %v", q, err)
			continue
		}
		if got.ID != snap.ID || !bytes.Equal(got.Meta, snap.Meta) || len(got.Files) != 4 {
			t.Errorf("Get(%s) = %+v", q, got)
		}
	}
	for _, q := range []string{"missing", hexID[:5], "sha256:" + strings.Repeat("0", 64)} {
		if _, err := s.Get(ctx, q); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), q) {
			t.Errorf("Get(%q) = %v, want ErrNotFound naming it", q, err)
		}
	}
	// Malformed names are refused before any lookup (internal/names).
	for _, q := range []string{"", "../x", "a\x00", strings.Repeat("s", 200)} {
		if _, err := s.Get(ctx, q); !errors.Is(err, ErrInvalidName) {
			t.Errorf("Get(%q) = %v, want ErrInvalidName", q, err)
		}
	}
	all, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 || all[0].ID != second.ID || all[1].ID != snap.ID {
		t.Errorf("List = %+v, want the two snapshots, newest first", all)
	}
	if second.Name != "" || second.Names != nil || second.Meta != nil {
		t.Errorf("unnamed snapshot without meta: %+v", second)
	}
}

func TestSameContentSameDigest(t *testing.T) {
	dataDir := t.TempDir()
	s := openStore(t, dataDir)
	files := map[string]string{"pages.img": "same pages", "checkpoint.img": "same state"}
	a := commit(t, s, "a", files)
	b := commit(t, s, "", files)
	if b.Digest != a.Digest || b.ID == a.ID {
		t.Fatalf("identical content: IDs %s %s, digests %s %s; want one digest, two IDs", a.ID, b.ID, a.Digest, b.Digest)
	}
	renamed := commit(t, s, "", map[string]string{"pages2.img": "same pages", "checkpoint.img": "same state"})
	changed := commit(t, s, "", map[string]string{"pages.img": "same pages", "checkpoint.img": "same statE"})
	if renamed.Digest == a.Digest || changed.Digest == a.Digest || renamed.Digest == changed.Digest {
		t.Errorf("different content shares a digest: %s %s %s", a.Digest, renamed.Digest, changed.Digest)
	}
	if e := entries(t, dataDir); len(e) != 4 {
		t.Errorf("snapshots dir holds %v, want 4 snapshot dirs and no staging", e)
	}
}

func TestNames(t *testing.T) {
	dataDir := t.TempDir()
	s := openStore(t, dataDir)
	ctx := t.Context()
	first := commit(t, s, "taken", map[string]string{"f": "1"})
	_, err := stage(t, s, map[string]string{"f": "2"}).Commit(ctx, "taken", "", sandbox.Lineage{}, nil)
	if !errors.Is(err, ErrNameInUse) || !strings.Contains(err.Error(), "taken") {
		t.Errorf("commit with a taken name: %v, want ErrNameInUse", err)
	}
	for _, name := range []string{"has space", "-dash", "a/b", "abcdef12", strings.Repeat("n", 129)} {
		_, err := stage(t, s, map[string]string{"f": "3"}).Commit(ctx, name, "", sandbox.Lineage{}, nil)
		if !errors.Is(err, ErrInvalidName) {
			t.Errorf("commit named %q: %v, want ErrInvalidName", name, err)
		}
	}
	all, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1 || all[0].ID != first.ID {
		t.Errorf("List = %+v, want only the first snapshot", all)
	}
	s.Wait()
	if e := entries(t, dataDir); len(e) != 1 {
		t.Errorf("failed commits left %v", e)
	}
	// Empty checkpoints are refused, and a finished staging stays finished.
	g := stage(t, s, nil)
	if _, err := g.Commit(ctx, "", "", sandbox.Lineage{}, nil); err == nil {
		t.Error("committed an empty checkpoint")
	}
	if _, err := g.Commit(ctx, "", "", sandbox.Lineage{}, nil); err == nil {
		t.Error("committed a staging twice")
	}
}

func TestVerify(t *testing.T) {
	s := openStore(t, t.TempDir())
	ctx := t.Context()
	snap := commit(t, s, "v", map[string]string{"pages.img": strings.Repeat("p", 10000), "checkpoint.img": "state"})
	dir, err := s.Verify(ctx, snap)
	if err != nil {
		t.Fatal(err)
	}
	pages := filepath.Join(dir, "pages.img")
	orig, err := os.ReadFile(pages)
	if err != nil {
		t.Fatalf("Verify returned %s, which does not hold the files: %v", dir, err)
	}
	damage := []struct {
		name string
		do   func() error
		want string
	}{
		{"truncated", func() error { return os.Truncate(pages, 9999) }, "size 9999, want 10000"},
		{"flipped byte", func() error {
			b := slices.Clone(orig)
			b[5000] ^= 1
			return os.WriteFile(pages, b, 0o600)
		}, "crc32c"},
		{"missing", func() error { return os.Remove(pages) }, "no such file"},
	}
	for _, d := range damage {
		if err := d.do(); err != nil {
			t.Fatal(err)
		}
		_, err := s.Verify(ctx, snap)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "pages.img") || !strings.Contains(err.Error(), d.want) {
			t.Errorf("%s: Verify = %v, want ErrCorrupt naming pages.img and %q", d.name, err, d.want)
		}
		if err := os.WriteFile(pages, orig, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Verify(ctx, snap); err != nil {
			t.Fatalf("%s: repaired snapshot: %v", d.name, err)
		}
	}
}

// A file damaged between Commit and its seal is not sealed: the seal's
// digest would bless it, and a restore would load the damage.
func TestSealRefusesChanged(t *testing.T) {
	s := openStore(t, t.TempDir())
	ctx := t.Context()
	g := stage(t, s, map[string]string{"pages.img": strings.Repeat("p", 10000), "checkpoint.img": "state"})
	snap, err := g.commit(ctx, newID(), "c", "sha256:img", sandbox.Lineage{Sandbox: "sb1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	g.done = true
	dir, err := s.path(snap.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filepath.Join(dir, "pages.img"), 5000); err != nil {
		t.Fatal(err)
	}
	g.seal(ctx, snap.ID, snap.Files)
	got, err := s.Get(ctx, snap.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Digest != "" || got.Files[1].SHA256 != "" {
		t.Fatalf("a snapshot truncated before its seal was sealed: digest %q, files %+v", got.Digest, got.Files)
	}
	if _, err := s.Verify(ctx, got); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "size 5000, want 10000") {
		t.Fatalf("Verify = %v, want ErrCorrupt for the size", err)
	}
}

func TestRemove(t *testing.T) {
	dataDir := t.TempDir()
	s := openStore(t, dataDir)
	ctx := t.Context()
	snap := commit(t, s, "keep", map[string]string{"f": "1"})
	dir := filepath.Join(dataDir, "snapshots", snap.ID)
	var asked []string
	used := func(id string) (bool, error) { asked = append(asked, id); return true, nil }
	if err := s.Remove(ctx, "keep", used); !errors.Is(err, ErrInUse) {
		t.Errorf("Remove of a snapshot in use: %v, want ErrInUse", err)
	}
	if !slices.Equal(asked, []string{snap.ID}) {
		t.Errorf("inUse asked about %v, want [%s]", asked, snap.ID)
	}
	boom := errors.New("boom")
	if err := s.Remove(ctx, "keep", func(string) (bool, error) { return false, boom }); !errors.Is(err, boom) {
		t.Errorf("Remove with a failing inUse: %v", err)
	}
	if _, err := s.Verify(ctx, snap); err != nil {
		t.Fatalf("refused removals damaged the snapshot: %v", err)
	}

	// A second name (identical content got one before IDs were random)
	// goes alone; the last one takes the snapshot.
	if _, err := s.st.DB().ExecContext(ctx, `INSERT INTO snapshot_names(name, snapshot_id, created) VALUES('alias', ?, 1)`, snap.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(ctx, "alias", used); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, snap.ID); err != nil || !slices.Equal(got.Names, []string{"keep"}) {
		t.Fatalf("after removing a name: %+v, %v", got, err)
	}
	notUsed := func(string) (bool, error) { return false, nil }
	if err := s.Remove(ctx, "keep", notUsed); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, snap.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get after Remove: %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("snapshot dir after Remove: %v", err)
	}
	if err := s.Remove(ctx, "keep", notUsed); !errors.Is(err, ErrNotFound) {
		t.Errorf("Remove of a removed snapshot: %v, want ErrNotFound", err)
	}
	// By ID, even one with several names.
	other := commit(t, s, "x", map[string]string{"g": "2"})
	if _, err := s.st.DB().ExecContext(ctx, `INSERT INTO snapshot_names(name, snapshot_id, created) VALUES('y', ?, 1)`, other.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(ctx, other.ID[:14], nil); err != nil {
		t.Fatal(err)
	}
	if all, _ := s.List(ctx); len(all) != 0 {
		t.Errorf("List after removing all: %+v", all)
	}
}

func TestGCAfterCrash(t *testing.T) {
	dataDir := t.TempDir()
	s := openStore(t, dataDir)
	ctx := t.Context()
	kept := commit(t, s, "kept", map[string]string{"f": "1"})

	// A process killed while writing a checkpoint.
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), "SNAPSHOT_TEST_CRASH_IN="+dataDir)
	out, err := child.Output()
	if ws, ok := child.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("crashing process: %v, %s", err, out)
	}
	crashed := filepath.Dir(strings.TrimSpace(string(out)))
	if _, err := os.Stat(filepath.Join(crashed, filesName, "pages.img")); err != nil {
		t.Fatalf("the crash left no staging: %v", err)
	}

	// A process killed after its Commit returned, while sealing.
	child = exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), "SNAPSHOT_TEST_CRASH_SEALING="+dataDir)
	out, err = child.Output()
	if ws, ok := child.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("crashing process: %v, %s", err, out)
	}
	lostID := strings.TrimSpace(string(out))
	var durable bool
	var sealer string
	if err := s.st.DB().QueryRowContext(ctx, `SELECT durable, sealer FROM snapshots WHERE id = ?`, lostID).Scan(&durable, &sealer); err != nil {
		t.Fatalf("the row of the snapshot being sealed: %v", err)
	}
	if durable {
		t.Fatal("the seal finished before the kill: the test missed its window")
	}
	// Never listed half-written: it is gone for readers at once.
	if _, err := s.Get(ctx, "sealing"); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "before it was durable") {
		t.Errorf("Get of a snapshot lost while sealing: %v, want ErrNotFound", err)
	}
	if all, err := s.List(ctx); err != nil || len(all) != 1 || all[0].ID != kept.ID {
		t.Errorf("List after a crash while sealing = %+v, %v; want only the older snapshot", all, err)
	}
	lostDir := filepath.Join(dataDir, "snapshots", lostID)
	sealerDir := filepath.Join(dataDir, "snapshots", sealer)

	// A live staging, however old, stays.
	live := stage(t, s, map[string]string{"f": "live"})
	defer live.Abort()
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(live.root, old, old); err != nil {
		t.Fatal(err)
	}
	// A creator that died before writing its pid file: kept for a minute.
	young := filepath.Join(dataDir, "snapshots", stagingPrefix+"young")
	stale := filepath.Join(dataDir, "snapshots", stagingPrefix+"stale")
	for _, d := range []string{young, stale} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chtimes(stale, old, old); err != nil {
		t.Fatal(err)
	}
	// A Commit that crashed between its rename and its row.
	orphan := commit(t, s, "", map[string]string{"f": "orphan"})
	if _, err := s.st.DB().ExecContext(ctx, `DELETE FROM snapshots WHERE id = ?`, orphan.ID); err != nil {
		t.Fatal(err)
	}
	orphanDir := filepath.Join(dataDir, "snapshots", orphan.ID)

	removed, err := s.GC(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(removed)
	want := []string{orphanDir, crashed, stale, lostDir, sealerDir}
	slices.Sort(want)
	if !slices.Equal(removed, want) {
		t.Errorf("GC removed %v, want %v", removed, want)
	}
	for _, p := range want {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after GC: %v", p, err)
		}
	}
	if _, err := s.Verify(ctx, kept); err != nil {
		t.Errorf("GC damaged a snapshot: %v", err)
	}
	var rows int
	if err := s.st.DB().QueryRowContext(ctx, `SELECT count(*) FROM snapshots WHERE id = ?`, lostID).Scan(&rows); err != nil || rows != 0 {
		t.Errorf("GC left the lost snapshot's row (%d, %v)", rows, err)
	}
	if _, err := os.Stat(live.Dir()); err != nil {
		t.Errorf("GC removed a live staging: %v", err)
	}
	if _, err := os.Stat(young); err != nil {
		t.Errorf("GC removed a fresh staging: %v", err)
	}
	if _, err := live.Commit(ctx, "live", "", sandbox.Lineage{}, nil); err != nil {
		t.Errorf("commit after GC: %v", err)
	}
}

func TestConcurrentCommits(t *testing.T) {
	dataDir := t.TempDir()
	openStore(t, dataDir) // migrate once, as the first smolvm process would
	const n = 4
	var wg sync.WaitGroup
	stores := make([]*Store, n)
	errs := make([]error, n)
	for i := range n {
		// Each worker has its own database handle, as a process would.
		s := openStore(t, dataDir)
		stores[i] = s
		wg.Go(func() {
			for round := range 3 {
				g, err := s.Begin(t.Context())
				if err != nil {
					errs[i] = err
					return
				}
				content, name := fmt.Sprintf("worker %d round %d", i, round), ""
				if round == 0 {
					content, name = "shared", fmt.Sprintf("w%d", i)
				}
				if err := os.WriteFile(filepath.Join(g.Dir(), "pages.img"), []byte(content), 0o600); err != nil {
					errs[i] = err
					return
				}
				if _, err := g.Commit(t.Context(), name, "", sandbox.Lineage{}, nil); err != nil {
					errs[i] = err
					return
				}
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
		stores[i].Wait()
	}
	s := openStore(t, dataDir)
	all, err := s.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != n*3 {
		t.Errorf("%d snapshots, want %d", len(all), n*3)
	}
	digests := map[string]int{}
	for _, snap := range all {
		if !snap.Durable {
			t.Errorf("snapshot %s not durable after its store's Wait", snap.ID)
		}
		digests[snap.Digest]++
	}
	if len(digests) != 1+n*2 {
		t.Errorf("%d digests, want %d (the shared content has one)", len(digests), 1+n*2)
	}
	if e := entries(t, dataDir); len(e) != len(all) {
		t.Errorf("snapshots dir holds %v for %d snapshots", e, len(all))
	}
	for _, snap := range all {
		if _, err := s.Verify(t.Context(), &snap); err != nil {
			t.Error(err)
		}
	}
}

func TestScratch(t *testing.T) {
	dataDir := t.TempDir()
	s := openStore(t, dataDir)
	if s.scratch == "" {
		t.Skip("/dev/shm is no tmpfs here")
	}
	ctx := t.Context()
	g, err := s.Scratch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs(g.Dir(), &sfs); err != nil || sfs.Type != unix.TMPFS_MAGIC {
		t.Fatalf("scratch checkpoint dir %s is not on a tmpfs (%x, %v)", g.Dir(), sfs.Type, err)
	}
	if err := os.WriteFile(filepath.Join(g.Dir(), "pages.img"), []byte("pages"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Commit(ctx, "", "", sandbox.Lineage{}, nil); err == nil || !strings.Contains(err.Error(), "scratch") {
		t.Errorf("Commit of a scratch checkpoint: %v", err)
	}
	if _, err := os.Stat(g.root); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("scratch checkpoint after its refused Commit: %v", err)
	}
	if e := entries(t, dataDir); len(e) != 0 {
		t.Errorf("a scratch checkpoint left %v in the store", e)
	}
	// Another data dir has another scratch dir: GC sweeps only its own.
	if other := openStore(t, t.TempDir()); other.scratch == s.scratch {
		t.Errorf("two data dirs share the scratch dir %s", s.scratch)
	}
	live, err := s.Scratch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Abort()
	stale := filepath.Join(s.scratch, stagingPrefix+"stale")
	if err := os.Mkdir(stale, 0o700); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(stale, old, old); err != nil {
		t.Fatal(err)
	}
	removed, err := s.GC(ctx)
	if err != nil || !slices.Equal(removed, []string{stale}) {
		t.Errorf("GC removed %v (%v), want only the stale scratch dir", removed, err)
	}
	if _, err := os.Stat(live.Dir()); err != nil {
		t.Errorf("GC removed a live scratch checkpoint: %v", err)
	}
	live.Abort()
	if _, err := os.Stat(s.scratch); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the scratch dir outlived its last checkpoint: %v", err)
	}
}

// tinyDataDir mounts a 1 MiB tmpfs as a data directory.
func tinyDataDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		if errors.Is(err, unix.EPERM) {
			t.Skip("cannot mount a tmpfs:", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

func freeBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		t.Fatal(err)
	}
	return int64(fs.Bavail) * fs.Bsize
}

func TestDiskFull(t *testing.T) {
	dataDir := tinyDataDir(t)
	s := openStore(t, dataDir)
	ctx := t.Context()
	free := freeBytes(t, dataDir)

	// The checkpoint does not fit: the backend fails and aborts.
	g, err := s.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	err = os.WriteFile(filepath.Join(g.Dir(), "pages.img"), make([]byte, 2<<20), 0o600)
	if !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("writing 2 MiB into 1 MiB: %v", err)
	}
	g.Abort()
	if got := freeBytes(t, dataDir); got != free {
		t.Errorf("%d bytes free after Abort, %d before", got, free)
	}

	// The checkpoint fits, but its record does not: Commit fails.
	g = stage(t, s, map[string]string{"pages.img": strings.Repeat("p", 256<<10)})
	meta := map[string]string{"config": strings.Repeat("m", 1<<20)}
	if _, err := g.Commit(ctx, "full", "", sandbox.Lineage{}, meta); err == nil {
		t.Fatal("Commit succeeded on a full disk")
	} else if !strings.Contains(err.Error(), "full") {
		t.Errorf("Commit error %q does not say the disk is full", err)
	}
	all, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 0 {
		t.Errorf("List after failed commits: %+v", all)
	}
	if e := entries(t, dataDir); len(e) != 0 {
		t.Errorf("failed commit left %v", e)
	}
	// SQLite may keep its journal grown; the checkpoint's bytes are back.
	if got := freeBytes(t, dataDir); got < 256<<10 {
		t.Errorf("%d bytes free after the failed Commit, want the checkpoint's 256 KiB back", got)
	}
	// And the store still works once there is room.
	commit(t, s, "fits", map[string]string{"pages.img": "small"})
}

// BenchmarkCommit100MB times what a checkpoint waits for (Commit: list,
// rename, insert) and, as seal-ms, what now runs after it returns
// (SHA-256 and CRC-32C of every byte, one syncfs), which used to be on
// the critical path with an fsync per file.
func BenchmarkCommit100MB(b *testing.B) {
	dataDir := b.TempDir()
	st, err := store.Open(b.Context(), dataDir)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	s, err := Open(b.Context(), dataDir, st)
	if err != nil {
		b.Fatal(err)
	}
	pages := bytes.Repeat([]byte("0123456789abcdef"), 100<<20/16)
	var seal time.Duration
	for b.Loop() {
		b.StopTimer()
		g, err := s.Begin(b.Context())
		if err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(g.Dir(), "pages.img"), pages, 0o600); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		snap, err := g.Commit(b.Context(), "", "", sandbox.Lineage{}, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		t := time.Now()
		s.Wait()
		seal += time.Since(t)
		s.Remove(b.Context(), snap.ID, nil)
		b.StartTimer()
	}
	b.ReportMetric(float64(seal.Milliseconds())/float64(b.N), "seal-ms/op")
}

// TestGetWhileSealing reads each snapshot over and over while its seal
// runs: a read that sees the row before the seal marks it durable, and
// the lock after the seal drops it, must not call the snapshot lost.
func TestGetWhileSealing(t *testing.T) {
	s := openStore(t, t.TempDir())
	for i := range 100 {
		snap, err := stage(t, s, map[string]string{"pages.img": fmt.Sprint(i)}).Commit(t.Context(), "", "", sandbox.Lineage{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for {
			got, err := s.Get(t.Context(), snap.ID)
			if err != nil {
				t.Fatalf("Get %s while it seals: %v", snap.ID, err)
			}
			if got.Durable {
				break
			}
		}
	}
}

// A seal handed over (HandOff) stops in this process and leaves the
// staging and its lock to the process that finishes it (Finish): the
// snapshot stays listed while the lock is held anywhere, and comes out
// sealed. A seal that give refuses goes on here.
func TestHandOff(t *testing.T) {
	s := openStore(t, t.TempDir())
	ctx := t.Context()
	hold := make(chan struct{})
	s.beforeSeal = func() { <-hold }
	commit := func(name string) *sandbox.Snapshot {
		g := stage(t, s, map[string]string{"pages.img": strings.Repeat("p", 3<<20), "checkpoint.img": "state"})
		snap, err := g.Commit(ctx, name, "sha256:img", sandbox.Lineage{Sandbox: "sb1"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return snap
	}
	given, kept := commit("given"), commit("kept")
	var handed []Handoff
	s.HandOff(func(h Handoff) error {
		if h.ID == kept.ID {
			return errors.New("no process to give it to")
		}
		// The other process holds its own duplicate of the lock.
		h.Lock = dupFile(t, h.Lock)
		handed = append(handed, h)
		return nil
	})
	close(hold)
	s.Wait()
	if len(handed) != 1 || handed[0].ID != given.ID {
		t.Fatalf("handed over %+v, want %s alone", handed, given.ID)
	}
	if got, err := s.Get(ctx, kept.ID); err != nil || !got.Durable || got.Digest == "" {
		t.Fatalf("the seal kept here: %+v, %v; want it sealed", got, err)
	}
	h := handed[0]
	got, err := s.Get(ctx, given.ID)
	if err != nil || got.Durable {
		t.Fatalf("the seal handed over, before Finish: %+v, %v; want it listed, not durable", got, err)
	}
	if _, err := os.Stat(filepath.Join(h.Staging, pidName)); err != nil {
		t.Fatalf("the staging handed over is gone: %v", err)
	}
	if gone, err := s.GC(ctx); err != nil || len(gone) != 0 {
		t.Fatalf("GC while the lock is held elsewhere: removed %v, %v", gone, err)
	}
	if err := s.Finish(ctx, h.ID, filepath.Join(t.TempDir(), stagingPrefix+"x"), dupFile(t, h.Lock)); err == nil {
		t.Fatal("Finish took a staging directory outside the store")
	}
	if err := s.Finish(ctx, h.ID, h.Staging, h.Lock); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, given.ID); err != nil || !got.Durable || got.Digest == "" || got.Files[1].SHA256 == "" {
		t.Fatalf("after Finish: %+v, %v; want it sealed", got, err)
	}
	if _, err := os.Stat(h.Staging); !os.IsNotExist(err) {
		t.Fatalf("Finish left its staging: %v", err)
	}
}

func dupFile(t *testing.T, f *os.File) *os.File {
	t.Helper()
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	return os.NewFile(uintptr(fd), f.Name())
}
