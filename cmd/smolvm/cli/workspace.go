package cli

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"smolvm.dev/smolvm/workflow/trust"
	"smolvm.dev/smolvm/workflow/workspace"
)

func (a *app) applyCmd() *cobra.Command {
	var dryRun, asJSON bool
	cmd := a.withSession(&cobra.Command{
		Use:   "apply SANDBOX:DIR TREE",
		Short: "Bring a sandbox's changes into a host tree, each file as the tree's trust policy allows",
		Long: `Copy DIR out of a running sandbox, compare it with TREE (file content,
permissions, added and deleted files; .git is left alone), and apply each
changed file that TREE's .smolvm/policy.toml allows as a write. An ask
waits for 'smolvm approvals approve|deny' (or the policy's timeout, which
denies). Each file is replaced atomically; nothing is written outside TREE
or through a symlink, and symlinks pointing out of TREE are rejected.

Exit status: 0 if every change was applied, 1 if some were denied or
rejected (the allowed ones are still applied), 125 on errors.`,
		Example: `  smolvm apply agent:/work .
  smolvm apply agent:/work ~/src/proj --dry-run`,
		Args: cobra.ExactArgs(2),
	}, func(s *session, args []string) error {
		sb, dir := splitSandboxPath(args[0])
		if sb == "" || dir == "" {
			return fmt.Errorf("apply: %q: want SANDBOX:DIR", args[0])
		}
		tree, err := filepath.Abs(args[1])
		if err != nil {
			return err
		}
		e, err := s.runtime()
		if err != nil {
			return err
		}
		sbx, err := e.mgr.Get(s.ctx, sb)
		if err != nil {
			return err
		}
		ledger, err := s.ledger()
		if err != nil {
			return err
		}
		r, err := workspace.Apply(s.ctx, workspace.Options{
			Manager: e.mgr, Sandbox: sb, Dir: dir, Tree: tree,
			Ledger: ledger, Requester: "sandbox-" + sbx.ID, DryRun: dryRun, Log: a.stderr,
		})
		if r.Changes != nil || err == nil {
			if perr := a.applyPrint(r, asJSON); perr != nil {
				return perr
			}
		}
		if err != nil {
			return err
		}
		if !r.Complete() {
			return exitCode(1)
		}
		return nil
	})
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "say what the policy decides for each change; apply nothing, ask nobody")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}

func (a *app) applyPrint(r workspace.Report, asJSON bool) error {
	if asJSON {
		return writeJSON(a.stdout, r)
	}
	if len(r.Changes) == 0 {
		_, err := fmt.Fprintln(a.stdout, "no changes")
		return err
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	outcome := "OUTCOME"
	if r.DryRun {
		outcome = "VERDICT"
	}
	fmt.Fprintf(tw, "PATH\tCHANGE\t%s\tRULE OR REASON\n", outcome)
	counts := map[string]int{}
	for _, c := range r.Changes {
		o := string(c.Outcome)
		if c.Outcome == workspace.Skipped {
			o = c.Verdict.String()
		}
		counts[o]++
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", c.Path, c.Kind, o, applyDetail(c))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var parts []string
	for _, o := range []string{"applied", "denied", "rejected", "failed", "allow", "ask", "deny"} {
		if counts[o] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[o], o))
		}
	}
	summary := fmt.Sprintf("%d changes: %s", len(r.Changes), strings.Join(parts, ", "))
	if r.DryRun {
		summary += " (dry run: nothing applied)"
	}
	_, err := fmt.Fprintln(a.stdout, summary)
	return err
}

// applyDetail is the deciding rule, or why the rule is not the whole
// story: a person's answer, an unsafe path, a failed write.
func applyDetail(c workspace.Change) string {
	switch {
	case c.Outcome == workspace.Rejected, c.Outcome == workspace.Failed,
		c.Outcome == workspace.Denied && c.Verdict == trust.Ask:
		return c.Reason
	}
	return c.Rule
}

