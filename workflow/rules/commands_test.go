package rules

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

func TestCommands(t *testing.T) {
	root := t.TempDir()
	os.Mkdir(filepath.Join(root, ".git"), 0o755)
	write := func(rel, text string) {
		t.Helper()
		p := filepath.Join(root, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("AGENTS.md", "# Project\n\n```sh\nnot-under-a-heading\n```\n\n## Setup\n\nInstall first:\n\n```bash\n# deps\nnpm ci\nmake build\n```\n\n```sh\nsecond-block-ignored\n```\n\n## Layout\n\n```\nsrc/  code\n```\n\n## Testing\n\n```console\n$ go test ./...\nok  output line\n```\n")
	write("sub/AGENTS.md", "## Testing\n\n```sh\nsub-only\n```\n")
	repo, err := Load(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	c := repo.Commands()
	if c.Setup != "set -e\nnpm ci\nmake build" || c.SetupFrom != "AGENTS.md:11" {
		t.Errorf("setup %q from %s", c.Setup, c.SetupFrom)
	}
	if c.Test != "set -e\ngo test ./..." || c.TestFrom != "AGENTS.md:29" {
		t.Errorf("test %q from %s", c.Test, c.TestFrom)
	}

	write("CLAUDE.md", "## Build and test\n\n```sh\nmake check\n```\n")
	repo, err = Load(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	if c := repo.Commands(); c.Test != "set -e\nmake check" || c.Setup != "set -e\nnpm ci\nmake build" {
		t.Errorf("with CLAUDE.md: %+v", c)
	}
}

func TestCommandsNone(t *testing.T) {
	root := t.TempDir()
	os.Mkdir(filepath.Join(root, ".git"), 0o755)
	os.WriteFile(filepath.Join(root, "AGENTS.md"), []byte("## Testing\n\nRun the tests before you commit.\n\n```go\nfunc TestX(t *testing.T) {}\n```\n"), 0o644)
	repo, err := Load(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	if c := repo.Commands(); c != (Commands{}) {
		t.Errorf("commands from prose and a go block: %+v", c)
	}
}
