package store

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestOpenPrivate: the database and the -wal and -shm files SQLite makes
// beside it are 0600 under any umask, and files an older smolvm left 0644
// are tightened at the next open (SECURITY.md, file permissions).
func TestOpenPrivate(t *testing.T) {
	// Under umask 0 SQLite's own default (0644) shows through unchanged.
	defer syscall.Umask(syscall.Umask(0))
	ctx := context.Background()
	dir := t.TempDir()
	st, err := Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Migrate(ctx, "test", []string{`CREATE TABLE t (v TEXT)`}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.DB().ExecContext(ctx, `INSERT INTO t VALUES ('x')`); err != nil {
		t.Fatal(err)
	}
	files := []string{FileName, FileName + "-wal", FileName + "-shm"}
	checkModes(t, dir, files, "made by Open")

	// Files as an older smolvm left them, while a process still has the
	// database open (so -wal and -shm stay).
	for _, f := range files {
		if err := os.Chmod(filepath.Join(dir, f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	again, err := Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	checkModes(t, dir, files, "left 0644, after the next Open")
}

func checkModes(t *testing.T, dir string, files []string, when string) {
	t.Helper()
	for _, f := range files {
		fi, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %s is %v, want 0600", when, f, fi.Mode().Perm())
		}
	}
}
