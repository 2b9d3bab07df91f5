package runner

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sync"

	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/workflow/runner/testparse"
)

// Dir is where the repository is inside the sandbox.
const Dir = "/work"

// MaxOutput bounds what is kept of a test run's stdout and stderr.
const MaxOutput = 8 << 20

// noBytecode goes with every command a run starts in its sandbox. Python
// takes a cached .pyc as current while its source has the same size and
// the same mtime second: an edit such as "a - b" to "a + b" made within
// a second of the last test run would be tested as the old code.
const noBytecode = "PYTHONDONTWRITEBYTECODE=1"

// runTests runs the test command in sb and parses its output.
func (r *run) runTests(ctx context.Context, sb string) (testparse.Result, error) {
	return r.runCommand(ctx, sb, r.o.Test)
}

// runCommand runs a test command in sb and parses its output.
func (r *run) runCommand(ctx context.Context, sb, test string) (testparse.Result, error) {
	return r.runEnv(ctx, sb, test, nil)
}

// runEnv is runCommand with env added to the command's environment.
func (r *run) runEnv(ctx context.Context, sb, test string, env []string) (testparse.Result, error) {
	var stdout, stderr capped
	stdout.max, stderr.max = MaxOutput, MaxOutput
	exit, err := r.svc.Exec(ctx, sb, sandbox.Process{
		Args: []string{"sh", "-c", test}, Dir: Dir, Env: append([]string{noBytecode}, env...),
		TimeoutMS: r.o.TestTimeout.Milliseconds(),
	}, sandbox.Stdio{Stdout: &stdout, Stderr: &stderr})
	if err != nil {
		return testparse.Result{}, fmt.Errorf("run tests in %s: %w", sb, err)
	}
	if exit.Error != "" {
		return testparse.Result{}, fmt.Errorf("run tests in %s: %s", sb, exit.Error)
	}
	res := testparse.Parse(stdout.Bytes(), stderr.Bytes(), exit.Code)
	if exit.TimedOut {
		res.Failure = fmt.Sprintf("%s%s\n%s", timedOut, r.o.TestTimeout, res.Failure)
	}
	return res, nil
}

// timedOut starts the failure of a test run cut at its timeout.
const timedOut = "the test command timed out after "

// capped is a buffer that keeps the first max bytes.
type capped struct {
	bytes.Buffer
	max int
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - c.Len(); room > 0 {
		c.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// newBox creates a sandbox (or restores Options.From) with the base
// tree in Dir.
func (r *run) newBox(ctx context.Context, name string) (string, error) {
	return startBox(ctx, r.svc, r.o, name, r.scr.tree)
}

// startBox creates a sandbox as o says (restored from o.From, or fresh
// from o.Image with o.Limits) with tree copied to Dir.
func startBox(ctx context.Context, svc sandbox.Service, o Options, name, tree string) (string, error) {
	var sb *sandbox.Sandbox
	var err error
	if o.From != "" {
		if sb, err = svc.Restore(ctx, o.From, sandbox.RestoreOptions{Name: name}); err != nil {
			return "", fmt.Errorf("restore %s: %w", o.From, err)
		}
	} else if sb, err = svc.Create(ctx, sandbox.CreateOptions{
		// The host image by default, not the base image: a run uses the
		// toolchains the host has (pytest, go), which the base lacks.
		Name: name, Image: cmp.Or(o.Image, sandbox.DefaultImage), Start: true,
		Config: sandbox.Config{Cmd: []string{"sleep", "infinity"}, Limits: o.Limits},
	}); err != nil {
		return "", fmt.Errorf("create sandbox: %w", err)
	}
	// Dir does not exist yet: cp semantics make it the copy of the tree.
	if err := svc.CopyIn(ctx, sb.ID, tree, Dir); err != nil {
		svc.Remove(context.WithoutCancel(ctx), sb.ID, true)
		return "", fmt.Errorf("copy the repository into %s: %w", sb.ID, err)
	}
	return sb.ID, nil
}

// snapshot checkpoints sb as the state of iteration n.
func (r *run) snapshot(ctx context.Context, sb string, n int) (string, error) {
	snap, err := r.svc.Checkpoint(ctx, sb, sandbox.CheckpointOptions{Name: fmt.Sprintf("agent-%s-%d", r.id, n)})
	if err != nil {
		return "", fmt.Errorf("checkpoint iteration %d: %w", n, err)
	}
	return snap.ID, nil
}

// restore starts a sandbox from a checkpoint; the caller removes it.
func (r *run) restore(ctx context.Context, snap string) (string, error) {
	sb, err := r.svc.Restore(ctx, snap, sandbox.RestoreOptions{})
	if err != nil {
		return "", fmt.Errorf("restore %s: %w", snap, err)
	}
	return sb.ID, nil
}

func (r *run) remove(ctx context.Context, sb string) {
	if sb != "" {
		r.svc.Remove(context.WithoutCancel(ctx), sb, true)
	}
}

// candidate copies the sandbox's tree out and commits it on parent in the
// scratch repository. Copying out (instead of running git inside) keeps
// the sandbox from choosing what the diff shows.
func (r *run) candidate(ctx context.Context, sb, parent string, n int) (string, error) {
	out := filepath.Join(r.scr.dir, fmt.Sprintf("iter-%d", n))
	os.RemoveAll(out)
	defer os.RemoveAll(out)
	// out does not exist: cp semantics make it the copy of Dir.
	if err := r.svc.CopyOut(ctx, sb, Dir, out); err != nil {
		return "", fmt.Errorf("copy the tree out of %s: %w", sb, err)
	}
	// A .git the agent made inside is not part of the change.
	os.RemoveAll(filepath.Join(out, ".git"))
	return r.scr.commit(ctx, out, parent, fmt.Sprintf("smolvm agent: iteration %d", n))
}

// pristine puts the base commit's test files back in sb and removes test
// files the agent added, so the verdict is the base's own tests.
func (r *run) pristine(ctx context.Context, sb, commit string) error {
	baseFiles, err := r.scr.files(ctx, r.scr.base)
	if err != nil {
		return err
	}
	now, err := r.scr.files(ctx, commit)
	if err != nil {
		return err
	}
	inBase := map[string]bool{}
	for _, f := range baseFiles {
		inBase[f] = true
		if !r.policy.IsTest(f) {
			continue
		}
		data, err := r.scr.file(ctx, r.scr.base, f)
		if err != nil {
			return err
		}
		if err := r.svc.WriteFile(ctx, sb, path.Join(Dir, f), bytes.NewReader(data)); err != nil {
			return fmt.Errorf("restore pristine %s: %w", f, err)
		}
	}
	var added []string
	for _, f := range now {
		if !inBase[f] && r.policy.IsTest(f) {
			added = append(added, path.Join(Dir, f))
		}
	}
	if len(added) > 0 {
		return r.rm(ctx, sb, added)
	}
	return nil
}

// rerunBase runs the test command cmd on n copies of the base checkpoint
// in parallel and returns each run's result.
func (r *run) rerunBase(ctx context.Context, n int, cmd string) ([]testparse.Result, error) {
	results := make([]testparse.Result, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sb, err := r.restore(ctx, r.baseSnap)
			if err != nil {
				errs[i] = err
				return
			}
			defer r.remove(ctx, sb)
			results[i], errs[i] = r.runCommand(ctx, sb, cmd)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("rerun on the base: %w", err)
		}
	}
	return results, nil
}
