package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"smolvm.dev/smolvm/internal/units"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/workflow/trust"
)

// limitFlags are a sandbox's resource limits, for run, create and pools.
type limitFlags struct {
	cpus         float64
	memory, disk string
	pids         int64
}

func (f *limitFlags) register(fs *pflag.FlagSet) {
	fs.Float64Var(&f.cpus, "cpus", 0, fmt.Sprintf("CPU cores (default %g)", sandbox.DefaultCPUs))
	fs.StringVar(&f.memory, "memory", "", "memory limit, e.g. 512m (default "+units.FormatBytes(sandbox.DefaultMemory)+")")
	fs.Int64Var(&f.pids, "pids", 0, fmt.Sprintf("process limit (default %d)", sandbox.DefaultPids))
	fs.StringVar(&f.disk, "disk", "", "writable layer size, e.g. 1g (default "+units.FormatBytes(sandbox.DefaultDisk)+")")
}

func (f *limitFlags) limits(fs *pflag.FlagSet) (sandbox.Limits, error) {
	l := sandbox.Limits{CPUs: f.cpus, Pids: f.pids}
	// Zero means "default" inside; typed explicitly it is impossible.
	if fs.Changed("cpus") && f.cpus <= 0 {
		return l, fmt.Errorf("--cpus %g: must be positive", f.cpus)
	}
	if fs.Changed("pids") && f.pids <= 0 {
		return l, fmt.Errorf("--pids %d: must be positive", f.pids)
	}
	var err error
	if f.memory != "" {
		if l.Memory, err = units.ParseBytes(f.memory); err != nil {
			return l, fmt.Errorf("--memory: %w", err)
		}
		if l.Memory == 0 {
			return l, fmt.Errorf("--memory %s: must be positive", f.memory)
		}
	}
	if f.disk != "" {
		if l.Disk, err = units.ParseBytes(f.disk); err != nil {
			return l, fmt.Errorf("--disk: %w", err)
		}
		if l.Disk == 0 {
			return l, fmt.Errorf("--disk %s: must be positive", f.disk)
		}
	}
	return l, nil
}

// createFlags are shared by run and create.
type createFlags struct {
	limitFlags
	name, image, workdir, user, hostname string
	policy, pool, onExpiry, backend      string
	env, labels                          []string
	timeout, idle                        time.Duration
	net                                  netFlags
	publish, volumes                     []string
}

func (f *createFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.name, "name", "", "sandbox name (default sb-<id>)")
	fs.StringVar(&f.image, "image", "", "image reference or ID (default: host, the host's /usr read-only)")
	fs.StringVar(&f.pool, "pool", "", "take a ready sandbox from this pool (see smolvm pool)")
	fs.StringVar(&f.backend, "backend", "", "backend to run the sandbox on (default: this smolvm's default, or the pool's)")
	f.limitFlags.register(fs)
	fs.StringArrayVarP(&f.env, "env", "e", nil, "environment variable KEY=VALUE (repeatable)")
	fs.StringArrayVar(&f.labels, "label", nil, "label KEY=VALUE, for smolvm usage --by label (repeatable)")
	fs.StringVarP(&f.workdir, "workdir", "w", "", "working directory inside the sandbox")
	fs.StringVarP(&f.user, "user", "u", "", "user (name, uid or uid:gid)")
	fs.StringVar(&f.hostname, "hostname", "", "hostname (default: the name)")
	fs.DurationVar(&f.timeout, "timeout", sandbox.DefaultTTL, "time to live after start; the sandbox is then stopped and shows as expired (0: none; extend with smolvm timeout)")
	fs.StringVar(&f.onExpiry, "on-expiry", sandbox.ExpiryStop, "what the end of --timeout does: stop, or pause (pause needs smolvm serve running)")
	fs.DurationVar(&f.idle, "idle-timeout", 0, "stop the sandbox once no exec or cp has run for this long (0: none)")
	fs.StringVar(&f.policy, "policy", "", "repository whose .smolvm/policy.toml every command in the sandbox must pass")
	f.net.register(fs)
	fs.StringArrayVarP(&f.volumes, "volume", "v", nil, "mount a volume (smolvm volume create): NAME:/path[:ro] (repeatable)")
	fs.StringArrayVarP(&f.publish, "publish", "p", nil, "publish a TCP port: [HOSTIP:][HOSTPORT:]PORT (default host address 127.0.0.1; no HOSTPORT: a free one)")
}

