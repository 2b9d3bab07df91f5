package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"smolvm.dev/smolvm/internal/store"
	"smolvm.dev/smolvm/workflow/trust"
)

// policyCmd groups the commands about the repository's trust policy.
func (a *app) policyCmd() *cobra.Command {
	var root string
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Check, explain and audit the trust policy in .smolvm/policy.toml",
		Long: `The trust policy decides, for each action an agent takes (read or write a
file, run a command, connect to a host, git commit, git push, open a PR,
change memory), whether smolvm allows it, asks a person, or denies it.
Deny beats ask beats allow; actions no rule matches get the default (ask).`,
	}
	cmd.PersistentFlags().StringVar(&root, "root", "", "repository root (default: the nearest directory at or above the current one with .smolvm or .git)")
	cmd.AddCommand(a.policyCheckCmd(&root), a.policyExplainCmd(&root), a.policyShowCmd(&root),
		a.policyPresetsCmd(), a.policyAuditCmd())
	return cmd
}

// policyLoad loads the policy of the repository at root, found from the
// current directory when root is empty. An invalid policy file is printed
// as file:line errors and exits 1.
func (a *app) policyLoad(root string) (*trust.Policy, error) {
	if root == "" {
		var err error
		if root, err = policyFindRoot(); err != nil {
			return nil, err
		}
	}
	p, err := trust.Load(root)
	var errs trust.Errors
	if errors.As(err, &errs) {
		for _, e := range errs {
			fmt.Fprintln(a.stderr, e)
		}
		return nil, exitCode(1)
	}
	return p, err
}

// policyFindRoot returns the nearest directory at or above the current one
// holding .smolvm or .git, or the current directory.
func policyFindRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		for _, name := range []string{".smolvm", ".git"} {
			if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
				return dir, nil
			}
		}
		if filepath.Dir(dir) == dir {
			return wd, nil
		}
	}
}

func (a *app) policyCheckCmd(root *string) *cobra.Command {
	return command(a, &cobra.Command{
		Use:   "check",
		Short: "Validate the policy file; print file:line errors and exit 1 if it is invalid",
		Args:  cobra.NoArgs,
	}, "", func(w io.Writer, p *trust.Policy) error {
		if p.File == "" {
			_, err := fmt.Fprintf(w, "no %s in %s: every action asks\n", trust.FileName, p.Root)
			return err
		}
		preset := ""
		if p.Preset != "" {
			preset = "preset " + p.Preset + ", "
		}
		_, err := fmt.Fprintf(w, "%s: ok (%s%d rules, default %s)\n", p.File, preset, len(p.Rules), p.Default)
		return err
	}, func(s *session, _ []string) (*trust.Policy, error) {
		return a.policyLoad(*root)
	})
}

func (a *app) policyExplainCmd(root *string) *cobra.Command {
	cmd := command(a, &cobra.Command{
		Use:   "explain ACTION [ARG...]",
		Short: "Say what the policy decides for an action, which rule decided and why",
		Long: `Actions: run 'COMMAND LINE', read PATH, write PATH, net HOST, git commit,
git push, pr, memory. A command line is judged part by part: every command
it runs (through &&, ;, pipes, $(…), sh -c, sudo, ...) and every file its
redirections write.`,
		Example: `  smolvm policy explain run 'true && rm -rf /'
  smolvm policy explain write src/foo_test.go
  smolvm policy explain git push
  smolvm policy explain net example.com`,
		Args: cobra.MinimumNArgs(1),
	}, "print the decision as JSON", policyExplain, func(s *session, args []string) (trust.Decision, error) {
		act, err := trust.ParseAction(args)
		if err != nil {
			return trust.Decision{}, err
		}
		p, err := a.policyLoad(*root)
		if err != nil {
			return trust.Decision{}, err
		}
		return p.Evaluate(act), nil
	})
	// explain run rm -rf / : words after the action are its, not flags.
	cmd.Flags().SetInterspersed(false)
	return cmd
}

