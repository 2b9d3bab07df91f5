package cli

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"smolvm.dev/smolvm/workflow/branch"
	"smolvm.dev/smolvm/workflow/forge"
	"smolvm.dev/smolvm/workflow/llm"
	"smolvm.dev/smolvm/workflow/rules"
	"smolvm.dev/smolvm/workflow/runner"
)

func (a *app) branchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "branch",
		Short: "Fan agents out over forks of one set-up sandbox, judge each on CI, merge them through a merge queue",
		Long: `fanout prepares the repository once in a sandbox (--setup, else the shell
block under a Setup/Install/Build heading of the root AGENTS.md or
CLAUDE.md), checkpoints it
and runs one agent branch per attempt (best-of-N) or sub-task (split) on
forks of that checkpoint, each judged by the repository's own CI. merge
ranks best-of-N branches and picks a winner, or merges split branches one
at a time with CI after each, handing conflicts to a resolver agent.
Runs, branches and merge steps live in the state database: status shows
them, even after smolvm was killed. See docs/branches.md.`,
	}
	cmd.AddCommand(a.branchFanoutCmd(), a.branchStatusCmd(), a.branchConflictsCmd(), a.branchMergeCmd())
	return cmd
}

func (a *app) coordinator(s *session) (*branch.Coordinator, error) {
	rn, err := a.agentRunner(s)
	if err != nil {
		return nil, err
	}
	st, err := s.store()
	if err != nil {
		return nil, err
	}
	bs, err := branch.OpenStore(s.ctx, st)
	if err != nil {
		return nil, err
	}
	return a.newCoordinator(rn, bs), nil
}

// newCoordinator is the CLI's and smolvm serve's: each run's repository
// under the data dir's branch/, each branch's scratch in the runs dir.
func (a *app) newCoordinator(rn *runner.Runner, st *branch.Store) *branch.Coordinator {
	return &branch.Coordinator{Service: rn.Service, Runner: rn, Store: st, Dir: filepath.Join(a.dataDir, "branch"), RunsDir: a.runsDir()}
}

// branchAgent makes an agent from --agent: "builtin" (SMOLVM_MODEL_*),
// "builtin:MODEL", or an agent CLI command line. A CLI sees its branch in
// $SMOLVM_BRANCH.
func (a *app) branchAgent(s *session, repo, spec string, k int) (runner.Agent, string, error) {
	if rest, ok := strings.CutPrefix(spec, "builtin"); ok && (rest == "" || rest[0] == ':') {
		cfg, err := llm.ConfigFromEnv(os.Getenv)
		if err != nil {
			return nil, "", fmt.Errorf("agent %s: %w", spec, err)
		}
		if rest != "" {
			cfg.Model = rest[1:]
		}
		m, err := llm.New(cfg, nil)
		if err != nil {
			return nil, "", fmt.Errorf("agent %s: %w", spec, err)
		}
		b := &runner.Builtin{Model: m}
		if b.Context, err = runner.RepoContext(s.ctx, repo); err != nil {
			return nil, "", err
		}
		return b, "builtin:" + cfg.Provider + "/" + cfg.Model, nil
	}
	return &runner.External{Command: spec, Env: []string{fmt.Sprintf("SMOLVM_BRANCH=%d", k)}}, spec, nil
}

// readTasks reads a task file: one task per line; blank lines and lines
// starting with # are left out.
func readTasks(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tasks: %w", err)
	}
	defer f.Close()
	var tasks []string
	sc := bufio.NewScanner(io.LimitReader(f, runner.MaxIssueBytes))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" && !strings.HasPrefix(l, "#") {
			tasks = append(tasks, l)
		}
	}
	return tasks, sc.Err()
}

