package runner

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDocsSayWhatRuns: docs/agent.md names the detected test commands
// and the scratch repository as the runner has them (it once said
// "go test -json ./..." and "DATA/agent/runs/RUN").
func TestDocsSayWhatRuns(t *testing.T) {
	doc, err := os.ReadFile("../../docs/agent.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{GoTest, PyTest, "`DATA/agent/runs/RUN/git`", "`DATA/agent/runs/RUN/base`"} {
		if !strings.Contains(string(doc), want) {
			t.Errorf("docs/agent.md does not say %q", want)
		}
	}
	// The CLI's RunsDir is DATA/agent/runs; a run's scratch is RUN in it.
	runs := filepath.Join(t.TempDir(), "agent", "runs")
	s, err := newScratch(context.Background(), gitRepo(t, jsRepo), filepath.Join(runs, "RUN"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	if s.git != filepath.Join(runs, "RUN", "git") || s.tree != filepath.Join(runs, "RUN", "base") {
		t.Errorf("scratch repository %s, base tree %s", s.git, s.tree)
	}
}
