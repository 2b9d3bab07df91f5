// Package branch runs many agent branches from one set-up checkpoint and
// merges them through a merge queue gated on the repository's own CI.
package branch

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/internal/proc"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/workflow/runner"
	"smolvm.dev/smolvm/workflow/runner/testparse"
)

// Mode is how a run's branches relate.
type Mode string

const (
	BestOfN Mode = "best-of-n" // the same task on every branch; one wins
	Split   Mode = "split"     // one sub-task per branch; all that pass merge
)

// State is where a run or a branch stands.
type State string

const (
	SettingUp State = "setting-up"
	Running   State = "running"
	Done      State = "done" // every branch finished
	Merging   State = "merging"
	Merged    State = "merged" // the integration branch exists
	Failed    State = "failed" // an error ended it; Reason says which

	Pending State = "pending"
	Passed  State = "passed" // CI green on the branch's best iteration
	Red     State = "red"    // finished, CI not green
	Killed  State = "killed" // over its wall budget
)

// Run is one fan-out as the state database keeps it.
type Run struct {
	ID      string    `json:"id"`
	Created time.Time `json:"created"`
	Repo    string    `json:"repo"`
	Mode    Mode      `json:"mode"`
	Task    string    `json:"task,omitempty"`
	Setup   string    `json:"setup,omitempty"`
	CI      CI        `json:"ci"`
	// Git is the run's bare repository; Base its base commit (the
	// repository's HEAD), the parent of every branch.
	Git  string `json:"git"`
	Base string `json:"base"`
	// Snapshot is the checkpoint taken after set-up: every branch and
	// every merge-queue CI run is a fork of it.
	Snapshot     string         `json:"snapshot,omitempty"`
	SetupElapsed time.Duration  `json:"setup_elapsed"`
	Limits       sandbox.Limits `json:"limits"`
	Concurrency  int            `json:"concurrency"`
	Budget       runner.Budget  `json:"budget"`
	State        State          `json:"state"`
	Reason       string         `json:"reason,omitempty"`
	// Owner is the smolvm process working on it; a running run whose
	// owner is gone was killed.
	proc.Owner
	Elapsed time.Duration `json:"elapsed"`
	// Integration is the branch the merge queue made, and Summary what
	// it merged and ejected.
	Integration string `json:"integration,omitempty"`
	Summary     string `json:"summary,omitempty"`
}

// Branch is one attempt or sub-task.
type Branch struct {
	Run    string `json:"run"`
	K      int    `json:"k"`      // from 1
	Name   string `json:"branch"` // smolvm/RUN/K in the run's repository
	Task   string `json:"task"`
	Agent  string `json:"agent"`
	State  State  `json:"state"`
	Reason string `json:"reason,omitempty"`
	// AgentRun is the runner's run (smolvm agent log shows it).
	AgentRun string `json:"agent_run,omitempty"`
	// Commit is the best iteration, in the run's repository; when the
	// unchanged base stayed the best, the agent's last change, which
	// failed CI.
	Commit string `json:"commit,omitempty"`
	// Result is CI on the best iteration with the base's test files (on
	// that last change, when it failed).
	Result        *testparse.Result `json:"result,omitempty"`
	Flaky         []string          `json:"flaky,omitempty"`
	DiffLines     int               `json:"diff_lines"`
	Interventions int               `json:"interventions"` // changes the guard rejected
	Iterations    int               `json:"iterations"`
	Usage         runner.Usage      `json:"usage"`
	Elapsed       time.Duration     `json:"elapsed"`
	Last          *runner.Event     `json:"last,omitempty"` // the latest progress
}

// Green reports whether the branch's CI passed.
func (b *Branch) Green() bool { return b.State == Passed }

// Options describe a fan-out.
type Options struct {
	Repo  string // a git work tree with no uncommitted changes
	Mode  Mode
	Task  string   // best-of-N
	N     int      // best-of-N: how many branches
	Tasks []string // split: one per branch
	// Agent returns branch k's agent (k from 1) and its name.
	Agent func(k int) (runner.Agent, string, error)
	Setup string // run once with sh -c in the repository; "" for none
	CI    CI
	Image string
	// Limits bound every branch's sandbox (the set-up sandbox's, which
	// the forks keep).
	Limits sandbox.Limits
	// Concurrency is how many branches run at once (default: the host's
	// CPUs).
	Concurrency  int
	Budget       runner.Budget
	TestTimeout  time.Duration
	SetupTimeout time.Duration
	FlakyReruns  int
	StuckAfter   int
	AllowWeaken  bool
	// Progress, if set, is told about every branch's every phase.
	Progress func(k int, e runner.Event)
}