func policyExplain(w io.Writer, d trust.Decision) error {
	fmt.Fprintf(w, "action:  %s\n", d.Action)
	fmt.Fprintf(w, "outcome: %s\n", d.Outcome)
	fmt.Fprintf(w, "rule:    %s\n", d.RuleText())
	fmt.Fprintf(w, "reason:  %s\n", d.Reason)
	if len(d.Parts) == 0 {
		return nil
	}
	fmt.Fprintln(w, "parts:")
	return table(w, "", func(tw io.Writer) {
		for i, pd := range d.Parts {
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\n", i+1, pd.Outcome, pd.Part, pd.Reason)
		}
	})
}

// policyView is the effective policy as policy show prints it.
type policyView struct {
	Root      string        `json:"root"`
	File      string        `json:"file,omitempty"`
	Preset    string        `json:"preset,omitempty"`
	Default   trust.Outcome `json:"default"`
	Dynamic   trust.Outcome `json:"dynamic"`
	Timeout   string        `json:"approval_timeout"`
	TestGlobs []string      `json:"test_globs"`
	Rules     []trust.Rule  `json:"rules"`
}

func (a *app) policyShowCmd(root *string) *cobra.Command {
	return command(a, &cobra.Command{
		Use:   "show",
		Short: "Print the effective policy: settings and every rule, presets expanded",
		Args:  cobra.NoArgs,
	}, "print JSON", func(w io.Writer, p policyView) error {
		fmt.Fprintf(w, "file:     %s\n", orNone(p.File))
		fmt.Fprintf(w, "preset:   %s\n", orNone(p.Preset))
		fmt.Fprintf(w, "default:  %s\ndynamic:  %s\ntimeout:  %s\n", p.Default, p.Dynamic, p.Timeout)
		fmt.Fprintf(w, "tests:    %s\n", strings.Join(p.TestGlobs, " "))
		return table(w, "WHERE\tOUTCOME\tCLASS\tPATTERN", func(tw io.Writer) {
			for _, r := range p.Rules {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Pos(), r.Outcome, r.Class, r.Pattern)
			}
		})
	}, func(s *session, _ []string) (policyView, error) {
		p, err := a.policyLoad(*root)
		if err != nil {
			return policyView{}, err
		}
		return policyView{p.Root, p.File, p.Preset, p.Default, p.Dynamic, p.Timeout.String(), p.TestGlobs, append([]trust.Rule{}, p.Rules...)}, nil
	})
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func (a *app) policyPresetsCmd() *cobra.Command {
	return a.withSession(&cobra.Command{
		Use:   "presets [NAME]",
		Short: "List the shipped presets, or print one's TOML",
		Args:  cobra.MaximumNArgs(1),
	}, func(s *session, args []string) error {
		if len(args) == 1 {
			text, err := trust.PresetText(args[0])
			if err != nil {
				return err
			}
			_, err = fmt.Fprint(a.stdout, text)
			return err
		}
		return table(a.stdout, "", func(tw io.Writer) {
			for _, name := range trust.PresetNames() {
				text, _ := trust.PresetText(name)
				first, _, _ := strings.Cut(text, "\n")
				fmt.Fprintf(tw, "%s\t%s\n", name, strings.TrimSpace(strings.TrimPrefix(first, "#")))
			}
		})
	})
}

func (a *app) policyAuditCmd() *cobra.Command {
	var since string
	var asJSON bool
	// list prints the audit log: a table, or JSON lines.
	list := func(s *session, jsonLines bool) error {
		t, err := policySince(since, time.Now())
		if err != nil {
			return err
		}
		l, err := s.ledger()
		if err != nil {
			return err
		}
		recs, err := l.Audit(s.ctx, t)
		if err != nil {
			return err
		}
		if jsonLines {
			enc := json.NewEncoder(a.stdout)
			for _, r := range recs {
				if err := enc.Encode(r); err != nil {
					return err
				}
			}
			return nil
		}
		return table(a.stdout, "TIME\tREQUESTER\tACTION\tPOLICY\tOUTCOME\tBY\tRULE", func(tw io.Writer) {
			for _, r := range recs {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Time.Local().Format(time.DateTime), r.Requester,
					policyShort(r.Action.String()), r.Verdict, r.Outcome, r.By, r.Rule)
			}
		})
	}
	cmd := a.withSession(&cobra.Command{
		Use:   "audit",
		Short: "List every recorded policy decision: time, action, rule, outcome, who decided",
		Args:  cobra.NoArgs,
	}, func(s *session, args []string) error {
		return list(s, asJSON)
	})
	cmd.PersistentFlags().StringVar(&since, "since", "", "only records since a time (RFC 3339 or YYYY-MM-DD) or for a duration back (24h)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON lines")
	cmd.AddCommand(a.withSession(&cobra.Command{
		Use:   "export",
		Short: "Write the audit log as JSON lines, one decision per line",
		Args:  cobra.NoArgs,
	}, func(s *session, args []string) error {
		return list(s, true)
	}))
	return cmd
}

