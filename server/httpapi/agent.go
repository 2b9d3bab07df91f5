package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"smolvm.dev/smolvm/api"
	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/runtime/tenant"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/workflow/runner"
	"smolvm.dev/smolvm/workflow/runner/testparse"
)

// agentRuns are the runs this server started and that have not ended,
// by ID: their cancel functions, for stop and shutdown.
type agentRuns struct {
	mu     sync.Mutex
	active map[string]*activeRun
	wg     sync.WaitGroup
}

type activeRun struct {
	cancel context.CancelFunc
	first  api.AgentRun // what GET answers until the log has the run
	// ended is set at the run's done event, which follows its last save:
	// from then on it may be resumed, and its log is what it is.
	ended bool
}

// errNoRunner answers the agent routes of a server without a runner;
// errNoBranches the fan-out routes of one without their state.
var (
	errNoRunner   = errdefs.New(errdefs.ErrUnsupported, "this server runs no agents")
	errNoBranches = errdefs.New(errdefs.ErrUnsupported, "this server keeps no branch runs")
)

// registerAgentRoutes registers the agent runner's routes and the
// fan-outs' (smolvm branch). They are the admin's: a run reads a path on
// the server's host, and neither kind of run belongs to a tenant.
func (s *Server) registerAgentRoutes(route, bare func(string, http.HandlerFunc)) {
	admin := func(served bool, missing error) func(http.HandlerFunc) http.HandlerFunc {
		return func(h http.HandlerFunc) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) {
				if _, scoped := tenant.Of(r.Context()); scoped {
					writeError(w, tenant.ErrAdminOnly)
					return
				}
				if !served {
					writeError(w, missing)
					return
				}
				h(w, r)
			}
		}
	}
	only := admin(s.o.Runner != nil, errNoRunner)
	route("POST /v1/agent/runs", only(s.startRun))
	route("GET /v1/agent/runs", only(s.listRuns))
	route("GET /v1/agent/runs/{id}", only(s.getRun))
	bare("POST /v1/agent/runs/{id}/stop", only(s.stopRun))
	route("POST /v1/agent/runs/{id}/resume", only(s.resumeRun))
	fanouts := admin(s.o.Branches != nil, errNoBranches)
	route("GET /v1/agent/branches", fanouts(s.listBranchRuns))
	route("GET /v1/agent/branches/{id}", fanouts(s.getBranchRun))
}

// startRun starts a run in the background and answers 202 with it; its
// progress is on /v1/events.
func (s *Server) startRun(w http.ResponseWriter, r *http.Request) {
	var req api.AgentRunRequest
	if err := decode(r.Body, &req); err != nil {
		writeError(w, err)
		return
	}
	o, err := s.runOptions(r.Context(), &req)
	if err != nil {
		writeError(w, err)
		return
	}
	o.ID = runner.NewRunID()
	first := api.AgentRun{ID: o.ID, Created: time.Now().UTC(), Repo: o.Repo, Task: o.Task, Test: o.Test, Agent: o.AgentName, State: string(runner.Running)}
	err = s.launch(r.Context(), &o, first, func(ctx context.Context) error {
		_, err := s.o.Runner.Fix(ctx, o)
		return err
	})
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusAccepted, first)
}

