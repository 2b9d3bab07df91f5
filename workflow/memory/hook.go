package memory

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// HookLine is the post-commit hook command. A post-commit hook cannot undo
// the commit, so verify's exit status is ignored; its report is printed.
const HookLine = "command -v smolvm >/dev/null && smolvm memory verify || true"

const hookMarker = "# smolvm memory verify"

// InstallHook adds HookLine to the repository's post-commit hook, creating
// the hook if needed (honouring core.hooksPath), and returns the hook's
// path. It appends to an existing hook and does nothing if already there.
func (r *Repo) InstallHook(ctx context.Context) (string, error) {
	out, err := git(ctx, r.root, "rev-parse", "--git-path", "hooks/post-commit")
	if err != nil {
		return "", fmt.Errorf("install hook: %w", err)
	}
	p := strings.TrimSpace(out)
	if !filepath.IsAbs(p) {
		p = filepath.Join(r.root, p)
	}
	old, err := os.ReadFile(p)
	if err != nil && !os.IsNotExist(err) {
		return "", fmt.Errorf("install hook: %w", err)
	}
	if strings.Contains(string(old), hookMarker) {
		return p, nil
	}
	s := string(old)
	if s == "" {
		s = "#!/bin/sh\n"
	} else if !strings.HasSuffix(s, "\n") {
		s += "\n"
	}
	s += hookMarker + ": mark facts whose anchors drifted as stale.\n" + HookLine + "\n"
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return "", fmt.Errorf("install hook: %w", err)
	}
	if err := os.WriteFile(p, []byte(s), 0o755); err != nil {
		return "", fmt.Errorf("install hook: %w", err)
	}
	// WriteFile keeps the mode of an existing file; make sure it runs.
	if err := os.Chmod(p, 0o755); err != nil {
		return "", fmt.Errorf("install hook: %w", err)
	}
	return p, nil
}