// Limits of a fan-out.
const (
	MaxBranches         = 64
	DefaultSetupTimeout = 30 * time.Minute
	// Grace is what a branch gets past its wall budget to finish its
	// verdict before its context is cancelled.
	Grace = 2 * time.Minute
)

// Coordinator runs fan-outs and merge queues on a sandbox service.
type Coordinator struct {
	Service sandbox.Service
	Runner  *runner.Runner // its Log holds each branch's agent run
	Store   *Store
	// Dir holds each run's repository (Dir/RUN/git); RunsDir is the
	// runner's (each branch's scratch repository).
	Dir, RunsDir string
}

func newID() string {
	b := make([]byte, 4)
	rand.Read(b)
	return "br-" + hex.EncodeToString(b)
}

func (o *Options) check() error {
	switch o.Mode {
	case BestOfN:
		if o.Task == "" || o.N < 1 {
			return errdefs.New(errdefs.ErrInvalid, "best-of-N needs a task and at least one branch")
		}
		o.Tasks = nil
		for range o.N {
			o.Tasks = append(o.Tasks, o.Task)
		}
	case Split:
		if len(o.Tasks) == 0 {
			return errdefs.New(errdefs.ErrInvalid, "split needs at least one task")
		}
		for i, t := range o.Tasks {
			if strings.TrimSpace(t) == "" {
				return errdefs.New(errdefs.ErrInvalid, fmt.Sprintf("task %d is empty", i+1))
			}
		}
	default:
		return errdefs.New(errdefs.ErrInvalid, fmt.Sprintf("unknown mode %q (best-of-n, split)", o.Mode))
	}
	if len(o.Tasks) > MaxBranches {
		return errdefs.New(errdefs.ErrInvalid, fmt.Sprintf("%d branches: at most %d", len(o.Tasks), MaxBranches))
	}
	if o.Agent == nil {
		return errdefs.New(errdefs.ErrInvalid, "no agent")
	}
	if o.CI.Command == "" {
		return errdefs.New(errdefs.ErrInvalid, "no CI command")
	}
	if o.Concurrency < 0 {
		return errdefs.New(errdefs.ErrInvalid, "negative concurrency")
	}
	if o.Concurrency == 0 {
		o.Concurrency = runtime.NumCPU()
	}
	if o.Budget.Wall == 0 {
		o.Budget.Wall = runner.DefaultWall
	}
	if o.SetupTimeout == 0 {
		o.SetupTimeout = DefaultSetupTimeout
	}
	return nil
}

// Fanout sets the repository up once in a sandbox, checkpoints it, and
// runs one agent branch per task on forks of that checkpoint, at most
// Concurrency at a time, each within its budget. It returns once every
// branch has finished; each is saved as it finishes.
func (c *Coordinator) Fanout(ctx context.Context, o Options) (*Run, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	start := time.Now()
	r, err := c.newRun(ctx, o)
	if err != nil {
		return nil, err
	}
	branches := make([]*Branch, len(o.Tasks))
	agents := make([]runner.Agent, len(o.Tasks))
	for i, task := range o.Tasks {
		k := i + 1
		a, name, err := o.Agent(k)
		if err != nil {
			return c.fail(ctx, r, fmt.Errorf("agent of branch %d: %w", k, err))
		}
		agents[i] = a
		branches[i] = &Branch{Run: r.ID, K: k, Name: fmt.Sprintf("smolvm/%s/%d", r.ID, k), Task: task, Agent: name, State: Pending}
		if err := c.Store.SaveBranch(ctx, branches[i]); err != nil {
			return c.fail(ctx, r, err)
		}
	}
	if r.Snapshot, err = c.setup(ctx, r, o); err != nil {
		for _, b := range branches {
			b.State, b.Reason = Failed, "the set-up failed"
			c.Store.SaveBranch(ctx, b)
		}
		return c.fail(ctx, r, err)
	}
	r.SetupElapsed = time.Since(start)
	r.State = Running
	if err := c.Store.SaveRun(ctx, r); err != nil {
		return c.fail(ctx, r, err)
	}
	sem := make(chan struct{}, o.Concurrency)
	var wg sync.WaitGroup
	for i, b := range branches {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				b.State, b.Reason = Failed, "cancelled before it started"
				c.Store.SaveBranch(ctx, b)
				return
			}
			defer func() { <-sem }()
			c.runBranch(ctx, r, o, b, agents[i])
		}()
	}
	wg.Wait()
	r.State, r.Elapsed = Done, time.Since(start)
	if ctx.Err() != nil {
		r.State, r.Reason = Failed, "cancelled"
	}
	return r, c.Store.SaveRun(ctx, r)
}

