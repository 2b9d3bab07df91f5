package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"smolvm.dev/smolvm/workflow/memory"
	"smolvm.dev/smolvm/workflow/trust"
)

// memoryProposed decides whether a new fact by author in the repository at
// root must be reviewed before it becomes valid. Humans write directly. For
// an agent the repository's trust policy decides (memory.change: allow
// writes directly, ask and deny propose) and the decision is audited in the
// data directory. No flag lifts the policy: enforcement is smolvm's, not
// the caller's.
func memoryProposed(s *session, root, author string) (bool, error) {
	if !strings.HasPrefix(author, "agent:") {
		return false, nil
	}
	gate, err := s.gate(root)
	if err != nil {
		return true, err
	}
	d, err := gate.Evaluate(s.ctx, trust.Action{Kind: trust.Memory}, author)
	if err != nil {
		return true, fmt.Errorf("audit memory change: %w", err)
	}
	return d.Outcome != trust.Allow, nil
}

// memoryCLI holds the memory group's shared flag.
type memoryCLI struct {
	*app
	dir string // -C: run as if started in this directory
}

func (a *app) memoryCmd() *cobra.Command {
	m := &memoryCLI{app: a}
	cmd := &cobra.Command{
		Use:   "memory",
		Short: "Project memory: facts anchored to code, invalidated when it changes",
		Long: `Project memory keeps one fact per file in .smolvm/memory/<id>.md, anchored
to paths (PATH, PATH:L1-L2 or PATH#Symbol) with the git blob hashes they had.
verify marks facts stale when their anchors drift; recall returns only valid
facts. Facts are never deleted: forget and review --reject close them and
keep their history.`,
	}
	cmd.PersistentFlags().StringVarP(&m.dir, "dir", "C", ".", "run as if started in `DIR`")
	cmd.AddCommand(m.addCmd(), m.lsCmd(), m.showCmd(), m.editCmd(), m.confirmCmd(),
		m.forgetCmd(), m.verifyCmd(), m.historyCmd(), m.recallCmd(), m.reviewCmd(),
		m.installHookCmd())
	return cmd
}

// memRepo is the repository memory a memory command works on.
type memRepo struct {
	*memory.Repo
	base string // the absolute base directory for relative paths
}

// open opens the repository memory at -C.
func (m *memoryCLI) open(s *session) (memRepo, error) {
	base, err := filepath.Abs(m.dir)
	if err != nil {
		return memRepo{}, err
	}
	r, err := memory.Open(s.ctx, base)
	if err != nil {
		return memRepo{}, err
	}
	return memRepo{r, base}, nil
}

// actor is who a change is recorded as when --by/--author is not given:
// $SMOLVM_AUTHOR, else human:<git user.name>, else human:$USER.
func (r memRepo) actor(ctx context.Context, given string) string {
	if given != "" {
		return given
	}
	if v := os.Getenv("SMOLVM_AUTHOR"); v != "" {
		return v
	}
	if u := r.GitUser(ctx); u != "" {
		return u
	}
	if u := os.Getenv("USER"); u != "" {
		return "human:" + u
	}
	return "human:unknown"
}

// anchors parses anchor specs whose paths are relative to the base.
func (r memRepo) anchors(specs []string) ([]memory.Anchor, error) {
	var as []memory.Anchor
	for _, s := range specs {
		a, err := r.ParseAnchorAt(r.base, s)
		if err != nil {
			return nil, err
		}
		as = append(as, a)
	}
	return as, nil
}

func parseKind(s string) (memory.Kind, error) {
	for _, k := range memory.Kinds {
		if string(k) == s {
			return k, nil
		}
	}
	return "", fmt.Errorf("unknown kind %q (want one of %v)", s, memory.Kinds)
}

// factCmd is a memory command that changes one fact and prints its ID and
// new status.
func (m *memoryCLI) factCmd(c *cobra.Command, jsonUsage string, change func(s *session, r memRepo, args []string) (*memory.Fact, error)) *cobra.Command {
	return command(m.app, c, jsonUsage, printFactStatus, on(m.open, change))
}

func printFactStatus(w io.Writer, f *memory.Fact) error {
	_, err := fmt.Fprintf(w, "%s %s\n", f.ID, f.Status)
	return err
}

