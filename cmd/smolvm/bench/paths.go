package bench

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"smolvm.dev/smolvm/runtime/manager"
	"smolvm.dev/smolvm/sandbox"
)

// path is one of the ways users call smolvm: the Go library, the smolvm
// CLI (a process per command, its start-up included) or the HTTP API.
// Each operation returns the ID of what it made.
type path struct {
	name       string
	checkpoint func(ctx context.Context, id string) (string, error)
	fork       func(ctx context.Context, id string) (string, error)
	restore    func(ctx context.Context, snap string) (string, error)
	exec       func(ctx context.Context, id string) error
}

const libraryPath = "Go library"

// servicePath calls svc: the Manager itself, or a client of the HTTP API
// serving it.
func servicePath(name string, svc sandbox.Service) path {
	return path{
		name: name,
		checkpoint: func(ctx context.Context, id string) (string, error) {
			snap, err := svc.Checkpoint(ctx, id, sandbox.CheckpointOptions{})
			if err != nil {
				return "", err
			}
			return snap.ID, nil
		},
		fork: func(ctx context.Context, id string) (string, error) {
			copies, err := svc.Fork(ctx, id, sandbox.ForkOptions{N: 1})
			if err != nil {
				return "", err
			}
			return copies[0].ID, nil
		},
		restore: func(ctx context.Context, snap string) (string, error) {
			sb, err := svc.Restore(ctx, snap, sandbox.RestoreOptions{})
			if err != nil {
				return "", err
			}
			return sb.ID, nil
		},
		exec: func(ctx context.Context, id string) error {
			exit, err := svc.Exec(ctx, id, sandbox.Process{Args: []string{"true"}}, sandbox.Stdio{})
			if err != nil || exit.Code != 0 {
				return fmt.Errorf("exec true in %s: %v %+v", id, err, exit)
			}
			return nil
		},
	}
}

// cliPath runs the smolvm binary self on dataDir, one process per
// command, as a user's shell would. Pools are not refilled by those
// processes (SMOLVM_NO_REFILL), as the library's and the API's are not
// here: the benchmark fills them, untimed.
func cliPath(self, dataDir, runsc string) path {
	run := cliRunner(self, dataDir, runsc)
	return path{
		name:       "CLI",
		checkpoint: func(ctx context.Context, id string) (string, error) { return run(ctx, "checkpoint", id) },
		fork:       func(ctx context.Context, id string) (string, error) { return run(ctx, "fork", id) },
		restore:    func(ctx context.Context, snap string) (string, error) { return run(ctx, "restore", snap) },
		exec: func(ctx context.Context, id string) error {
			_, err := run(ctx, "exec", id, "--", "true")
			return err
		},
	}
}

// cliRunner runs one smolvm command on dataDir and returns its output.
func cliRunner(self, dataDir, runsc string) func(ctx context.Context, args ...string) (string, error) {
	return func(ctx context.Context, args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, self, append([]string{"--data-dir", dataDir, "--runsc", runsc}, args...)...)
		cmd.Env = append(cmd.Environ(), "SMOLVM_NO_REFILL=1")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("smolvm %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
		}
		return strings.TrimSpace(string(out)), nil
	}
}

// cliStartup splits the CLI's cost over the library into its parts, n
// times each, interleaved: a process that does nothing (/bin/true, the
// floor of any command), smolvm's own start-up (help: process start,
// runtime and package init, the command tree; no data dir), and that
// plus opening and closing the data dir and its manager (ls: one more
// query). What an exec by the CLI adds beyond the last is its lookups,
// as the library's.
func cliStartup(ctx context.Context, self, dataDir, runsc string, n int) ([]Series, error) {
	run := cliRunner(self, dataDir, runsc)
	steps := []struct {
		name string
		do   func() error
	}{
		{"CLI floor: a process doing nothing (/bin/true)", func() error { return exec.CommandContext(ctx, "/bin/true").Run() }},
		{"CLI start-up: smolvm help (no data dir)", func() error { _, err := run(ctx, "help"); return err }},
		{"CLI start-up + data dir opened and closed: smolvm ls --quiet", func() error { _, err := run(ctx, "ls", "--quiet"); return err }},
	}
	series := make([]Series, len(steps))
	for i, s := range steps {
		series[i].Name = s.name
		if i > 0 {
			series[i].Baseline = steps[0].name
		}
	}
	for range n {
		for i, s := range steps {
			t := time.Now()
			if err := s.do(); err != nil {
				return nil, err
			}
			series[i].Samples = append(series[i].Samples, time.Since(t))
		}
	}
	return series, nil
}

// pathSeries are one operation's series, one per path. The library's
// line is compared with stock's (baseline), the others with the
// library's, so that the ratio shows what the CLI or the API adds.
func pathSeries(name, baseline string, paths []path) []Series {
	out := make([]Series, len(paths))
	for i, p := range paths {
		out[i] = Series{Name: name + " (" + p.name + ")", Baseline: baseline}
		if i > 0 {
			out[i].Baseline = out[0].Name
		}
	}
	return out
}

// forkExec forks one copy of id through p and waits until it answers an
// exec, also through p; the copy is removed untimed.
func forkExec(ctx context.Context, m *manager.Manager, p path, id string) (time.Duration, error) {
	t := time.Now()
	cp, err := p.fork(ctx, id)
	if err != nil {
		return 0, err
	}
	defer m.Remove(context.WithoutCancel(ctx), cp, true)
	if err := p.exec(ctx, cp); err != nil {
		return 0, err
	}
	return time.Since(t), nil
}

// execSeries times exec true through each path in one running sandbox:
// for the CLI, that is its start-up and opening the data dir.
func execSeries(ctx context.Context, o Options, paths []path, n int) ([]Series, error) {
	sb, err := o.Manager.Create(ctx, sandbox.CreateOptions{Start: true})
	if err != nil {
		return nil, err
	}
	defer o.Manager.Remove(context.WithoutCancel(ctx), sb.ID, true)
	series := pathSeries("exec true", "", paths)
	for range n {
		for i, p := range paths {
			t := time.Now()
			if err := p.exec(ctx, sb.ID); err != nil {
				return nil, err
			}
			series[i].Samples = append(series[i].Samples, time.Since(t))
		}
	}
	return series, nil
}
