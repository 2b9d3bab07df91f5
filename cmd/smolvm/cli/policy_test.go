package cli

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"smolvm.dev/smolvm/internal/store"
	"smolvm.dev/smolvm/workflow/trust"
)

// policyRepo makes a repository whose policy file holds text.
func policyRepo(t *testing.T, text string) string {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, ".smolvm"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, trust.FileName), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

const policyTestFile = `preset = "autofix-tests"

[run]
deny = ["rm -rf /"]
`

func TestPolicyCheck(t *testing.T) {
	c := newCLI(t, "")
	root := policyRepo(t, policyTestFile)
	out, errOut, code := c.run("policy", "check", "--root", root)
	if code != 0 || !strings.Contains(out, "ok") || !strings.Contains(out, "autofix-tests") {
		t.Fatalf("valid policy: code %d, out %q, err %q", code, out, errOut)
	}
	root = policyRepo(t, "default = \"allow\"\n[run]\nallow = [\"ls &&\"]\n[git]\npush = \"maybe\"\n")
	out, errOut, code = c.run("policy", "check", "--root", root)
	if code != 1 {
		t.Fatalf("invalid policy: code %d, out %q", code, out)
	}
	for _, want := range []string{".smolvm/policy.toml:3: run.allow", ".smolvm/policy.toml:5: git.push"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr %q lacks %q", errOut, want)
		}
	}
	out, _, code = c.run("policy", "check", "--root", t.TempDir())
	if code != 0 || !strings.Contains(out, "every action asks") {
		t.Errorf("no policy file: code %d, out %q", code, out)
	}
}

func TestPolicyExplain(t *testing.T) {
	c := newCLI(t, "")
	root := policyRepo(t, policyTestFile)
	out, errOut, code := c.run("policy", "explain", "--root", root, "run", "true && rm -rf /")
	if code != 0 {
		t.Fatalf("code %d: %s", code, errOut)
	}
	for _, re := range []string{
		`outcome: deny`,
		`rule: +\.smolvm/policy\.toml:4: deny run "rm -rf /"`,
		`reason: +part 2 \(rm -rf /\)`,
		`(?m)^ +1 +allow +true +matched by preset:autofix-tests:\d+`,
		`(?m)^ +2 +deny +rm -rf / +matched by \.smolvm/policy\.toml:4`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("explain output lacks /%s/:\n%s", re, out)
		}
	}
	// Unquoted words after the action belong to it.
	out, _, _ = c.run("policy", "explain", "--root", root, "run", "rm", "-rf", "/")
	if !strings.Contains(out, "outcome: deny") {
		t.Errorf("unquoted run: %s", out)
	}
	for _, tt := range []struct {
		args []string
		want trust.Outcome
	}{
		{[]string{"write", "src/foo_test.go"}, trust.Allow},
		{[]string{"write", "src/foo.go"}, trust.Ask},
		{[]string{"git", "push"}, trust.Deny},
		{[]string{"git", "commit"}, trust.Ask},
		{[]string{"net", "example.com"}, trust.Ask},
		{[]string{"net", "proxy.golang.org:443"}, trust.Allow},
		{[]string{"run", "FOO=1 sh -c 'go test ./... 2>&1 | grep -v ok'"}, trust.Allow},
	} {
		args := append([]string{"policy", "explain", "--root", root, "--json"}, tt.args...)
		out, errOut, code := c.run(args...)
		var d trust.Decision
		if err := json.Unmarshal([]byte(out), &d); err != nil || code != 0 {
			t.Fatalf("%q: code %d, %v: %s%s", tt.args, code, err, out, errOut)
		}
		if d.Outcome != tt.want {
			t.Errorf("%q: %s, want %s (%s)", tt.args, d.Outcome, tt.want, d.Reason)
		}
	}
	if _, errOut, code := c.run("policy", "explain", "--root", root, "launch", "rockets"); code == 0 || !strings.Contains(errOut, "unknown action") {
		t.Errorf("bad action: code %d, %q", code, errOut)
	}
}

func TestPolicyShowAndPresets(t *testing.T) {
	c := newCLI(t, "")
	root := policyRepo(t, policyTestFile)
	out, _, code := c.run("policy", "show", "--root", root)
	if code != 0 || !regexp.MustCompile(`\.smolvm/policy\.toml:4 +deny +run +rm -rf /`).MatchString(out) ||
		!regexp.MustCompile(`preset:autofix-tests:\d+ +deny +git-push`).MatchString(out) {
		t.Errorf("show:\n%s", out)
	}
	out, _, _ = c.run("policy", "presets")
	for _, name := range trust.PresetNames() {
		if !strings.Contains(out, name) {
			t.Errorf("presets list lacks %s:\n%s", name, out)
		}
	}
	out, _, code = c.run("policy", "presets", "autofix-tests")
	if text, _ := trust.PresetText("autofix-tests"); code != 0 || out != text {
		t.Errorf("preset text: code %d\n%s", code, out)
	}
}