func (a *app) branchFanoutCmd() *cobra.Command {
	var (
		repo, task, tasksFile, test, ci, job string
		agents                               []string
		o                                    branch.Options
		lf                                   limitFlags
		asJSON                               bool
	)
	cmd := a.withSession(&cobra.Command{
		Use:   "fanout (--task TEXT [-n N] | --tasks FILE) --agent CMD...",
		Short: "Set the repository up once, then run N agent branches on forks of it",
		Example: `  smolvm branch fanout --task "fix the parser" -n 3 --agent "claude -p" --agent "codex exec" --agent builtin
  smolvm branch fanout --tasks subtasks.txt --agent builtin --setup "npm ci" --ci github --job test`,
		Args: cobra.NoArgs,
	}, func(s *session, _ []string) error {
		var err error
		if o.Repo, err = filepath.Abs(repo); err != nil {
			return err
		}
		switch {
		case (task == "") == (tasksFile == ""):
			return fmt.Errorf("branch fanout: give --task (best-of-N) or --tasks FILE (split), not both")
		case task != "":
			o.Mode, o.Task = branch.BestOfN, task
			if o.N == 0 {
				o.N = max(len(agents), 1)
			}
		default:
			o.Mode = branch.Split
			if o.Tasks, err = readTasks(tasksFile); err != nil {
				return err
			}
		}
		if len(agents) == 0 {
			agents = []string{"builtin"}
		}
		rs, err := rules.Load(s.ctx, o.Repo)
		if err != nil {
			return err
		}
		rc := rs.Commands()
		if !s.cmd.Flags().Changed("setup") && rc.Setup != "" {
			o.Setup = rc.Setup
			fmt.Fprintf(a.stderr, "set-up from %s (--setup overrides it)\n", rc.SetupFrom)
		}
		switch ci {
		case "":
			o.CI, err = branch.DetectCI(o.Repo, test, rc)
		case "github":
			if job == "" {
				return fmt.Errorf("branch fanout: --ci github needs --job NAME")
			}
			o.CI, err = branch.GitHubCI(o.Repo, job)
		default:
			return fmt.Errorf("branch fanout: --ci %q: only github", ci)
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(a.stderr, "CI (%s): %s\n", o.CI.Source, firstLineOf(o.CI.Command))
		for _, u := range o.CI.Unsupported {
			fmt.Fprintf(a.stderr, "CI step not run: %s\n", u)
		}
		if o.Limits, err = lf.limits(s.cmd.Flags()); err != nil {
			return err
		}
		o.Agent = func(k int) (runner.Agent, string, error) {
			return a.branchAgent(s, o.Repo, agents[(k-1)%len(agents)], k)
		}
		// Plain lines, one per event and branch: N branches interleave.
		st := &status{w: a.stderr}
		var mu sync.Mutex
		o.Progress = func(k int, e runner.Event) {
			mu.Lock()
			defer mu.Unlock()
			fmt.Fprintf(a.stderr, "branch %d: ", k)
			st.show(e)
		}
		c, err := a.coordinator(s)
		if err != nil {
			return err
		}
		r, err := c.Fanout(s.ctx, o)
		if r == nil {
			return err
		}
		if perr := a.printBranchRun(s, c, r.ID, asJSON); perr != nil && err == nil {
			err = perr
		}
		return err
	})
	fl := cmd.Flags()
	fl.StringVar(&repo, "repo", ".", "the repository (a git work tree without uncommitted changes); branches start from its HEAD")
	fl.StringVar(&task, "task", "", "best-of-N: the task every branch works on")
	fl.IntVarP(&o.N, "branches", "n", 0, "best-of-N: how many branches (default: one per --agent)")
	fl.StringVar(&tasksFile, "tasks", "", "split: a file with one sub-task per line, one branch each")
	fl.StringArrayVar(&agents, "agent", nil, `an agent per branch, in turn: "builtin", "builtin:MODEL", or an agent CLI command line (repeat for several)`)
	fl.StringVar(&o.Setup, "setup", "", "run once with sh -c in the repository before the checkpoint every branch forks from (dependencies, build, caches); default: the rule files' set-up block, --setup '' for none")
	fl.StringVar(&test, "test", "", "the CI command (default: the rule files' test block, else detected: go test, pytest, npm test, make test)")
	fl.StringVar(&ci, "ci", "", `"github": run the run: steps of --job from .github/workflows in the sandbox`)
	fl.StringVar(&job, "job", "", "the GitHub Actions job (its key or name) with --ci github")
	fl.IntVar(&o.Concurrency, "concurrency", 0, "branches at once (default: the host's CPUs)")
	lf.register(fl)
	fl.IntVar(&o.Budget.Iterations, "max-iterations", runner.DefaultIterations, "per-branch iteration budget")
	fl.DurationVar(&o.Budget.Wall, "max-time", runner.DefaultWall, "per-branch wall-time budget; a branch past it is killed")
	fl.IntVar(&o.Budget.Tokens, "max-tokens", runner.DefaultTokens, "per-branch token budget")
	fl.Float64Var(&o.Budget.CostUSD, "max-cost", runner.DefaultCostUSD, "per-branch cost budget in USD")
	fl.DurationVar(&o.TestTimeout, "test-timeout", runner.DefaultTestTimeout, "limit for one CI run")
	fl.DurationVar(&o.SetupTimeout, "setup-timeout", branch.DefaultSetupTimeout, "limit for the set-up")
	fl.IntVar(&o.FlakyReruns, "flaky-reruns", runner.DefaultFlakyReruns, "copies of a branch's base state that re-run failing tests to find flaky ones (-1: off)")
	fl.IntVar(&o.StuckAfter, "stuck-after", runner.DefaultStuckAfter, "stop a branch after the same failure this many times in a row")
	fl.BoolVar(&o.AllowWeaken, "allow-test-changes", false, "let diffs delete, skip or weaken tests")
	fl.BoolVar(&asJSON, "json", false, "print the run as JSON")
	return cmd
}

func firstLineOf(s string) string {
	l, rest, _ := strings.Cut(strings.TrimSpace(s), "\n")
	if rest != "" {
		l += " …"
	}
	return l
}

// branchView is what status prints: a run, its branches, its merge steps.
type branchView struct {
	Run      *branch.Run      `json:"run"`
	Branches []*branch.Branch `json:"branches"`
	Steps    []*branch.Step   `json:"steps,omitempty"`
}

func (a *app) printBranchRun(s *session, c *branch.Coordinator, id string, asJSON bool) error {
	r, bs, err := c.Get(s.ctx, id)
	if err != nil {
		return err
	}
	ss, err := c.Store.Steps(s.ctx, id)
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(a.stdout, branchView{r, bs, ss})
	}
	w := a.stdout
	fmt.Fprintf(w, "run %s (%s): %s", r.ID, r.Mode, r.State)
	if r.Reason != "" {
		fmt.Fprintf(w, " (%s)", r.Reason)
	}
	fmt.Fprintf(w, "\n  repo %s at %.12s; git %s\n  CI (%s): %s\n  set-up once in %s, then forked; %s in all\n",
		r.Repo, r.Base, r.Git, r.CI.Source, firstLineOf(r.CI.Command), r.SetupElapsed.Round(time.Millisecond), r.Elapsed.Round(time.Second))
	for _, u := range r.CI.Unsupported {
		fmt.Fprintf(w, "  CI step not run: %s\n", u)
	}
	err = table(w, "BRANCH\tSTATE\tCI\tLINES\tINTERVENTIONS\tTOKENS\tAGENT RUN\tREASON", func(tw io.Writer) {
		for _, b := range bs {
			ci := "-"
			if b.Result != nil {
				ci = b.Result.Summary()
			} else if b.Last != nil {
				ci = fmt.Sprintf("#%d %s: %d passed, %d failed", b.Last.Iteration, b.Last.Phase, b.Last.Passed, b.Last.Failed)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\n", b.Name, b.State, ci, b.DiffLines, b.Interventions, b.Usage.Tokens(), b.AgentRun, firstLineOf(b.Reason))
		}
	})
	if err != nil {
		return err
	}
	for _, st := range ss {
		fmt.Fprintf(w, "step %d %s", st.N, st.Kind)
		if st.Branch > 0 {
			fmt.Fprintf(w, " branch %d", st.Branch)
		}
		fmt.Fprintf(w, ": %s\n", firstLineOf(st.Note))
	}
	if r.Summary != "" {
		fmt.Fprintf(w, "\n%s", r.Summary)
	}
	return nil
}

func (a *app) branchStatusCmd() *cobra.Command {
	var asJSON bool
	cmd := a.withSession(&cobra.Command{
		Use:   "status [RUN]",
		Short: "Show a run's branches and merge steps, or list the runs",
		Args:  cobra.MaximumNArgs(1),
	}, func(s *session, args []string) error {
		c, err := a.coordinator(s)
		if err != nil {
			return err
		}
		if len(args) == 1 {
			return a.printBranchRun(s, c, args[0], asJSON)
		}
		if asJSON {
			runs, err := c.Store.Runs(s.ctx)
			if err != nil {
				return err
			}
			return writeJSON(a.stdout, runs)
		}
		runs, _, err := c.Runs(s.ctx)
		if err != nil {
			return err
		}
		return table(a.stdout, "RUN\tMODE\tSTATE\tCREATED\tREPO", func(tw io.Writer) {
			for _, r := range runs {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.ID, r.Mode, r.State, r.Created.Local().Format(time.DateTime), r.Repo)
			}
		})
	})
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}