func (f *createFlags) options(fs *pflag.FlagSet, cmd []string, start bool) (sandbox.CreateOptions, error) {
	limits, err := f.limits(fs)
	if err != nil {
		return sandbox.CreateOptions{}, err
	}
	o := sandbox.CreateOptions{Name: f.name, Image: f.image, Backend: f.backend, Start: start, Pool: f.pool, Config: sandbox.Config{
		Cmd: cmd, Env: f.env, WorkDir: f.workdir, User: f.user, Hostname: f.hostname,
		TTL: f.timeout, IdleTimeout: f.idle, OnExpiry: f.onExpiry, TrustRepo: f.policy,
		Limits: limits,
	}}
	if err := checkEnv(f.env); err != nil {
		return o, err
	}
	if o.Config.Labels, err = parseLabels(f.labels); err != nil {
		return o, err
	}
	for _, v := range f.volumes {
		m, err := sandbox.ParseVolumeMount(v)
		if err != nil {
			return o, err
		}
		o.Config.Volumes = append(o.Config.Volumes, m)
	}
	pol := f.net.policy()
	for _, p := range f.publish {
		pt, err := sandbox.ParsePort(p)
		if err != nil {
			return o, err
		}
		pol.Ports = append(pol.Ports, pt)
	}
	if err := pol.Validate(); err != nil {
		return o, err
	}
	if pol.Enabled() {
		o.Config.Network = &pol
	}
	return o, nil
}

// create creates a sandbox from the flags and args (its command), through
// the session's sandbox operations.
func (f *createFlags) create(s *session, cmd []string, start bool) (sandbox.Service, *sandbox.Sandbox, error) {
	opts, err := f.options(s.cmd.Flags(), cmd, start)
	if err != nil {
		return nil, nil, err
	}
	ops, err := s.sandboxes()
	if err != nil {
		return nil, nil, err
	}
	sb, err := ops.Create(s.ctx, opts)
	if err != nil {
		return nil, nil, startStatus(err)
	}
	return ops, sb, nil
}

func (a *app) runCmd() *cobra.Command {
	var f createFlags
	var rm, detach bool
	cmd := a.withSession(&cobra.Command{
		Use:   "run [flags] [-- CMD...]",
		Short: "Create and start a sandbox, and wait for its command unless detached",
		Long: `Create and start a sandbox. Without --detach, run streams the command's
output and exits with its status. Without a command (and with an image that
has none) the sandbox idles, ready for exec.`,
	}, func(s *session, args []string) error {
		if rm && detach {
			return errors.New("--rm and --detach cannot be combined: no daemon would remove the sandbox later")
		}
		ops, sb, err := f.create(s, args, true)
		if err != nil {
			return err
		}
		if detach {
			fmt.Fprintln(a.stdout, sb.ID)
			return nil
		}
		return a.attach(s.ctx, ops, sb, rm)
	})
	f.register(cmd.Flags())
	cmd.Flags().BoolVar(&rm, "rm", false, "remove the sandbox when its command exits")
	cmd.Flags().BoolVarP(&detach, "detach", "d", false, "print the sandbox ID and return at once")
	return cmd
}

