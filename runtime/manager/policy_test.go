package manager

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/workflow/trust"
)

// TestPolicyGateway: with a trust policy, every command is checked before
// it starts; the policy, not the prompt, decides.
func TestPolicyGateway(t *testing.T) {
	m := newManager(t)
	ctx := context.Background()
	repo := t.TempDir()
	os.MkdirAll(filepath.Join(repo, ".smolvm"), 0o755)
	os.WriteFile(filepath.Join(repo, ".smolvm", "policy.toml"), []byte(`
default = "deny"
[approvals]
timeout = "20s"
[run]
allow = ["echo", "true", "cat"]
ask = ["touch"]
deny = ["rm"]
`), 0o644)
	sb, err := m.Create(ctx, sandbox.CreateOptions{Start: true, Config: sandbox.Config{TrustRepo: repo}})
	if err != nil {
		t.Fatal(err)
	}
	exec := func(args ...string) (string, error) {
		var out bytes.Buffer
		exit, err := m.Exec(ctx, sb.ID, sandbox.Process{Args: args}, sandbox.Stdio{Stdout: &out})
		if err == nil && exit.Code != 0 {
			t.Fatalf("%v: %+v", args, exit)
		}
		return out.String(), err
	}
	if out, err := exec("echo", "allowed"); err != nil || out != "allowed\n" {
		t.Fatalf("allowed command: %q %v", out, err)
	}
	for _, denied := range [][]string{
		{"rm", "-rf", "/tmp"},
		{"sh", "-c", "true && rm -rf /"},
		{"sh", "-c", "echo $(rm -rf /)"},
		{"python3", "-c", "print(1)"}, // not listed: default deny
	} {
		if _, err := exec(denied...); !errors.Is(err, trust.ErrDenied) {
			t.Errorf("%v: got %v, want a policy denial", denied, err)
		}
	}
	// ask -> approve from "another terminal" (the ledger), then it runs.
	ledger, err := trust.OpenLedger(ctx, m.st)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			aps, _ := ledger.Approvals(ctx, false)
			if len(aps) > 0 {
				ledger.Answer(ctx, aps[0].ID, true, "human:test", "fine")
				return
			}
		}
	}()
	if _, err := exec("touch", "/tmp/approved"); err != nil {
		t.Fatalf("approved command: %v", err)
	}
	if out, err := exec("cat", "/tmp/approved"); err != nil || out != "" {
		t.Fatalf("after approval: %q %v", out, err)
	}
	recs, err := ledger.Audit(ctx, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) < 7 {
		t.Fatalf("audit has %d records, want one per decision (7+)", len(recs))
	}

	// A create whose main command the policy denies makes nothing.
	if _, err := m.Create(ctx, sandbox.CreateOptions{Name: "denied", Start: true, Config: sandbox.Config{TrustRepo: repo, Cmd: []string{"rm", "-rf", "/"}}}); !errors.Is(err, trust.ErrDenied) {
		t.Fatalf("create with a denied command: %v", err)
	}
	if _, err := m.Get(ctx, "denied"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("denied create left a record: %v", err)
	}
	if _, err := m.Create(ctx, sandbox.CreateOptions{Config: sandbox.Config{TrustRepo: t.TempDir()}}); !errors.Is(err, sandbox.ErrInvalid) {
		t.Fatalf("--policy without a policy file: %v", err)
	}
}

// TestPolicyReload: the gate follows edits to policy.toml between two
// execs in one manager, an edit in the same second included.
func TestPolicyReload(t *testing.T) {
	m := newManager(t)
	ctx := context.Background()
	repo := t.TempDir()
	os.MkdirAll(filepath.Join(repo, ".smolvm"), 0o755)
	path := filepath.Join(repo, ".smolvm", "policy.toml")
	// Same size, same inode: only the times tell the versions apart.
	allowed := "default = \"deny\"\n[run]\nallow = [\"echo\"]\ndeny = [\"true\"]\n"
	denied := "default = \"deny\"\n[run]\ndeny = [\"echo\"]\nallow = [\"true\"]\n"
	os.WriteFile(path, []byte(allowed), 0o644)
	sb := m.run(t, sandbox.Config{TrustRepo: repo})
	echo := func() error {
		_, err := m.Exec(ctx, sb.ID, sandbox.Process{Args: []string{"echo", "hi"}}, sandbox.Stdio{})
		return err
	}
	if err := echo(); err != nil {
		t.Fatalf("echo under the first policy: %v", err)
	}
	for i, text := range []string{denied, allowed, denied} {
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		err := echo()
		if want := text == denied; errors.Is(err, trust.ErrDenied) != want || (!want && err != nil) {
			t.Fatalf("edit %d: echo: %v, want denied %v", i+1, err, want)
		}
	}
}
