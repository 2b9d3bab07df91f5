package cli

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"smolvm.dev/smolvm/internal/store"
	"smolvm.dev/smolvm/workflow/trust"
)

// memoryMust runs a memory subcommand in dir and fails the test unless it
// exits with want.
func memoryMust(t *testing.T, want int, dir string, args ...string) string {
	t.Helper()
	out, errOut, code := newCLI(t, "").run(append([]string{"memory", "-C", dir}, args...)...)
	if code != want {
		t.Fatalf("memory %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, want, out, errOut)
	}
	return out
}

// memoryRepo makes a git repository with a committed Go file.
func memoryRepo(t *testing.T) string {
	t.Helper()
	for k, v := range map[string]string{
		"GIT_CONFIG_GLOBAL": os.DevNull, "GIT_CONFIG_NOSYSTEM": "1",
		"GIT_AUTHOR_NAME": "Alice", "GIT_AUTHOR_EMAIL": "a@example.com",
		"GIT_COMMITTER_NAME": "Alice", "GIT_COMMITTER_EMAIL": "a@example.com",
		"SMOLVM_AUTHOR": "",
		// Agents' writes are audited in the data directory.
		"SMOLVM_DATA_DIR": t.TempDir(),
	} {
		t.Setenv(k, v)
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "srv"), 0o755); err != nil {
		t.Fatal(err)
	}
	src := "package srv\n\nfunc Serve() {}\n\nfunc Stop() {}\n"
	if err := os.WriteFile(filepath.Join(dir, "srv", "srv.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"init", "-q"}, {"config", "user.name", "Alice"}, {"add", "-A"}, {"commit", "-q", "-m", "init"},
	} {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	return dir
}

func memoryID(t *testing.T, out string) string {
	t.Helper()
	f := strings.Fields(out)
	if len(f) != 2 {
		t.Fatalf("unexpected add output %q", out)
	}
	return f[0]
}

func TestMemoryCLI(t *testing.T) {
	dir := memoryRepo(t)
	srv := filepath.Join(dir, "srv")

	// A human's fact is valid; the author defaults to git's user.name and
	// anchors are relative to -C.
	out := memoryMust(t, 0, srv, "add", "Serve must not block", "--kind", "gotcha", "--anchor", "srv.go#Serve")
	human := memoryID(t, out)
	if !strings.HasSuffix(strings.TrimSpace(out), " valid") {
		t.Errorf("human add: %q", out)
	}
	// Without a policy file memory changes ask, so an agent's fact is
	// proposed, and --direct does not get around that.
	agent := memoryID(t, memoryMust(t, 0, dir, "add", "Stop drains connections", "--kind", "decision",
		"--anchor", "srv/srv.go#Stop", "--author", "agent:claude-1"))
	direct := memoryID(t, memoryMust(t, 0, dir, "add", "srv is the HTTP layer", "--kind", "architecture",
		"--anchor", "srv", "--author", "agent:claude-1", "--direct"))

	var facts []struct{ ID, Status, Author string }
	if err := json.Unmarshal([]byte(memoryMust(t, 0, dir, "ls", "--json")), &facts); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range facts {
		got[f.ID] = f.Status + " " + f.Author
	}
	if got[human] != "valid human:Alice" || got[agent] != "proposed agent:claude-1" || got[direct] != "proposed agent:claude-1" {
		t.Errorf("ls: %v", got)
	}
	if out := memoryMust(t, 0, dir, "review"); !strings.Contains(out, agent) || !strings.Contains(out, direct) || strings.Contains(out, human) {
		t.Errorf("review list:\n%s", out)
	}
	memoryMust(t, 0, dir, "review", direct, "--accept", "--by", "human:bob")

	// Recall skips the proposal and ranks the file anchor over the
	// directory anchor.
	var ms []struct {
		ID     string
		Score  int
		Reason string
	}
	if err := json.Unmarshal([]byte(memoryMust(t, 0, dir, "recall", "srv/srv.go", "--json")), &ms); err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 || ms[0].ID != human || ms[1].ID != direct || ms[0].Score <= ms[1].Score {
		t.Errorf("recall: %+v", ms)
	}

	memoryMust(t, 0, dir, "review", agent, "--accept", "--by", "human:bob")
	memoryMust(t, 125, dir, "review", agent, "--accept")
	memoryMust(t, 125, dir, "review", human, "--accept", "--reject")

	out = memoryMust(t, 0, dir, "verify")
	if !strings.Contains(out, "3 facts checked, 0 stale") {
		t.Errorf("clean verify:\n%s", out)
	}
	src := "package srv\n\nfunc Serve() { go loop() }\n\nfunc Stop() {}\n"
	if err := os.WriteFile(filepath.Join(srv, "srv.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	out = memoryMust(t, 1, dir, "verify")
	for _, want := range []string{"stale " + human + " (now stale)", "srv/srv.go#Serve: modified (symbol Serve changed)", "3 facts checked, 1 stale"} {
		if !strings.Contains(out, want) {
			t.Errorf("verify output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, agent) || strings.Contains(out, direct) {
		t.Errorf("verify reported unchanged facts:\n%s", out)
	}
	if out := memoryMust(t, 0, dir, "ls", "--stale"); !strings.Contains(out, human) || strings.Contains(out, agent) {
		t.Errorf("ls --stale:\n%s", out)
	}
	if out := memoryMust(t, 0, dir, "recall", "Serve", "block"); strings.Contains(out, human) {
		t.Errorf("recall returned a stale fact:\n%s", out)
	}

	memoryMust(t, 0, dir, "confirm", human[:14], "--by", "human:bob", "--why", "still blocks the caller")
	memoryMust(t, 0, dir, "verify")
	memoryMust(t, 125, dir, "forget", human, "--by", "human:bob")
	memoryMust(t, 0, dir, "forget", human, "--by", "human:bob", "--why", "Serve is async now")
	if out := memoryMust(t, 0, dir, "ls"); strings.Contains(out, human) {
		t.Errorf("ls shows a forgotten fact:\n%s", out)
	}
	if out := memoryMust(t, 0, dir, "ls", "--all"); !strings.Contains(out, human) {
		t.Errorf("ls --all hides a forgotten fact:\n%s", out)
	}
	out = strings.Join(strings.Fields(memoryMust(t, 0, dir, "history", human)), " ")
	for _, want := range []string{"human:Alice add", "human:Alice stale srv/srv.go#Serve: modified", "human:bob confirm", "still blocks the caller", "human:bob forget Serve is async now"} {
		if !strings.Contains(out, want) {
			t.Errorf("history lacks %q:\n%s", want, out)
		}
	}
	if out := memoryMust(t, 0, dir, "show", human); !strings.Contains(out, "status:   forgotten") || !strings.Contains(out, "Serve is async now") {
		t.Errorf("show:\n%s", out)
	}

	memoryMust(t, 125, dir, "add", "x", "--kind", "rumour")
	memoryMust(t, 125, dir, "add", "x", "--kind", "gotcha", "--anchor", "missing.go")
	memoryMust(t, 125, dir, "add", "x", "--kind", "gotcha", "--author", "alice")
	memoryMust(t, 125, dir, "show", "zzzz")

	out = memoryMust(t, 0, dir, "install-hook")
	hook := filepath.Join(dir, ".git", "hooks", "post-commit")
	if data, err := os.ReadFile(hook); err != nil || !strings.Contains(string(data), "smolvm memory verify") || !strings.Contains(out, hook) {
		t.Errorf("install-hook: %q, %v\n%s", out, err, data)
	}
}

// TestMemoryProposed checks that the trust policy of the repository given
// with -C, not of the current directory, decides whether an agent's fact is
// proposed, that --direct cannot override it, and that each agent write
// leaves one audit record.
func TestMemoryProposed(t *testing.T) {
	for _, tc := range []struct {
		name, policy string // policy file text; "" for none
		outcome      trust.Outcome
	}{
		{"none", "", trust.Ask},
		{"allow", "[memory]\nchange = \"allow\"\n", trust.Allow},
		{"ask", "[memory]\nchange = \"ask\"\n", trust.Ask},
		{"deny", "[memory]\nchange = \"deny\"\n", trust.Deny},
		{"default allow", "default = \"allow\"\n", trust.Allow},
		{"trusted", "preset = \"trusted\"\n", trust.Allow},
		{"read-only", "preset = \"read-only\"\n", trust.Deny},
		{"deny beats default", "default = \"allow\"\n[memory]\nchange = \"deny\"\n", trust.Deny},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := memoryRepo(t)
			if tc.policy != "" {
				memoryPolicy(t, dir, tc.policy)
			}
			// The current directory's repository says the opposite, so
			// reading the policy from there would give the wrong answer.
			other := memoryRepo(t)
			opposite := "allow"
			if tc.outcome == trust.Allow {
				opposite = "deny"
			}
			memoryPolicy(t, other, "[memory]\nchange = \""+opposite+"\"\n")
			t.Chdir(other)

			data := t.TempDir()
			want := "proposed"
			if tc.outcome == trust.Allow {
				want = "valid"
			}
			for _, extra := range [][]string{nil, {"--direct"}} {
				args := append([]string{"memory", "-C", filepath.Join(dir, "srv"),
					"add", "Stop drains connections", "--kind", "decision", "--author", "agent:claude-1"}, extra...)
				out, errOut, code := newCLI(t, data).run(args...)
				if f := strings.Fields(out); code != 0 || len(f) != 2 || f[1] != want {
					t.Errorf("agent add %v: exit %d, %q, want %s\n%s", extra, code, out, want, errOut)
				}
				if ignored := strings.Contains(errOut, "--direct is ignored"); ignored != (extra != nil) {
					t.Errorf("agent add %v: stderr %q", extra, errOut)
				}
			}
			out, errOut, code := newCLI(t, data).run("memory", "-C", dir,
				"add", "Serve must not block", "--kind", "gotcha", "--author", "human:alice")
			if f := strings.Fields(out); code != 0 || len(f) != 2 || f[1] != "valid" {
				t.Errorf("human add: exit %d, %q\n%s", code, out, errOut)
			}

			// One record per agent write, none for the human's.
			recs := memoryAudit(t, data)
			if len(recs) != 2 {
				t.Fatalf("%d audit records, want 2: %+v", len(recs), recs)
			}
			for _, r := range recs {
				if r.Requester != "agent:claude-1" || r.Repo != dir || r.Action.Kind != trust.Memory ||
					r.Outcome != tc.outcome || r.By != "policy" {
					t.Errorf("audit record %+v, want agent:claude-1 %s in %s", r, tc.outcome, dir)
				}
			}
		})
	}
}

// TestMemoryProposedBadPolicy checks that an agent cannot write memory in a
// repository whose policy file is invalid, and is told where it is wrong.
func TestMemoryProposedBadPolicy(t *testing.T) {
	dir := memoryRepo(t)
	memoryPolicy(t, dir, "[memory]\nchange = \"sometimes\"\n")
	data := t.TempDir()
	_, errOut, code := newCLI(t, data).run("memory", "-C", dir,
		"add", "x", "--kind", "gotcha", "--author", "agent:claude-1")
	if code != exitFailure || !strings.Contains(errOut, trust.FileName+":2") {
		t.Errorf("exit %d, stderr %q; want %d naming %s:2", code, errOut, exitFailure, trust.FileName)
	}
	if out := memoryMust(t, 0, dir, "ls", "--all"); strings.Contains(out, "agent:claude-1") {
		t.Errorf("fact written despite the invalid policy:\n%s", out)
	}
	// Humans are not subject to the policy.
	memoryMust(t, 0, dir, "add", "x", "--kind", "gotcha", "--author", "human:alice")
}

// memoryPolicy writes the trust policy of the repository at dir.
func memoryPolicy(t *testing.T, dir, text string) {
	t.Helper()
	p := filepath.Join(dir, filepath.FromSlash(trust.FileName))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// memoryAudit returns the audit log in the data directory dir.
func memoryAudit(t *testing.T, dir string) []trust.Record {
	t.Helper()
	st, err := store.Open(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	l, err := trust.OpenLedger(t.Context(), st)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := l.Audit(t.Context(), time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	return recs
}
