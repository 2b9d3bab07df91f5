package bench

import (
	"context"
	"fmt"
	"time"

	"smolvm.dev/smolvm/runtime/manager"
	"smolvm.dev/smolvm/sandbox"
)

// CompareOptions configure Compare.
type CompareOptions struct {
	Manager *manager.Manager
	// Backend is measured beside Baseline ("vm" beside "gvisor"), both on
	// Image.
	Backend, Baseline, Image string
	// Cold is how many sandboxes to cold-start, Exec how many execs, and
	// Snapshots how many times each snapshot operation runs (0 skips
	// them).
	Cold, Exec, Snapshots int
	// Self, if set, is the smolvm binary: a fork into a restore target is
	// then also timed through the CLI, on DataDir with Runsc.
	Self, DataDir, Runsc string
}

// Compare measures two backends side by side, through the manager, in
// one run: cold start to first exec, exec round trip, checkpoint,
// restore, fork ×1 and ×4 (into new sandboxes, then into restore
// targets), and the memory of one more idle fork.
// Operations alternate between the backends so that machine noise hits
// both alike. Each series is named after its backend.
func Compare(ctx context.Context, o CompareOptions) ([]Series, []Memory, error) {
	m, bg := o.Manager, context.WithoutCancel(ctx)
	type pair struct{ mine, theirs Series }
	newPair := func(op string) *pair {
		return &pair{
			mine:   Series{Name: o.Backend + ": " + op, Baseline: o.Baseline + ": " + op},
			theirs: Series{Name: o.Baseline + ": " + op},
		}
	}
	// each runs f on the backend, then on the baseline.
	each := func(p *pair, f func(backend string) (time.Duration, error)) error {
		for _, b := range []string{o.Backend, o.Baseline} {
			d, err := f(b)
			if err != nil {
				return fmt.Errorf("%s: %s: %w", b, p.theirs.Name, err)
			}
			if b == o.Backend {
				p.mine.Samples = append(p.mine.Samples, d)
			} else {
				p.theirs.Samples = append(p.theirs.Samples, d)
			}
		}
		return nil
	}
	create := func(backend string) (*sandbox.Sandbox, error) {
		return m.Create(ctx, sandbox.CreateOptions{Start: true, Backend: backend, Image: o.Image})
	}

	cold := newPair("cold start to first exec true")
	for range o.Cold {
		if err := each(cold, func(b string) (time.Duration, error) {
			t := time.Now()
			sb, err := create(b)
			if err != nil {
				return 0, err
			}
			defer m.Remove(bg, sb.ID, true)
			if err := execTrue(ctx, m, sb.ID); err != nil {
				return 0, err
			}
			return time.Since(t), nil
		}); err != nil {
			return nil, nil, err
		}
	}

	// One long-lived sandbox per backend serves exec, checkpoint and
	// fork.
	idle := map[string]string{}
	for _, b := range []string{o.Backend, o.Baseline} {
		sb, err := create(b)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", b, err)
		}
		defer m.Remove(bg, sb.ID, true)
		idle[b] = sb.ID
	}
	execs := newPair("exec true")
	for range o.Exec {
		if err := each(execs, func(b string) (time.Duration, error) {
			t := time.Now()
			err := execTrue(ctx, m, idle[b])
			return time.Since(t), err
		}); err != nil {
			return nil, nil, err
		}
	}
	series := []Series{cold.mine, cold.theirs, execs.mine, execs.theirs}
	if o.Snapshots == 0 {
		return series, nil, nil
	}

	ck, restore := newPair("checkpoint, leaving it running"), newPair("restore + exec true")
	fork1, fork4 := newPair("fork x1 until it answers exec"), newPair("fork x4 until all answer exec")
	for range o.Snapshots {
		snaps := map[string]string{}
		err := each(ck, func(b string) (time.Duration, error) {
			t := time.Now()
			snap, err := m.Checkpoint(ctx, idle[b], sandbox.CheckpointOptions{})
			if err != nil {
				return 0, err
			}
			d := time.Since(t)
			snaps[b] = snap.ID
			// Its seal runs on in the background: let it finish
			// untimed, so that it does not slow the other's turn.
			m.Snapshots().Wait()
			return d, nil
		})
		if err == nil {
			err = each(restore, func(b string) (time.Duration, error) {
				t := time.Now()
				cp, err := m.Restore(ctx, snaps[b], sandbox.RestoreOptions{})
				if err != nil {
					return 0, err
				}
				defer m.Remove(bg, cp.ID, true)
				err = execTrue(ctx, m, cp.ID)
				return time.Since(t), err
			})
		}
		for _, id := range snaps {
			m.Snapshots().Remove(bg, id, nil)
		}
		if err == nil {
			err = each(fork1, func(b string) (time.Duration, error) { return timeFork(ctx, m, idle[b], 1) })
		}
		if err == nil {
			err = each(fork4, func(b string) (time.Duration, error) { return timeFork(ctx, m, idle[b], 4) })
		}
		if err != nil {
			return nil, nil, err
		}
	}
	series = append(series, ck.mine, ck.theirs, restore.mine, restore.theirs, fork1.mine, fork1.theirs, fork4.mine, fork4.theirs)

	var mem []Memory
	for _, b := range []string{o.Backend, o.Baseline} {
		more, err := forkMemory(ctx, m, idle[b])
		if err != nil {
			return nil, nil, fmt.Errorf("%s: fork memory: %w", b, err)
		}
		for i := range more {
			more[i].Name = b + ": " + more[i].Name
			more[i].Baseline = b + ": " + more[i].Baseline
		}
		mem = append(mem, more...)
	}
	// Restore targets: created sandboxes a fork restores into (a
	// pre-launched QEMU for vm), each pool full before a timed fork.
	pools := map[string]string{}
	for _, b := range []string{o.Backend, o.Baseline} {
		pools[b] = "bench-targets-" + b
		if _, err := m.CreatePool(ctx, sandbox.PoolOptions{Name: pools[b], Image: o.Image, Targets: 4, Backend: b}); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", b, err)
		}
		defer m.RemovePool(bg, pools[b])
	}
	type forkOp struct {
		pair *pair
		fork func(id string) (time.Duration, error)
	}
	ops := []forkOp{
		{newPair("fork x1 into a restore target until it answers exec"), func(id string) (time.Duration, error) { return timeFork(ctx, m, id, 1) }},
		{newPair("fork x4 into restore targets until all answer exec"), func(id string) (time.Duration, error) { return timeFork(ctx, m, id, 4) }},
	}
	if o.Self != "" {
		cli := cliPath(o.Self, o.DataDir, o.Runsc)
		ops = append(ops, forkOp{newPair("fork x1 into a restore target until it answers exec (CLI)"), func(id string) (time.Duration, error) { return forkExec(ctx, m, cli, id) }})
	}
	for range o.Snapshots {
		for _, op := range ops {
			if err := each(op.pair, func(b string) (time.Duration, error) {
				if err := fillTargets(ctx, m, pools[b]); err != nil {
					return 0, err
				}
				return op.fork(idle[b])
			}); err != nil {
				return nil, nil, err
			}
		}
	}
	for _, op := range ops {
		series = append(series, op.pair.mine, op.pair.theirs)
	}
	return series, mem, nil
}