// launch runs fn in the background as run o.ID, whose progress goes to
// /v1/events: the run outlives the request, and the server's shutdown or
// a stop cancels it. first is what GET answers until the log has it. A
// run already running here is a conflict (two resumes at once).
func (s *Server) launch(ctx context.Context, o *runner.Options, first api.AgentRun, fn func(context.Context) error) error {
	a := &s.runs
	a.mu.Lock()
	if old := a.active[o.ID]; old != nil && !old.ended {
		a.mu.Unlock()
		return errRunning(o.ID)
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	run := &activeRun{cancel: cancel, first: first}
	o.Progress = func(e runner.Event) {
		if e.Phase == "done" {
			a.mu.Lock()
			run.ended = true
			a.mu.Unlock()
		}
		s.publishRun(ctx, "agent."+e.Phase, e)
	}
	if a.active == nil {
		a.active = map[string]*activeRun{}
	}
	// An ended run still clearing up may be resumed: its entry is
	// replaced, and it removes only its own.
	a.active[o.ID] = run
	a.wg.Add(1)
	a.mu.Unlock()
	s.publishRun(ctx, "agent.started", runner.Event{Run: o.ID, Phase: "started"})
	go func() {
		defer a.wg.Done()
		defer cancel()
		if err := fn(ctx); err != nil {
			s.o.Logger.Warn("agent run", "run", o.ID, "err", err)
		}
		a.mu.Lock()
		if a.active[o.ID] == run {
			delete(a.active, o.ID)
		}
		a.mu.Unlock()
	}()
	return nil
}

func errRunning(id string) error {
	return errdefs.New(errdefs.ErrConflict, fmt.Sprintf("run %s is running: stop it first", id))
}

// resumeRun continues a run from an iteration's checkpoint in the
// background (smolvm agent resume), as startRun starts one: 202 with the
// run, its progress on /v1/events, a stop ends it. What Resume would
// refuse only once under way (no such iteration, no checkpoint) is
// refused here first, so that the answer says so.
func (s *Server) resumeRun(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var req api.AgentResumeRequest
	if err := decode(r.Body, &req); err != nil {
		writeError(w, err)
		return
	}
	if err := checkBudget(req.AgentBudget); err != nil {
		writeError(w, err)
		return
	}
	run, err := s.o.Runner.Log.Get(r.Context(), id)
	if err != nil {
		writeError(w, err)
		return
	}
	if s.active(id) != nil || run.State == runner.Running {
		writeError(w, errRunning(id))
		return
	}
	its, err := s.o.Runner.Log.Iterations(r.Context(), id)
	if err != nil {
		writeError(w, err)
		return
	}
	if !slices.ContainsFunc(its, func(it runner.Iteration) bool { return it.N == req.From && it.Snapshot != "" }) {
		writeError(w, invalid("from", fmt.Sprintf("run %s has no checkpoint at iteration %d", id, req.From)))
		return
	}
	spec := req.Agent
	if spec == "" {
		// The built-in agent is recorded with its model; the server's
		// SMOLVM_MODEL_* say which model it is now.
		if spec = run.Agent; strings.HasPrefix(spec, "builtin:") {
			spec = "builtin"
		}
	}
	o := budgetOptions(req.AgentBudget)
	o.ID, o.RunsDir = id, s.o.RunsDir
	if o.Agent, o.AgentName, err = s.newAgent(r.Context(), spec, run.Repo); err != nil {
		writeError(w, err)
		return
	}
	first := running(wireRun(run))
	err = s.launch(r.Context(), &o, first, func(ctx context.Context) error {
		_, err := s.o.Runner.Resume(ctx, id, req.From, o)
		return err
	})
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusAccepted, first)
}

// runOptions checks a request and turns it into the runner's options.
func (s *Server) runOptions(ctx context.Context, req *api.AgentRunRequest) (runner.Options, error) {
	switch {
	case req.Task == "":
		return runner.Options{}, invalid("task", "no task")
	case req.Repo == "" || !filepath.IsAbs(req.Repo):
		return runner.Options{}, invalid("repo", "want an absolute path on the server's host")
	}
	if err := checkBudget(req.AgentBudget); err != nil {
		return runner.Options{}, err
	}
	if err := runner.CheckRepo(ctx, req.Repo); err != nil {
		return runner.Options{}, invalid("repo", err.Error())
	}
	o := budgetOptions(req.AgentBudget)
	o.Repo, o.Task, o.Test, o.RunsDir = req.Repo, req.Task, req.Test, s.o.RunsDir
	if o.Test == "" {
		if o.Test = runner.DetectTest(o.Repo); o.Test == "" {
			return o, invalid("test", "no test command given and none detected in "+o.Repo)
		}
	}
	spec := req.Agent
	if spec == "" {
		spec = "builtin"
	}
	var err error
	o.Agent, o.AgentName, err = s.newAgent(ctx, spec, o.Repo)
	return o, err
}

