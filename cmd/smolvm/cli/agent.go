package cli

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"smolvm.dev/smolvm/internal/lazyre"
	"smolvm.dev/smolvm/workflow/forge"
	"smolvm.dev/smolvm/workflow/runner"
)

// agentFlags are the flags fix, run and resume share.
type agentFlags struct {
	repo, test, agent, task string
	budget                  runner.Budget
	testTimeout             time.Duration
	flakyReruns, stuckAfter int
	allowWeaken, asJSON     bool
}

func (f *agentFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.repo, "repo", ".", "the repository (a git work tree); it is copied, never written")
	fl.StringVar(&f.test, "test", "", "the test command, run with sh -c in the repository inside the sandbox (default: detected from go.mod, pytest files, package.json)")
	fl.StringVar(&f.agent, "agent", "builtin", `"builtin" (the model from SMOLVM_MODEL_*), or an agent CLI command line run inside the sandbox with the prompt on stdin`)
	fl.IntVar(&f.budget.Iterations, "max-iterations", runner.DefaultIterations, "iteration budget")
	fl.DurationVar(&f.budget.Wall, "max-time", runner.DefaultWall, "wall-time budget")
	fl.IntVar(&f.budget.Tokens, "max-tokens", runner.DefaultTokens, "token budget (input + output)")
	fl.Float64Var(&f.budget.CostUSD, "max-cost", runner.DefaultCostUSD, "cost budget in USD")
	fl.DurationVar(&f.testTimeout, "test-timeout", runner.DefaultTestTimeout, "limit for one run of the test command")
	fl.IntVar(&f.flakyReruns, "flaky-reruns", runner.DefaultFlakyReruns, "copies of the base state that re-run failing tests to find flaky ones (-1: off)")
	fl.IntVar(&f.stuckAfter, "stuck-after", runner.DefaultStuckAfter, "stop after the same failure this many times in a row")
	fl.BoolVar(&f.allowWeaken, "allow-test-changes", false, "let diffs delete, skip or weaken tests (the tests class of the policy still decides test file writes)")
	fl.BoolVar(&f.asJSON, "json", false, "print the run as JSON")
}

func (a *app) agentCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run a coding agent in a sandbox: test, patch, re-test, with guardrails and a checkpoint per iteration",
		Long: `The agent runner copies a repository into a sandbox, runs its tests, gives
the failures to an agent (the built-in one over SMOLVM_MODEL_*, or any agent
CLI), and re-runs them until green or out of budget. Every iteration is
checkpointed; diffs that touch protected tests or delete, skip or weaken
tests are rejected and rolled back; flaky tests are found on copies of the
base state and never chased; the verdict re-runs the best iteration against
the base commit's own test files. See docs/agent.md.`,
	}
	cmd.AddCommand(a.agentFixCmd(), a.agentRunCmd(), a.agentLogCmd(), a.agentResumeCmd(), a.agentEvalCmd())
	return cmd
}

func (a *app) agentFixCmd() *cobra.Command {
	f := &agentFlags{}
	cmd := a.withSession(&cobra.Command{
		Use:   "fix",
		Short: "Make the failing tests pass",
		Example: `  smolvm agent fix --test "go test -json ./..."
  smolvm agent fix --repo ~/src/proj --test "python3 -m pytest -rA" --agent "claude -p"`,
		Args: cobra.NoArgs,
	}, func(s *session, _ []string) error {
		if f.task == "" {
			f.task = "Make the failing tests pass by fixing the code under test."
		}
		run, err := a.agentFix(s, f)
		if run != nil {
			a.printRun(run, f.asJSON)
		}
		if err != nil {
			return err
		}
		return runExit(run)
	})
	cmd.Flags().StringVar(&f.task, "task", "", "what to tell the agent besides the failures")
	f.register(cmd)
	return cmd
}