// newRun checks the repository, clones it into the run's repository
// and saves the run.
func (c *Coordinator) newRun(ctx context.Context, o Options) (*Run, error) {
	repo, err := filepath.Abs(o.Repo)
	if err != nil {
		return nil, err
	}
	top, _, err := git(ctx, repo, "rev-parse", "--show-toplevel")
	if err != nil {
		return nil, errdefs.New(errdefs.ErrInvalid, fmt.Sprintf("%s is not a git repository: %v", repo, err))
	}
	repo = strings.TrimSpace(string(top))
	if dirty, _, err := git(ctx, repo, "status", "--porcelain"); err != nil {
		return nil, err
	} else if len(bytes.TrimSpace(dirty)) > 0 {
		return nil, errdefs.New(errdefs.ErrConflict, fmt.Sprintf("%s has uncommitted changes: commit or stash them (branches start from HEAD)", repo))
	}
	r := &Run{ID: newID(), Created: time.Now().UTC(), Repo: repo, Mode: o.Mode, Task: o.Task, Setup: o.Setup, CI: o.CI,
		Limits: o.Limits, Concurrency: o.Concurrency, Budget: o.Budget, State: SettingUp, Owner: proc.Self()}
	r.Git = filepath.Join(c.Dir, r.ID, "git")
	if err := os.MkdirAll(filepath.Dir(r.Git), 0o700); err != nil {
		return nil, err
	}
	if _, _, err := git(ctx, "", "clone", "-q", "--bare", "--shared", repo, r.Git); err != nil {
		return nil, fmt.Errorf("clone %s: %w", repo, err)
	}
	g := gitDir(r.Git)
	if r.Base, err = g.run(ctx, "rev-parse", "HEAD"); err != nil {
		return nil, fmt.Errorf("%s has no commit: %w", repo, err)
	}
	return r, c.Store.SaveRun(ctx, r)
}

func (c *Coordinator) fail(ctx context.Context, r *Run, err error) (*Run, error) {
	r.State, r.Reason = Failed, err.Error()
	c.Store.SaveRun(ctx, r)
	return r, err
}

// setup prepares a sandbox once and checkpoints it: every branch is a
// fork of that checkpoint.
func (c *Coordinator) setup(ctx context.Context, r *Run, o Options) (string, error) {
	sb, err := c.prepare(ctx, r, o)
	if err != nil {
		return "", err
	}
	defer c.Service.Remove(context.WithoutCancel(ctx), sb, true)
	snap, err := c.Service.Checkpoint(ctx, sb, sandbox.CheckpointOptions{Name: "branch-" + r.ID + "-setup"})
	if err != nil {
		return "", fmt.Errorf("checkpoint the set-up: %w", err)
	}
	return snap.ID, nil
}

