package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"smolvm.dev/smolvm/api"
	"smolvm.dev/smolvm/client"
	"smolvm.dev/smolvm/runtime/manager"
	"smolvm.dev/smolvm/sandbox"
)

// templateOps are the template operations, on the data dir or through
// the server --host names.
type templateOps interface {
	BuildTemplate(ctx context.Context, req api.TemplateRequest) (*sandbox.Template, error)
	Templates(ctx context.Context) ([]*sandbox.Template, error)
	Template(ctx context.Context, name string) (*sandbox.Template, error)
	RemoveTemplate(ctx context.Context, name string) error
}

// localTemplates are templateOps on the data dir's runtime, with the
// build's progress on log.
type localTemplates struct {
	*manager.Manager
	log io.Writer
}

func (l localTemplates) BuildTemplate(ctx context.Context, req api.TemplateRequest) (*sandbox.Template, error) {
	o := req.Options()
	o.Log = l.log
	return l.Manager.BuildTemplate(ctx, o)
}

func (s *session) templates() (templateOps, error) {
	ops, err := s.sandboxes()
	if err != nil {
		return nil, err
	}
	if m, ok := ops.(*manager.Manager); ok {
		return localTemplates{m, s.stderr}, nil
	}
	return ops.(*client.Client), nil
}

func (a *app) templateCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "template",
		Short: "Templates: an image plus a started state (its server already up in every sandbox made from it)",
		Long: `A template is an image plus, optionally, a start command and a ready check. Building
one runs the start command in a sandbox of the image, waits until the check passes,
and checkpoints it: every sandbox created from the template (smolvm run --image NAME,
or NAME as the image of the API's create and E2B's templateID) is a restore of that
checkpoint, its server already answering. A template without a start command is a
name for its image (with its env, workdir and user).`,
	}
	c.AddCommand(a.templateBuildCmd(), a.templateLsCmd(), a.templateInspectCmd(), a.templateRmCmd())
	return c
}

func (a *app) templateBuildCmd() *cobra.Command {
	var (
		req   api.TemplateRequest
		ready api.TemplateReady
		start string
		after time.Duration
		wait  time.Duration
		lf    limitFlags
	)
	c := command(a, &cobra.Command{
		Use:   "build NAME [--image IMAGE] [--start CMD] [--ready-port PORT | --ready-url URL | ...]",
		Short: "Build a template: run --start in a sandbox of --image until ready, and checkpoint it",
		Example: `  smolvm template build web --image myapp --start 'python3 -m http.server 8000' --ready-port 8000
  smolvm template build api --image myapp --start './serve' --ready-url http://localhost:8080/health --ready-timeout 5m
  smolvm run --image web -- true    # no: a started template's main process is its start command
  smolvm run --image web            # a restore: port 8000 answers at once`,
		Args: cobra.ExactArgs(1),
	}, "print the template as JSON", printTemplate, on((*session).templates, func(s *session, ops templateOps, args []string) (*sandbox.Template, error) {
		req.Name = args[0]
		if start != "" {
			req.Start = []string{"/bin/sh", "-c", start}
		}
		ready.After, ready.Timeout = api.Duration(after), api.Duration(wait)
		if ready != (api.TemplateReady{}) {
			req.Ready = &ready
		}
		l, err := lf.limits(s.cmd.Flags())
		if err != nil {
			return nil, err
		}
		req.CPUs, req.Memory, req.Pids, req.Disk = l.CPUs, api.Bytes(l.Memory), l.Pids, api.Bytes(l.Disk)
		return ops.BuildTemplate(s.ctx, req)
	}))
	f := c.Flags()
	f.StringVar(&req.Image, "image", "", "image reference or ID (default: host)")
	f.StringVar(&start, "start", "", "start command (sh -c), run as the sandbox's main process; none: the image alone")
	f.IntVar(&ready.Port, "ready-port", 0, "ready once this TCP port in the sandbox accepts")
	f.StringVar(&ready.URL, "ready-url", "", "ready once http://localhost:PORT/PATH answers --ready-status")
	f.IntVar(&ready.Status, "ready-status", 0, "the status --ready-url must answer (default 200)")
	f.StringVar(&ready.File, "ready-file", "", "ready once this file exists in the sandbox")
	f.StringVar(&ready.Process, "ready-process", "", "ready once pgrep finds this process (the image needs pgrep)")
	f.StringVar(&ready.Cmd, "ready-cmd", "", "ready once this command (sh -c) exits 0")
	f.DurationVar(&after, "ready-after", 0, "ready no sooner than this after the start")
	f.DurationVar(&wait, "ready-timeout", 0, fmt.Sprintf("give up after this long (default %s)", sandbox.DefaultReadyTimeout))
	f.StringArrayVarP(&req.Env, "env", "e", nil, "environment variable KEY=VALUE of the start command and every sandbox made from the template (repeatable)")
	f.StringVarP(&req.WorkDir, "workdir", "w", "", "working directory")
	f.StringVarP(&req.User, "user", "u", "", "user (name, uid or uid:gid)")
	f.BoolVar(&req.Public, "public", false, "every tenant may use it (admin only)")
	f.IntVar(&req.Hot, "hot", 0, fmt.Sprintf("keep this many copies restored and paused, which creates claim (0 to %d)", sandbox.MaxPoolSize))
	f.StringVar(&req.Backend, "backend", "", "backend to run it on (default: this smolvm's default)")
	lf.register(f)
	return c
}

func printTemplate(w io.Writer, t *sandbox.Template) error {
	_, err := fmt.Fprintln(w, t.Name)
	return err
}

func (a *app) templateLsCmd() *cobra.Command {
	return command(a, &cobra.Command{
		Use:   "ls",
		Short: "List templates: your own and the public ones",
		Args:  cobra.NoArgs,
	}, "print JSON", func(w io.Writer, ts []*sandbox.Template) error {
		now := time.Now()
		return table(w, "NAME\tIMAGE\tSTARTED\tREADY AFTER\tTENANT\tPUBLIC\tBUILT", func(tw io.Writer) {
			for _, t := range ts {
				started, after := "-", "-"
				if t.Snapshot != "" {
					started, after = strings.Join(t.Start, " "), t.ReadyAfter.Round(time.Millisecond).String()
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%t\t%s\n", t.Name, t.Image, started, after, t.Tenant, t.Public, age(now.Sub(t.Built)))
			}
		})
	}, on((*session).templates, func(s *session, ops templateOps, _ []string) ([]*sandbox.Template, error) {
		return ops.Templates(s.ctx)
	}))
}

func (a *app) templateInspectCmd() *cobra.Command {
	return command(a, &cobra.Command{
		Use:   "inspect NAME",
		Short: "Show a template as JSON",
		Args:  cobra.ExactArgs(1),
	}, "print JSON (the default)", printJSON[*sandbox.Template], on((*session).templates, func(s *session, ops templateOps, args []string) (*sandbox.Template, error) {
		return ops.Template(s.ctx, args[0])
	}))
}

func (a *app) templateRmCmd() *cobra.Command {
	return removeCmd(a, &cobra.Command{
		Use:   "rm NAME...",
		Short: "Remove templates (a started state's snapshot stays while sandboxes restored from it remain)",
	}, (*session).templates, func(ops templateOps, ctx context.Context, name string, _ func(string) (bool, error)) error {
		return ops.RemoveTemplate(ctx, name)
	}, nil)
}