// attach follows a started sandbox's output until it stops, and returns
// its exit status. Interrupting stops the sandbox.
func (a *app) attach(ctx context.Context, ops sandbox.Service, sb *sandbox.Sandbox, rm bool) error {
	cleanup := func() {
		if rm {
			ops.Remove(context.WithoutCancel(ctx), sb.ID, true)
		}
	}
	err := ops.Logs(ctx, sb.ID, sandbox.LogOptions{Follow: true, Stdout: a.stdout, Stderr: a.stderr})
	if ctx.Err() != nil {
		bg := context.WithoutCancel(ctx)
		ops.Stop(bg, sb.ID, 2*time.Second)
		cleanup()
		return exitCode(exitInterrupted)
	}
	if err != nil {
		cleanup()
		return err
	}
	final, err := ops.Get(ctx, sb.ID)
	if ee := (*sandbox.ExpiredError)(nil); errors.As(err, &ee) && ee.Sandbox != nil {
		final, err = ee.Sandbox, nil
	}
	cleanup()
	if err != nil {
		return err
	}
	code := 0
	if final.ExitCode != nil {
		code = *final.ExitCode
	}
	if final.Reason != "" && final.Reason != "exited" {
		fmt.Fprintf(a.stderr, "smolvm: sandbox %s: %s\n", final.Name, final.Reason)
	}
	return exitCode(code)
}

func (a *app) createCmd() *cobra.Command {
	var f createFlags
	cmd := command(a, &cobra.Command{
		Use:   "create [flags] [-- CMD...]",
		Short: "Create a sandbox without starting it",
	}, "", printLine(sandboxID), func(s *session, args []string) (*sandbox.Sandbox, error) {
		_, sb, err := f.create(s, args, false)
		return sb, err
	})
	f.register(cmd.Flags())
	return cmd
}

// sandboxID is what most sandbox commands print.
func sandboxID(sb *sandbox.Sandbox) string { return sb.ID }

// printIDs prints sandboxes' IDs, one per line.
func printIDs(w io.Writer, sbs []*sandbox.Sandbox) error {
	for _, sb := range sbs {
		fmt.Fprintln(w, sb.ID)
	}
	return nil
}

// eachCmd builds c as a command that applies fn to every sandbox (or pool)
// it names, printing each name done and reporting each failure; it fails
// overall if any did.
func (a *app) eachCmd(c *cobra.Command, fn func(ctx context.Context, ops sandbox.Service, name string) error) *cobra.Command {
	c.Args = cobra.MinimumNArgs(1)
	return a.withSession(c, func(s *session, names []string) error {
		ops, err := s.sandboxes()
		if err != nil {
			return err
		}
		var failed error
		for _, n := range names {
			if err := fn(s.ctx, ops, n); err != nil {
				if len(names) == 1 {
					return err
				}
				fmt.Fprintln(a.stderr, "smolvm:", err)
				failed = errors.New("some sandboxes failed")
				continue
			}
			fmt.Fprintln(a.stdout, n)
		}
		return failed
	})
}

// stateCmd is a command that changes the state of every sandbox it names
// with op.
func (a *app) stateCmd(use, short string, op func(sandbox.Service, context.Context, string) (*sandbox.Sandbox, error)) *cobra.Command {
	return a.eachCmd(&cobra.Command{Use: use, Short: short}, func(ctx context.Context, ops sandbox.Service, n string) error {
		_, err := op(ops, ctx, n)
		return err
	})
}

func (a *app) startCmd() *cobra.Command {
	return a.stateCmd("start SANDBOX...", "Start created or stopped sandboxes", sandbox.Service.Start)
}

func (a *app) stopCmd() *cobra.Command {
	var timeout time.Duration
	cmd := a.stateCmd("stop SANDBOX...", "Stop sandboxes (SIGTERM, then SIGKILL after --time)",
		func(ops sandbox.Service, ctx context.Context, n string) (*sandbox.Sandbox, error) {
			return ops.Stop(ctx, n, timeout)
		})
	cmd.Flags().DurationVarP(&timeout, "time", "t", 10*time.Second, "grace period before SIGKILL")
	return cmd
}

func (a *app) rmCmd() *cobra.Command {
	var force bool
	cmd := a.eachCmd(&cobra.Command{Use: "rm [-f] SANDBOX...", Short: "Remove sandboxes"}, func(ctx context.Context, ops sandbox.Service, n string) error {
		return ops.Remove(ctx, n, force)
	})
	cmd.Flags().BoolVarP(&force, "force", "f", false, "remove running sandboxes too")
	return cmd
}

