// Package cli implements the smolvm command line.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

// Exit codes follow docker's habits.
const (
	exitFailure     = 125 // smolvm itself failed
	exitCannotRun   = 126 // the command exists but cannot be run
	exitNotFound    = 127 // the command does not exist
	exitInterrupted = 130
)

// exitError ends the process with a specific status. A nil err means the
// status belongs to a command that ran, and nothing more is printed.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// exitCode returns a bare status without a message.
func exitCode(code int) error { return &exitError{code: code} }

// app carries what every command shares: global flags and standard streams.
type app struct {
	dataDir string
	runsc   string
	kernel  string
	accel   string
	// host, when set, is a server the sandbox commands go through.
	host string
	// self is the smolvm binary, run in the background to refill pools;
	// "" leaves pools to be refilled by hand (smolvm pool fill).
	self string
	// noRefill leaves pools to be refilled by hand even where self is set:
	// the benchmark fills them itself, so that no detached filler competes
	// with what it times.
	noRefill bool

	stdin          io.Reader
	stdout, stderr io.Writer
}

// Main runs the CLI with args and returns the process exit status.
func Main(args []string) int {
	// SMOLVM_NO_REFILL: smolvm bench runs the CLI's commands and fills
	// the pools itself, untimed.
	a := &app{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, noRefill: os.Getenv("SMOLVM_NO_REFILL") != ""}
	if exe, err := os.Executable(); err == nil {
		a.self = exe
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return a.run(ctx, args)
}

// run executes one command line and returns its exit status, printing
// errors as one "smolvm: ..." line.
func (a *app) run(ctx context.Context, args []string) int {
	root := a.rootCmd()
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			fmt.Fprintln(a.stderr, "smolvm:", ee.err)
		}
		return ee.code
	}
	fmt.Fprintln(a.stderr, "smolvm:", err)
	if ctx.Err() != nil {
		return exitInterrupted
	}
	return exitFailure
}

func (a *app) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "smolvm",
		Short:         "Isolated, checkpointable sandboxes for AI agents",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetIn(a.stdin)
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	// Flag errors are smolvm's own failures (125), not the command's.
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &exitError{code: exitFailure, err: fmt.Errorf("%s: %w", subcommand(c), err)}
	})
	pf := root.PersistentFlags()
	pf.StringVar(&a.dataDir, "data-dir", envOr("SMOLVM_DATA_DIR", defaultDataDir()), "state directory (env SMOLVM_DATA_DIR)")
	pf.StringVar(&a.host, "host", os.Getenv("SMOLVM_HOST"), "smolvm serve to use: unix:///path or http(s)://host:port (env SMOLVM_HOST; token in SMOLVM_TOKEN); default: work directly")
	pf.StringVar(&a.runsc, "runsc", os.Getenv("SMOLVM_RUNSC"), "path to runsc (env SMOLVM_RUNSC; default: next to smolvm, then $PATH)")
	pf.StringVar(&a.accel, "accel", os.Getenv("SMOLVM_ACCEL"), "accelerator of the vm backend: kvm or tcg (env SMOLVM_ACCEL; default: KVM where /dev/kvm creates VMs, else TCG); one given must work")
	pf.StringVar(&a.kernel, "kernel", os.Getenv("SMOLVM_KERNEL"), "guest kernel of the vm backend (env SMOLVM_KERNEL; default: the newest /boot/vmlinuz-*); {\"backend\": \"vm\"} in <data dir>/config.json, or SMOLVM_BACKEND=vm, makes vm the default backend")

	root.AddCommand(
		// Command groups register here, one constructor per file.
		a.policyCmd(), a.approvalsCmd(),
		a.rulesCmd(),
		a.runCmd(), a.createCmd(), a.startCmd(), a.stopCmd(), a.rmCmd(),
		a.execCmd(), a.cpCmd(), a.lsCmd(), a.inspectCmd(), a.logsCmd(), a.timeoutCmd(), a.gcCmd(), a.serveCmd(), a.benchCmd(), a.doctorCmd(),
		a.memoryCmd(),
		a.imageCmd(), a.buildCmd(),
		a.checkpointCmd(), a.restoreCmd(), a.forkCmd(), a.pauseCmd(), a.resumeCmd(), a.snapshotCmd(), a.poolCmd(), a.templateCmd(), a.volumeCmd(),
		a.applyCmd(), a.gitCmd(),
		a.mcpCmd(),
		a.agentCmd(), a.branchCmd(),
		a.netCmd(), a.netHelperCmd(),
		a.tenantCmd(), a.usageCmd(),
		a.browserCmd(),
	)
	withUsage(root)
	return root
}

// subcommand is c's path without the root's name: "pool create".
func subcommand(c *cobra.Command) string {
	return strings.TrimPrefix(c.CommandPath(), c.Root().Name()+" ")
}

// withUsage makes every command's wrong arguments a failure of smolvm's
// own (125) that shows the command's usage line.
func withUsage(c *cobra.Command) {
	if args := c.Args; args != nil {
		c.Args = func(c *cobra.Command, a []string) error {
			if err := args(c, a); err != nil {
				return &exitError{code: exitFailure, err: fmt.Errorf("%s: %w; usage: %s", subcommand(c), err, c.UseLine())}
			}
			return nil
		}
	}
	for _, sub := range c.Commands() {
		withUsage(sub)
	}
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// defaultDataDir is /var/lib/smolvm for root and $XDG_DATA_HOME/smolvm
// otherwise.
func defaultDataDir() string {
	if os.Geteuid() == 0 {
		return "/var/lib/smolvm"
	}
	if x := os.Getenv("XDG_DATA_HOME"); x != "" {
		return filepath.Join(x, "smolvm")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "smolvm")
	}
	return filepath.Join(home, ".local", "share", "smolvm")
}