// gitCmd groups git operations run on the host after the policy allows them.
func (a *app) gitCmd() *cobra.Command {
	var tree string
	cmd := &cobra.Command{
		Use:   "git",
		Short: "Commit or push a host work tree, on the host, once the trust policy allows it",
		Long: `Git operations never run inside a sandbox: these commands run the git CLI on
the host tree, after its .smolvm/policy.toml allows git commit or git push
(an ask waits for 'smolvm approvals approve|deny'). A denial exits 126 and
names the rule. Every decision is in 'smolvm policy audit'.`,
	}
	cmd.PersistentFlags().StringVar(&tree, "tree", "", "git work tree (default: the nearest directory at or above the current one with .smolvm or .git)")
	cmd.AddCommand(a.gitCommitCmd(&tree), a.gitPushCmd(&tree))
	return cmd
}

func (a *app) gitCommitCmd(tree *string) *cobra.Command {
	var msg string
	cmd := a.withSession(&cobra.Command{
		Use:   "commit -m MSG",
		Short: "Stage every change (git add -A) and commit it, if the policy allows git commit",
		Long: `Stage every change (git add -A) and commit it with MSG. The author comes
from git's configuration, or from $SMOLVM_AUTHOR ("NAME" or "NAME <EMAIL>").
Exits 1 when there is nothing to commit.`,
		Args: cobra.NoArgs,
	}, func(s *session, args []string) error {
		return a.gitGated(s, *tree, trust.Action{Kind: trust.Commit}, func(g *trust.Gate, root, who string) error {
			hash, err := workspace.Commit(s.ctx, g, root, msg, who)
			if errors.Is(err, workspace.ErrNothingToCommit) {
				return &exitError{code: 1, err: err}
			}
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(a.stdout, hash)
			return err
		})
	})
	cmd.Flags().StringVarP(&msg, "message", "m", "", "commit message (required)")
	cmd.MarkFlagRequired("message")
	return cmd
}

func (a *app) gitPushCmd(tree *string) *cobra.Command {
	return a.withSession(&cobra.Command{
		Use:   "push [REMOTE [BRANCH]]",
		Short: "Run git push [REMOTE [BRANCH]], if the policy allows git push",
		Args:  cobra.MaximumNArgs(2),
	}, func(s *session, args []string) error {
		args = append(args, "", "")
		remote, branch := args[0], args[1]
		act := trust.Action{Kind: trust.Push}
		return a.gitGated(s, *tree, act, func(g *trust.Gate, root, who string) error {
			if err := workspace.Push(s.ctx, g, root, remote, branch, who); err != nil {
				return err
			}
			_, err := fmt.Fprintln(a.stdout, "pushed")
			return err
		})
	})
}

// gitGated loads the tree's policy and the ledger, tells the person when
// act will wait for an approval, and runs fn with a gate. A denial exits
// 126 and names the deciding rule.
func (a *app) gitGated(s *session, tree string, act trust.Action, fn func(g *trust.Gate, root, who string) error) error {
	p, err := a.policyLoad(tree)
	if err != nil {
		return err
	}
	ledger, err := s.ledger()
	if err != nil {
		return err
	}
	if d := p.Evaluate(act); d.Outcome == trust.Ask {
		fmt.Fprintf(a.stderr, "%s needs approval (%s): smolvm approvals ls, then approve|deny ID\n", act.Kind, d.RuleText())
	}
	err = fn(&trust.Gate{Policy: p, Ledger: ledger}, p.Root, envOr("SMOLVM_AUTHOR", policyWho()))
	var de *trust.DeniedError
	if !errors.As(err, &de) {
		return err
	}
	if de.By != "policy" {
		err = fmt.Errorf("%w (rule %s)", err, de.Decision.RuleText())
	}
	return &exitError{code: exitCannotRun, err: err}
}