func (a *app) lsCmd() *cobra.Command {
	var quiet bool
	cmd := command(a, &cobra.Command{
		Use:     "ls",
		Aliases: []string{"ps", "list"},
		Short:   "List sandboxes",
		Args:    cobra.NoArgs,
	}, "print JSON", func(w io.Writer, sbs []*sandbox.Sandbox) error {
		if quiet {
			return printIDs(w, sbs)
		}
		now := time.Now()
		return table(w, "NAME\tID\tIMAGE\tSTATE\tBACKEND\tCPUS\tMEMORY\tAGE\tTTL", func(tw io.Writer) {
			for _, sb := range sbs {
				l := sb.Config.Limits
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%g\t%s\t%s\t%s\n", sb.Name, sb.ID, sb.Image, stateText(sb),
					sb.Backend, l.CPUs, units.FormatBytes(l.Memory), age(now.Sub(sb.CreatedAt)), ttlText(sb, now))
			}
		})
	}, on((*session).sandboxes, func(s *session, ops sandbox.Service, _ []string) ([]*sandbox.Sandbox, error) {
		return ops.List(s.ctx)
	}))
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "print IDs only")
	return cmd
}

func stateText(sb *sandbox.Sandbox) string {
	s := string(sb.State)
	if (sb.State == sandbox.StateStopped || sb.State == sandbox.StateExpired) && sb.ExitCode != nil {
		s += " (" + strconv.Itoa(*sb.ExitCode) + ")"
	}
	if sb.State == sandbox.StateCreating && sb.Reason != "" {
		s = "orphaned"
	}
	return s
}

func ttlText(sb *sandbox.Sandbox, now time.Time) string {
	if sb.ExpiresAt == nil || sb.State != sandbox.StateRunning && sb.State != sandbox.StatePaused {
		if sb.Config.TTL > 0 {
			return sb.Config.TTL.String()
		}
		return "-"
	}
	return age(sb.ExpiresAt.Sub(now)) + " left"
}

