package store

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
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

// TestMigrateUpToDate: opening a component whose schema is already applied
// takes no write lock, so a command never waits for another process's
// writer just to open the data dir; a component still behind does wait,
// and a database newer than the code is still refused.
func TestMigrateUpToDate(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	schema := []string{`CREATE TABLE t (v TEXT)`}
	first, err := Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	if err := first.Migrate(ctx, "test", schema); err != nil {
		t.Fatal(err)
	}
	// Another process holds the write lock.
	held, release := make(chan struct{}), make(chan struct{})
	go first.Tx(ctx, func(tx *sql.Tx) error {
		close(held)
		<-release
		return nil
	})
	<-held
	defer close(release)

	second, err := Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := second.Migrate(short, "test", schema); err != nil {
		t.Errorf("up-to-date migrate while another writer holds the lock: %v", err)
	}
	if err := second.Migrate(short, "test", append(schema, `CREATE TABLE u (v TEXT)`)); err == nil {
		t.Error("a migration that needs a write ran while another writer held the lock")
	}
	if err := second.Migrate(ctx, "test", nil); err == nil || !strings.Contains(err.Error(), "newer than this smolvm") {
		t.Errorf("migrate to an older schema: %v", err)
	}
}

// TestCloseKeepsWAL: the last connection's close leaves the -wal and -shm
// files (emptied), so the next command's open makes neither again, and
// what was written is in the database.
func TestCloseKeepsWAL(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Migrate(ctx, "test", []string{`CREATE TABLE t (v TEXT)`}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.DB().ExecContext(ctx, `INSERT INTO t VALUES ('x')`); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	shm, err := os.Stat(filepath.Join(dir, FileName+"-shm"))
	if err != nil {
		t.Fatalf("-shm after close: %v", err)
	}
	wal, err := os.Stat(filepath.Join(dir, FileName+"-wal"))
	if err != nil {
		t.Fatalf("-wal after close: %v", err)
	}
	if wal.Size() != 0 {
		t.Errorf("-wal after close: %d bytes, want it checkpointed and emptied", wal.Size())
	}
	again, err := Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	var v string
	if err := again.DB().QueryRowContext(ctx, `SELECT v FROM t`).Scan(&v); err != nil || v != "x" {
		t.Errorf("row after reopen: %q, %v", v, err)
	}
	if fi, err := os.Stat(filepath.Join(dir, FileName+"-shm")); err != nil || !os.SameFile(fi, shm) {
		t.Errorf("-shm made again by the next open: %v", err)
	}
}