func (a *app) agentRunCmd() *cobra.Command {
	f := &agentFlags{}
	var issue, dryRun, baseBranch, remote string
	var openPR bool
	cmd := a.withSession(&cobra.Command{
		Use:   "run (--task TEXT | --issue FILE|URL)",
		Short: "Work on a task or an issue until its tests pass; from an issue, make the PR",
		Long: `run is fix with a task. With --issue (a Markdown file, or a GitHub,
GitLab, Gitea or Forgejo issue URL; SMOLVM_FORGE names the forge of a host
that does not say) it skips closed and locked issues and issues a commit
already references, and once resolved makes a PR: one commit on branch
smolvm/issue-N-slug with a body giving the problem, the change, the test
evidence, iterations, tokens and flaky tests. --dry-run DIR writes it as
files; --open-pr, once the policy allows open-pr (or someone approves it),
creates the branch (the policy's git-commit), pushes it to --remote (its
git-push) and opens a draft PR through the forge.`,
		Example: `  smolvm agent run --task "handle empty input in Parse" --test "go test -json ./..."
  smolvm agent run --issue https://github.com/o/r/issues/12 --dry-run /tmp/pr`,
		Args: cobra.NoArgs,
	}, func(s *session, _ []string) error {
		if (f.task == "") == (issue == "") {
			return fmt.Errorf("agent run: give --task or --issue, not both")
		}
		var is forge.Issue
		var fg forge.Forge
		if issue != "" {
			var err error
			if is, fg, err = runner.ReadIssue(s.ctx, issue, forge.TokenFromEnv(issue, os.Getenv), nil); err != nil {
				return err
			}
			if err := runner.CheckIssue(s.ctx, f.repo, is); err != nil {
				return err
			}
			f.task = runner.Task(is)
		}
		run, err := a.agentFix(s, f)
		if run != nil {
			a.printRun(run, f.asJSON)
		}
		if err != nil || issue == "" || run.State != runner.Resolved {
			if err == nil {
				err = runExit(run)
			}
			return err
		}
		return a.agentPR(s, run, is, fg, baseBranch, remote, dryRun, openPR)
	})
	cmd.Flags().StringVar(&f.task, "task", "", "what to do")
	cmd.Flags().StringVar(&issue, "issue", "", "an issue: a Markdown file or a GitHub, GitLab, Gitea or Forgejo issue URL")
	cmd.Flags().StringVar(&dryRun, "dry-run", "", "write the PR into this directory (pr.md, pr.diff, pr.json) instead of opening it")
	cmd.Flags().BoolVar(&openPR, "open-pr", false, "create and push the branch and open a draft PR through the forge, as the trust policy allows")
	cmd.Flags().StringVar(&baseBranch, "base", "main", "the branch the PR targets")
	cmd.Flags().StringVar(&remote, "remote", "origin", "the remote --open-pr pushes the branch to (the policy's git-push)")
	f.register(cmd)
	return cmd
}

func (a *app) agentPR(s *session, run *runner.Run, is forge.Issue, fg forge.Forge, base, remote, dryRun string, open bool) error {
	rn, err := a.agentRunner(s)
	if err != nil {
		return err
	}
	pr, err := rn.MakePR(s.ctx, a.runsDir(), run.ID, is, base)
	if err != nil {
		return err
	}
	if dryRun != "" {
		if err := pr.WriteFiles(dryRun); err != nil {
			return err
		}
		fmt.Fprintf(a.stdout, "PR written to %s (branch %s)\n", dryRun, pr.Head)
		return nil
	}
	if !open {
		fmt.Fprintf(a.stdout, "resolved; PR not made (give --dry-run DIR or --open-pr)\n")
		return nil
	}
	gate, err := s.gate(run.Repo)
	if err != nil {
		return err
	}
	if fg == nil {
		return fmt.Errorf("the issue came from a file: no forge to open the PR on")
	}
	if err := rn.Publish(s.ctx, gate, fg, a.runsDir(), run.ID, remote, pr); err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "branch %s pushed to %s; draft PR opened: %s\n", pr.Head, remote, pr.URL)
	return nil
}

