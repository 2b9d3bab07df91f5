package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/workflow/runner/testparse"
)

// Fixture is one evaluation task: DIR/NAME holds fixture.json, issue.md,
// repo/ (the code, with its visible tests) and hidden/ (test files laid
// over the result for the verdict, never shown to the agent).
type Fixture struct {
	Name string `json:"name"`
	Dir  string `json:"-"`
	// Test is the test command (default: detected from repo/).
	Test string `json:"test"`
	// FlakyReruns overrides the run's option when set.
	FlakyReruns int `json:"flaky_reruns,omitempty"`
}

// Fixtures reads the fixtures under dir, sorted by name.
func Fixtures(dir string) ([]Fixture, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("eval: %w", err)
	}
	var fs []Fixture
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		f := Fixture{Name: e.Name(), Dir: filepath.Join(dir, e.Name())}
		data, err := os.ReadFile(filepath.Join(f.Dir, "fixture.json"))
		if errors.Is(err, os.ErrNotExist) {
			continue // not a fixture
		}
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(data, &f); err != nil {
			return nil, errdefs.New(errdefs.ErrInvalid, fmt.Sprintf("fixture %s: fixture.json: %v", e.Name(), err))
		}
		f.Name = e.Name()
		if f.Test == "" {
			f.Test = DetectTest(filepath.Join(f.Dir, "repo"))
		}
		fs = append(fs, f)
	}
	if len(fs) == 0 {
		return nil, errdefs.New(errdefs.ErrInvalid, fmt.Sprintf("eval: no fixtures (DIR/NAME/fixture.json) under %s", dir))
	}
	return fs, nil
}

// EvalResult is how one fixture or SWE-bench instance went.
type EvalResult struct {
	Fixture       string            `json:"fixture"` // or the instance ID
	Run           string            `json:"run,omitempty"`
	State         State             `json:"state,omitempty"`
	Resolved      bool              `json:"resolved"` // resolved, and the hidden tests pass
	Iterations    int               `json:"iterations"`
	Interventions int               `json:"interventions"` // changes the guard rejected
	Usage         Usage             `json:"usage"`
	Flaky         []string          `json:"flaky,omitempty"`
	Hidden        *testparse.Result `json:"hidden,omitempty"` // the verdict's tests (SWE-bench: the grading run)
	Error         string            `json:"error,omitempty"`
	Reason        string            `json:"reason,omitempty"`
	// SWE-bench: the model patch graded (nil: none was made), and the
	// harness's report on it (nil: not graded).
	Patch    *string         `json:"model_patch,omitempty"`
	SWEBench *InstanceReport `json:"swebench,omitempty"`
}

// EvalReport sums up an evaluation.
type EvalReport struct {
	Results       []EvalResult `json:"results"`
	Resolved      int          `json:"resolved"`
	Total         int          `json:"total"`
	Rate          float64      `json:"rate"`
	Iterations    int          `json:"iterations"`
	Interventions int          `json:"interventions"`
	Usage         Usage        `json:"usage"`
	// SWEBench is the harness's run report, for SWE-bench instances.
	SWEBench *RunReport `json:"swebench,omitempty"`
}

// add counts res in.
func (rep *EvalReport) add(res EvalResult) {
	rep.Results = append(rep.Results, res)
	rep.Total++
	if res.Resolved {
		rep.Resolved++
	}
	rep.Iterations += res.Iterations
	rep.Interventions += res.Interventions
	rep.Usage.add(res.Usage)
	rep.Rate = float64(rep.Resolved) / float64(rep.Total)
}

// Eval runs every fixture under dir with the agent agentFor gives it and
// o's budgets, one at a time, and reports. A fixture that errors counts
// as unresolved; the others go on.
func (rn *Runner) Eval(ctx context.Context, dir string, agentFor func(Fixture) Agent, o Options) (EvalReport, error) {
	fixtures, err := Fixtures(dir)
	if err != nil {
		return EvalReport{}, err
	}
	var rep EvalReport
	for _, f := range fixtures {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		rep.add(rn.evalOne(ctx, f, agentFor(f), o))
	}
	return rep, nil
}

func (rn *Runner) evalOne(ctx context.Context, f Fixture, agent Agent, o Options) EvalResult {
	res := EvalResult{Fixture: f.Name}
	fail := func(err error) EvalResult { res.Error = err.Error(); return res }
	issue, _, err := ReadIssue(ctx, filepath.Join(f.Dir, "issue.md"), "", nil)
	if err != nil {
		return fail(err)
	}
	repo, err := os.MkdirTemp("", "smolvm-eval-")
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(repo)
	if err := copyTree(filepath.Join(f.Dir, "repo"), repo); err != nil {
		return fail(err)
	}
	for _, args := range [][]string{{"init", "-q"}, {"add", "-A"}, {"-c", "user.name=eval", "-c", "user.email=eval@localhost", "commit", "-qm", "fixture " + f.Name}} {
		if _, err := gitOut(ctx, repo, nil, args...); err != nil {
			return fail(err)
		}
	}
	o.Repo, o.Test, o.Agent, o.Task, o.Policy = repo, f.Test, agent, Task(issue), nil
	if f.FlakyReruns != 0 {
		o.FlakyReruns = f.FlakyReruns
	}
	run, err := rn.Fix(ctx, o)
	if run != nil {
		rn.record(ctx, &res, run)
	}
	if err != nil {
		return fail(err)
	}
	if run.State != Resolved {
		return res
	}
	hidden, err := readTree(filepath.Join(f.Dir, "hidden"))
	if err != nil {
		return fail(err)
	}
	v, err := rn.Verify(ctx, o.RunsDir, run.ID, hidden, o)
	if err != nil {
		return fail(err)
	}
	res.Hidden = &v
	res.Resolved = v.Green() || v.Failed > 0 && !slices.ContainsFunc(v.Failing(), func(n string) bool { return !slices.Contains(run.Flaky, n) })
	return res
}

// record fills in res what run did: its state, iterations, guard
// interventions, tokens and flaky tests.
func (rn *Runner) record(ctx context.Context, res *EvalResult, run *Run) {
	res.Run, res.State, res.Usage, res.Flaky, res.Reason = run.ID, run.State, run.Usage, run.Flaky, run.Reason
	if its, err := rn.Log.Iterations(ctx, run.ID); err == nil {
		res.Iterations = len(its) - 1
		for _, it := range its {
			if len(it.Violations) > 0 {
				res.Interventions++
			}
		}
	}
}

// readTree reads every regular file under dir by slash path; a missing
// dir is empty.
func readTree(dir string) (map[string][]byte, error) {
	out := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, os.ErrNotExist) && p == dir {
			return filepath.SkipDir
		}
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		data, err := os.ReadFile(p)
		out[filepath.ToSlash(rel)] = data
		return err
	})
	return out, err
}
