package branch

import (
	"context"
	"fmt"
	"strings"

	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/workflow/forge"
	"smolvm.dev/smolvm/workflow/runner"
	"smolvm.dev/smolvm/workflow/trust"
)

// PR is the pull request of a merged run: the integration branch on the
// base, with the summary (merged, ejected and why) and each merge's CI
// evidence as its body. is may be zero (no issue).
func (c *Coordinator) PR(ctx context.Context, id string, is forge.Issue, baseBranch string) (*runner.PR, error) {
	r, bs, err := c.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if r.State != Merged {
		return nil, errdefs.New(errdefs.ErrConflict, fmt.Sprintf("run %s is %s: merge it first", id, r.State))
	}
	g := gitDir(r.Git)
	head, err := g.run(ctx, "rev-parse", "refs/heads/"+r.Integration)
	if err != nil {
		return nil, err
	}
	diff, err := g.run(ctx, "diff", "--no-color", "--no-ext-diff", "--no-textconv", r.Base, head)
	if err != nil {
		return nil, err
	}
	stat, _ := g.run(ctx, "diff", "--stat", r.Base, head)
	ss, err := c.Store.Steps(ctx, id)
	if err != nil {
		return nil, err
	}
	title := fmt.Sprintf("smolvm branches %s: %d branches (%s)", r.ID, len(bs), r.Mode)
	if is.Title != "" {
		title = is.Title
		if is.Number > 0 {
			title = fmt.Sprintf("Fix #%d: %s", is.Number, is.Title)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "## Summary\n\n%s\n## Change\n\n```\n%s\n```\n\n## CI evidence\n\n`%s` (%s), run in a fork of the set-up checkpoint:\n\n",
		r.Summary, stat, firstLine(r.CI.Command), r.CI.Source)
	for _, s := range ss {
		if s.Result != nil && (s.Kind == "merged" || s.Kind == "winner" || s.Kind == "ci" || s.Kind == "ejected") {
			fmt.Fprintf(&b, "- step %d, branch %d, %s: %s\n", s.N, s.Branch, s.Kind, s.Result.Summary())
		}
	}
	if len(r.CI.Unsupported) > 0 {
		fmt.Fprintf(&b, "\nCI steps not run in the sandbox:\n- %s\n", strings.Join(r.CI.Unsupported, "\n- "))
	}
	if is.Number > 0 {
		fmt.Fprintf(&b, "\nFixes #%d\n", is.Number)
	}
	return &runner.PR{PullRequest: forge.PullRequest{Head: r.Integration, Base: baseBranch, Title: title, Body: b.String(), Draft: true},
		Commit: head, Diff: diff}, nil
}

// Publish copies run id's branches (each branch and the integration
// branch, refs and objects only) into the user's repository, once gate
// allows the git-commit.
func (c *Coordinator) Publish(ctx context.Context, gate *trust.Gate, id string) error {
	r, err := c.Store.Run(ctx, id)
	if err != nil {
		return err
	}
	if err := gate.Check(ctx, trust.Action{Kind: trust.Commit}, "branch-"+id); err != nil {
		return err
	}
	spec := fmt.Sprintf("refs/heads/smolvm/%s/*:refs/heads/smolvm/%s/*", r.ID, r.ID)
	if _, _, err := git(ctx, r.Repo, "fetch", "-q", r.Git, spec); err != nil {
		return fmt.Errorf("publish %s into %s: %w", r.ID, r.Repo, err)
	}
	return nil
}