func (a *app) agentResumeCmd() *cobra.Command {
	f := &agentFlags{}
	var from int
	cmd := a.withSession(&cobra.Command{
		Use:   "resume RUN --from N",
		Short: "Continue a run from the checkpoint of iteration N",
		Args:  cobra.ExactArgs(1),
	}, func(s *session, args []string) error {
		rn, o, err := a.agentSetup(s, f)
		if err != nil {
			return err
		}
		run, err := rn.Resume(s.ctx, args[0], from, o)
		if run != nil {
			a.printRun(run, f.asJSON)
		}
		if err != nil {
			return err
		}
		return runExit(run)
	})
	cmd.Flags().IntVar(&from, "from", 0, "the iteration to continue from")
	f.register(cmd)
	return cmd
}

func (a *app) agentLogCmd() *cobra.Command {
	var asJSON, diffs bool
	cmd := a.withSession(&cobra.Command{
		Use:   "log [RUN]",
		Short: "List runs, or show every iteration of one (diff, tests, tokens, checkpoint)",
		Args:  cobra.MaximumNArgs(1),
	}, func(s *session, args []string) error {
		rn, err := a.agentRunner(s)
		if err != nil {
			return err
		}
		if len(args) == 0 {
			runs, err := rn.Log.Runs(s.ctx)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(a.stdout, runs)
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "RUN\tCREATED\tSTATE\tBEST\tTOKENS\tREPO\tREASON")
			for _, r := range runs {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\n", r.ID, r.Created.Local().Format(time.DateTime), r.State, r.Best, r.Usage.Tokens(), r.Repo, r.Reason)
			}
			return tw.Flush()
		}
		run, err := rn.Log.Get(s.ctx, args[0])
		if err != nil {
			return err
		}
		its, err := rn.Log.Iterations(s.ctx, run.ID)
		if err != nil {
			return err
		}
		if asJSON {
			return writeJSON(a.stdout, map[string]any{"run": run, "iterations": its})
		}
		a.printRun(run, false)
		if run.Evidence != nil {
			fmt.Fprintln(a.stdout, indent(run.Evidence.Markdown(), "    "))
		}
		for _, it := range its {
			line := fmt.Sprintf("#%d (from %d)", it.N, it.Parent)
			switch {
			case it.Result != nil:
				line += "  tests: " + it.Result.Summary()
			case len(it.Violations) > 0:
				line += fmt.Sprintf("  rejected: %d violation(s)", len(it.Violations))
			}
			if len(it.Flaky) > 0 {
				line += "  flaky: " + strings.Join(it.Flaky, ", ")
			}
			line += fmt.Sprintf("  tokens: %d  checkpoint: %s", it.Usage.Tokens(), orDash(it.Snapshot))
			fmt.Fprintln(a.stdout, line)
			for _, v := range it.Violations {
				fmt.Fprintf(a.stdout, "    %s\n", v)
			}
			if diffs && it.Diff != "" {
				fmt.Fprintln(a.stdout, indent(it.Diff, "    "))
			}
		}
		return nil
	})
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	cmd.Flags().BoolVar(&diffs, "diff", false, "show each iteration's diff against the base")
	return cmd
}

func indent(s, pre string) string {
	return pre + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n"+pre)
}

// runExit is 0 for a resolved run and 1 for one that stopped unresolved.
func runExit(run *runner.Run) error {
	if run.State == runner.Resolved {
		return nil
	}
	return exitCode(1)
}

func (a *app) runsDir() string { return filepath.Join(a.dataDir, "agent", "runs") }

func (a *app) agentRunner(s *session) (*runner.Runner, error) {
	svc, err := s.sandboxes()
	if err != nil {
		return nil, err
	}
	st, err := s.store()
	if err != nil {
		return nil, err
	}
	l, err := runner.OpenLog(s.ctx, st)
	if err != nil {
		return nil, err
	}
	ledger, err := s.ledger()
	if err != nil {
		return nil, err
	}
	return &runner.Runner{Service: svc, Log: l, Ledger: ledger}, nil
}

func (a *app) agentFix(s *session, f *agentFlags) (*runner.Run, error) {
	rn, o, err := a.agentSetup(s, f)
	if err != nil {
		return nil, err
	}
	if o.Test == "" {
		if o.Test = runner.DetectTest(o.Repo); o.Test == "" {
			return nil, fmt.Errorf("agent: no --test given and none detected in %s", o.Repo)
		}
		fmt.Fprintf(a.stderr, "test command: %s\n", o.Test)
	}
	return rn.Fix(s.ctx, o)
}

