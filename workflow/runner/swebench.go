package runner

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/internal/lazyre"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/workflow/runner/testparse"
)

// Instance is one task in SWE-bench's dataset format. FAIL_TO_PASS and
// PASS_TO_PASS name tests as the test command's parser does (testparse:
// "file.py::test", "pkg.TestX/sub", "suite > test"); a Go test may also be
// named without its package, as SWE-bench's go parser names it.
type Instance struct {
	InstanceID       string   `json:"instance_id"`
	Repo             string   `json:"repo"` // owner/name: found under the repos directory (RepoDir)
	BaseCommit       string   `json:"base_commit"`
	ProblemStatement string   `json:"problem_statement"`
	TestPatch        string   `json:"test_patch"`
	Patch            string   `json:"patch"` // the gold patch
	FailToPass       TestList `json:"FAIL_TO_PASS"`
	PassToPass       TestList `json:"PASS_TO_PASS"`
	// TestCmd is smolvm's own field: SWE-bench keeps the test command per
	// repository and version in its harness. Default: DetectTest on the
	// base commit's tree.
	TestCmd string `json:"test_cmd,omitempty"`
}

// TestList is a JSON list of test names, or a string holding one (as
// SWE-bench's published datasets carry FAIL_TO_PASS and PASS_TO_PASS).
type TestList []string

func (l *TestList) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		b = []byte(s)
	}
	var list []string
	if err := json.Unmarshal(b, &list); err != nil {
		return fmt.Errorf("want a list of test names: %w", err)
	}
	*l = list
	return nil
}

// Prediction is a model's patch for an instance, as the harness reads
// predictions. A nil ModelPatch is the harness's None.
type Prediction struct {
	InstanceID string  `json:"instance_id"`
	Model      string  `json:"model_name_or_path"`
	ModelPatch *string `json:"model_patch"`
}

// ReadInstances reads a JSON array of instances or JSON Lines, one a line.
func ReadInstances(path string) ([]Instance, error) {
	list, err := readRecords[Instance](path)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for i, in := range list {
		switch {
		case in.InstanceID == "" || in.Repo == "" || in.BaseCommit == "":
			return nil, errdefs.New(errdefs.ErrInvalid, fmt.Sprintf("%s: instance %d lacks instance_id, repo or base_commit", path, i+1))
		case seen[in.InstanceID]:
			return nil, errdefs.New(errdefs.ErrInvalid, fmt.Sprintf("%s: instance %s twice", path, in.InstanceID))
		}
		seen[in.InstanceID] = true
	}
	return list, nil
}

// ReadPredictions reads predictions (a JSON array or JSON Lines) by
// instance ID.
func ReadPredictions(path string) (map[string]Prediction, error) {
	list, err := readRecords[Prediction](path)
	if err != nil {
		return nil, err
	}
	out := map[string]Prediction{}
	for _, p := range list {
		out[p.InstanceID] = p
	}
	return out, nil
}

// GoldPredictions are the instances' own patches, as the harness's
// --predictions_path gold makes them.
func GoldPredictions(insts []Instance) map[string]Prediction {
	out := map[string]Prediction{}
	for _, in := range insts {
		out[in.InstanceID] = Prediction{InstanceID: in.InstanceID, Model: "gold", ModelPatch: &in.Patch}
	}
	return out
}

func readRecords[T any](path string) ([]T, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("swe-bench: %w", err)
	}
	var list []T
	if t := bytes.TrimSpace(data); len(t) > 0 && t[0] == '[' {
		if err := json.Unmarshal(t, &list); err != nil {
			return nil, errdefs.New(errdefs.ErrInvalid, fmt.Sprintf("%s: %v", path, err))
		}
		return list, nil
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for n := 1; sc.Scan(); n++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			return nil, errdefs.New(errdefs.ErrInvalid, fmt.Sprintf("%s:%d: %v", path, n, err))
		}
		list = append(list, v)
	}
	return list, sc.Err()
}