func (m *memoryCLI) addCmd() *cobra.Command {
	var kind, author, supersedes string
	var anchors []string
	var direct bool
	cmd := m.factCmd(&cobra.Command{
		Use:   "add TEXT --kind KIND [--anchor PATH[:L1-L2|#Symbol]]...",
		Short: "Record a fact (agents' facts are proposed unless the trust policy allows memory changes)",
		Args:  cobra.MinimumNArgs(1),
	}, "print the fact as JSON", func(s *session, r memRepo, args []string) (*memory.Fact, error) {
		k, err := parseKind(kind)
		if err != nil {
			return nil, err
		}
		as, err := r.anchors(anchors)
		if err != nil {
			return nil, err
		}
		if direct {
			fmt.Fprintln(m.stderr, "smolvm: --direct is ignored: the trust policy's memory.change decides")
		}
		author := r.actor(s.ctx, author)
		proposed, err := memoryProposed(s, r.Root(), author)
		if err != nil {
			return nil, err
		}
		return r.Add(s.ctx, memory.AddOptions{
			Text:       strings.Join(args, " "),
			Kind:       k,
			Author:     author,
			Anchors:    as,
			Proposed:   proposed,
			Supersedes: supersedes,
		})
	})
	fl := cmd.Flags()
	fl.StringVar(&kind, "kind", "", "decision, convention, architecture or gotcha (required)")
	fl.StringArrayVar(&anchors, "anchor", nil, "anchor `PATH[:L1-L2|#Symbol]` (repeatable)")
	fl.StringVar(&author, "author", "", "human:NAME or agent:NAME (default $SMOLVM_AUTHOR, then human:<git user.name>)")
	// --direct used to let agents skip review; old scripts may still pass it.
	fl.BoolVar(&direct, "direct", false, "ignored: the trust policy decides")
	fl.MarkHidden("direct")
	fl.StringVar(&supersedes, "supersedes", "", "`ID` of a fact this one replaces (closed once this is valid)")
	cmd.MarkFlagRequired("kind")
	return cmd
}

func (m *memoryCLI) lsCmd() *cobra.Command {
	var stale, valid, proposed, all bool
	var path string
	cmd := command(m.app, &cobra.Command{
		Use:   "ls [--stale|--valid|--proposed|--all] [--path P]",
		Short: "List facts (default: valid, stale and proposed)",
		Args:  cobra.NoArgs,
	}, "print JSON", factTable, on(m.open, func(s *session, r memRepo, _ []string) ([]*memory.Fact, error) {
		facts, err := r.List(s.ctx)
		if err != nil {
			return nil, err
		}
		path := path
		if path != "" {
			if path, err = r.Rel(r.base, path); err != nil {
				return nil, err
			}
		}
		want := map[memory.Status]bool{memory.Stale: stale, memory.Valid: valid, memory.Proposed: proposed}
		filtered := stale || valid || proposed
		out := []*memory.Fact{}
		for _, f := range facts {
			switch {
			case filtered && !want[f.Status]:
			case !filtered && !all && f.Status.Closed():
			case path != "" && !anchoredUnder(f, path):
			default:
				out = append(out, f)
			}
		}
		return out, nil
	}))
	fl := cmd.Flags()
	fl.BoolVar(&stale, "stale", false, "only stale facts")
	fl.BoolVar(&valid, "valid", false, "only valid facts")
	fl.BoolVar(&proposed, "proposed", false, "only proposed facts")
	fl.BoolVar(&all, "all", false, "include forgotten and rejected facts")
	fl.StringVar(&path, "path", "", "only facts anchored at or under `P`")
	return cmd
}

func anchoredUnder(f *memory.Fact, p string) bool {
	for _, a := range f.Anchors {
		if p == "." || a.Path == p || strings.HasPrefix(a.Path, p+"/") {
			return true
		}
	}
	return false
}