// prepare creates a sandbox with the base tree in runner.Dir and runs
// the set-up command there; the caller removes it.
func (c *Coordinator) prepare(ctx context.Context, r *Run, o Options) (string, error) {
	tree, err := os.MkdirTemp("", "smolvm-branch-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tree)
	tree = filepath.Join(tree, "work")
	if err := os.Mkdir(tree, 0o755); err != nil {
		return "", err
	}
	// The committed tree only: what every branch's base commit holds.
	if _, _, err := git(ctx, "", "--git-dir", r.Git, "--work-tree", tree, "checkout", "-f", r.Base, "--", "."); err != nil {
		return "", fmt.Errorf("export %s: %w", short(r.Base), err)
	}
	// The host image by default, as the runner's (its toolchains).
	img := o.Image
	if img == "" {
		img = sandbox.DefaultImage
	}
	sb, err := c.Service.Create(ctx, sandbox.CreateOptions{Image: img, Start: true,
		Config: sandbox.Config{Cmd: []string{"sleep", "infinity"}, Limits: o.Limits}})
	if err != nil {
		return "", fmt.Errorf("create the set-up sandbox: %w", err)
	}
	fail := func(err error) (string, error) {
		c.Service.Remove(context.WithoutCancel(ctx), sb.ID, true)
		return "", err
	}
	// runner.Dir does not exist yet: cp semantics make it the copy.
	if err := c.Service.CopyIn(ctx, sb.ID, tree, runner.Dir); err != nil {
		return fail(fmt.Errorf("copy the repository into %s: %w", sb.ID, err))
	}
	if o.Setup != "" {
		var out bytes.Buffer
		exit, err := c.Service.Exec(ctx, sb.ID, sandbox.Process{Args: []string{"sh", "-c", o.Setup}, Dir: runner.Dir,
			TimeoutMS: o.SetupTimeout.Milliseconds()}, sandbox.Stdio{Stdout: &out, Stderr: &out})
		switch {
		case err != nil:
			return fail(fmt.Errorf("set-up: %w", err))
		case exit.TimedOut:
			return fail(errdefs.New(errdefs.ErrInvalid, fmt.Sprintf("set-up %q timed out after %s: %s", o.Setup, o.SetupTimeout, tail(out.String(), 4<<10))))
		case exit.Error != "" || exit.Code != 0:
			return fail(errdefs.New(errdefs.ErrInvalid, fmt.Sprintf("set-up %q failed (exit %d %s): %s", o.Setup, exit.Code, exit.Error, tail(out.String(), 4<<10))))
		}
	}
	return sb.ID, nil
}

// runBranch forks the set-up checkpoint and runs b's agent loop in the
// fork, then records the outcome.
func (c *Coordinator) runBranch(ctx context.Context, r *Run, o Options, b *Branch, a runner.Agent) {
	start := time.Now()
	b.State = Running
	c.Store.SaveBranch(ctx, b)
	// The wall budget is checked between iterations by the runner; a
	// branch that hangs inside one is cancelled here.
	bctx, cancel := context.WithTimeout(ctx, o.Budget.Wall+Grace)
	defer cancel()
	if ext, ok := a.(*runner.External); ok && (ext.Timeout == 0 || ext.Timeout > o.Budget.Wall) {
		ext.Timeout = o.Budget.Wall
	}
	var mu sync.Mutex
	ro := runner.Options{Repo: r.Repo, Test: r.CI.Command, Task: b.Task, Agent: a, AgentName: b.Agent,
		Budget: o.Budget, TestTimeout: o.TestTimeout, FlakyReruns: o.FlakyReruns, StuckAfter: o.StuckAfter,
		AllowWeaken: o.AllowWeaken, RunsDir: c.RunsDir,
		Progress: func(e runner.Event) {
			mu.Lock()
			b.AgentRun, b.Last = e.Run, &e
			c.Store.SaveBranch(ctx, b)
			mu.Unlock()
			if o.Progress != nil {
				o.Progress(b.K, e)
			}
		}}
	finish := func(st State, reason string) {
		mu.Lock()
		defer mu.Unlock()
		b.State, b.Reason, b.Elapsed = st, reason, time.Since(start)
		c.Store.SaveBranch(ctx, b)
	}
	sb, err := c.Service.Restore(bctx, r.Snapshot, sandbox.RestoreOptions{})
	if err != nil {
		finish(Failed, fmt.Sprintf("fork the set-up: %v", err))
		return
	}
	rec, err := c.Runner.FixIn(bctx, ro, sb.ID)
	killed := bctx.Err() != nil && ctx.Err() == nil
	if rec == nil {
		finish(Failed, err.Error())
		return
	}
	mu.Lock()
	b.AgentRun, b.Usage, b.Flaky, b.Result = rec.ID, rec.Usage, rec.Flaky, rec.Verdict
	mu.Unlock()
	failed, rerr := c.record(ctx, r, b)
	if rerr != nil && err == nil {
		err = rerr
	}
	// The agent's own timeout is the wall budget: a hung agent is killed
	// by it and the runner stops there.
	hung := strings.Contains(rec.Reason, "timed out") && time.Since(start) >= o.Budget.Wall
	switch {
	case killed || hung:
		finish(Killed, fmt.Sprintf("over its wall budget of %s: killed (%s)", o.Budget.Wall, cmp(rec.Reason, errText(err))))
	case err != nil:
		finish(Failed, err.Error())
	case failed != nil:
		finish(Red, fmt.Sprintf("its change failed CI: %s (iteration %d; the unchanged base stayed the best: smolvm agent log %s)",
			resultLine(failed.Result), failed.N, rec.ID))
	case b.DiffLines == 0:
		finish(Red, fmt.Sprintf("made no change (%s: %s; %d interventions)", rec.State, rec.Reason, b.Interventions))
	case rec.Verdict != nil && rec.Verdict.Green():
		finish(Passed, rec.Reason)
	default:
		finish(Red, fmt.Sprintf("%s: %s", rec.State, rec.Reason))
	}
}

// record brings the best iteration of b's agent run into the run's
// repository as branch b.Name, with its size and interventions. When the
// unchanged base is the best (every change the agent made failed CI),
// the branch holds the agent's last tested change instead, with its CI
// result, and record returns that iteration: the change is the branch's
// to show, not only the agent log's.
func (c *Coordinator) record(ctx context.Context, r *Run, b *Branch) (*runner.Iteration, error) {
	ctx = context.WithoutCancel(ctx)
	its, err := c.Runner.Log.Iterations(ctx, b.AgentRun)
	if err != nil {
		return nil, err
	}
	b.Iterations = max(len(its)-1, 0)
	b.Interventions = 0
	for _, it := range its {
		if len(it.Violations) > 0 {
			b.Interventions++
		}
	}
	best, err := c.Runner.Best(ctx, b.AgentRun)
	if err != nil || best.Commit == "" {
		return nil, nil // no iteration was judged: nothing to keep
	}
	var failed *runner.Iteration
	if best.N == 0 {
		if failed = lastChange(its); failed != nil {
			best, b.Result = *failed, failed.Result
		}
	}
	g := gitDir(r.Git)
	if err := g.fetch(ctx, filepath.Join(c.RunsDir, b.AgentRun, "git"), best.Commit, "refs/heads/"+b.Name); err != nil {
		return nil, err
	}
	// The runner's commits sit on HEAD when the tree is clean; put the
	// tree on the run's base in any case, so every branch shares it.
	tree, err := g.run(ctx, "rev-parse", best.Commit+"^{tree}")
	if err != nil {
		return nil, err
	}
	if b.Commit, err = g.commit(ctx, tree, fmt.Sprintf("smolvm branch %s/%d: %s", r.ID, b.K, firstLine(b.Task)), r.Base); err != nil {
		return nil, err
	}
	if err := g.setRef(ctx, "refs/heads/"+b.Name, b.Commit); err != nil {
		return nil, err
	}
	b.DiffLines, err = g.diffLines(ctx, r.Base, b.Commit)
	return failed, err
}

// lastChange is the latest iteration whose change was tested (accepted
// by the checks), or nil.
func lastChange(its []runner.Iteration) *runner.Iteration {
	for i := len(its) - 1; i > 0; i-- {
		if its[i].Result != nil && its[i].Commit != "" && its[i].Diff != "" {
			return &its[i]
		}
	}
	return nil
}

// Get returns a run and its branches; a run still marked as going whose
// process is gone is reported failed (killed), its finished branches
// kept.
func (c *Coordinator) Get(ctx context.Context, id string) (*Run, []*Branch, error) {
	r, err := c.Store.Run(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	bs, err := c.branches(ctx, r)
	if err != nil {
		return nil, nil, err
	}
	return r, bs, nil
}

// Runs lists every run, newest first, with its branches, each as Get
// reads it.
func (c *Coordinator) Runs(ctx context.Context) ([]*Run, [][]*Branch, error) {
	runs, err := c.Store.Runs(ctx)
	if err != nil {
		return nil, nil, err
	}
	all := make([][]*Branch, len(runs))
	for i, r := range runs {
		if all[i], err = c.branches(ctx, r); err != nil {
			return nil, nil, err
		}
	}
	return runs, all, nil
}

// branches returns r's branches, and reports r failed (killed) if it is
// still marked as going but its process is gone, its unfinished
// branches with it.
func (c *Coordinator) branches(ctx context.Context, r *Run) ([]*Branch, error) {
	bs, err := c.Store.Branches(ctx, r.ID)
	if err != nil {
		return nil, err
	}
	if going(r.State) && !r.Alive() {
		r.Reason = fmt.Sprintf("smolvm (pid %d) died while it was %s", r.PID, r.State)
		r.State = Failed
		for _, b := range bs {
			if going(b.State) || b.State == Pending {
				b.State, b.Reason = Failed, "interrupted: "+r.Reason
			}
		}
	}
	return bs, nil
}

func going(s State) bool { return s == SettingUp || s == Running || s == Merging }

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	if len(l) > 72 {
		l = l[:72]
	}
	return l
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
