package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

func mustDuration(t *testing.T, s string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestCLIAgent drives smolvm agent fix, log, resume and run --issue with
// an external agent CLI (a shell script) in real sandboxes.
func TestCLIAgent(t *testing.T) {
	c := newSandboxCLI(t)
	repo := t.TempDir()
	files := map[string]string{
		"calc.js": "exports.add = (a, b) => a - b;\n",
		"calc.test.js": "const test = require('node:test');\nconst assert = require('node:assert');\n" +
			"const { add } = require('./calc.js');\ntest('add', () => { assert.strictEqual(add(2, 3), 5); });\n",
		// The agent: first it deletes the test, then (told why that was
		// rejected, on stdin) it fixes the code.
		"agent.sh": `prompt=$(cat)
case "$prompt" in
*"test add was removed"*) sed -i 's/a - b/a + b/' calc.js ;;
*) printf "const test = require('node:test');\n" > calc.test.js ;;
esac
`,
		"42-add-is-wrong.md": "# add() subtracts\n\nadd(2, 3) is -1.\n",
	}
	for name, data := range files {
		os.WriteFile(filepath.Join(repo, name), []byte(data), 0o644)
	}
	for _, args := range [][]string{{"init", "-q"}, {"add", "-A"}, {"-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base"}} {
		if out, err := exec.Command("git", append([]string{"-C", repo}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %s", args, out)
		}
	}
	test := "node --test --test-reporter=tap"
	out, errOut, code := c.run("agent", "fix", "--repo", repo, "--test", test, "--agent", "sh agent.sh", "--flaky-reruns", "-1")
	if code != 0 || !strings.Contains(out, ": resolved (green)") || !strings.Contains(out, "pristine tests: 1 passed, 0 failed") {
		t.Fatalf("fix: %d\n%s\n%s", code, out, errOut)
	}
	// Not a terminal: one plain line per phase.
	if !strings.Contains(errOut, "#1 rejected") || !strings.Contains(errOut, "#2 tests    1 passed, 0 failed") || strings.Contains(errOut, "\r") {
		t.Errorf("status lines:\n%s", errOut)
	}
	id := regexp.MustCompile(`run (run-[0-9a-f]+)`).FindStringSubmatch(out)[1]
	// The done line's elapsed is the summary's (it was twice it).
	done := regexp.MustCompile(`done .* · ([0-9a-z.]+) · `).FindStringSubmatch(errOut)
	sum := regexp.MustCompile(`cost \$[0-9.]+, ([0-9a-z.]+)\n`).FindStringSubmatch(out)
	if done == nil || sum == nil {
		t.Fatalf("no elapsed in the done line or the summary:\n%s\n%s", errOut, out)
	}
	if d1, d2 := mustDuration(t, done[1]), mustDuration(t, sum[1]); d1-d2 > time.Second || d2-d1 > time.Second {
		t.Errorf("done line says %s, the summary %s", d1, d2)
	}
	if !strings.Contains(errOut, "#2 verdict  1 passed, 0 failed") || !strings.Contains(out, "evidence: proven") {
		t.Errorf("verdict line or evidence:\n%s\n%s", errOut, out)
	}

	if out := c.must("agent", "log"); !strings.Contains(out, id) || !strings.Contains(out, "resolved") {
		t.Errorf("log: %s", out)
	}
	out = c.must("agent", "log", id, "--diff")
	for _, want := range []string{"**proven**", "fail-to-pass (1): add", "| `calc.js` `@@ -1 +1 @@` | add |", "#0 (from 0)  tests: 0 passed, 1 failed", "#1 (from 0)  rejected", "test add was removed", "#2 (from 0)  tests: 1 passed", "+exports.add = (a, b) => a + b;"} {
		if !strings.Contains(out, want) {
			t.Errorf("log %s lacks %q:\n%s", id, want, out)
		}
	}
	if !regexp.MustCompile(`checkpoint: [0-9a-f]{64}`).MatchString(out) {
		t.Errorf("log %s names no checkpoint:\n%s", id, out)
	}
	// Resume from the base checkpoint: the same run goes on at #3.
	out, errOut, code = c.run("agent", "resume", id, "--from", "0", "--agent", "sh agent.sh", "--flaky-reruns", "-1")
	if code != 0 || !strings.Contains(out, "best iteration 4") {
		t.Fatalf("resume: %d\n%s\n%s", code, out, errOut)
	}
	if out := c.must("agent", "log", id); !strings.Contains(out, "#3 (from 0)  rejected") || !strings.Contains(out, "#4 (from 0)  tests: 1 passed") {
		t.Errorf("log after resume:\n%s", out)
	}

	dry := filepath.Join(t.TempDir(), "pr")
	out, errOut, code = c.run("agent", "run", "--repo", repo, "--issue", filepath.Join(repo, "42-add-is-wrong.md"), "--test", test,
		"--agent", "sh agent.sh", "--flaky-reruns", "-1", "--dry-run", dry)
	if code != 0 || !strings.Contains(out, "branch smolvm/issue-42-add-subtracts") {
		t.Fatalf("run --issue: %d\n%s\n%s", code, out, errOut)
	}
	if md, _ := os.ReadFile(filepath.Join(dry, "pr.md")); !strings.Contains(string(md), "# Fix #42: add() subtracts") || !strings.Contains(string(md), "1 rejected by the guard") {
		t.Errorf("pr.md:\n%s", md)
	}

	if _, errOut, code := c.run("agent", "fix", "--repo", t.TempDir(), "--test", "true", "--agent", "true"); code != 125 || !strings.Contains(errOut, "not a git repository") {
		t.Errorf("not a repository: %d %q", code, errOut)
	}
	if _, errOut, code := c.run("agent", "fix", "--repo", repo, "--test", "true", "--agent", "true", "--max-iterations", "-2"); code != 125 || !strings.Contains(errOut, "bad budget") {
		t.Errorf("bad budget: %d %q", code, errOut)
	}
}

// TestCLIAgentEvalSWEBench: smolvm agent eval FILE on a SWE-bench instance
// made here (its repository under DIR/acme/calc, found through the
// instances file's directory): the gold patch graded without an agent,
// then an agent CLI's patch; both resolve it, and the run reports and the
// instance's report.json have the harness's keys.
func TestCLIAgentEvalSWEBench(t *testing.T) {
	c := newSandboxCLI(t)
	dir := t.TempDir()
	repo := filepath.Join(dir, "acme", "calc")
	os.MkdirAll(repo, 0o755)
	git := func(args ...string) string {
		out, err := exec.Command("git", append([]string{"-C", repo, "-c", "user.name=t", "-c", "user.email=t@t"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %s", args, out)
		}
		return string(out)
	}
	os.WriteFile(filepath.Join(repo, "calc.js"), []byte("exports.add = (a, b) => a - b;\n"), 0o644)
	head := "const test = require('node:test');\nconst assert = require('node:assert');\nconst { add } = require('./calc.js');\n" +
		"test('zero', () => { assert.strictEqual(add(0, 0), 0); });\n"
	os.WriteFile(filepath.Join(repo, "calc.test.js"), []byte(head), 0o644)
	git("init", "-q")
	git("add", "-A")
	git("commit", "-qm", "base")
	base := strings.TrimSpace(git("rev-parse", "HEAD"))
	os.WriteFile(filepath.Join(repo, "calc.js"), []byte("exports.add = (a, b) => a + b;\n"), 0o644)
	gold := git("diff")
	git("checkout", "-q", ".")
	os.WriteFile(filepath.Join(repo, "calc.test.js"), []byte(head+"test('add', () => { assert.strictEqual(add(2, 3), 5); });\n"), 0o644)
	testPatch := git("diff")
	git("checkout", "-q", ".")
	inst, _ := json.Marshal(map[string]any{"instance_id": "acme__calc-1", "repo": "acme/calc", "base_commit": base,
		"problem_statement": "add() subtracts", "patch": gold, "test_patch": testPatch,
		"FAIL_TO_PASS": []string{"add"}, "PASS_TO_PASS": []string{"zero"}, "test_cmd": "node --test --test-reporter=tap"})
	insts := filepath.Join(dir, "instances.jsonl")
	os.WriteFile(insts, append(inst, '\n'), 0o644)

	reports := t.TempDir()
	for _, args := range [][]string{
		{"--predictions", "gold", "--report", filepath.Join(reports, "gold.json")},
		{"--agent", "sed -i s:a.-.b:a+b: calc.js", "--flaky-reruns", "-1", "--run-id", "cli", "--report", filepath.Join(reports, "agent.json")},
	} {
		cmd := append([]string{"agent", "eval", insts}, args...)
		out, errOut, code := c.run(cmd...)
		if code != 0 || !strings.Contains(out, "SWE-bench: 1 instances, 1 completed, 1 resolved") || !strings.Contains(out, "resolved 1/1 (100%)") {
			t.Fatalf("%v: %d\n%s\n%s", args, code, out, errOut)
		}
	}
	for _, p := range []string{filepath.Join(reports, "gold.json"), filepath.Join(reports, "agent.json")} {
		var rep map[string]any
		data, err := os.ReadFile(p)
		if err != nil || json.Unmarshal(data, &rep) != nil || len(rep) != 15 || rep["resolved_instances"] != 1.0 ||
			fmt.Sprint(rep["resolved_ids"]) != "[acme__calc-1]" || rep["schema_version"] != 2.0 {
			t.Errorf("%s: %v %s", p, err, data)
		}
	}
	// The logs are under the agent's name, made fit for a file name.
	data, err := os.ReadFile(filepath.Join(c.dataDir, "agent", "swebench", "cli", "sed_-i_s:a.-.b:a_b:_calc.js", "acme__calc-1", "report.json"))
	if err != nil || !strings.Contains(string(data), `"resolved": true`) || !strings.Contains(string(data), `"FAIL_TO_PASS"`) {
		t.Errorf("report.json: %v %s", err, data)
	}
}