func factTable(w io.Writer, facts []*memory.Fact) error {
	return table(w, "ID\tSTATUS\tKIND\tAUTHOR\tANCHORS\tTEXT", func(tw io.Writer) {
		for _, f := range facts {
			var as []string
			for _, a := range f.Anchors {
				as = append(as, a.String())
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", f.ID, f.Status, f.Kind, f.Author, strings.Join(as, ","), summary(f.Text))
		}
	})
}

// summary is the first line of text, cut to fit a table.
func summary(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if r := []rune(s); len(r) > 60 {
		return string(r[:57]) + "..."
	}
	return s
}

// getFact is the body of the commands that show one fact.
func getFact(s *session, r memRepo, args []string) (*memory.Fact, error) {
	return r.Get(s.ctx, args[0])
}

func (m *memoryCLI) showCmd() *cobra.Command {
	return command(m.app, &cobra.Command{
		Use:   "show ID",
		Short: "Show a fact (ID may be a unique prefix)",
		Args:  cobra.ExactArgs(1),
	}, "print JSON", showFact, on(m.open, getFact))
}

func showFact(w io.Writer, f *memory.Fact) error {
	fmt.Fprintf(w, "id:       %s\nstatus:   %s\nkind:     %s\nauthor:   %s\n", f.ID, f.Status, f.Kind, f.Author)
	fmt.Fprintf(w, "created:  %s", f.CreatedAt.Format(time.RFC3339))
	if f.CreatedCommit != "" {
		fmt.Fprintf(w, " at commit %s", f.CreatedCommit)
	}
	fmt.Fprintln(w)
	if !f.ValidFrom.IsZero() {
		fmt.Fprintf(w, "valid:    from %s\n", f.ValidFrom.Format(time.RFC3339))
	}
	if !f.InvalidatedAt.IsZero() {
		fmt.Fprintf(w, "closed:   %s: %s\n", f.InvalidatedAt.Format(time.RFC3339), f.Reason)
	}
	if f.Supersedes != "" {
		fmt.Fprintf(w, "replaces: %s\n", f.Supersedes)
	}
	if f.SupersededBy != "" {
		fmt.Fprintf(w, "replaced: by %s\n", f.SupersededBy)
	}
	for _, a := range f.Anchors {
		fmt.Fprintf(w, "anchor:   %s", a)
		if a.Blob != "" {
			fmt.Fprintf(w, " (blob %.12s)", a.Blob)
		}
		if a.Drift != "" {
			fmt.Fprintf(w, " DRIFTED: %s", a.Drift)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "history:  %d events (smolvm memory history %s)\n\n%s\n", len(f.History), f.ID, f.Text)
	return nil
}

func (m *memoryCLI) editCmd() *cobra.Command {
	var text, kind, by, why string
	var anchors []string
	cmd := m.factCmd(&cobra.Command{
		Use:   "edit ID [--text T] [--kind K] [--anchor A]...",
		Short: "Change a fact; new anchors are re-hashed and revalidate a stale fact",
		Args:  cobra.ExactArgs(1),
	}, "", func(s *session, r memRepo, args []string) (*memory.Fact, error) {
		o := memory.EditOptions{Text: text, By: r.actor(s.ctx, by), Why: why}
		var err error
		if kind != "" {
			if o.Kind, err = parseKind(kind); err != nil {
				return nil, err
			}
		}
		if s.cmd.Flags().Changed("anchor") {
			if o.Anchors, err = r.anchors(anchors); err != nil {
				return nil, err
			}
		}
		return r.Edit(s.ctx, args[0], o)
	})
	fl := cmd.Flags()
	fl.StringVar(&text, "text", "", "new text")
	fl.StringVar(&kind, "kind", "", "new kind")
	fl.StringArrayVar(&anchors, "anchor", nil, "replace all anchors with these (repeatable)")
	fl.StringVar(&by, "by", "", "who is editing (default as for add --author)")
	fl.StringVar(&why, "why", "", "reason, kept in the history")
	return cmd
}

func (m *memoryCLI) confirmCmd() *cobra.Command {
	var by, why string
	cmd := m.factCmd(&cobra.Command{
		Use:   "confirm ID",
		Short: "Re-hash a stale fact's anchors as they are now (following renames) and make it valid",
		Args:  cobra.ExactArgs(1),
	}, "", func(s *session, r memRepo, args []string) (*memory.Fact, error) {
		return r.Confirm(s.ctx, args[0], r.actor(s.ctx, by), why)
	})
	cmd.Flags().StringVar(&by, "by", "", "who is confirming (default as for add --author)")
	cmd.Flags().StringVar(&why, "why", "", "reason, kept in the history")
	return cmd
}

func (m *memoryCLI) forgetCmd() *cobra.Command {
	var by, why string
	cmd := m.factCmd(&cobra.Command{
		Use:   "forget ID --why W --by WHO",
		Short: "Close a fact; it stays on disk with who and why",
		Args:  cobra.ExactArgs(1),
	}, "", func(s *session, r memRepo, args []string) (*memory.Fact, error) {
		return r.Forget(s.ctx, args[0], by, why)
	})
	cmd.Flags().StringVar(&by, "by", "", "who is forgetting it: human:NAME or agent:NAME (required)")
	cmd.Flags().StringVar(&why, "why", "", "why it no longer holds (required)")
	cmd.MarkFlagRequired("by")
	cmd.MarkFlagRequired("why")
	return cmd
}

// memoryVerifyJSON is one fact in verify --json output.
type memoryVerifyJSON struct {
	ID      string          `json:"id"`
	Status  memory.Status   `json:"status"`
	Change  string          `json:"change,omitempty"`
	Text    string          `json:"text"`
	Drifted []memory.Anchor `json:"drifted,omitempty"`
}

func (m *memoryCLI) verifyCmd() *cobra.Command {
	var by string
	var asJSON bool
	cmd := m.withSession(&cobra.Command{
		Use:   "verify",
		Short: "Mark facts whose anchors drifted as stale; exit 1 if any fact is stale",
		Long: `verify checks every valid and stale fact against the working tree and
prints each drifted anchor and how: modified, renamed to X, deleted, or
symbol gone. Facts whose anchors match again become valid. Changes are
written to the fact files with a history entry. Exit status is 1 when any
fact is stale afterwards (newly or from before), 0 otherwise.`,
		Args: cobra.NoArgs,
	}, func(s *session, args []string) error {
		r, err := m.open(s)
		if err != nil {
			return err
		}
		res, err := r.Verify(s.ctx, r.actor(s.ctx, by))
		if err != nil {
			return err
		}
		stale := 0
		out := []memoryVerifyJSON{}
		for _, x := range res {
			if x.Fact.Status == memory.Stale {
				stale++
			}
			if x.Fact.Status != memory.Stale && x.Change == "" {
				continue
			}
			out = append(out, memoryVerifyJSON{ID: x.Fact.ID, Status: x.Fact.Status, Change: x.Change, Text: x.Fact.Text, Drifted: x.Drifted})
		}
		if asJSON {
			if err := writeJSON(m.stdout, out); err != nil {
				return err
			}
		} else {
			for _, v := range out {
				note := ""
				if v.Change != "" {
					note = " (now " + v.Change + ")"
				}
				fmt.Fprintf(m.stdout, "%s %s%s: %s\n", v.Status, v.ID, note, summary(v.Text))
				for _, a := range v.Drifted {
					fmt.Fprintf(m.stdout, "    %s: %s\n", a, a.Drift)
				}
			}
			fmt.Fprintf(m.stdout, "%d facts checked, %d stale\n", len(res), stale)
		}
		if stale > 0 {
			return exitCode(1)
		}
		return nil
	})
	cmd.Flags().StringVar(&by, "by", "", "who the history records (default as for add --author)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func (m *memoryCLI) historyCmd() *cobra.Command {
	return command(m.app, &cobra.Command{
		Use:   "history ID",
		Short: "Show every recorded change to a fact",
		Args:  cobra.ExactArgs(1),
	}, "print JSON", func(w io.Writer, history []memory.Event) error {
		return table(w, "TIME\tBY\tWHAT\tWHY", func(tw io.Writer) {
			for _, e := range history {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", e.At.Format(time.RFC3339), e.By, e.Action, e.Why)
			}
		})
	}, on(m.open, func(s *session, r memRepo, args []string) ([]memory.Event, error) {
		f, err := r.Get(s.ctx, args[0])
		if err != nil {
			return nil, err
		}
		return f.History, nil
	}))
}

// memoryRecallJSON is one match in recall --json output.
type memoryRecallJSON struct {
	ID      string          `json:"id"`
	Kind    memory.Kind     `json:"kind"`
	Text    string          `json:"text"`
	Score   int             `json:"score"`
	Reason  string          `json:"reason"`
	Anchors []memory.Anchor `json:"anchors"`
}

func (m *memoryCLI) recallCmd() *cobra.Command {
	var limit int
	cmd := command(m.app, &cobra.Command{
		Use:   "recall PATH|QUERY",
		Short: "Valid facts relevant to a path or a text query, best first",
		Long: `recall returns only valid facts whose anchors still match. A PATH (one that
exists or that facts are anchored under) ranks facts by anchor: the path
itself 100, its directory 80, an ancestor directory 70 down to 40, inside a
queried directory 60, a file in the same directory 50. Otherwise the
arguments are a text query scored by the share of its words in the fact
(up to 30, +10 for the whole phrase). Ties go to the newer fact.`,
		Args: cobra.MinimumNArgs(1),
	}, "print JSON", func(w io.Writer, out []memoryRecallJSON) error {
		for _, x := range out {
			fmt.Fprintf(w, "%3d %s [%s] %s\n", x.Score, x.ID, x.Kind, x.Text)
			fmt.Fprintf(w, "    why: %s\n", x.Reason)
			for _, a := range x.Anchors {
				fmt.Fprintf(w, "    anchor: %s\n", a)
			}
		}
		return nil
	}, on(m.open, func(s *session, r memRepo, args []string) ([]memoryRecallJSON, error) {
		ms, err := r.Recall(s.ctx, r.base, strings.Join(args, " "))
		if err != nil {
			return nil, err
		}
		if limit > 0 && len(ms) > limit {
			ms = ms[:limit]
		}
		out := []memoryRecallJSON{}
		for _, x := range ms {
			out = append(out, memoryRecallJSON{ID: x.Fact.ID, Kind: x.Fact.Kind, Text: x.Fact.Text, Score: x.Score, Reason: x.Reason, Anchors: x.Fact.Anchors})
		}
		return out, nil
	}))
	cmd.Flags().IntVar(&limit, "limit", 0, "return at most `N` facts (0: all)")
	return cmd
}

func (m *memoryCLI) reviewCmd() *cobra.Command {
	var accept, reject, asJSON bool
	var by, why string
	cmd := m.withSession(&cobra.Command{
		Use:   "review [ID --accept|--reject [--why W]]",
		Short: "List proposed facts, or accept or reject one",
		Args:  cobra.MaximumNArgs(1),
	}, func(s *session, args []string) error {
		r, err := m.open(s)
		if err != nil {
			return err
		}
		if len(args) == 0 {
			if accept || reject {
				return errors.New("review: --accept and --reject need a fact ID")
			}
			facts, err := r.List(s.ctx)
			if err != nil {
				return err
			}
			out := []*memory.Fact{}
			for _, f := range facts {
				if f.Status == memory.Proposed {
					out = append(out, f)
				}
			}
			if asJSON {
				return writeJSON(m.stdout, out)
			}
			return factTable(m.stdout, out)
		}
		if accept == reject {
			return errors.New("review: give exactly one of --accept or --reject")
		}
		f, err := r.Review(s.ctx, args[0], accept, r.actor(s.ctx, by), why)
		if err != nil {
			return err
		}
		return printFactStatus(m.stdout, f)
	})
	fl := cmd.Flags()
	fl.BoolVar(&accept, "accept", false, "make the proposed fact valid")
	fl.BoolVar(&reject, "reject", false, "reject the proposed fact (kept, closed)")
	fl.StringVar(&by, "by", "", "reviewer (default as for add --author)")
	fl.StringVar(&why, "why", "", "reason, kept in the history")
	fl.BoolVar(&asJSON, "json", false, "print JSON when listing")
	return cmd
}

func (m *memoryCLI) installHookCmd() *cobra.Command {
	return command(m.app, &cobra.Command{
		Use:   "install-hook",
		Short: "Run verify after every commit (adds to .git/hooks/post-commit)",
		Args:  cobra.NoArgs,
	}, "", printLine(func(p string) string { return p + " runs: " + memory.HookLine }), on(m.open, func(s *session, r memRepo, _ []string) (string, error) {
		return r.InstallHook(s.ctx)
	}))
}
