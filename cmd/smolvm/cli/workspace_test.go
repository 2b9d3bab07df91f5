package cli

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"smolvm.dev/smolvm/internal/store"
	"smolvm.dev/smolvm/tests/testenv"
	"smolvm.dev/smolvm/workflow/trust"
	"smolvm.dev/smolvm/workflow/workspace"
)

// approveNext answers, through the CLI, the first approval whose action
// mentions target, and reports the approval's ID.
func (c *testCLI) approveNext(target string, approve bool) <-chan string {
	done := make(chan string, 1)
	verb := "deny"
	if approve {
		verb = "approve"
	}
	go func() {
		defer close(done)
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(30 * time.Millisecond) {
			out, _, code := c.run("approvals", "ls", "--json")
			var aps []trust.Approval
			if code != 0 || json.Unmarshal([]byte(out), &aps) != nil {
				continue
			}
			for _, ap := range aps {
				if strings.Contains(ap.Action.String(), target) {
					if _, _, code := c.run("approvals", verb, ap.ID, "--as", "alice"); code == 0 {
						done <- ap.ID
					}
					return
				}
			}
		}
	}()
	return done
}

// audit returns the audit log as "action outcome by" lines.
func (c *testCLI) audit() []string {
	c.t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, c.dataDir)
	if err != nil {
		c.t.Fatal(err)
	}
	defer st.Close()
	l, err := trust.OpenLedger(ctx, st)
	if err != nil {
		c.t.Fatal(err)
	}
	recs, err := l.Audit(ctx, time.Time{})
	if err != nil {
		c.t.Fatal(err)
	}
	var lines []string
	for _, r := range recs {
		lines = append(lines, r.Action.String()+" "+r.Outcome.String()+" "+r.By)
	}
	return lines
}