func (a *app) branchConflictsCmd() *cobra.Command {
	return command(a, &cobra.Command{
		Use:   "conflicts RUN",
		Short: "Merge every pair of passing branches with git merge-tree and print the conflict matrix",
		Args:  cobra.ExactArgs(1),
	}, "print the matrix as JSON", func(w io.Writer, m *branch.Matrix) error {
		if len(m.Branches) == 0 {
			_, err := fmt.Fprintln(w, "no passing branches")
			return err
		}
		header := "\t"
		for _, k := range m.Branches {
			header += fmt.Sprintf("%d\t", k)
		}
		return table(w, header+"CONFLICTS", func(tw io.Writer) {
			for i, k := range m.Branches {
				fmt.Fprintf(tw, "%d\t", k)
				var files []string
				for j := range m.Branches {
					switch {
					case i == j:
						fmt.Fprint(tw, "-\t")
					case len(m.Files[i][j]) > 0:
						fmt.Fprint(tw, "X\t")
						files = append(files, fmt.Sprintf("%d: %s", m.Branches[j], strings.Join(m.Files[i][j], " ")))
					default:
						fmt.Fprint(tw, ".\t")
					}
				}
				fmt.Fprintln(tw, strings.Join(files, "; "))
			}
		})
	}, func(s *session, args []string) (*branch.Matrix, error) {
		c, err := a.coordinator(s)
		if err != nil {
			return nil, err
		}
		return c.Conflicts(s.ctx, args[0])
	})
}