// policySince parses --since: empty for the beginning, a duration back
// from now, an RFC 3339 time or a date.
func policySince(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if t, err := time.ParseInLocation(time.DateOnly, s, time.Local); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("--since %q: want a duration (24h), an RFC 3339 time or YYYY-MM-DD", s)
}

// policyShort keeps long command lines on one table row.
func policyShort(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > 60 {
		return string(r[:59]) + "…"
	}
	return s
}

// approvalsCmd groups the commands that answer policy asks.
func (a *app) approvalsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "approvals",
		Short: "List and answer actions waiting for approval under the trust policy",
	}
	cmd.AddCommand(a.approvalsLsCmd(), a.approvalsAnswerCmd(true), a.approvalsAnswerCmd(false))
	return cmd
}

func (a *app) approvalsLsCmd() *cobra.Command {
	var all bool
	cmd := command(a, &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List pending approvals (--all: answered ones too)",
		Args:    cobra.NoArgs,
	}, "print JSON", func(w io.Writer, aps []trust.Approval) error {
		now := store.Now()
		return table(w, "ID\tSTATE\tAGE\tREQUESTER\tACTION\tRULE", func(tw io.Writer) {
			for _, ap := range aps {
				state := ap.State
				if state == trust.Pending {
					state = "pending " + ap.Deadline.Sub(now).Round(time.Second).String() + " left"
					if !ap.Deadline.After(now) {
						state = trust.Expired // its requester is gone
					}
				} else if ap.By != "" && ap.By != ap.State {
					state += " by " + ap.By
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", ap.ID, state, now.Sub(ap.Created).Round(time.Second),
					ap.Requester, policyShort(ap.Action.String()), ap.Rule)
			}
		})
	}, on((*session).ledger, func(s *session, l *trust.Ledger, _ []string) ([]trust.Approval, error) {
		aps, err := l.Approvals(s.ctx, all)
		return append([]trust.Approval{}, aps...), err // [] in JSON
	}))
	cmd.Flags().BoolVar(&all, "all", false, "include answered and expired approvals")
	return cmd
}

func (a *app) approvalsAnswerCmd(approve bool) *cobra.Command {
	var why, as string
	verb, done := "deny", "denied"
	if approve {
		verb, done = "approve", "approved"
	}
	cmd := a.withSession(&cobra.Command{
		Use:   verb + " ID",
		Short: strings.ToUpper(verb[:1]) + verb[1:] + " a pending action; the agent waiting on it continues at once",
		Args:  cobra.ExactArgs(1),
	}, func(s *session, args []string) error {
		if as == "" {
			as = policyWho()
		}
		l, err := s.ledger()
		if err != nil {
			return err
		}
		ap, err := l.Approval(s.ctx, args[0])
		if err != nil {
			return &exitError{code: 1, err: err}
		}
		if err := l.Answer(s.ctx, ap.ID, approve, as, why); err != nil {
			if errors.Is(err, trust.ErrAnswered) {
				return &exitError{code: 1, err: err}
			}
			return err
		}
		_, err = fmt.Fprintf(a.stdout, "%s %s: %s\n", done, ap.ID, ap.Action)
		return err
	})
	cmd.Flags().StringVar(&why, "why", "", "reason, recorded in the audit log and shown to the agent")
	cmd.Flags().StringVar(&as, "as", "", "who answers (default: the current user)")
	return cmd
}

// policyWho names the person running the command for the audit log.
func policyWho() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	return "unknown"
}