// RepoDir finds repo (owner/name) under repos: repos/owner/name,
// repos/owner__name (the form of SWE-bench's instance IDs) or repos/name;
// or repos itself when it is a git work tree (one repository for all).
func RepoDir(ctx context.Context, repos, repo string) (string, error) {
	owner, name, _ := strings.Cut(repo, "/")
	for _, p := range []string{filepath.Join(repos, filepath.FromSlash(repo)), filepath.Join(repos, owner+"__"+name), filepath.Join(repos, name)} {
		if st, err := os.Stat(p); err == nil && st.IsDir() && name != "" {
			return p, CheckRepo(ctx, p)
		}
	}
	if CheckRepo(ctx, repos) == nil {
		return repos, nil
	}
	return "", errdefs.New(errdefs.ErrNotFound, fmt.Sprintf("repository %s: not under %s (as %s, %s__%s or %s)", repo, repos, repo, owner, name, name))
}

// Outcome is one category of SWE-bench's tests_status.
type Outcome struct {
	Success []string `json:"success"`
	Failure []string `json:"failure"`
}

// TestsStatus is SWE-bench's tests_status. FAIL_TO_FAIL and PASS_TO_FAIL
// stay empty, as the harness leaves them when grading.
type TestsStatus struct {
	FailToPass Outcome `json:"FAIL_TO_PASS"`
	PassToPass Outcome `json:"PASS_TO_PASS"`
	FailToFail Outcome `json:"FAIL_TO_FAIL"`
	PassToFail Outcome `json:"PASS_TO_FAIL"`
}

// InstanceReport is the value of the harness's report.json for one
// instance ({instance_id: InstanceReport}).
type InstanceReport struct {
	PatchIsNone  bool         `json:"patch_is_None"`
	PatchExists  bool         `json:"patch_exists"`
	PatchApplied bool         `json:"patch_successfully_applied"`
	Resolved     bool         `json:"resolved"`
	TestsStatus  *TestsStatus `json:"tests_status,omitempty"`
}

// RunReport is the harness's run report (reporting.make_run_report), key
// for key.
type RunReport struct {
	Total         int      `json:"total_instances"`
	Submitted     int      `json:"submitted_instances"`
	Completed     int      `json:"completed_instances"`
	Resolved      int      `json:"resolved_instances"`
	Unresolved    int      `json:"unresolved_instances"`
	EmptyPatch    int      `json:"empty_patch_instances"`
	Errors        int      `json:"error_instances"`
	CompletedIDs  []string `json:"completed_ids"`
	IncompleteIDs []string `json:"incomplete_ids"`
	EmptyPatchIDs []string `json:"empty_patch_ids"`
	SubmittedIDs  []string `json:"submitted_ids"`
	ResolvedIDs   []string `json:"resolved_ids"`
	UnresolvedIDs []string `json:"unresolved_ids"`
	ErrorIDs      []string `json:"error_ids"`
	SchemaVersion int      `json:"schema_version"`
}

// runReport sorts results into the harness's sets: no result is
// incomplete, an empty or None patch is empty (and never graded), a
// graded one is completed and resolved or not, the rest are errors.
func runReport(insts []Instance, results map[string]EvalResult) RunReport {
	rep := RunReport{SchemaVersion: 2, Total: len(insts)}
	for _, in := range insts {
		id := in.InstanceID
		res, ok := results[id]
		switch {
		case !ok:
			rep.IncompleteIDs = append(rep.IncompleteIDs, id)
			continue
		case res.Patch == nil && res.Error != "":
			rep.ErrorIDs = append(rep.ErrorIDs, id) // no patch made: the agent's run failed
		case res.Patch == nil || *res.Patch == "":
			rep.EmptyPatchIDs = append(rep.EmptyPatchIDs, id)
		case res.SWEBench == nil:
			rep.ErrorIDs = append(rep.ErrorIDs, id)
		case res.SWEBench.Resolved:
			rep.CompletedIDs = append(rep.CompletedIDs, id)
			rep.ResolvedIDs = append(rep.ResolvedIDs, id)
		default:
			rep.CompletedIDs = append(rep.CompletedIDs, id)
			rep.UnresolvedIDs = append(rep.UnresolvedIDs, id)
		}
		rep.SubmittedIDs = append(rep.SubmittedIDs, id)
	}
	for _, l := range []*[]string{&rep.CompletedIDs, &rep.IncompleteIDs, &rep.EmptyPatchIDs, &rep.SubmittedIDs, &rep.ResolvedIDs, &rep.UnresolvedIDs, &rep.ErrorIDs} {
		if *l == nil {
			*l = []string{} // [] as the harness writes it, not null
		}
		slices.Sort(*l)
	}
	rep.Submitted, rep.Completed, rep.Resolved = len(rep.SubmittedIDs), len(rep.CompletedIDs), len(rep.ResolvedIDs)
	rep.Unresolved, rep.EmptyPatch, rep.Errors = len(rep.UnresolvedIDs), len(rep.EmptyPatchIDs), len(rep.ErrorIDs)
	return rep
}

