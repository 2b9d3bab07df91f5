package cli

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"smolvm.dev/smolvm/tests/testenv"
	"smolvm.dev/smolvm/workflow/branch"
)

// A smolvm branch fanout killed with SIGKILL while one branch hangs keeps
// the branch that finished: status shows it passed and the run
// interrupted, and merge takes it in.
func TestCLIBranchKilled(t *testing.T) {
	c := newSandboxCLI(t)
	repo := t.TempDir()
	files := map[string]string{
		"test.sh":     "echo 'TAP version 13'; n=0; bad=0\nfor f in cmd/*.sh; do n=$((n+1)); if [ \"$(sh $f)\" = ok ]; then echo \"ok $n - $f\"; else echo \"not ok $n - $f\"; bad=1; fi; done\necho \"1..$n\"; exit $bad\n",
		"cmd/main.sh": "echo ok\n",
	}
	for name, data := range files {
		os.MkdirAll(filepath.Dir(filepath.Join(repo, name)), 0o755)
		os.WriteFile(filepath.Join(repo, name), []byte(data), 0o644)
	}
	for _, args := range [][]string{{"init", "-q"}, {"add", "-A"}, {"-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base"}} {
		if out, err := exec.Command("git", append([]string{"-C", repo}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	tasks := filepath.Join(t.TempDir(), "tasks")
	os.WriteFile(tasks, []byte("# one quick sub-task, one that hangs\ndo: echo 'echo ok' > cmd/alpha.sh\ndo: sleep 600\n"), 0o644)
	agent := `sh -c "$(sed -n 's/^do: //p' "$SMOLVM_AGENT_PROMPT" | head -n 1)"`

	cmd := exec.Command(testenv.Smolvm(t), "--host", "", "--data-dir", c.dataDir, "--runsc", c.runsc, "branch", "fanout",
		"--repo", repo, "--tasks", tasks, "--agent", agent, "--test", "sh test.sh", "--setup", "true",
		"--flaky-reruns", "-1", "--max-iterations", "1", "--concurrency", "2")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	var id string
	var view branchView
	for deadline := time.Now().Add(4 * time.Minute); ; time.Sleep(time.Second) {
		if time.Now().After(deadline) {
			t.Fatalf("branch 1 never passed: %+v\n%s", view, stderr.String())
		}
		if id == "" {
			var runs []*branch.Run
			json.Unmarshal([]byte(c.must("branch", "status", "--json")), &runs)
			if len(runs) == 0 {
				continue
			}
			id = runs[0].ID
		}
		view = branchView{}
		json.Unmarshal([]byte(c.must("branch", "status", id, "--json")), &view)
		if len(view.Branches) == 2 && view.Branches[0].State == branch.Passed {
			break
		}
	}
	cmd.Process.Kill() // SIGKILL: no cleanup, no last save
	cmd.Wait()

	view = branchView{}
	if err := json.Unmarshal([]byte(c.must("branch", "status", id, "--json")), &view); err != nil {
		t.Fatal(err)
	}
	b1, b2 := view.Branches[0], view.Branches[1]
	if view.Run.State != branch.Failed || !strings.Contains(view.Run.Reason, "died") ||
		b1.State != branch.Passed || b1.Commit == "" || b2.State != branch.Failed || !strings.Contains(b2.Reason, "interrupted") {
		t.Fatalf("after the kill: run %s (%s); branch 1 %s %q; branch 2 %s (%s)", view.Run.State, view.Run.Reason, b1.State, b1.Commit, b2.State, b2.Reason)
	}
	text := c.must("branch", "status", id)
	if !strings.Contains(text, "smolvm/"+id+"/1") || !strings.Contains(text, "passed") {
		t.Errorf("status:\n%s", text)
	}
	out := c.must("branch", "merge", id)
	if !strings.Contains(out, "1 merged") || !strings.Contains(out, "branch 2: not merged") {
		t.Fatalf("merge after the kill:\n%s", out)
	}
	if out := c.must("branch", "conflicts", id); !strings.Contains(out, "CONFLICTS") {
		t.Errorf("conflicts:\n%s", out)
	}
}