// age renders a duration the way ls users read it: 5s, 3m, 2h, 4d.
func age(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func (a *app) inspectCmd() *cobra.Command {
	return command(a, &cobra.Command{
		Use:   "inspect SANDBOX...",
		Short: "Show sandboxes' records and live resource usage as JSON",
		Args:  cobra.MinimumNArgs(1),
	}, "", printJSON, on((*session).sandboxes, func(s *session, ops sandbox.Service, args []string) ([]sandboxView, error) {
		var out []sandboxView
		for _, n := range args {
			sb, err := ops.Get(s.ctx, n)
			if err != nil {
				return nil, err
			}
			v := sandboxView{Sandbox: sb}
			if sb.State == sandbox.StateRunning || sb.State == sandbox.StatePaused {
				v.Stats, _ = ops.Stats(s.ctx, sb.ID)
			}
			// An orphan's network may be half made: show the record
			// anyway.
			if sb.Config.Network != nil {
				v.Network, _ = ops.NetStatus(s.ctx, sb.ID)
			}
			out = append(out, v)
		}
		return out, nil
	}))
}

// sandboxView is a sandbox as inspect shows it.
type sandboxView struct {
	*sandbox.Sandbox
	Stats   *sandbox.Stats        `json:"stats,omitempty"`
	Network *sandbox.NetworkState `json:"network_state,omitempty"`
}

func (a *app) logsCmd() *cobra.Command {
	var follow bool
	cmd := a.withSession(&cobra.Command{
		Use:   "logs [-f] SANDBOX",
		Short: "Print a sandbox's main command output",
		Args:  cobra.ExactArgs(1),
	}, func(s *session, args []string) error {
		ops, err := s.sandboxes()
		if err != nil {
			return err
		}
		return ops.Logs(s.ctx, args[0], sandbox.LogOptions{Follow: follow, Stdout: a.stdout, Stderr: a.stderr})
	})
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing until the sandbox stops")
	return cmd
}

func (a *app) execCmd() *cobra.Command {
	var (
		interactive, tty bool
		envs             []string
		workdir, user    string
		timeout          time.Duration
	)
	cmd := a.withSession(&cobra.Command{
		Use:   "exec [flags] SANDBOX -- CMD...",
		Short: "Run a command in a running sandbox",
		Args:  cobra.MinimumNArgs(2),
	}, func(s *session, args []string) error {
		if err := checkEnv(envs); err != nil {
			return err
		}
		ops, err := s.sandboxes()
		if err != nil {
			return err
		}
		p := sandbox.Process{Args: args[1:], Env: envs, Dir: workdir, User: user, TTY: tty, TimeoutMS: timeout.Milliseconds()}
		stdio := sandbox.Stdio{Stdout: a.stdout, Stderr: a.stderr}
		if interactive {
			stdio.Stdin = a.stdin
		}
		if tty {
			restore, err := a.rawTerminal(&p, &stdio)
			if err != nil {
				return err
			}
			defer restore()
		}
		exit, err := ops.Exec(s.ctx, args[0], p, stdio)
		if errors.Is(err, trust.ErrDenied) {
			return &exitError{code: exitCannotRun, err: err}
		}
		if err != nil {
			return err
		}
		return execStatus(exit)
	})
	f := cmd.Flags()
	f.BoolVarP(&interactive, "interactive", "i", false, "stream stdin to the command")
	f.BoolVarP(&tty, "tty", "t", false, "allocate a pseudo-terminal")
	f.StringArrayVarP(&envs, "env", "e", nil, "environment variable KEY=VALUE (repeatable)")
	f.StringVarP(&workdir, "workdir", "w", "", "working directory")
	f.StringVarP(&user, "user", "u", "", "user (name, uid or uid:gid)")
	f.DurationVar(&timeout, "timeout", 0, "kill the command after this long")
	return cmd
}

// checkEnv checks --env's KEY=VALUE pairs.
func checkEnv(env []string) error {
	for _, kv := range env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return fmt.Errorf("--env %q: want KEY=VALUE", kv)
		}
	}
	return nil
}

// startStatus gives a main command that could not start its shell status
// (127 not found, 126 not executable), as an exec's would have.
func startStatus(err error) error {
	var se *sandbox.StartError
	if errors.As(err, &se) {
		return &exitError{code: se.Exit.Code, err: err}
	}
	return err
}

// execStatus maps an exec's exit onto smolvm's exit status.
func execStatus(exit sandbox.Exit) error {
	switch {
	case exit.Kind == sandbox.KindNotFound:
		return &exitError{code: exitNotFound, err: errors.New(exit.Error)}
	case exit.Kind == sandbox.KindCannotRun:
		return &exitError{code: exitCannotRun, err: errors.New(exit.Error)}
	case exit.Kind == sandbox.KindInvalid:
		return &exitError{code: exitFailure, err: errors.New(exit.Error)}
	case exit.Error != "":
		return &exitError{code: exit.Code, err: errors.New(exit.Error)}
	}
	if exit.Code == 0 {
		return nil
	}
	return exitCode(exit.Code)
}

// rawTerminal puts the local terminal in raw mode for a -t exec and
// forwards window size changes.
func (a *app) rawTerminal(p *sandbox.Process, stdio *sandbox.Stdio) (func(), error) {
	in, ok := a.stdin.(*os.File)
	if !ok || !term.IsTerminal(int(in.Fd())) {
		// Not a terminal (a pipe, a test): the remote side still gets a
		// PTY, just without local raw mode.
		return func() {}, nil
	}
	fd := int(in.Fd())
	if w, h, err := term.GetSize(fd); err == nil {
		p.Size = &sandbox.Size{Rows: uint16(h), Cols: uint16(w)}
	}
	old, err := term.MakeRaw(fd)
	if err != nil {
		return nil, fmt.Errorf("terminal raw mode: %w", err)
	}
	resize := make(chan sandbox.Size, 1)
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-winch:
				if w, h, err := term.GetSize(fd); err == nil {
					select {
					case resize <- sandbox.Size{Rows: uint16(h), Cols: uint16(w)}:
					default:
					}
				}
			case <-done:
				return
			}
		}
	}()
	stdio.Resize = resize
	return func() {
		signal.Stop(winch)
		close(done)
		term.Restore(fd, old)
	}, nil
}