// Grade judges patch on inst as SWE-bench's harness does: in a fresh
// sandbox (o.From, o.Image, o.Limits) holding the base commit's tree, it
// applies patch (git apply, else patch --batch --fuzz=5), puts the files
// the test patch modifies back to the base commit's, applies the test
// patch, runs the test command (o.TestTimeout) and grades the result
// (gradeTests). The patches are applied inside the sandbox, as the
// harness applies them in its container: a model's patch never writes on
// the host. A patch that does not apply, a test run that fails to run or
// times out is an error: the harness writes no report for those. repo is
// the instance's repository on the host (RepoDir).
func (rn *Runner) Grade(ctx context.Context, inst Instance, repo, patch string, o Options) (InstanceReport, testparse.Result, error) {
	rep := InstanceReport{PatchExists: true}
	tmp, err := os.MkdirTemp("", "smolvm-grade-")
	if err != nil {
		return rep, testparse.Result{}, err
	}
	defer os.RemoveAll(tmp)
	w, err := checkout(ctx, repo, inst.BaseCommit, filepath.Join(tmp, "repo"))
	if err != nil {
		return rep, testparse.Result{}, err
	}
	test := cmp0(inst.TestCmd, DetectTest(w.dir))
	if test == "" {
		return rep, testparse.Result{}, errdefs.New(errdefs.ErrInvalid, fmt.Sprintf("%s: no test_cmd and none detected", inst.InstanceID))
	}
	tree, err := w.export()
	if err != nil {
		return rep, testparse.Result{}, err
	}
	sb, err := startBox(ctx, rn.Service, o, "", tree)
	if err != nil {
		return rep, testparse.Result{}, err
	}
	defer rn.Service.Remove(context.WithoutCancel(ctx), sb, true)
	if err := applyIn(ctx, rn.Service, sb, "model patch", patch, true); err != nil {
		return rep, testparse.Result{}, err
	}
	if err := w.resetTests(ctx, rn.Service, sb, inst.TestPatch); err != nil {
		return rep, testparse.Result{}, err
	}
	if err := applyIn(ctx, rn.Service, sb, "test patch", inst.TestPatch, false); err != nil {
		return rep, testparse.Result{}, err
	}
	rep.PatchApplied = true
	res, err := RunTests(ctx, rn.Service, sb, test, o.TestTimeout)
	if err != nil {
		return rep, res, err
	}
	if strings.HasPrefix(res.Failure, timedOut) {
		return rep, res, fmt.Errorf("%s: %s", inst.InstanceID, strings.SplitN(res.Failure, "\n", 2)[0])
	}
	st, ok := gradeTests(inst, res)
	rep.TestsStatus, rep.Resolved = &st, ok
	return rep, res, nil
}

