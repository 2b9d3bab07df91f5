package gvisor

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"smolvm.dev/smolvm/runtime/backend"
)

// Stock drives runsc the way a user would by hand: one runsc process per
// operation, the exec going through `runsc exec`. Benchmarks run it beside
// the backend as the baseline.
type Stock struct {
	runsc string
	dir   string
	id    string
}

// NewStock writes a bundle for an idle sandbox (sleep) over rootfs in dir.
func NewStock(runsc string, rootfs backend.Rootfs, dir, id string) (*Stock, error) {
	s := &backend.Spec{ID: id, Hostname: id, Dir: dir, Rootfs: rootfs, GuestBinary: "/dev/null"}
	l := layout{dir}
	for _, d := range []string{l.bundle(), l.run(), l.runscRoot()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	root, err := (&Backend{}).mountRootfs(s)
	if err != nil {
		return nil, err
	}
	spec := ociSpec(s, root)
	spec.Process.Args = []string{"/usr/bin/sleep", "infinity"}
	// docker's capabilities: only the agent needs more.
	spec.Process.Capabilities = capabilities(defaultCaps)
	if err := writeJSON(filepath.Join(l.bundle(), "config.json"), spec); err != nil {
		return nil, err
	}
	return &Stock{runsc: runsc, dir: dir, id: id}, nil
}

func (s *Stock) cmd(ctx context.Context, args ...string) error {
	l := layout{s.dir}
	base := []string{"--root", l.runscRoot(), "--platform", "systrap", "--network", "none", "--overlay2", "root:memory"}
	cmd := exec.CommandContext(ctx, s.runsc, append(base, args...)...)
	errf, err := os.CreateTemp(s.dir, "stderr-")
	if err != nil {
		return err
	}
	defer os.Remove(errf.Name())
	defer errf.Close()
	cmd.Stderr = errf
	if err := cmd.Run(); err != nil {
		msg, _ := os.ReadFile(errf.Name())
		return fmt.Errorf("runsc %s: %w: %s", args[0], err, lastLine(string(msg)))
	}
	return nil
}

// Run is `runsc run --detach`.
func (s *Stock) Run(ctx context.Context) error {
	return s.cmd(ctx, "run", "--detach", "--bundle", layout{s.dir}.bundle(), s.id)
}

// Start is `runsc start` of a created sandbox.
func (s *Stock) Start(ctx context.Context) error { return s.cmd(ctx, "start", s.id) }

// Exec is `runsc exec ID ARGS...`.
func (s *Stock) Exec(ctx context.Context, args ...string) error {
	return s.cmd(ctx, append([]string{"exec", s.id}, args...)...)
}

// Delete kills and deletes the sandbox and removes its directory.
func (s *Stock) Delete(ctx context.Context) error {
	return (&Backend{cfg: Config{Runsc: s.runsc}}).Delete(ctx, &backend.Spec{ID: s.id, Dir: s.dir})
}

// Checkpoint is `runsc checkpoint --leave-running --image-path DIR ID`.
func (s *Stock) Checkpoint(ctx context.Context, dir string) error {
	return s.cmd(ctx, "checkpoint", "--leave-running", "--image-path", dir, s.id)
}

// Create is `runsc create`.
func (s *Stock) Create(ctx context.Context) error {
	return s.cmd(ctx, "create", "--bundle", layout{s.dir}.bundle(), s.id)
}

// Restore is `runsc restore --detach` of the image in dir, into this
// created sandbox.
func (s *Stock) Restore(ctx context.Context, dir string) error {
	return s.cmd(ctx, "restore", "--detach", "--bundle", layout{s.dir}.bundle(), "--image-path", dir, s.id)
}