func (a *app) cpCmd() *cobra.Command {
	return a.withSession(&cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy files between the host and a sandbox (SANDBOX:PATH on one side)",
		Example: `  smolvm cp ./data.csv mysb:/tmp/
  smolvm cp mysb:/tmp/results ./results`,
		Args: cobra.ExactArgs(2),
	}, func(s *session, args []string) error {
		srcSB, srcPath := splitSandboxPath(args[0])
		dstSB, dstPath := splitSandboxPath(args[1])
		if (srcSB == "") == (dstSB == "") {
			return errors.New("cp: exactly one of SRC and DST must be SANDBOX:PATH")
		}
		ops, err := s.sandboxes()
		if err != nil {
			return err
		}
		if dstSB != "" {
			return ops.CopyIn(s.ctx, dstSB, srcPath, dstPath)
		}
		return ops.CopyOut(s.ctx, srcSB, srcPath, dstPath)
	})
}

// splitSandboxPath splits "sb:/path". Like docker, a local path that
// contains ':' must start with "/" or "." to be taken as local.
func splitSandboxPath(s string) (string, string) {
	if strings.HasPrefix(s, "/") || strings.HasPrefix(s, ".") {
		return "", s
	}
	sb, p, ok := strings.Cut(s, ":")
	if !ok || sb == "" {
		return "", s
	}
	return sb, p
}

func (a *app) gcCmd() *cobra.Command {
	return a.withSession(&cobra.Command{
		Use:   "gc",
		Short: "Finish or remove what crashes left behind (half-made sandboxes, mounts, cgroups) and remove sandboxes expired over an hour ago",
		Args:  cobra.NoArgs,
	}, func(s *session, args []string) error {
		e, err := s.runtime()
		if err != nil {
			return err
		}
		completed, removed, err := e.mgr.Recover(s.ctx)
		for _, n := range completed {
			fmt.Fprintln(a.stdout, "completed", n)
		}
		for _, r := range removed {
			fmt.Fprintln(a.stdout, "removed", r)
		}
		expired, rerr := e.mgr.Reap(s.ctx, sandbox.DefaultExpiredGrace)
		for _, n := range expired {
			fmt.Fprintln(a.stdout, "removed expired sandbox", n)
		}
		return errors.Join(err, rerr)
	})
}

func (a *app) timeoutCmd() *cobra.Command {
	return command(a, &cobra.Command{
		Use:   "timeout SANDBOX DURATION",
		Short: "Set a sandbox's time to live to DURATION from now (0: none)",
		Long: `Set a sandbox's time to live to DURATION from now, for this run and every
later start. 0 removes it. A running sandbox's deadline moves at once.`,
		Example: "  smolvm timeout box 1h",
		Args:    cobra.ExactArgs(2),
	}, "", printLine(func(sb *sandbox.Sandbox) string { return ttlText(sb, time.Now()) }), func(s *session, args []string) (*sandbox.Sandbox, error) {
		ttl, err := time.ParseDuration(args[1])
		if err != nil {
			return nil, fmt.Errorf("timeout: %w", err)
		}
		ops, err := s.sandboxes()
		if err != nil {
			return nil, err
		}
		return ops.SetTTL(s.ctx, args[0], ttl)
	})
}

// parseLabels turns repeated --label KEY=VALUE flags into labels (nil
// for none).
func parseLabels(kvs []string) (map[string]string, error) {
	var l map[string]string
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("--label %q: want KEY=VALUE", kv)
		}
		if l == nil {
			l = map[string]string{}
		}
		l[k] = v
	}
	return l, nil
}