// gradeTests is the harness's get_eval_tests_report and
// get_resolution_status: a FAIL_TO_PASS test succeeds when it passed or
// xfailed, a PASS_TO_PASS test when it passed, xfailed or was skipped; a
// test the run did not report failed. Resolved is every test of both
// lists succeeding.
func gradeTests(inst Instance, res testparse.Result) (TestsStatus, bool) {
	st := TestsStatus{FailToPass: outcome(), PassToPass: outcome(), FailToFail: outcome(), PassToFail: outcome()}
	for _, name := range inst.FailToPass {
		s := statusOf(res, name)
		judge(&st.FailToPass, name, s == testparse.Pass || s == testparse.XFail)
	}
	for _, name := range inst.PassToPass {
		s := statusOf(res, name)
		judge(&st.PassToPass, name, s == testparse.Pass || s == testparse.XFail || s == testparse.Skip)
	}
	return st, len(st.FailToPass.Failure) == 0 && len(st.PassToPass.Failure) == 0
}

func outcome() Outcome { return Outcome{Success: []string{}, Failure: []string{}} }

func judge(o *Outcome, name string, ok bool) {
	if ok {
		o.Success = append(o.Success, name)
	} else {
		o.Failure = append(o.Failure, name)
	}
}

// statusOf is how the test name fared in res: the test of that name; else
// a Go test named without its package ("TestX" for "example.com/p.TestX");
// else a parent whose subtests testparse counted instead (failed if one
// failed, skipped if all were, passed otherwise); "" when none ran.
func statusOf(res testparse.Result, name string) testparse.Status {
	if s := res.Status(name); s != "" {
		return s
	}
	goName := res.Format == "go-json" && !strings.Contains(name, ".")
	match := func(t string) bool {
		if t == name || strings.HasPrefix(t, name+"/") {
			return true
		}
		return goName && (strings.HasSuffix(t, "."+name) || strings.Contains(t, "."+name+"/"))
	}
	var seen []testparse.Status
	for _, t := range res.Tests {
		if match(t.Name) {
			seen = append(seen, t.Status)
		}
	}
	switch {
	case len(seen) == 0:
		return ""
	case slices.Contains(seen, testparse.Fail):
		return testparse.Fail
	case !slices.Contains(seen, testparse.Pass):
		return testparse.Skip
	}
	return testparse.Pass
}

// work is a clone of a repository checked out at its base commit, on
// the host: export copies its tree without .git for a sandbox, and the
// base commit's files are read from it.
type work struct {
	dir, base string
}

// checkout clones repo (sharing its objects) into dir and checks commit
// out there.
func checkout(ctx context.Context, repo, commit, dir string) (*work, error) {
	w := &work{dir: dir, base: commit}
	if _, err := gitOut(ctx, "", nil, "clone", "-q", "--shared", "--no-checkout", repo, dir); err != nil {
		return nil, fmt.Errorf("clone %s: %w", repo, err)
	}
	if _, err := gitOut(ctx, dir, nil, "checkout", "-q", "--detach", commit); err != nil {
		return nil, fmt.Errorf("check out %s of %s: %w", short(commit), repo, err)
	}
	return w, nil
}

// export copies the tree, without .git, to a new directory beside it.
func (w *work) export() (string, error) {
	tree := w.dir + "-tree"
	if err := copyTree(w.dir, tree); err != nil {
		return "", fmt.Errorf("export %s: %w", w.dir, err)
	}
	return tree, nil
}

// applyIn applies patch to Dir in sb: git apply (outside any repository:
// Dir has no .git), else, with fuzz, patch --batch --fuzz=5 as the harness
// falls back to. An empty patch is nothing to do.
func applyIn(ctx context.Context, svc sandbox.Service, sb, what, patch string, fuzz bool) error {
	if strings.TrimSpace(patch) == "" {
		return nil
	}
	f := "/tmp/smolvm-" + strings.ReplaceAll(what, " ", "-") + ".diff"
	if err := svc.WriteFile(ctx, sb, f, strings.NewReader(patch)); err != nil {
		return fmt.Errorf("write the %s: %w", what, err)
	}
	script := "git apply --whitespace=nowarn " + f
	if fuzz {
		script += " || patch --batch --fuzz=5 -p1 -i " + f
	}
	var out capped
	out.max = 16 << 10
	exit, err := svc.Exec(ctx, sb, sandbox.Process{Args: []string{"sh", "-c", script}, Dir: Dir,
		Env: []string{"GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1"}}, sandbox.Stdio{Stdout: &out, Stderr: &out})
	if err != nil {
		return fmt.Errorf("apply the %s: %w", what, err)
	}
	if exit.Code != 0 || exit.Error != "" {
		return errdefs.New(errdefs.ErrInvalid, fmt.Sprintf("the %s does not apply (exit %d %s): %s", what, exit.Code, exit.Error, head(out.String(), 2<<10)))
	}
	return nil
}