func wsGit(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v: %s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// wsRepo makes a git repository with one commit of files.
func wsRepo(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	wsGit(t, dir, "init", "-q", "-b", "main")
	wsGit(t, dir, "config", "user.name", "Repo Owner")
	wsGit(t, dir, "config", "user.email", "owner@example.com")
	wsGit(t, dir, "add", "-A")
	wsGit(t, dir, "commit", "-q", "-m", "initial")
	return dir
}

func wsPolicy(t *testing.T, dir, text string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, ".smolvm", "policy.toml"), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func wsRead(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestWorkspaceApply: an agent edits a repository in a sandbox; apply
// brings back what the repository's policy allows.
func TestWorkspaceApply(t *testing.T) {
	c := &testCLI{t: t, dataDir: t.TempDir(), runsc: testenv.Runsc(t)}
	t.Setenv("SMOLVM_GUEST_BINARY", testenv.Guest(t))
	const askSrc = "default = \"deny\"\n[approvals]\ntimeout = \"%s\"\n[tests]\nallow = [\"**\"]\n[write]\nask = [\"src/**\"]\n"
	tree := wsRepo(t, map[string]string{
		".smolvm/policy.toml": strings.Replace(askSrc, "%s", "1s", 1),
		"src/lib.go":          "package lib\n",
		"src/lib_test.go":     "package lib\n",
		"README.md":           "readme\n",
	})
	passwd := wsRead(t, "/etc/passwd")

	c.must("run", "-d", "--name", "agent")
	t.Cleanup(func() { c.run("rm", "-f", "agent") })
	c.must("cp", tree, "agent:/work")
	c.must("exec", "agent", "--", "sh", "-c", `set -e; cd /work
		echo 'package lib // fixed test' > src/lib_test.go
		echo 'package lib // changed' > src/lib.go
		rm README.md
		ln -s /etc/passwd link
		ln -s ../../etc/passwd src/passwd
		mkdir -p .git/hooks && echo 'rm -rf ~' > .git/hooks/pre-commit`)

	// A dry run decides, and changes, records and asks nothing.
	out, _, code := c.run("apply", "agent:/work", tree, "--dry-run", "--json")
	var r workspace.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil || code != 1 || !r.DryRun {
		t.Fatalf("dry run: exit %d %v\n%s", code, err, out)
	}
	verdicts := map[string]string{}
	for _, ch := range r.Changes {
		verdicts[ch.Path] = string(ch.Kind) + " " + ch.Verdict.String() + " " + string(ch.Outcome)
	}
	wantDry := map[string]string{
		"README.md":       "deleted deny skipped",
		"link":            "added unset rejected",
		"src/lib.go":      "modified ask skipped",
		"src/lib_test.go": "modified allow skipped",
		"src/passwd":      "added unset rejected",
	}
	if !mapsEqual(verdicts, wantDry) {
		t.Fatalf("dry run verdicts:\n%v\nwant\n%v", verdicts, wantDry)
	}
	if a := c.audit(); len(a) != 0 || wsRead(t, filepath.Join(tree, "src/lib_test.go")) != "package lib\n" {
		t.Fatalf("dry run had effects: audit %q", a)
	}

	// Nobody answers the ask within the 1s timeout: denied.
	out, errOut, code := c.run("apply", "agent:/work", tree)
	if code != 1 {
		t.Fatalf("apply: exit %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{
		"src/lib_test.go modified applied",
		"src/lib.go modified denied write src/lib.go: nobody approved it in time",
		"README.md deleted denied default",
		"link added rejected symlink to /etc/passwd points outside the tree",
		"src/passwd added rejected symlink to ../../etc/passwd points outside the tree",
		"5 changes: 1 applied, 2 denied, 2 rejected",
	} {
		found := false
		for _, line := range strings.Split(out, "\n") {
			found = found || strings.HasPrefix(strings.Join(strings.Fields(line), " "), want)
		}
		if !found {
			t.Errorf("apply output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(errOut, "waiting for approval of 1 change(s)") {
		t.Errorf("stderr: %q", errOut)
	}
	if got := wsRead(t, filepath.Join(tree, "src/lib_test.go")); got != "package lib // fixed test\n" {
		t.Errorf("test file: %q", got)
	}
	if got := wsRead(t, filepath.Join(tree, "src/lib.go")); got != "package lib\n" {
		t.Errorf("denied source change applied: %q", got)
	}
	if _, err := os.Stat(filepath.Join(tree, "README.md")); err != nil {
		t.Errorf("denied deletion applied: %v", err)
	}
	for _, p := range []string{"link", "src/passwd", ".git/hooks/pre-commit"} {
		if _, err := os.Lstat(filepath.Join(tree, p)); !os.IsNotExist(err) {
			t.Errorf("%s created in the tree: %v", p, err)
		}
	}
	if wsRead(t, "/etc/passwd") != passwd {
		t.Fatal("/etc/passwd changed")
	}

	// The ask is approved from another "terminal": applied.
	wsPolicy(t, tree, strings.Replace(askSrc, "%s", "30s", 1))
	approved := c.approveNext("src/lib.go", true)
	out, errOut, code = c.run("apply", "agent:/work", tree, "--json")
	id := <-approved
	if err := json.Unmarshal([]byte(out), &r); err != nil || code != 1 || id == "" {
		t.Fatalf("apply: exit %d %v approval %q\n%s%s", code, err, id, out, errOut)
	}
	if got := wsRead(t, filepath.Join(tree, "src/lib.go")); got != "package lib // changed\n" {
		t.Errorf("approved change not applied: %q", got)
	}
	var outcomes []string
	for _, ch := range r.Changes {
		outcomes = append(outcomes, ch.Path+" "+string(ch.Outcome))
	}
	if want := []string{".smolvm/policy.toml denied", "README.md denied", "link rejected", "src/lib.go applied", "src/passwd rejected"}; !slices.Equal(outcomes, want) {
		// The policy file differs from the sandbox's copy now, and its
		// change back is a write the policy denies.
		t.Errorf("outcomes %q, want %q", outcomes, want)
	}

	// Everything allowed and safe: exit 0.
	wsPolicy(t, tree, "default = \"allow\"\n")
	c.must("exec", "agent", "--", "sh", "-c", "rm /work/link /work/src/passwd && echo 'default = \"allow\"' > /work/.smolvm/policy.toml")
	out = c.must("apply", "agent:/work", tree)
	if !strings.Contains(out, "1 changes: 1 applied") {
		t.Errorf("apply: %s", out)
	}
	if _, err := os.Stat(filepath.Join(tree, "README.md")); !os.IsNotExist(err) {
		t.Errorf("allowed deletion not applied: %v", err)
	}
	if out := c.must("apply", "agent:/work", tree); out != "no changes\n" {
		t.Errorf("apply with nothing to do: %q", out)
	}

	// Every decision is in the audit log, with who made it.
	wantAudit := []string{
		"write README.md deny policy",
		"write src/lib.go deny expired",
		"write src/lib_test.go allow policy",
		"write .smolvm/policy.toml deny policy",
		"write README.md deny policy",
		"write src/lib.go allow alice",
		"write README.md allow policy",
	}
	got := c.audit()
	slices.Sort(got)
	slices.Sort(wantAudit)
	if !slices.Equal(got, wantAudit) {
		t.Errorf("audit:\n%q\nwant\n%q", got, wantAudit)
	}

	if _, errOut, code := c.run("apply", "agent", tree); code != 125 || !strings.Contains(errOut, "SANDBOX:DIR") {
		t.Errorf("apply without DIR: %d %q", code, errOut)
	}
	if _, _, code := c.run("apply", "agent:/nonexistent", tree); code != 125 {
		t.Errorf("apply of a missing DIR: %d", code)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestWorkspaceGit: commit and push run on the host tree only when the
// policy allows them.
func TestWorkspaceGit(t *testing.T) {
	c := &testCLI{t: t, dataDir: t.TempDir()}
	tree := wsRepo(t, map[string]string{".smolvm/policy.toml": "preset = \"read-only\"\n", "a.txt": "a\n"})
	remote := filepath.Join(t.TempDir(), "remote.git")
	if out, err := exec.Command("git", "init", "-q", "--bare", remote).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	wsGit(t, tree, "remote", "add", "origin", remote)
	head := func() string { return wsGit(t, tree, "rev-parse", "HEAD") }
	first := head()
	os.WriteFile(filepath.Join(tree, "b.txt"), []byte("b\n"), 0o644)

	// Denied: exit 126, the rule named, nothing committed or staged.
	_, errOut, code := c.run("git", "commit", "-m", "add b", "--tree", tree)
	if code != 126 || !strings.Contains(errOut, "preset:read-only") || head() != first {
		t.Fatalf("denied commit: exit %d %q", code, errOut)
	}
	if st := wsGit(t, tree, "status", "--porcelain"); !strings.Contains(st, "?? b.txt") {
		t.Fatalf("denied commit staged: %q", st)
	}

	// Asked, nobody answers: denied with the rule named.
	wsPolicy(t, tree, "preset = \"autofix-tests\"\n[approvals]\ntimeout = \"1s\"\n")
	_, errOut, code = c.run("git", "commit", "-m", "add b", "--tree", tree)
	if code != 126 || !strings.Contains(errOut, "in time") || !strings.Contains(errOut, "preset:autofix-tests") || head() != first {
		t.Fatalf("unanswered commit: exit %d %q", code, errOut)
	}

	// Asked and approved: committed, run from inside the tree.
	wsPolicy(t, tree, "preset = \"autofix-tests\"\n")
	t.Chdir(filepath.Join(tree, ".smolvm"))
	approved := c.approveNext("git-commit", true)
	out, errOut, code := c.run("git", "commit", "-m", "add b")
	if id := <-approved; code != 0 || id == "" || strings.TrimSpace(out) != head() || head() == first {
		t.Fatalf("approved commit: exit %d %q %q", code, out, errOut)
	}
	if got := wsGit(t, tree, "log", "-1", "--format=%s|%an"); got != "add b|Repo Owner" {
		t.Errorf("commit: %q", got)
	}
	if _, _, code := c.run("git", "commit", "-m", "again"); code != 1 {
		t.Errorf("nothing to commit: exit %d", code)
	}

	// autofix-tests denies pushing; trusted asks, and approved it pushes.
	_, errOut, code = c.run("git", "push", "origin", "main")
	if code != 126 || !strings.Contains(errOut, "preset:autofix-tests") {
		t.Fatalf("push: exit %d %q", code, errOut)
	}
	if out, _ := exec.Command("git", "-C", remote, "rev-parse", "--verify", "-q", "main").Output(); len(out) != 0 {
		t.Fatal("denied push reached the remote")
	}
	wsPolicy(t, tree, "preset = \"trusted\"\n")
	approved = c.approveNext("git-push origin main", true)
	_, errOut, code = c.run("git", "push", "origin", "main")
	if id := <-approved; code != 0 || id == "" {
		t.Fatalf("approved push: exit %d %q", code, errOut)
	}
	if got := wsGit(t, remote, "rev-parse", "main"); got != head() {
		t.Fatalf("remote main %s, want %s", got, head())
	}

	want := []string{
		"git-commit deny policy",
		"git-commit deny expired",
		"git-commit allow alice",
		"git-push origin main deny policy",
		"git-push origin main allow alice",
	}
	if got := c.audit(); !slices.Equal(got, want) {
		t.Errorf("audit:\n%q\nwant\n%q", got, want)
	}
}
