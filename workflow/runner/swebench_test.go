package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/workflow/runner/testparse"
)

const sweDir = "testdata/swebench"

// sweRepos makes the instances' repositories from testdata/swebench/repos
// under DIR/smolvm/NAME (their repo field is smolvm/NAME), committed with
// a fixed author and date so that each base commit is the one
// instances.jsonl names.
func sweRepos(t *testing.T, insts []Instance) string {
	t.Helper()
	dir := t.TempDir()
	env := append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	for _, k := range []string{"AUTHOR", "COMMITTER"} {
		env = append(env, "GIT_"+k+"_NAME=swe", "GIT_"+k+"_EMAIL=swe@localhost", "GIT_"+k+"_DATE=2026-01-01T00:00:00Z")
	}
	for _, in := range insts {
		repo := filepath.Join(dir, filepath.FromSlash(in.Repo))
		if err := copyTree(filepath.Join(sweDir, "repos", strings.TrimPrefix(in.Repo, "smolvm/")), repo); err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"add", "-A"}, {"commit", "-qm", "base"}} {
			cmd := exec.Command("git", args...)
			cmd.Dir, cmd.Env = repo, env
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%s: git %v: %v\n%s", in.Repo, args, err, out)
			}
		}
		if head, err := gitOut(context.Background(), repo, nil, "rev-parse", "HEAD"); err != nil || head != in.BaseCommit {
			t.Fatalf("%s: base %s (%v), instances.jsonl says %s", in.Repo, head, err, in.BaseCommit)
		}
	}
	return dir
}