func checkBudget(b api.AgentBudget) error {
	switch {
	case b.MaxIterations < 0 || b.MaxIterations > runner.MaxIterations:
		return invalid("max_iterations", fmt.Sprintf("want 0 (the default) to %d", runner.MaxIterations))
	case b.MaxTokens < 0 || b.MaxCost < 0 || b.FlakyReruns < -1 || b.FlakyReruns > sandbox.MaxFork || b.StuckAfter < 0:
		return invalid("", fmt.Sprintf("budgets must not be negative; flaky_reruns is -1 (off) to %d", sandbox.MaxFork))
	}
	return nil
}

// budgetOptions are the runner's options a budget sets.
func budgetOptions(b api.AgentBudget) runner.Options {
	return runner.Options{
		Budget:      runner.Budget{Iterations: b.MaxIterations, Wall: time.Duration(b.MaxTime), Tokens: b.MaxTokens, CostUSD: b.MaxCost},
		TestTimeout: time.Duration(b.TestTimeout), FlakyReruns: b.FlakyReruns, StuckAfter: b.StuckAfter,
		AllowWeaken: b.AllowTestChanges,
	}
}

// newAgent makes the agent spec names ("builtin" or a command line) for
// repo; the built-in one uses the server's SMOLVM_MODEL_*.
func (s *Server) newAgent(ctx context.Context, spec, repo string) (runner.Agent, string, error) {
	getenv := s.o.Getenv
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	ag, name, err := runner.NewAgent(ctx, spec, repo, getenv, io.Discard)
	if err != nil {
		return nil, "", invalid("agent", err.Error())
	}
	return ag, name, nil
}

// publishRun sends a run's progress to /v1/events.
func (s *Server) publishRun(ctx context.Context, typ string, e runner.Event) {
	data, _ := json.Marshal(wireProgress(e))
	s.o.Manager.Publish(ctx, sandbox.Event{Type: typ, ID: e.Run, Data: data})
}

func wireProgress(e runner.Event) api.AgentProgress {
	return api.AgentProgress{
		Run: e.Run, Iteration: e.Iteration, Phase: e.Phase, Passed: e.Passed, Failed: e.Failed, Flaky: e.Flaky,
		Tokens: e.Tokens, CostUSD: e.CostUSD, Elapsed: e.Elapsed.Seconds(), Note: e.Note,
	}
}

func (s *Server) listRuns(w http.ResponseWriter, r *http.Request) {
	runs, err := s.o.Runner.Log.Runs(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	out := make([]api.AgentRun, 0, len(runs))
	for _, run := range runs {
		out = append(out, s.wireRunHere(run))
	}
	writeJSON(w, http.StatusOK, out)
}

// active is run id if it runs here and has not ended.
func (s *Server) active(id string) *activeRun {
	s.runs.mu.Lock()
	defer s.runs.mu.Unlock()
	if a := s.runs.active[id]; a != nil && !a.ended {
		return a
	}
	return nil
}

// wireRunHere is run as the log has it, but running while it runs here:
// a resumed run's log keeps its last end until its first iteration.
func (s *Server) wireRunHere(run *runner.Run) api.AgentRun {
	if s.active(run.ID) != nil {
		return running(wireRun(run))
	}
	return wireRun(run)
}

// running is run under way again: its last end's outcome cleared.
func running(run api.AgentRun) api.AgentRun {
	run.State, run.Reason, run.Verdict, run.Evidence = string(runner.Running), "", nil, nil
	return run
}

func (s *Server) getRun(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	run, err := s.o.Runner.Log.Get(r.Context(), id)
	if errors.Is(err, runner.ErrRunNotFound) {
		// Started, but the runner has not logged it yet.
		if a := s.active(id); a != nil {
			writeJSON(w, http.StatusOK, api.AgentRunLog{Run: a.first, Iterations: []api.AgentIteration{}})
			return
		}
	}
	if err != nil {
		writeError(w, err)
		return
	}
	its, err := s.o.Runner.Log.Iterations(r.Context(), id)
	if err != nil {
		writeError(w, err)
		return
	}
	out := api.AgentRunLog{Run: s.wireRunHere(run), Iterations: make([]api.AgentIteration, 0, len(its))}
	for _, it := range its {
		wi := api.AgentIteration{N: it.N, Parent: it.Parent, Created: it.Created, Commit: it.Commit, Snapshot: it.Snapshot,
			Diff: it.Diff, Tests: wireTests(it.Result), Flaky: it.Flaky, Usage: wireUsage(it.Usage), Note: it.Note}
		for _, v := range it.Violations {
			wi.Violations = append(wi.Violations, api.AgentViolation{Rule: string(v.Rule), Path: v.Path, Reason: v.Reason})
		}
		out.Iterations = append(out.Iterations, wi)
	}
	writeJSON(w, http.StatusOK, out)
}

// stopRun cancels a running run; it ends as stopped, its best checkpoint
// standing. The answer is the run once it has ended.
func (s *Server) stopRun(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	a := s.active(id)
	if a == nil {
		run, err := s.o.Runner.Log.Get(r.Context(), id)
		if err != nil {
			writeError(w, err)
			return
		}
		writeError(w, errdefs.New(errdefs.ErrConflict, fmt.Sprintf("run %s is not running here (%s)", id, run.State)))
		return
	}
	a.cancel()
	// Wait (bounded by the request) for the run to save its end.
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for s.active(id) != nil {
		select {
		case <-r.Context().Done():
			return
		case <-t.C:
		}
	}
	run, err := s.o.Runner.Log.Get(r.Context(), id)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, wireRun(run))
}

