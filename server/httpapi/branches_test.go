package httpapi_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/internal/store"
	"smolvm.dev/smolvm/server/httpapi"
	"smolvm.dev/smolvm/workflow/branch"
	"smolvm.dev/smolvm/workflow/runner/testparse"
)

// branchStore is a state database holding a merged split fan-out (a
// passing branch merged after a conflict its resolver settled, a red one
// left out) and a running one whose smolvm is gone.
func branchStore(t *testing.T) *branch.Store {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	bs, err := branch.OpenStore(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	green := &testparse.Result{Format: "tap", Passed: 3}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(bs.SaveRun(ctx, &branch.Run{ID: "br-00000001", Created: now.Add(-time.Hour), Repo: "/src/app", Mode: branch.Split,
		CI: branch.CI{Command: "sh test.sh", Source: "--test"}, Base: "abc", State: branch.Merged, Elapsed: time.Minute,
		Integration: "smolvm/br-00000001/integration", Summary: "1 merged, 1 not merged"}))
	must(bs.SaveBranch(ctx, &branch.Branch{Run: "br-00000001", K: 1, Name: "smolvm/br-00000001/1", Task: "add alpha", State: branch.Passed,
		AgentRun: "run-00000001", Commit: "c1", Result: green, DiffLines: 4, Iterations: 1}))
	must(bs.SaveBranch(ctx, &branch.Branch{Run: "br-00000001", K: 2, Name: "smolvm/br-00000001/2", Task: "add beta", State: branch.Red,
		Reason: "its change failed CI", Result: &testparse.Result{Format: "tap", Passed: 1, Failed: 2}, DiffLines: 7}))
	for _, s := range []branch.Step{
		{Kind: "rank", Note: "order 1"},
		{Kind: "conflict", Branch: 1, Files: []string{"lib.sh"}},
		{Kind: "resolve", Branch: 1, Files: []string{"lib.sh"}, Note: "resolver x"},
		{Kind: "merged", Branch: 1, Commit: "m1", Result: green, Note: "resolved by the resolver agent"},
		{Kind: "done", Commit: "m1", Note: "integration branch smolvm/br-00000001/integration"},
	} {
		must(bs.AddStep(ctx, "br-00000001", &s))
	}
	// Running, by no process (pid 0): it died.
	must(bs.SaveRun(ctx, &branch.Run{ID: "br-00000002", Created: now, Repo: "/src/app", Mode: branch.BestOfN, Task: "fix", State: branch.Running}))
	must(bs.SaveBranch(ctx, &branch.Branch{Run: "br-00000002", K: 1, State: branch.Running}))
	return bs
}

// TestBranchRuns reads fan-outs over the API: the list newest first with
// their branch counts, one run with its branches' CI and its merge
// queue's steps (the conflict, its resolution, the integration's CI) in
// order, a dead run as dead; a tenant is refused them, a server without
// them says so, a bad ID is 400 and a missing one 404.
func TestBranchRuns(t *testing.T) {
	f := withTenants(t, newFakeFixture(t, func(o *httpapi.Options) { o.Branches = &branch.Coordinator{Store: branchStore(t)} }))
	ctx := context.Background()
	runs, err := f.c.BranchRuns(ctx)
	if err != nil || len(runs) != 2 {
		t.Fatalf("list: %+v, %v", runs, err)
	}
	if r := runs[0]; r.ID != "br-00000002" || r.State != "failed" || !strings.Contains(r.Reason, "died") || r.Branches != 1 {
		t.Errorf("the dead run: %+v", r)
	}
	if r := runs[1]; r.ID != "br-00000001" || r.State != "merged" || r.Branches != 2 || r.Green != 1 || r.CI.Command != "sh test.sh" || r.Elapsed != 60 {
		t.Errorf("the merged run: %+v", r)
	}

	l, err := f.c.BranchRun(ctx, "br-00000001")
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Branches) != 2 || l.Branches[0].Tests == nil || l.Branches[0].Tests.Passed != 3 || l.Branches[0].AgentRun != "run-00000001" ||
		l.Branches[1].State != "red" || l.Branches[1].Tests.Failed != 2 || l.Branches[1].DiffLines != 7 {
		t.Errorf("branches: %+v", l.Branches)
	}
	var kinds []string
	for _, s := range l.Steps {
		kinds = append(kinds, s.Kind)
	}
	if strings.Join(kinds, " ") != "rank conflict resolve merged done" || l.Steps[1].Files[0] != "lib.sh" || l.Steps[3].Tests == nil || l.Steps[3].N != 4 {
		t.Errorf("steps: %+v", l.Steps)
	}
	code, body, _ := f.do(http.MethodGet, "/v1/agent/branches/br-00000002", "")
	if code != http.StatusOK || !strings.Contains(string(body), `"state":"failed"`) || !strings.Contains(string(body), "interrupted") {
		t.Errorf("the dead run: %d %s", code, body)
	}

	if _, err := f.c.BranchRun(ctx, "br-0000000f"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("a missing run: %v, want not found", err)
	}
	if code, body, _ := f.do(http.MethodGet, "/v1/agent/branches/..%2Fx", ""); code != http.StatusBadRequest {
		t.Errorf("a bad ID: %d %s, want 400", code, body)
	}
	for _, path := range []string{"/v1/agent/branches", "/v1/agent/branches/br-00000001"} {
		if code, body := f.as("a", http.MethodGet, path, ""); code != http.StatusForbidden || strings.Contains(body, "br-0000000") {
			t.Errorf("tenant a: GET %s: %d %s, want 403", path, code, body)
		}
	}

	none := newFakeFixture(t, nil)
	if code, body, _ := none.do(http.MethodGet, "/v1/agent/branches", ""); code != http.StatusNotImplemented {
		t.Errorf("a server without branch runs: %d %s, want 501", code, body)
	}
}