// modified matches the files a patch modifies ("--- a/PATH"), as the
// harness's DIFF_MODIFIED_FILE_REGEX does.
var modified = lazyre.New(`(?m)^--- a/(.*)$`)

// resetTests puts the files testPatch modifies back in sb as the base
// commit has them, so the model's edits to them do not stand in the way of
// the test patch (the harness's git checkout BASE -- FILES).
func (w *work) resetTests(ctx context.Context, svc sandbox.Service, sb, testPatch string) error {
	for _, m := range modified().FindAllStringSubmatch(testPatch, -1) {
		f := strings.TrimRight(m[1], "\r\t ")
		data, err := gitBytes(ctx, w.dir, nil, "cat-file", "blob", w.base+":"+f)
		if err != nil {
			return fmt.Errorf("reset %s: %w", f, err)
		}
		if err := svc.WriteFile(ctx, sb, path.Join(Dir, f), bytes.NewReader(data)); err != nil {
			return fmt.Errorf("reset %s: %w", f, err)
		}
	}
	return nil
}

// SWEBenchOptions say how to evaluate SWE-bench instances.
type SWEBenchOptions struct {
	// Repos is where each instance's repository is found (RepoDir).
	Repos string
	// Predictions are graded as given, by instance ID; the other
	// instances get an agent run whose best iteration's diff is the
	// model patch, or, without an agent, stay incomplete (as the harness
	// leaves an instance with no prediction).
	Predictions map[string]Prediction
	// Parallel is how many instances run at once, each in its own
	// sandboxes (default 1).
	Parallel int
	// LogDir, if set, gets per instance LogDir/ID/report.json (the
	// harness's), patch.diff and tests.json (the grading run, parsed).
	LogDir string
}

// EvalSWEBench evaluates insts: each instance's patch (a prediction, or
// what an agent from agentFor, when not nil, made on its base commit) is
// graded as SWE-bench's harness grades it, so.Parallel instances at a
// time. The report carries the harness's run report; Rate is resolved
// over all instances, the harness's resolved rate. Instances not started
// when ctx ends are incomplete.
func (rn *Runner) EvalSWEBench(ctx context.Context, insts []Instance, so SWEBenchOptions, agentFor func(Instance) (Agent, error), o Options) (EvalReport, error) {
	var todo []Instance
	for _, in := range insts {
		if _, ok := so.Predictions[in.InstanceID]; ok || agentFor != nil {
			todo = append(todo, in)
		}
	}
	results := make([]EvalResult, len(todo))
	ran := each(ctx, len(todo), so.Parallel, func(i int) {
		results[i] = rn.sweOne(ctx, todo[i], so, agentFor, o)
	})
	var rep EvalReport
	byID := map[string]EvalResult{}
	for i, res := range results {
		if ran[i] {
			rep.add(res)
			byID[res.Fixture] = res
		}
	}
	rr := runReport(insts, byID)
	rep.SWEBench = &rr
	if rep.Total > 0 {
		rep.Rate = float64(rep.Resolved) / float64(len(insts))
	}
	return rep, ctx.Err()
}