// stopRuns stops every run at shutdown and waits for them to save.
func (s *Server) stopRuns(timeout time.Duration) {
	s.runs.mu.Lock()
	for _, a := range s.runs.active {
		a.cancel()
	}
	s.runs.mu.Unlock()
	done := make(chan struct{})
	go func() { s.runs.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(timeout):
	}
}

func wireRun(run *runner.Run) api.AgentRun {
	return api.AgentRun{
		ID: run.ID, Created: run.Created, Repo: run.Repo, Task: run.Task, Test: run.Test, Agent: run.Agent,
		State: string(run.State), Reason: run.Reason, Best: run.Best, BaseSnapshot: run.BaseSnapshot,
		Verdict: wireTests(run.Verdict), Evidence: wireEvidence(run.Evidence), Flaky: run.Flaky, Usage: wireUsage(run.Usage),
		Elapsed: run.Elapsed.Seconds(),
	}
}

func wireEvidence(e *runner.Evidence) *api.AgentEvidence {
	if e == nil {
		return nil
	}
	c := e.Coverage
	w := &api.AgentEvidence{Verdict: e.Verdict, Reason: e.Reason, FailToPass: e.FailToPass, PassToPass: e.PassToPass,
		PassToFail: e.PassToFail, ProveNothing: e.ProveNothing, Elapsed: e.Elapsed.Seconds(),
		Coverage: api.AgentCoverage{Tool: c.Tool, Changed: c.Changed, Executed: c.Executed, Missed: c.Missed, NotMeasured: c.NotMeasured, Note: c.Note}}
	for _, f := range c.Files {
		w.Coverage.Files = append(w.Coverage.Files, api.AgentFileCoverage{File: f.File, Tool: f.Tool, Changed: f.Changed, Executed: f.Executed, Missed: f.Missed})
	}
	for _, h := range e.Hunks {
		w.Hunks = append(w.Hunks, api.AgentHunk{File: h.File, Header: h.Header, Test: h.Test, Pinned: h.Pinned, By: h.By, Note: h.Note})
	}
	return w
}

func wireTests(r *testparse.Result) *api.AgentTests {
	if r == nil {
		return nil
	}
	return &api.AgentTests{Format: r.Format, Exit: r.Exit, Passed: r.Passed, Failed: r.Failed, Skipped: r.Skipped, Failing: r.Failing()}
}

func wireUsage(u runner.Usage) api.AgentUsage {
	return api.AgentUsage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, CostUSD: u.CostUSD}
}