// agentSetup returns the runner and the options the flags give.
func (a *app) agentSetup(s *session, f *agentFlags) (*runner.Runner, runner.Options, error) {
	rn, err := a.agentRunner(s)
	if err != nil {
		return nil, runner.Options{}, err
	}
	o, err := a.agentOptions(s, f)
	return rn, o, err
}

func (a *app) agentOptions(s *session, f *agentFlags) (runner.Options, error) {
	o, err := a.runOptions(f)
	if err != nil {
		return o, err
	}
	o.Agent, o.AgentName, err = runner.NewAgent(s.ctx, f.agent, o.Repo, os.Getenv, a.stderr)
	return o, err
}

// runOptions are the options the flags give, but the agent.
func (a *app) runOptions(f *agentFlags) (runner.Options, error) {
	repo, err := filepath.Abs(f.repo)
	if err != nil {
		return runner.Options{}, err
	}
	return runner.Options{
		Repo: repo, Test: f.test, Task: f.task, AgentName: f.agent, Budget: f.budget,
		TestTimeout: f.testTimeout, FlakyReruns: f.flakyReruns, StuckAfter: f.stuckAfter,
		AllowWeaken: f.allowWeaken, RunsDir: a.runsDir(), Progress: newStatus(a.stderr).show,
	}, nil
}

func (a *app) printRun(run *runner.Run, asJSON bool) {
	if asJSON {
		writeJSON(a.stdout, run)
		return
	}
	verdict := "-"
	if run.Verdict != nil {
		verdict = run.Verdict.Summary()
	}
	fmt.Fprintf(a.stdout, "run %s: %s (%s)\n  best iteration %d; pristine tests: %s\n  tokens %d, cost $%.4f, %s\n",
		run.ID, run.State, run.Reason, run.Best, verdict, run.Usage.Tokens(), run.Usage.CostUSD, run.Elapsed.Round(time.Second))
	if len(run.Flaky) > 0 {
		fmt.Fprintf(a.stdout, "  flaky: %s\n", strings.Join(run.Flaky, ", "))
	}
	if e := run.Evidence; e != nil {
		fmt.Fprintf(a.stdout, "  evidence: %s (%s); %d fail-to-pass, %d pass-to-pass, %d hunk(s), %d not pinned\n",
			e.Verdict, e.Reason, len(e.FailToPass), len(e.PassToPass), len(e.Hunks), len(e.Unpinned()))
	}
}

// status prints progress: one line rewritten in place on a terminal,
// plain lines otherwise.
type status struct {
	w   io.Writer
	tty bool
}

func newStatus(w io.Writer) *status {
	f, ok := w.(*os.File)
	return &status{w: w, tty: ok && term.IsTerminal(int(f.Fd()))}
}

func (st *status) show(e runner.Event) {
	line := fmt.Sprintf("%s #%d %-8s %d passed, %d failed", e.Run, e.Iteration, e.Phase, e.Passed, e.Failed)
	if e.Flaky > 0 {
		line += fmt.Sprintf(" (+%d flaky)", e.Flaky)
	}
	line += fmt.Sprintf(" · %s tokens · $%.4f · %s", compact(e.Tokens), e.CostUSD, e.Elapsed.Round(time.Second))
	if e.Note != "" {
		line += " · " + e.Note
	}
	if !st.tty {
		fmt.Fprintln(st.w, line)
		return
	}
	end := ""
	if e.Phase == "done" {
		end = "\n"
	}
	fmt.Fprintf(st.w, "\r\033[K%s%s", line, end)
}

func compact(n int) string {
	if n < 1000 {
		return strconv.Itoa(n)
	}
	return fmt.Sprintf("%.1fk", float64(n)/1000)
}

