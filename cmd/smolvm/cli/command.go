package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"smolvm.dev/smolvm/client"
	"smolvm.dev/smolvm/internal/store"
	"smolvm.dev/smolvm/runtime/image"
	"smolvm.dev/smolvm/runtime/snapshot"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/workflow/trust"
)

// The common shape of a command: open what it works on, do one call, print
// the result as JSON (--json) or as text. command builds such a command;
// session opens what its body needs and closes it when the body returns.

// session is one run of a command: its context, and the data dir's
// database once something opened it.
type session struct {
	*app
	ctx context.Context
	cmd *cobra.Command
	st  *store.Store
	env *env
}

func (s *session) close() {
	if s.env != nil {
		if s.self != "" {
			// What the command checkpointed can be restored already; its
			// hashing and syncfs (snapshot.Staging.Commit) need not hold
			// up the user, as they do not hold up a library's caller.
			s.env.snaps.HandOff(s.sealAside)
		}
		s.env.Close()
	}
	if s.st != nil {
		s.st.Close()
	}
}

// store opens the data dir's database, once per session: the runtime's,
// if it is open.
func (s *session) store() (*store.Store, error) {
	if s.env != nil {
		return s.env.st, nil
	}
	if s.st == nil {
		st, err := store.Open(s.ctx, s.dataDir)
		if err != nil {
			return nil, err
		}
		s.st = st
	}
	return s.st, nil
}

// runtime opens the sandbox manager on the data dir, once per session,
// whatever --host says.
func (s *session) runtime() (*env, error) {
	if s.env == nil {
		e, err := s.open(s.ctx)
		if err != nil {
			return nil, err
		}
		s.env = e
	}
	return s.env, nil
}

// services is what both a Manager and a client offer.
type services interface {
	sandbox.Service
	sandbox.VolumeService
}

// sandboxes returns the sandbox operations: through the server --host
// (SMOLVM_HOST) names, with SMOLVM_TOKEN, or directly on the data dir.
func (s *session) sandboxes() (sandbox.Service, error) {
	svc, err := s.services()
	return svc, err
}

// volumes returns the volume operations, as sandboxes does.
func (s *session) volumes() (sandbox.VolumeService, error) {
	svc, err := s.services()
	return svc, err
}

func (s *session) services() (services, error) {
	if s.host != "" {
		return client.New(s.host, os.Getenv("SMOLVM_TOKEN"))
	}
	e, err := s.runtime()
	if err != nil {
		return nil, err
	}
	return e.mgr, nil
}

// images opens the data dir's image store.
func (s *session) images() (*image.Store, error) {
	st, err := s.store()
	if err != nil {
		return nil, err
	}
	return image.Open(s.ctx, s.dataDir, st)
}

// snapshots opens the data dir's snapshot store.
func (s *session) snapshots() (*snapshot.Store, error) {
	st, err := s.store()
	if err != nil {
		return nil, err
	}
	return snapshot.Open(s.ctx, s.dataDir, st)
}

// ledger opens the trust policy's approvals and audit ledger in the data
// dir.
func (s *session) ledger() (*trust.Ledger, error) {
	st, err := s.store()
	if err != nil {
		return nil, err
	}
	return trust.OpenLedger(s.ctx, st)
}

// gate is the trust gate of the repository at root: its policy, with
// decisions audited in the data directory's ledger.
func (s *session) gate(root string) (*trust.Gate, error) {
	p, err := trust.Load(root)
	if err != nil {
		return nil, fmt.Errorf("trust policy: %w", err)
	}
	l, err := s.ledger()
	if err != nil {
		return nil, err
	}
	return &trust.Gate{Policy: p, Ledger: l}, nil
}

// withSession sets c's body: run gets a session, closed when it returns.
func (a *app) withSession(c *cobra.Command, run func(s *session, args []string) error) *cobra.Command {
	c.RunE = func(cmd *cobra.Command, args []string) error {
		s := &session{app: a, ctx: cmd.Context(), cmd: cmd}
		defer s.close()
		return run(s, args)
	}
	return c
}

// command builds c (use, help, args) with run as its body, and prints
// what run returns: as indented JSON when --json is on (jsonUsage is the
// flag's usage; "" for a command without one), otherwise with text (nil:
// nothing). A failed run prints nothing.
func command[T any](a *app, c *cobra.Command, jsonUsage string, text func(w io.Writer, v T) error, run func(s *session, args []string) (T, error)) *cobra.Command {
	var asJSON bool
	if jsonUsage != "" {
		c.Flags().BoolVar(&asJSON, "json", false, jsonUsage)
	}
	return a.withSession(c, func(s *session, args []string) error {
		v, err := run(s, args)
		switch {
		case err != nil:
			return err
		case asJSON:
			return writeJSON(s.stdout, v)
		case text != nil:
			return text(s.stdout, v)
		}
		return nil
	})
}

// on makes a body that opens what a command works on with open, then does
// call with it.
func on[R, T any](open func(*session) (R, error), call func(s *session, r R, args []string) (T, error)) func(*session, []string) (T, error) {
	return func(s *session, args []string) (T, error) {
		r, err := open(s)
		if err != nil {
			var zero T
			return zero, err
		}
		return call(s, r, args)
	}
}

// writeJSON writes v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// printJSON prints a result as indented JSON, with or without --json.
func printJSON[T any](w io.Writer, v T) error { return writeJSON(w, v) }

// printLine prints the line that line makes of a result.
func printLine[T any](line func(T) string) func(io.Writer, T) error {
	return func(w io.Writer, v T) error {
		_, err := fmt.Fprintln(w, line(v))
		return err
	}
}

// table writes an aligned table: header (if any), then what rows writes,
// one tab-separated line per row.
func table(w io.Writer, header string, rows func(tw io.Writer)) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if header != "" {
		fmt.Fprintln(tw, header)
	}
	rows(tw)
	return tw.Flush()
}

// removeCmd builds c as a command that removes every name it is given
// from the store open opens, but not what a sandbox uses (inUse). A
// failure does not stop the rest: each success prints "Removed NAME", all
// failures but the last are printed, the last is returned.
func removeCmd[S any](a *app, c *cobra.Command, open func(*session) (S, error),
	remove func(S, context.Context, string, func(id string) (bool, error)) error,
	inUse func(context.Context, *store.Store, string) (bool, error)) *cobra.Command {
	c.Args = cobra.MinimumNArgs(1)
	return a.withSession(c, func(s *session, names []string) error {
		from, err := open(s)
		if err != nil {
			return err
		}
		used := func(id string) (bool, error) { return inUse(s.ctx, s.st, id) }
		return a.removeEach(names, func(n string) error { return remove(from, s.ctx, n, used) })
	})
}

// removeEach removes every name: each success prints "Removed NAME", all
// failures but the last are printed, the last is returned.
func (a *app) removeEach(names []string, remove func(string) error) error {
	var last error
	for _, n := range names {
		if err := remove(n); err != nil {
			if last != nil {
				fmt.Fprintln(a.stderr, "smolvm:", last)
			}
			last = err
			continue
		}
		fmt.Fprintln(a.stdout, "Removed", n)
	}
	return last
}
