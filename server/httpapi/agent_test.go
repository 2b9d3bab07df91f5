package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"smolvm.dev/smolvm/api"
	"smolvm.dev/smolvm/server/httpapi"
	"smolvm.dev/smolvm/tests/testmgr"
	"smolvm.dev/smolvm/workflow/llm"
	"smolvm.dev/smolvm/workflow/llm/llmtest"
	"smolvm.dev/smolvm/workflow/runner"
	"smolvm.dev/smolvm/workflow/trust"
)

// agentRepo is a git repository whose node --test suite fails until
// add() adds.
func agentRepo(t *testing.T) string {
	dir := t.TempDir()
	files := map[string]string{
		"calc.js": "exports.add = (a, b) => a - b;\n",
		"calc.test.js": "const test = require('node:test');\nconst assert = require('node:assert');\n" +
			"test('add', () => { assert.strictEqual(require('./calc.js').add(2, 3), 5); });\n",
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"init", "-q"}, {"add", "-A"}, {"-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base"}} {
		if out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	return dir
}

// Runs over the API with the built-in agent on the scripted model: one
// fixes the code (its progress on /v1/events, its log over GET); one
// whose model never answers is stopped and ends stopped at its base
// checkpoint; bad input gets 400 and 404.
func TestAgentRuns(t *testing.T) {
	model := llmtest.NewServer(t)
	model.Respond(func(req llm.Request) llmtest.Turn {
		first := req.Messages[0].Content
		last := req.Messages[len(req.Messages)-1]
		switch {
		case strings.Contains(first, "hang"):
			return llmtest.Turn{Delay: 10 * time.Minute, Text: "too late"}
		case last.Role == llm.RoleUser:
			return llmtest.Turn{InputTokens: 100, OutputTokens: 10, ToolCalls: []llm.ToolCall{{Name: "edit_file",
				Arguments: json.RawMessage(`{"path":"calc.js","old":"a - b","new":"a + b"}`)}}}
		}
		return llmtest.Turn{InputTokens: 100, OutputTokens: 10, Text: "fixed"}
	})
	env := map[string]string{"SMOLVM_MODEL_BASE_URL": model.URL, "SMOLVM_MODEL": "scripted", "SMOLVM_MODEL_API_KEY": "k", "SMOLVM_MODEL_PRICE_IN": "1"}
	f := newFixtureOn(t, func(o *httpapi.Options, e *testmgr.Env) {
		l, err := runner.OpenLog(context.Background(), e.Store)
		if err != nil {
			t.Fatal(err)
		}
		ledger, err := trust.OpenLedger(context.Background(), e.Store)
		if err != nil {
			t.Fatal(err)
		}
		o.Runner = &runner.Runner{Service: e.Manager, Log: l, Ledger: ledger}
		o.RunsDir, o.Getenv = t.TempDir(), func(k string) string { return env[k] }
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	repo := agentRepo(t)
	const test = "node --test --test-reporter=tap"

	for _, c := range []struct {
		body  string
		code  int
		field string
	}{
		{`{"task":`, 400, ""},
		{`{"task":"x","repo":"` + repo + `","bogus":1}`, 400, "bogus"},
		{`{"repo":"` + repo + `"}`, 400, "task"},
		{`{"task":"x","repo":"relative/path"}`, 400, "repo"},
		{`{"task":"x","repo":"` + t.TempDir() + `","test":"true"}`, 400, "repo"}, // not a git repository
		{`{"task":"x","repo":"` + repo + `","test":"true","agent":"builtin","max_iterations":-1}`, 400, "max_iterations"},
	} {
		code, body, _ := f.do(http.MethodPost, "/v1/agent/runs", c.body)
		if code != c.code || apiError(t, body).Field != c.field {
			t.Errorf("POST %s: %d %s, want %d field %q", c.body, code, body, c.code, c.field)
		}
	}
	for _, p := range []string{"GET /v1/agent/runs/run-00000000", "POST /v1/agent/runs/run-00000000/stop"} {
		method, path, _ := strings.Cut(p, " ")
		if code, body, _ := f.do(method, path, ""); code != http.StatusNotFound {
			t.Errorf("%s: %d %s, want 404", p, code, body)
		}
	}

	run, err := f.c.StartAgentRun(ctx, api.AgentRunRequest{Task: "make add add", Repo: repo, Test: test, AgentBudget: api.AgentBudget{MaxIterations: 3, FlakyReruns: -1}})
	if err != nil {
		t.Fatal(err)
	}
	if run.State != "running" || run.ID == "" {
		t.Fatalf("started %+v", run)
	}
	var progress []api.AgentProgress
	if err := f.c.WatchAgentRun(ctx, run.ID, func(p api.AgentProgress) error { progress = append(progress, p); return nil }); err != nil {
		t.Fatal(err)
	}
	l, err := f.c.AgentRun(ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if l.Run.State != "resolved" || l.Run.Best != 1 || l.Run.Verdict == nil || l.Run.Verdict.Passed != 1 || l.Run.Usage.InputTokens != 200 ||
		len(l.Iterations) != 2 || l.Iterations[1].Tests == nil || !strings.Contains(l.Iterations[1].Diff, "+exports.add = (a, b) => a + b;") {
		t.Fatalf("run log = %+v", l)
	}
	if e := l.Run.Evidence; e == nil || e.Verdict != "proven" || !slices.Equal(e.FailToPass, []string{"add"}) ||
		len(e.Hunks) != 1 || !e.Hunks[0].Pinned || e.Coverage.Tool != "node-v8" {
		t.Fatalf("evidence = %+v", l.Run.Evidence)
	}
	var phases []string
	for _, p := range progress {
		phases = append(phases, p.Phase)
	}
	last := progress[len(progress)-1]
	if !slices.Contains(phases, "tests") || last.Phase != "done" || last.Passed != 1 || last.Tokens != 220 || last.CostUSD == 0 || last.Elapsed <= 0 {
		t.Fatalf("progress = %+v", progress)
	}
	// agent.done's elapsed is the run's, not twice it.
	if d := last.Elapsed - l.Run.Elapsed; d < -1 || d > 1 {
		t.Errorf("agent.done says %.1fs elapsed, the run %.1fs", last.Elapsed, l.Run.Elapsed)
	}
	runs, err := f.c.AgentRuns(ctx)
	if err != nil || len(runs) != 1 || runs[0].ID != run.ID {
		t.Fatalf("runs = %+v, %v", runs, err)
	}

	// Resumed from its base, the run fixes add again in a new iteration
	// whose parent is the base, and ends resolved again.
	resume := "/v1/agent/runs/" + run.ID + "/resume"
	for _, c := range []struct {
		path, body string
		code       int
		field      string
	}{
		{resume, `{"from":7}`, 400, "from"},
		{resume, `{"from":0,"max_iterations":-1}`, 400, "max_iterations"},
		{resume, `{"from":0,"bogus":1}`, 400, "bogus"},
		{"/v1/agent/runs/run-00000000/resume", `{"from":0}`, 404, ""},
	} {
		code, body, _ := f.do(http.MethodPost, c.path, c.body)
		if code != c.code || apiError(t, body).Field != c.field {
			t.Errorf("POST %s %s: %d %s, want %d field %q", c.path, c.body, code, body, c.code, c.field)
		}
	}
	resumed, err := f.c.ResumeAgentRun(ctx, run.ID, api.AgentResumeRequest{AgentBudget: api.AgentBudget{MaxIterations: 2, FlakyReruns: -1}})
	if err != nil || resumed.ID != run.ID || resumed.State != "running" || resumed.Agent != l.Run.Agent || resumed.Verdict != nil {
		t.Fatalf("resume: %+v, %v", resumed, err)
	}
	if code, body, _ := f.do(http.MethodPost, resume, `{"from":0}`); code != http.StatusConflict {
		t.Errorf("resume of a running run: %d %s, want 409", code, body)
	}
	if err := f.c.WatchAgentRun(ctx, run.ID, func(api.AgentProgress) error { return nil }); err != nil {
		t.Fatal(err)
	}
	again, err := f.c.AgentRun(ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(again.Iterations); again.Run.State != "resolved" || n != 3 || again.Iterations[n-1].Parent != 0 || again.Iterations[n-1].N != 2 {
		t.Fatalf("resumed run: %s (%s), iterations %+v", again.Run.State, again.Run.Reason, again.Iterations)
	}

	hang, err := f.c.StartAgentRun(ctx, api.AgentRunRequest{Task: "hang", Repo: repo, Test: test, AgentBudget: api.AgentBudget{FlakyReruns: -1}})
	if err != nil {
		t.Fatal(err)
	}
	sawAgent := make(chan struct{})
	watched := make(chan error, 1)
	go func() {
		once := false
		watched <- f.c.WatchAgentRun(ctx, hang.ID, func(p api.AgentProgress) error {
			if p.Phase == "agent" && !once {
				once = true
				close(sawAgent)
			}
			return nil
		})
	}()
	select {
	case <-sawAgent:
	case <-ctx.Done():
		t.Fatal("the hanging run never reached its agent")
	}
	stopped, err := f.c.StopAgentRun(ctx, hang.ID)
	if err != nil {
		t.Fatal(err)
	}
	if stopped.State != "stopped" || stopped.Best != 0 || !strings.Contains(stopped.Reason, "cancelled") {
		t.Fatalf("stopped run = %+v", stopped)
	}
	if err := <-watched; err != nil {
		t.Fatalf("watch: %v", err)
	}
	if code, body, _ := f.do(http.MethodPost, "/v1/agent/runs/"+hang.ID+"/stop", ""); code != http.StatusConflict {
		t.Errorf("second stop: %d %s, want 409", code, body)
	}
}