func TestApprovalsCLI(t *testing.T) {
	root := policyRepo(t, policyTestFile)
	dataDir := t.TempDir()
	c := newCLI(t, dataDir)
	ctx := context.Background()
	st, err := store.Open(ctx, dataDir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	l, err := trust.OpenLedger(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	p, err := trust.Load(root)
	if err != nil {
		t.Fatal(err)
	}
	g := &trust.Gate{Policy: p, Ledger: l, Poll: 10 * time.Millisecond}
	done := make(chan error, 1)
	go func() { done <- g.Check(ctx, trust.Action{Kind: trust.Commit}, "sandbox-7") }()

	var id string
	for deadline := time.Now().Add(10 * time.Second); id == "" && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		out, _, _ := c.run("approvals", "ls", "--json")
		var aps []trust.Approval
		if err := json.Unmarshal([]byte(out), &aps); err != nil {
			t.Fatalf("ls --json: %v: %s", err, out)
		}
		if len(aps) == 1 {
			id = aps[0].ID
		}
	}
	if id == "" {
		t.Fatal("no pending approval listed")
	}
	out, _, _ := c.run("approvals", "ls")
	if !strings.Contains(out, id) || !strings.Contains(out, "sandbox-7") || !strings.Contains(out, "git-commit") {
		t.Errorf("ls:\n%s", out)
	}
	out, errOut, code := c.run("approvals", "approve", id, "--why", "tests pass", "--as", "alice")
	if code != 0 || !strings.Contains(out, "approved "+id) {
		t.Fatalf("approve: code %d, %s%s", code, out, errOut)
	}
	if err := <-done; err != nil {
		t.Fatalf("Check after approve: %v", err)
	}
	if _, errOut, code := c.run("approvals", "deny", id); code != 1 || !strings.Contains(errOut, "already answered") {
		t.Errorf("deny after approve: code %d, %q", code, errOut)
	}
	if _, _, code := c.run("approvals", "approve", "nope"); code != 1 {
		t.Errorf("approve unknown id: code %d", code)
	}

	// One more decision, then the audit log has both.
	if err := g.Check(ctx, trust.Action{Kind: trust.Push}, "sandbox-7"); !errors.Is(err, trust.ErrDenied) {
		t.Fatalf("push: %v", err)
	}
	for _, args := range [][]string{{"policy", "audit", "--json"}, {"policy", "audit", "export"}} {
		out, errOut, code := c.run(args...)
		if code != 0 {
			t.Fatalf("%q: code %d %s", args, code, errOut)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 2 {
			t.Fatalf("%q: %d lines, want 2:\n%s", args, len(lines), out)
		}
		var first, second trust.Record
		if err := errors.Join(json.Unmarshal([]byte(lines[0]), &first), json.Unmarshal([]byte(lines[1]), &second)); err != nil {
			t.Fatal(err)
		}
		if first.Action.Kind != trust.Commit || first.Verdict != trust.Ask || first.Outcome != trust.Allow ||
			first.By != "alice" || first.Why != "tests pass" || first.Approval != id || first.Requester != "sandbox-7" {
			t.Errorf("first record %+v", first)
		}
		if second.Action.Kind != trust.Push || second.Outcome != trust.Deny || second.By != "policy" || !strings.Contains(second.Rule, "preset:autofix-tests") {
			t.Errorf("second record %+v", second)
		}
	}
	out, _, _ = c.run("policy", "audit")
	if !regexp.MustCompile(`sandbox-7 +git-commit +ask +allow +alice`).MatchString(out) {
		t.Errorf("audit table:\n%s", out)
	}
	out, _, _ = c.run("policy", "audit", "--since", "2999-01-01", "--json")
	if out != "" {
		t.Errorf("audit --since future: %q", out)
	}
	if _, _, code := c.run("policy", "audit", "--since", "yesterday"); code == 0 {
		t.Error("audit --since yesterday: accepted")
	}
}

func TestPolicySince(t *testing.T) {
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"":                     {},
		"2h":                   now.Add(-2 * time.Hour),
		"2025-05-01T10:00:00Z": time.Date(2025, 5, 1, 10, 0, 0, 0, time.UTC),
	} {
		got, err := policySince(in, now)
		if err != nil || !got.Equal(want) {
			t.Errorf("policySince(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
}

// TestCLIPolicyGate: a sandbox run with --policy has every exec pass the
// repository's policy (the gate the CLI gives its manager).
func TestCLIPolicyGate(t *testing.T) {
	c := newSandboxCLI(t)
	repo := t.TempDir()
	os.MkdirAll(filepath.Join(repo, ".smolvm"), 0o755)
	os.WriteFile(filepath.Join(repo, trust.FileName), []byte("default = \"deny\"\n[run]\nallow = [\"echo\"]\n"), 0o644)
	c.must("run", "-d", "--name", "gated", "--policy", repo)
	if out := c.must("exec", "gated", "--", "echo", "hi"); out != "hi\n" {
		t.Fatalf("allowed exec: %q", out)
	}
	if _, errOut, code := c.run("exec", "gated", "--", "rm", "-rf", "/tmp"); code != 126 || !strings.Contains(errOut, "policy denies") {
		t.Fatalf("denied exec: exit %d: %s", code, errOut)
	}
}