func (a *app) branchMergeCmd() *cobra.Command {
	var (
		resolver, dryRun, issue, base, remote string
		publish, openPR, asJSON               bool
		o                                     branch.MergeOptions
	)
	cmd := a.withSession(&cobra.Command{
		Use:   "merge RUN",
		Short: "Run the merge queue: pick the best-of-N winner, or merge split branches with CI after each",
		Long: `merge ends with branch smolvm/RUN/integration in the run's repository
and a summary. Conflicts (git merge-tree up front, or CI red after a
merge) go to --resolver in a fork; its resolution counts only if CI
passes, else the branch is ejected. --publish copies the branches into
the repository (the policy's git-commit); --dry-run DIR writes the PR;
--open-pr (with --issue URL) opens it through the forge (open-pr).`,
		Args: cobra.ExactArgs(1),
	}, func(s *session, args []string) error {
		c, err := a.coordinator(s)
		if err != nil {
			return err
		}
		r, err := c.Store.Run(s.ctx, args[0])
		if err != nil {
			return err
		}
		if resolver != "" {
			o.Resolver = func() (runner.Agent, string, error) { return a.branchAgent(s, r.Repo, resolver, 0) }
		}
		o.Progress = func(st branch.Step) {
			fmt.Fprintf(a.stderr, "step %d %s branch %d: %s\n", st.N, st.Kind, st.Branch, firstLineOf(st.Note))
		}
		if _, err := c.Merge(s.ctx, r.ID, o); err != nil {
			a.printBranchRun(s, c, r.ID, asJSON)
			return err
		}
		if err := a.printBranchRun(s, c, r.ID, asJSON); err != nil {
			return err
		}
		var is forge.Issue
		var fg forge.Forge
		if issue != "" {
			if is, fg, err = runner.ReadIssue(s.ctx, issue, forge.TokenFromEnv(issue, os.Getenv), nil); err != nil {
				return err
			}
		}
		pr, err := c.PR(s.ctx, r.ID, is, base)
		if err != nil {
			return err
		}
		if dryRun != "" {
			if err := pr.WriteFiles(dryRun); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "PR written to %s (branch %s)\n", dryRun, pr.Head)
		}
		if !publish && !openPR {
			return nil
		}
		gate, err := s.gate(r.Repo)
		if err != nil {
			return err
		}
		if !openPR {
			if err := c.Publish(s.ctx, gate, r.ID); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "branches smolvm/%s/* created in %s\n", r.ID, r.Repo)
			return nil
		}
		if fg == nil {
			return fmt.Errorf("branch merge: --open-pr needs --issue with a forge's issue URL (GitHub, GitLab, Gitea)")
		}
		if err := pr.Open(s.ctx, gate, fg, r.Repo, remote, "branch-"+r.ID, func() error {
			return c.Publish(s.ctx, gate, r.ID)
		}); err != nil {
			return err
		}
		fmt.Fprintf(a.stdout, "branches smolvm/%s/* created in %s; %s pushed to %s; draft PR opened: %s\n", r.ID, r.Repo, pr.Head, remote, pr.URL)
		return nil
	})
	fl := cmd.Flags()
	fl.StringVar(&resolver, "resolver", "", `the agent given conflicts: "builtin", "builtin:MODEL" or an agent CLI (default: none; conflicting branches are ejected)`)
	fl.IntVar(&o.Budget.Iterations, "resolver-iterations", 3, "iteration budget of one resolution")
	fl.DurationVar(&o.Budget.Wall, "resolver-time", 10*time.Minute, "wall-time budget of one resolution")
	fl.DurationVar(&o.TestTimeout, "test-timeout", runner.DefaultTestTimeout, "limit for one CI run")
	fl.BoolVar(&publish, "publish", false, "create the branches smolvm/RUN/* in the repository, as the trust policy allows (git-commit)")
	fl.StringVar(&dryRun, "dry-run", "", "write the PR into this directory (pr.md, pr.diff, pr.json)")
	fl.StringVar(&issue, "issue", "", "the issue the PR resolves: a Markdown file or a GitHub, GitLab, Gitea or Forgejo issue URL")
	fl.BoolVar(&openPR, "open-pr", false, "publish and open a draft PR through the forge of --issue, as the trust policy allows")
	fl.StringVar(&base, "base", "main", "the branch the PR targets")
	fl.StringVar(&remote, "remote", "origin", "the remote --open-pr pushes the integration branch to (the policy's git-push)")
	fl.BoolVar(&asJSON, "json", false, "print the run as JSON")
	return cmd
}