// TestReadInstances: JSON Lines, test lists as lists or as strings holding
// them (SWE-bench's published datasets), refusals of broken files.
func TestReadInstances(t *testing.T) {
	insts, err := ReadInstances(filepath.Join(sweDir, "instances.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, in := range insts {
		ids = append(ids, in.InstanceID)
		if len(in.FailToPass) == 0 || len(in.PassToPass) == 0 || in.Patch == "" || in.TestPatch == "" || in.ProblemStatement == "" {
			t.Errorf("%s: %+v", in.InstanceID, in)
		}
	}
	if want := []string{"smolvm__go-calc-1", "smolvm__js-chunk-1", "smolvm__py-slug-1"}; !slices.Equal(ids, want) {
		t.Fatalf("ids %v", ids)
	}
	if py := insts[2]; !slices.Equal(py.FailToPass, []string{"tests/test_slug.py::test_punctuation"}) {
		t.Fatalf("FAIL_TO_PASS from a string: %q", py.FailToPass)
	}
	arr := filepath.Join(t.TempDir(), "insts.json")
	data, _ := json.Marshal(insts)
	os.WriteFile(arr, data, 0o644)
	if again, err := ReadInstances(arr); err != nil || !reflect.DeepEqual(again, insts) {
		t.Fatalf("a JSON array: %v", err)
	}
	for name, body := range map[string]string{
		"no base":   `{"instance_id":"a","repo":"o/r"}`,
		"twice":     `{"instance_id":"a","repo":"o/r","base_commit":"c"}` + "\n" + `{"instance_id":"a","repo":"o/r","base_commit":"c"}`,
		"bad lists": `{"instance_id":"a","repo":"o/r","base_commit":"c","FAIL_TO_PASS":"x"}`,
	} {
		p := filepath.Join(t.TempDir(), "i.jsonl")
		os.WriteFile(p, []byte(body), 0o644)
		if _, err := ReadInstances(p); err == nil {
			t.Errorf("%s: read", name)
		}
	}
}

// TestGradeTests: statuses as SWE-bench's grading reads them, through
// testparse's names: a Go test named without its package, a parent of
// subtests, a skip (fine for PASS_TO_PASS, not for FAIL_TO_PASS), a test
// that did not run (failed).
func TestGradeTests(t *testing.T) {
	res := testparse.Result{Format: "go-json", Tests: []testparse.Test{
		{Name: "example.com/calc.TestAdd", Status: testparse.Pass},
		{Name: "example.com/calc.TestClamp/low", Status: testparse.Pass},
		{Name: "example.com/calc.TestClamp/high", Status: testparse.Fail},
		{Name: "example.com/calc.TestSkip", Status: testparse.Skip},
	}}
	xfail := testparse.Result{Format: "pytest", Tests: []testparse.Test{{Name: "t.py::test_x", Status: testparse.XFail}}}
	if _, ok := gradeTests(Instance{FailToPass: []string{"t.py::test_x"}, PassToPass: []string{"t.py::test_x"}}, xfail); !ok {
		t.Error("an xfail passes, for FAIL_TO_PASS and PASS_TO_PASS alike (grading.py's test_passed)")
	}
	for name, want := range map[string]testparse.Status{
		"TestAdd": testparse.Pass, "example.com/calc.TestAdd": testparse.Pass, "TestClamp/low": testparse.Pass,
		"TestClamp": testparse.Fail, "TestSkip": testparse.Skip, "TestGone": "", "TestAd": "",
	} {
		if got := statusOf(res, name); got != want {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}
	inst := Instance{FailToPass: []string{"TestClamp/high", "TestSkip"}, PassToPass: []string{"TestAdd", "TestSkip", "TestGone"}}
	st, ok := gradeTests(inst, res)
	want := TestsStatus{
		FailToPass: Outcome{Success: []string{}, Failure: []string{"TestClamp/high", "TestSkip"}},
		PassToPass: Outcome{Success: []string{"TestAdd", "TestSkip"}, Failure: []string{"TestGone"}},
		FailToFail: outcome(), PassToFail: outcome(),
	}
	if ok || !reflect.DeepEqual(st, want) {
		t.Fatalf("%v %+v", ok, st)
	}
	if _, ok := gradeTests(Instance{PassToPass: []string{"TestAdd"}}, res); !ok {
		t.Fatal("no FAIL_TO_PASS and PASS_TO_PASS passing: the harness's f2p is 1 then")
	}
}

// TestRunReport sorts results into the harness's sets and writes its keys.
func TestRunReport(t *testing.T) {
	empty, patch := "", "diff"
	insts := []Instance{{InstanceID: "e"}, {InstanceID: "n"}, {InstanceID: "r"}, {InstanceID: "u"}, {InstanceID: "x"}, {InstanceID: "a"}, {InstanceID: "i"}}
	rep := runReport(insts, map[string]EvalResult{
		"e": {Patch: &empty}, "n": {}, "r": {Patch: &patch, SWEBench: &InstanceReport{Resolved: true}},
		"u": {Patch: &patch, SWEBench: &InstanceReport{}}, "x": {Patch: &patch, Error: "does not apply"}, "a": {Error: "sandbox gone"},
	})
	want := RunReport{Total: 7, Submitted: 6, Completed: 2, Resolved: 1, Unresolved: 1, EmptyPatch: 2, Errors: 2,
		CompletedIDs: []string{"r", "u"}, IncompleteIDs: []string{"i"}, EmptyPatchIDs: []string{"e", "n"},
		SubmittedIDs: []string{"a", "e", "n", "r", "u", "x"}, ResolvedIDs: []string{"r"}, UnresolvedIDs: []string{"u"},
		ErrorIDs: []string{"a", "x"}, SchemaVersion: 2}
	if !reflect.DeepEqual(rep, want) {
		t.Fatalf("%+v\nwant %+v", rep, want)
	}
	data, _ := json.Marshal(runReport(nil, nil))
	var keys map[string]any
	json.Unmarshal(data, &keys)
	for _, k := range []string{"total_instances", "submitted_instances", "completed_instances", "resolved_instances", "unresolved_instances",
		"empty_patch_instances", "error_instances", "completed_ids", "incomplete_ids", "empty_patch_ids", "submitted_ids",
		"resolved_ids", "unresolved_ids", "error_ids", "schema_version"} {
		if _, ok := keys[k]; !ok {
			t.Errorf("no %s in %s", k, data)
		}
	}
	if len(keys) != 15 || !strings.Contains(string(data), `"resolved_ids":[]`) {
		t.Errorf("%s", data)
	}
}

// TestSWEBenchPredictions: without an agent, an instance with no
// prediction stays incomplete, and empty or null patches are never graded
// (no sandbox is needed for any of it).
func TestSWEBenchPredictions(t *testing.T) {
	insts, err := ReadInstances(filepath.Join(sweDir, "instances.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	empty := ""
	preds := map[string]Prediction{insts[0].InstanceID: {ModelPatch: &empty}, insts[1].InstanceID: {}}
	rep, err := (&Runner{}).EvalSWEBench(context.Background(), insts, SWEBenchOptions{Repos: sweRepos(t, insts), Predictions: preds}, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	g := rep.SWEBench
	if !slices.Equal(g.EmptyPatchIDs, []string{"smolvm__go-calc-1", "smolvm__js-chunk-1"}) || !slices.Equal(g.IncompleteIDs, []string{"smolvm__py-slug-1"}) ||
		g.Submitted != 2 || g.Completed != 0 || rep.Total != 2 || rep.Rate != 0 {
		t.Fatalf("%+v", g)
	}
}

// editDiff is the diff that replaces old with new in file of repo.
func editDiff(t *testing.T, repo, file, old, new string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "edit")
	if _, err := gitOut(context.Background(), "", nil, "clone", "-q", repo, dir); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil || !strings.Contains(string(data), old) {
		t.Fatalf("%s: %v", file, err)
	}
	os.WriteFile(filepath.Join(dir, file), []byte(strings.Replace(string(data), old, new, 1)), 0o644)
	d, err := gitBytes(context.Background(), dir, nil, "diff")
	if err != nil {
		t.Fatal(err)
	}
	return string(d)
}

// patcher is a scripted agent that applies a patch in its sandbox with
// patch(1) on its first turn; an empty one does nothing.
type patcher struct{ patch string }

func (p patcher) Step(ctx context.Context, s Step) (Usage, error) {
	if p.patch == "" || s.N > 1 {
		return Usage{InputTokens: 1}, nil
	}
	if err := s.Service.WriteFile(ctx, s.Sandbox, "/tmp/model.diff", strings.NewReader(p.patch)); err != nil {
		return Usage{}, err
	}
	var out strings.Builder
	exit, err := s.Service.Exec(ctx, s.Sandbox, sandbox.Process{Args: []string{"patch", "-p1", "-i", "/tmp/model.diff"}, Dir: s.Dir},
		sandbox.Stdio{Stdout: &out, Stderr: &out})
	if err != nil || exit.Code != 0 {
		return Usage{}, fmt.Errorf("patch: %v %+v %s", err, exit, out.String())
	}
	return Usage{InputTokens: 300, OutputTokens: 60}, nil
}

// TestSWEBenchInstances grades the shipped instances (Go, Python, Node)
// in real sandboxes, as SWE-bench's harness would: each gold patch
// resolves its instance and the empty patch resolves none (its
// FAIL_TO_PASS tests fail, its PASS_TO_PASS tests pass). Then agents run
// on them, two at a time: a scripted one that applies the gold patch
// resolves its instance, one that changes nothing leaves an empty patch.
// The run report and the per-instance report.json have the harness's
// keys.
func TestSWEBenchInstances(t *testing.T) {
	if testing.Short() {
		t.Skip("three instances, each graded in sandboxes")
	}
	insts, err := ReadInstances(filepath.Join(sweDir, "instances.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	repos := sweRepos(t, insts)
	rn := newRunner(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	start := time.Now()
	o := Options{From: warmGo(ctx, t, rn), FlakyReruns: -1, Budget: Budget{Iterations: 2}, AgentName: "script"}
	t.Logf("warm-up: %s", time.Since(start).Round(time.Second))

	start = time.Now()
	logs := t.TempDir()
	rep, err := rn.EvalSWEBench(ctx, insts, SWEBenchOptions{Repos: repos, Predictions: GoldPredictions(insts), Parallel: 3, LogDir: logs}, nil, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("gold: %s", time.Since(start).Round(time.Second))
	for _, r := range rep.Results {
		if !r.Resolved || r.Error != "" {
			t.Errorf("gold %s: %+v (tests %+v)", r.Fixture, r.SWEBench, r.Hidden)
		}
	}
	all := []string{"smolvm__go-calc-1", "smolvm__js-chunk-1", "smolvm__py-slug-1"}
	if g := rep.SWEBench; !slices.Equal(g.ResolvedIDs, all) || g.Resolved != 3 || g.Completed != 3 || rep.Rate != 1 {
		t.Errorf("gold report %+v", g)
	}
	var onDisk map[string]InstanceReport
	data, err := os.ReadFile(filepath.Join(logs, "smolvm__go-calc-1", "report.json"))
	if err != nil || json.Unmarshal(data, &onDisk) != nil || !onDisk["smolvm__go-calc-1"].Resolved || !onDisk["smolvm__go-calc-1"].PatchApplied {
		t.Errorf("report.json: %v %s", err, data)
	}

	start = time.Now()
	var wg sync.WaitGroup
	for _, in := range insts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rep, res, err := rn.Grade(ctx, in, filepath.Join(repos, in.Repo), "", o)
			if err != nil {
				t.Errorf("empty patch on %s: %v", in.InstanceID, err)
				return
			}
			st := rep.TestsStatus
			if rep.Resolved || !rep.PatchApplied || !slices.Equal(st.FailToPass.Failure, in.FailToPass) || !slices.Equal(st.PassToPass.Success, in.PassToPass) {
				t.Errorf("empty patch on %s: %+v %+v (tests %+v)", in.InstanceID, rep, st, res)
			}
		}()
	}
	// A model patch that also edits a file the test patch modifies: the
	// file is put back first, so the test patch applies and judges the fix.
	py := insts[2]
	wg.Add(2)
	go func() {
		defer wg.Done()
		edited := py.Patch + editDiff(t, filepath.Join(repos, py.Repo), "tests/test_slug.py", `"Hello World") == "hello-world"`, `"Hello World")`)
		rep, res, err := rn.Grade(ctx, py, filepath.Join(repos, py.Repo), edited, o)
		if err != nil || !rep.Resolved {
			t.Errorf("gold + test edit on %s: %+v %v (tests %+v)", py.InstanceID, rep, err, res)
		}
	}()
	go func() {
		defer wg.Done()
		js := insts[1]
		_, _, err := rn.Grade(ctx, js, filepath.Join(repos, js.Repo), strings.ReplaceAll(js.Patch, "i + n <= list.length", "i + n <= list.size"), o)
		if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "model patch does not apply") {
			t.Errorf("a patch that does not apply: %v", err)
		}
	}()
	wg.Wait()
	t.Logf("empty and other patches: %s", time.Since(start).Round(time.Second))

	start = time.Now()
	agents := map[string]Agent{"smolvm__go-calc-1": patcher{insts[0].Patch}, "smolvm__js-chunk-1": patcher{insts[1].Patch}, "smolvm__py-slug-1": patcher{}}
	rep, err = rn.EvalSWEBench(ctx, insts, SWEBenchOptions{Repos: repos, Parallel: 2},
		func(in Instance) (Agent, error) { return agents[in.InstanceID], nil }, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("agents: %s", time.Since(start).Round(time.Second))
	g := rep.SWEBench
	if !slices.Equal(g.ResolvedIDs, all[:2]) || !slices.Equal(g.EmptyPatchIDs, all[2:]) || g.Errors != 0 || rep.Rate != 2.0/3 {
		t.Errorf("agents' report %+v", g)
	}
	for _, r := range rep.Results {
		if r.Run == "" || r.Iterations == 0 || r.Error != "" {
			t.Errorf("agent on %s: %+v", r.Fixture, r)
		}
		if r.Fixture == "smolvm__go-calc-1" && (r.Patch == nil || !strings.Contains(*r.Patch, "+\tif x > hi {") || !strings.HasSuffix(*r.Patch, "\n")) {
			t.Errorf("go-calc's model patch: %v", r.Patch)
		}
	}
}