// each calls fn(i) for every i below n, at most parallel at once, and no
// more once ctx is done; it says which ran.
func each(ctx context.Context, n, parallel int, fn func(i int)) []bool {
	ran := make([]bool, n)
	sem := make(chan struct{}, max(parallel, 1))
	var wg sync.WaitGroup
	for i := range n {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		ran[i] = true
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			fn(i)
		}()
	}
	wg.Wait()
	return ran
}

// sweOne grades inst's prediction, or runs an agent for one first.
func (rn *Runner) sweOne(ctx context.Context, inst Instance, so SWEBenchOptions, agentFor func(Instance) (Agent, error), o Options) EvalResult {
	res := EvalResult{Fixture: inst.InstanceID}
	fail := func(err error) EvalResult { res.Error = err.Error(); return res }
	repo, err := RepoDir(ctx, so.Repos, inst.Repo)
	if err != nil {
		return fail(err)
	}
	if p, ok := so.Predictions[inst.InstanceID]; ok {
		res.Patch = p.ModelPatch
	} else {
		agent, err := agentFor(inst)
		if err != nil {
			return fail(err)
		}
		patch, err := rn.sweAgent(ctx, inst, repo, agent, o, &res)
		if err != nil {
			return fail(err)
		}
		res.Patch = &patch
	}
	if res.Patch == nil || *res.Patch == "" {
		return res // the harness grades no empty patch
	}
	rep, tests, err := rn.Grade(ctx, inst, repo, *res.Patch, o)
	res.Hidden = &tests
	if err != nil {
		return fail(err)
	}
	res.SWEBench, res.Resolved = &rep, rep.Resolved
	if so.LogDir != "" {
		if err := writeInstanceLog(filepath.Join(so.LogDir, inst.InstanceID), inst.InstanceID, res); err != nil {
			return fail(err)
		}
	}
	return res
}

// sweAgent runs agent on inst's base commit and returns the model patch:
// the diff of the run's best iteration ("" when that is the base). The
// run starts as FixIn does: the visible tests of a SWE-bench base mostly
// pass, and that is an issue to resolve, not nothing to fix.
func (rn *Runner) sweAgent(ctx context.Context, inst Instance, repo string, agent Agent, o Options, res *EvalResult) (string, error) {
	tmp, err := os.MkdirTemp("", "smolvm-swebench-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	w, err := checkout(ctx, repo, inst.BaseCommit, filepath.Join(tmp, "repo"))
	if err != nil {
		return "", err
	}
	tree, err := w.export()
	if err != nil {
		return "", err
	}
	o.Repo, o.Agent, o.Policy = w.dir, agent, nil
	o.Test = cmp0(inst.TestCmd, DetectTest(w.dir))
	o.Task = fmt.Sprintf("Resolve this issue in the repository (SWE-bench instance %s):\n\n%s", inst.InstanceID, inst.ProblemStatement)
	sb, err := startBox(ctx, rn.Service, o, "", tree)
	if err != nil {
		return "", err
	}
	run, err := rn.FixIn(ctx, o, sb)
	if run != nil {
		rn.record(ctx, res, run)
	}
	if err != nil {
		return "", err
	}
	best, err := rn.Best(ctx, run.ID)
	if err != nil {
		return "", err
	}
	// The log keeps diffs trimmed: a patch whose last line is an added one
	// wants its newline back, or git apply and patch call it corrupt.
	if best.Diff != "" && !strings.HasSuffix(best.Diff, "\n") {
		return best.Diff + "\n", nil
	}
	return best.Diff, nil
}

// writeInstanceLog writes dir/report.json as the harness does
// ({instance_id: report}), the model patch and the grading run.
func writeInstanceLog(dir, id string, res EvalResult) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	report, err := json.MarshalIndent(map[string]*InstanceReport{id: res.SWEBench}, "", "    ")
	if err != nil {
		return err
	}
	tests, err := json.MarshalIndent(res.Hidden, "", "  ")
	if err != nil {
		return err
	}
	for name, data := range map[string][]byte{"report.json": report, "patch.diff": []byte(*res.Patch), "tests.json": tests} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return fmt.Errorf("swe-bench log: %w", err)
		}
	}
	return nil
}
