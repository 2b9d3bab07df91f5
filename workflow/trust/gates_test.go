package trust

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"smolvm.dev/smolvm/internal/store"
	"smolvm.dev/smolvm/sandbox"
)

// Two policies of the same size: an edit from one to the other changes
// neither the file's size nor its inode.
const (
	echoAllowed = "[run]\nallow = [\"echo\"]\ndeny = [\"true\"]\n"
	echoDenied  = "[run]\ndeny = [\"echo\"]\nallow = [\"true\"]\n"
)

// newGates returns Gates over a fresh store, and a repository whose policy
// is text.
func newGates(t testing.TB, text string) (*Gates, *store.Store, string) {
	t.Helper()
	st, err := store.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	repo := t.TempDir()
	if err := os.MkdirAll(filepath.Join(repo, ".smolvm"), 0o755); err != nil {
		t.Fatal(err)
	}
	writePolicy(t, repo, text)
	return NewGates(st), st, repo
}

// writePolicy rewrites repo's policy file in place.
func writePolicy(t testing.TB, repo, text string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(repo, FileName), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// echo returns the gate's decision on running echo under repo's policy.
func echo(t testing.TB, g *Gates, repo string) Outcome {
	t.Helper()
	err := g.Check(context.Background(), &sandbox.Sandbox{Name: "sb", Config: sandbox.Config{TrustRepo: repo}}, []string{"echo", "hi"})
	switch {
	case err == nil:
		return Allow
	case errors.Is(err, ErrDenied):
		return Deny
	}
	t.Fatal(err)
	return 0
}

// settle marks repo's cached policy as read long after its file last
// changed, as it would be for a file not edited in the last seconds: from
// then on only its stat tells whether to read it again.
func settle(t *testing.T, g *Gates, repo string) {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	l := g.policies[repo]
	if l == nil {
		t.Fatal("policy not cached")
	}
	l.racy = false
}

// TestGatesReload: an edit to the policy file between two checks decides
// the second, however it is made; an unchanged file is not read again.
func TestGatesReload(t *testing.T) {
	g, _, repo := newGates(t, echoAllowed)
	path := filepath.Join(repo, FileName)
	if got := echo(t, g, repo); got != Allow {
		t.Fatalf("echo under the first policy: %s", got)
	}
	before, _ := g.policy(repo)
	settle(t, g, repo)
	if p, _ := g.policy(repo); p != before {
		t.Fatal("an unchanged policy file was parsed again")
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}

	// In place, same size, within the same second: the nanoseconds (or
	// the change time) tell.
	writePolicy(t, repo, echoDenied)
	if now, _ := os.Stat(path); now.ModTime().Unix() != fi.ModTime().Unix() {
		t.Logf("the edit fell into the next second (%v, %v)", fi.ModTime(), now.ModTime())
	}
	if got := echo(t, g, repo); got != Deny {
		t.Fatalf("echo after an edit in the same second: %s", got)
	}

	// In place with the old modification time put back: the change time
	// tells.
	settle(t, g, repo)
	if fi, err = os.Stat(path); err != nil {
		t.Fatal(err)
	}
	writePolicy(t, repo, echoAllowed)
	if err := os.Chtimes(path, time.Time{}, fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if got := echo(t, g, repo); got != Allow {
		t.Fatalf("echo after an edit that kept the mtime: %s", got)
	}

	// Replaced by a rename, as editors save: a new inode.
	settle(t, g, repo)
	tmp := filepath.Join(repo, ".smolvm", "policy.toml.new")
	if err := os.WriteFile(tmp, []byte(echoDenied), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	if got := echo(t, g, repo); got != Deny {
		t.Fatalf("echo after the file was replaced: %s", got)
	}

	// Removed: the built-in default, which asks; Load says the same.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if p, err := g.policy(repo); err != nil || p.File != "" || p.Default != Ask {
		t.Fatalf("without a policy file: %+v %v, want the default", p, err)
	}

	// A malformed file is an error at every check, not a stale policy.
	writePolicy(t, repo, "[run\n")
	for range 2 {
		if _, err := g.policy(repo); err == nil {
			t.Fatal("malformed policy loaded")
		}
	}
}

// TestGatesRacy: on a filesystem whose timestamps are too coarse to show
// an edit made right after a read (the stat comes out the same), the
// policy is read again for as long as the file changed too recently to
// trust its stat.
func TestGatesRacy(t *testing.T) {
	g, _, repo := newGates(t, echoAllowed)
	if got := echo(t, g, repo); got != Allow {
		t.Fatalf("echo under the first policy: %s", got)
	}
	writePolicy(t, repo, echoDenied)
	fi, err := os.Stat(filepath.Join(repo, FileName))
	if err != nil {
		t.Fatal(err)
	}
	// What a coarse filesystem would report: the stat from before the edit.
	g.mu.Lock()
	l := g.policies[repo]
	if !l.racy {
		t.Error("a policy read right after it was written is not racy")
	}
	l.id = idOf(fi)
	g.mu.Unlock()
	if got := echo(t, g, repo); got != Deny {
		t.Fatalf("echo after an edit the stat does not show: %s", got)
	}
}

// TestGatesWriteOnlyAudit: past the first check, which opens the ledger
// (and migrates its schema), a check writes exactly its audit record:
// no migration, no other row, per exec.
func TestGatesWriteOnlyAudit(t *testing.T) {
	g, st, repo := newGates(t, echoAllowed)
	ctx := context.Background()
	// One connection, so SQLite's total_changes() counts every row any
	// statement of the gate inserts, updates or deletes (the schema
	// migration's bookkeeping row included).
	st.DB().SetMaxOpenConns(1)
	changes := func() int {
		var n int
		if err := st.DB().QueryRowContext(ctx, `SELECT total_changes()`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	base := changes()
	echo(t, g, repo)
	if first := changes() - base; first < 2 {
		t.Fatalf("the first check changed %d rows; want the migration's and an audit record", first)
	}
	const n = 20
	before := changes()
	for i := range n {
		want := Allow
		if i%2 == 1 {
			want = Deny
			writePolicy(t, repo, echoDenied)
		} else {
			writePolicy(t, repo, echoAllowed)
		}
		if got := echo(t, g, repo); got != want {
			t.Fatalf("check %d: %s, want %s", i, got, want)
		}
	}
	if got := changes() - before; got != n {
		t.Fatalf("%d checks changed %d rows, want %d (one audit record each)", n, got, n)
	}
	l, err := g.openLedger(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if recs := audit(t, l); len(recs) != n+1 {
		t.Fatalf("%d audit records, want %d", len(recs), n+1)
	}
}

// TestGatesConcurrent: checks in parallel, under two repositories, while
// one policy is rewritten, all decide and audit (run it with -race).
func TestGatesConcurrent(t *testing.T) {
	g, _, repo := newGates(t, echoAllowed)
	other := t.TempDir()
	os.MkdirAll(filepath.Join(other, ".smolvm"), 0o755)
	writePolicy(t, other, echoDenied)
	// A check that asks would wait for minutes: fail instead.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const workers, each = 8, 15
	stop := make(chan struct{})
	edits := make(chan error, 1)
	go func() {
		defer close(edits)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			text := echoAllowed
			if i%2 == 1 {
				text = echoDenied
			}
			// Replaced whole, so no check reads a half-written file: a
			// policy rewritten in place can be read empty, which is the
			// default policy (ask), and an exec then waits for an approval.
			tmp := filepath.Join(repo, ".smolvm", "policy.toml.new")
			if err := errors.Join(os.WriteFile(tmp, []byte(text), 0o644), os.Rename(tmp, filepath.Join(repo, FileName))); err != nil {
				edits <- err
				return
			}
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Go(func() {
			root := repo
			if w%2 == 1 {
				root = other
			}
			sb := &sandbox.Sandbox{Name: fmt.Sprint("sb", w), Config: sandbox.Config{TrustRepo: root}}
			for range each {
				err := g.Check(ctx, sb, []string{"echo"})
				var de *DeniedError
				switch {
				case root == other && err == nil:
					errs <- errors.New("echo allowed under the denying policy")
				case err != nil && !(errors.As(err, &de) && de.By == "policy"):
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	if err := <-edits; err != nil {
		t.Fatal(err)
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// The file's last version decides from here on.
	writePolicy(t, repo, echoDenied)
	if got := echo(t, g, repo); got != Deny {
		t.Fatalf("echo after the edits: %s", got)
	}
	l, err := g.openLedger(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if recs := audit(t, l); len(recs) != workers*each+1 {
		t.Fatalf("%d audit records, want %d", len(recs), workers*each+1)
	}
}

// BenchmarkGate is one exec's pass through the trust policy, an allowed
// command, audit record included: the policy loaded and the ledger opened
// (its schema migrated) for each, as the manager did; Gates; and the
// floor, the audit record alone.
func BenchmarkGate(b *testing.B) {
	ctx := context.Background()
	// open is what the manager did at every exec before Gates.
	open := func(b *testing.B, st *store.Store, repo string) *Gate {
		pol, err := Load(repo)
		if err != nil {
			b.Fatal(err)
		}
		l, err := OpenLedger(ctx, st)
		if err != nil {
			b.Fatal(err)
		}
		return &Gate{Policy: pol, Ledger: l}
	}
	check := func(b *testing.B, g *Gate) {
		if err := g.Check(ctx, Action{Kind: Run, Argv: []string{"echo"}}, "sandbox:sb"); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("load+migrate", func(b *testing.B) {
		_, st, repo := newGates(b, echoAllowed)
		for b.Loop() {
			check(b, open(b, st, repo))
		}
	})
	b.Run("gates", func(b *testing.B) {
		g, _, repo := newGates(b, echoAllowed)
		sb := &sandbox.Sandbox{Name: "sb", Config: sandbox.Config{TrustRepo: repo}}
		// A policy file edited more than racyWindow ago.
		time.Sleep(racyWindow)
		for b.Loop() {
			if err := g.Check(ctx, sb, []string{"echo"}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("audit-only", func(b *testing.B) {
		_, st, repo := newGates(b, echoAllowed)
		g := open(b, st, repo)
		for b.Loop() {
			check(b, g)
		}
	})
}