func (a *app) agentEvalCmd() *cobra.Command {
	f := &agentFlags{}
	var sf sweFlags
	cmd := a.withSession(&cobra.Command{
		Use:   "eval DIR | INSTANCES.jsonl",
		Short: "Run task fixtures (repo + issue + hidden tests) or SWE-bench instances with an agent; report resolved rate, iterations, cost, guardrail interventions",
		Long: `eval DIR runs each fixture DIR/NAME (fixture.json, issue.md, repo/, hidden/)
with the agent. eval FILE reads SWE-bench instances (a JSON array or JSON
Lines: instance_id, repo, base_commit, problem_statement, patch, test_patch,
FAIL_TO_PASS, PASS_TO_PASS) whose repositories are local (--repos), runs the
agent on each base commit, --parallel at once, and grades the model patches
as SWE-bench's harness does; --predictions grades given patches (or the gold
ones) instead. The harness's run report is written to MODEL.RUN_ID.json and
each instance's report.json under the data dir. See docs/agent.md.`,
		Example: `  smolvm agent eval workflow/runner/testdata/eval --agent "claude -p"
  smolvm agent eval instances.jsonl --repos ~/src --parallel 4 --agent builtin
  smolvm agent eval instances.jsonl --repos ~/src --predictions gold`,
		Args: cobra.ExactArgs(1),
	}, func(s *session, args []string) error {
		var rep runner.EvalReport
		var err error
		if st, serr := os.Stat(args[0]); serr == nil && !st.IsDir() {
			rep, err = a.agentEvalSWEBench(s, f, sf, args[0])
		} else {
			rn, o, serr := a.agentSetup(s, f)
			if serr != nil {
				return serr
			}
			agent := o.Agent
			rep, err = rn.Eval(s.ctx, args[0], func(runner.Fixture) runner.Agent { return agent }, o)
		}
		if rep.Total == 0 && rep.SWEBench == nil {
			return err
		}
		// A cancelled evaluation still shows what it did.
		if f.asJSON {
			writeJSON(a.stdout, rep)
		} else {
			a.printEval(rep)
		}
		return err
	})
	f.register(cmd)
	cmd.Flags().StringVar(&sf.repos, "repos", "", "SWE-bench: where each instance's repo is (DIR/OWNER/NAME, DIR/OWNER__NAME, DIR/NAME, or DIR itself); default: the instances file's directory")
	cmd.Flags().StringVar(&sf.predictions, "predictions", "", `SWE-bench: grade these patches (JSON or JSON Lines: instance_id, model_name_or_path, model_patch), or "gold", instead of running the agent`)
	cmd.Flags().IntVar(&sf.parallel, "parallel", 2, "SWE-bench: instances at once, each in its own sandboxes")
	cmd.Flags().StringVar(&sf.runID, "run-id", "smolvm", "SWE-bench: the run's ID, in the report's name (MODEL.RUN_ID.json) and its logs' directory")
	cmd.Flags().StringVar(&sf.report, "report", "", "SWE-bench: where the harness's run report goes (default MODEL.RUN_ID.json here)")
	return cmd
}

// sweFlags are eval's SWE-bench flags.
type sweFlags struct {
	repos, predictions, runID, report string
	parallel                          int
}

