package manager

import (
	"context"
	"errors"
	"testing"

	"smolvm.dev/smolvm/runtime/backend"
	"smolvm.dev/smolvm/sandbox"
)

// renamed is a backend under another name, without snapshots.
type renamed struct {
	backend.Backend
	name string
}

func (r renamed) Name() string { return r.name }

// TestBackendsByRecord: every operation on a sandbox goes to the backend
// its record names, and a record naming a backend this manager lacks is
// an error for each, never a panic.
func TestBackendsByRecord(t *testing.T) {
	m := newManager(t, func(c *Config) { c.Backends = append(c.Backends, renamed{c.Backends[0], "plain"}) })
	ctx := context.Background()
	def := m.run(t, sandbox.Config{})
	plain, err := m.Create(ctx, sandbox.CreateOptions{Backend: "plain", Start: true})
	if err != nil {
		t.Fatal(err)
	}
	if def.Backend != "gvisor" || plain.Backend != "plain" {
		t.Fatalf("backends %q and %q, want gvisor and plain", def.Backend, plain.Backend)
	}
	if out, _, _ := m.sh(t, plain, "echo hi"); out != "hi\n" {
		t.Fatalf("exec on plain: %q", out)
	}
	// Only the default backend snapshots.
	if _, err := m.Pause(ctx, plain.ID); !errors.Is(err, sandbox.ErrUnsupported) {
		t.Fatalf("pause on plain: %v", err)
	}
	if _, err := m.Pause(ctx, def.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Resume(ctx, def.ID); err != nil {
		t.Fatal(err)
	}

	if _, err := m.Create(ctx, sandbox.CreateOptions{Backend: "nope"}); !errors.Is(err, sandbox.ErrInvalid) {
		t.Fatalf("create on an unknown backend: %v", err)
	}
	if _, err := m.CreatePool(ctx, sandbox.PoolOptions{Name: "p", Size: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Create(ctx, sandbox.CreateOptions{Pool: "p", Backend: "plain"}); !errors.Is(err, sandbox.ErrInvalid) {
		t.Fatalf("create from a gvisor pool on plain: %v", err)
	}
	// A pool names its backend; its sandboxes run there.
	if _, err := m.CreatePool(ctx, sandbox.PoolOptions{Name: "nope", Size: 1, Backend: "nope"}); !errors.Is(err, sandbox.ErrInvalid) {
		t.Fatalf("pool on an unknown backend: %v", err)
	}
	if p, err := m.CreatePool(ctx, sandbox.PoolOptions{Name: "q", Size: 1, Backend: "plain"}); err != nil || p.Backend != "plain" {
		t.Fatalf("pool on plain: %+v, %v", p, err)
	}
	if p, err := m.Pool(ctx, "q"); err != nil || p.Backend != "plain" {
		t.Fatalf("pool q read back: %+v, %v", p, err)
	}
	if sb, err := m.Create(ctx, sandbox.CreateOptions{Pool: "q", Start: true}); err != nil || sb.Backend != "plain" {
		t.Fatalf("create from pool q: %+v, %v", sb, err)
	} else {
		m.Remove(ctx, sb.ID, true)
	}
	snap, err := m.Checkpoint(ctx, def.ID, sandbox.CheckpointOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.CreatePool(ctx, sandbox.PoolOptions{Name: "h", From: snap.ID, Hot: 1, Backend: "plain"}); !errors.Is(err, sandbox.ErrInvalid) {
		t.Fatalf("hot pool of a gvisor snapshot on plain: %v", err)
	}

	// A manager without plain lists the sandbox and refuses to act on it.
	m2 := openManager(t, m.dir)
	list, err := m2.List(ctx)
	if err != nil || !listed(list, plain.ID, sandbox.StateRunning) {
		t.Fatalf("list without the backend: %v", err)
	}
	ops := map[string]func() error{
		"get": func() error { _, err := m2.Get(ctx, plain.ID); return err },
		"exec": func() error {
			_, err := m2.Exec(ctx, plain.ID, sandbox.Process{Args: []string{"true"}}, sandbox.Stdio{})
			return err
		},
		"stop": func() error { _, err := m2.Stop(ctx, plain.ID, 0); return err },
		"rm":   func() error { return m2.Remove(ctx, plain.ID, true) },
	}
	for name, op := range ops {
		if err := op(); !errors.Is(err, backend.ErrUnknown) {
			t.Errorf("%s without the backend: %v", name, err)
		}
	}
	if _, err := m2.GC(ctx); err != nil {
		t.Fatal(err)
	}
	if out, _, _ := m.sh(t, plain, "echo still"); out != "still\n" {
		t.Fatalf("after the other manager: %q", out)
	}
}
