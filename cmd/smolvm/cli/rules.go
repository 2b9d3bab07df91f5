package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"smolvm.dev/smolvm/workflow/rules"
)

// rulesCmd groups the commands about agent instruction files.
func (a *app) rulesCmd() *cobra.Command {
	var root string
	cmd := &cobra.Command{
		Use:   "rules",
		Short: "Explain, lint and render the instruction files that coding agents read",
		Long: `Reads AGENTS.md, AGENTS.override.md, CLAUDE.md (with @imports), .claude/rules,
.cursor/rules, .cursorrules, .windsurf/rules, .windsurfrules and GEMINI.md
anywhere in the repository into one model.`,
	}
	cmd.PersistentFlags().StringVar(&root, "root", "", "repository root (default: the nearest directory at or above the path with .git)")
	cmd.AddCommand(a.rulesExplainCmd(&root), a.rulesLintCmd(&root), a.rulesRenderCmd(&root))
	return cmd
}

// rulesLoad loads the rules of the repository at root, or of the one
// that contains start.
func rulesLoad(ctx context.Context, root, start string) (*rules.Repo, error) {
	if root == "" {
		var err error
		if root, err = rules.FindRoot(start); err != nil {
			return nil, err
		}
	}
	return rules.Load(ctx, root)
}

// rulesResolve loads the repository holding path and resolves path in it.
func rulesResolve(ctx context.Context, root, path string, budget int) (*rules.Resolution, error) {
	if budget < 0 {
		return nil, fmt.Errorf("--budget must not be negative")
	}
	repo, err := rulesLoad(ctx, root, path)
	if err != nil {
		return nil, err
	}
	rel, err := repo.Rel(path)
	if err != nil {
		return nil, err
	}
	return repo.Resolve(rel, budget), nil
}

func (a *app) rulesExplainCmd(root *string) *cobra.Command {
	var budget int
	cmd := command(a, &cobra.Command{
		Use:   "explain PATH",
		Short: "Show which rules apply to an edit of PATH, why, and where they come from",
		Args:  cobra.ExactArgs(1),
	}, "print JSON", func(w io.Writer, res *rules.Resolution) error { return res.Explain(w) }, func(s *session, args []string) (*rules.Resolution, error) {
		return rulesResolve(s.ctx, *root, args[0], budget)
	})
	cmd.Flags().IntVar(&budget, "budget", rules.DefaultBudget, "bytes of rule text to include; 0 for no limit")
	return cmd
}

func (a *app) rulesLintCmd(root *string) *cobra.Command {
	opts := rules.LintOptions{Budget: rules.DefaultBudget, MaxFile: rules.DefaultMaxFile}
	var asJSON bool
	cmd := a.withSession(&cobra.Command{
		Use:   "lint",
		Short: "Check rule files for mistakes and conflicts; exit status 1 on errors",
		Args:  cobra.NoArgs,
	}, func(s *session, args []string) error {
		repo, err := rulesLoad(s.ctx, *root, ".")
		if err != nil {
			return err
		}
		findings := repo.Lint(opts)
		errs := 0
		for _, f := range findings {
			if f.Severity == rules.Error {
				errs++
			}
		}
		if asJSON {
			err = writeJSON(a.stdout, struct {
				Root     string          `json:"root"`
				Findings []rules.Finding `json:"findings"`
				Errors   int             `json:"errors"`
				Warnings int             `json:"warnings"`
			}{repo.Root, findings, errs, len(findings) - errs})
		} else {
			for _, f := range findings {
				fmt.Fprintln(a.stdout, f)
			}
			_, err = fmt.Fprintf(a.stdout, "%d rules in %d files: %d errors, %d warnings\n",
				len(repo.Rules), len(repo.Sizes), errs, len(findings)-errs)
		}
		if err != nil {
			return err
		}
		if errs > 0 {
			return exitCode(1)
		}
		return nil
	})
	cmd.Flags().IntVar(&opts.Budget, "budget", opts.Budget, "bytes of rule text per file; a rule file larger than this is an error")
	cmd.Flags().IntVar(&opts.MaxFile, "max-file", opts.MaxFile, "bytes; a rule file larger than this is a warning")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func (a *app) rulesRenderCmd(root *string) *cobra.Command {
	var budget int
	var format string
	cmd := command(a, &cobra.Command{
		Use:   "render PATH",
		Short: "Write the rules for PATH as one context file for an agent",
		Args:  cobra.ExactArgs(1),
	}, "", func(w io.Writer, res *rules.Resolution) error { return res.Render(w, format) }, func(s *session, args []string) (*rules.Resolution, error) {
		if !slices.Contains(rules.Formats, format) {
			return nil, fmt.Errorf("--format %q: want one of %s", format, strings.Join(rules.Formats, ", "))
		}
		res, err := rulesResolve(s.ctx, *root, args[0], budget)
		if err != nil {
			return nil, err
		}
		// The cut is in the output as comments too; say it where a
		// person running the command sees it.
		for _, e := range res.Entries {
			if e.Status == rules.Dropped || e.Status == rules.Truncated {
				fmt.Fprintf(a.stderr, "smolvm: rules: %s %s: %s\n", e.Status, e.Rule.Pos(), e.Note)
			}
		}
		return res, nil
	})
	cmd.Flags().StringVar(&format, "format", "claude", "output format: "+strings.Join(rules.Formats, ", "))
	cmd.Flags().IntVar(&budget, "budget", rules.DefaultBudget, "bytes of rule text to include; 0 for no limit")
	return cmd
}