// agentEvalSWEBench evaluates the SWE-bench instances in path and writes
// the harness's run report.
func (a *app) agentEvalSWEBench(s *session, f *agentFlags, sf sweFlags, path string) (runner.EvalReport, error) {
	insts, err := runner.ReadInstances(path)
	if err != nil {
		return runner.EvalReport{}, err
	}
	rn, err := a.agentRunner(s)
	if err != nil {
		return runner.EvalReport{}, err
	}
	// Graded predictions need no agent (and no model configured).
	o, err := a.runOptions(f)
	if err != nil {
		return runner.EvalReport{}, err
	}
	so := runner.SWEBenchOptions{Repos: cmp.Or(sf.repos, filepath.Dir(path)), Parallel: sf.parallel}
	model := ""
	switch sf.predictions {
	case "":
	case "gold":
		so.Predictions, model = runner.GoldPredictions(insts), "gold"
	default:
		if so.Predictions, err = runner.ReadPredictions(sf.predictions); err != nil {
			return runner.EvalReport{}, err
		}
		for _, p := range so.Predictions {
			model = cmp.Or(p.Model, model)
		}
	}
	var agentFor func(runner.Instance) (runner.Agent, error)
	if so.Predictions == nil {
		// The agent's name, for the report; NewAgent refuses a bad spec here.
		if _, o.AgentName, err = runner.NewAgent(s.ctx, f.agent, o.Repo, os.Getenv, a.stderr); err != nil {
			return runner.EvalReport{}, err
		}
		model = o.AgentName
		// One agent per instance, with its repository's context: the
		// built-in one carries its conversation from turn to turn.
		agentFor = func(in runner.Instance) (runner.Agent, error) {
			repo, err := runner.RepoDir(s.ctx, so.Repos, in.Repo)
			if err != nil {
				return nil, err
			}
			ag, _, err := runner.NewAgent(s.ctx, f.agent, repo, os.Getenv, a.stderr)
			return ag, err
		}
	}
	// The harness's names: logs/run_evaluation/RUN_ID/MODEL/ID and
	// MODEL.RUN_ID.json, "/" in MODEL as "__"; an agent's command line
	// loses its other odd characters too.
	model = unsafeName().ReplaceAllString(strings.ReplaceAll(model, "/", "__"), "_")
	so.LogDir = filepath.Join(a.dataDir, "agent", "swebench", sf.runID, model)
	rep, err := rn.EvalSWEBench(s.ctx, insts, so, agentFor, o)
	out := cmp.Or(sf.report, model+"."+sf.runID+".json")
	data, jerr := json.MarshalIndent(rep.SWEBench, "", "    ")
	if jerr == nil {
		jerr = os.WriteFile(out, append(data, '\n'), 0o644)
	}
	if jerr != nil {
		return rep, fmt.Errorf("swe-bench report: %w", jerr)
	}
	fmt.Fprintf(a.stderr, "report written to %s; instance logs under %s\n", out, so.LogDir)
	return rep, err
}

// unsafeName matches what a file name is better without.
var unsafeName = lazyre.New(`[^A-Za-z0-9._:@-]+`)

func (a *app) printEval(rep runner.EvalReport) {
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FIXTURE\tRESOLVED\tITERATIONS\tINTERVENTIONS\tTOKENS\tCOST\tFLAKY\tNOTE")
	for _, r := range rep.Results {
		note := r.Reason
		switch {
		case r.Error != "":
			note = "error: " + r.Error
		case r.SWEBench != nil && !r.Resolved:
			st := r.SWEBench.TestsStatus
			note = fmt.Sprintf("FAIL_TO_PASS failing: %s; PASS_TO_PASS failing: %s", orDash(strings.Join(st.FailToPass.Failure, " ")), orDash(strings.Join(st.PassToPass.Failure, " ")))
		case r.SWEBench == nil && r.Patch != nil && *r.Patch == "":
			note = "empty patch"
		case r.Hidden != nil && !r.Resolved:
			note = "hidden tests: " + r.Hidden.Summary()
		}
		fmt.Fprintf(tw, "%s\t%v\t%d\t%d\t%d\t$%.4f\t%s\t%s\n", r.Fixture, r.Resolved, r.Iterations, r.Interventions, r.Usage.Tokens(), r.Usage.CostUSD, strings.Join(r.Flaky, ","), note)
	}
	tw.Flush()
	total := rep.Total
	if g := rep.SWEBench; g != nil {
		total = g.Total
		fmt.Fprintf(a.stdout, "SWE-bench: %d instances, %d completed, %d resolved, %d unresolved, %d empty patches, %d errors, %d incomplete\n",
			g.Total, g.Completed, g.Resolved, g.Unresolved, g.EmptyPatch, g.Errors, len(g.IncompleteIDs))
	}
	fmt.Fprintf(a.stdout, "resolved %d/%d (%.0f%%), %d iterations, %d guardrail interventions, %d tokens, $%.4f\n",
		rep.Resolved, total, 100*rep.Rate, rep.Iterations, rep.Interventions, rep.Usage.Tokens(), rep.Usage.CostUSD)
}
