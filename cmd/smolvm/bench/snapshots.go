package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"text/tabwriter"
	"time"

	"smolvm.dev/smolvm/internal/units"
	"smolvm.dev/smolvm/runtime/backend/gvisor"
	"smolvm.dev/smolvm/runtime/manager"
	"smolvm.dev/smolvm/runtime/snapshot"
	"smolvm.dev/smolvm/sandbox"
)

// touch100MB leaves a process holding 100 MB of touched, incompressible
// memory, and returns once it does.
var touch100MB = []string{"sh", "-c", `python3 -c 'import os, time
b = bytearray(os.urandom(100 << 20))
open("/tmp/touched", "w").close()
time.sleep(1e9)' >/dev/null 2>&1 & while [ ! -e /tmp/touched ]; do sleep 0.05; done`}

// Memory is one measured amount of memory, compared with a baseline.
type Memory struct {
	Name     string
	Bytes    int64
	Baseline string
	Base     int64
}

// Snapshots measures checkpoint, restore, fork and pool creation, each
// beside the stock runsc pipeline doing the same, n times each (fork ×10
// fewer times), and the memory one more idle fork costs. An idle
// checkpoint, a fork into a restore target and a hot-pool claim are also
// measured through the HTTP API and, with o.Self, the smolvm CLI, each
// on its own line, with exec true through each as their start-up cost.
func Snapshots(ctx context.Context, o Options, snaps *snapshot.Store, n int) ([]Series, []Memory, error) {
	m := o.Manager
	rootfs, err := m.ImageRootfs(ctx, "") // the image smolvm's sandboxes run
	if err != nil {
		return nil, nil, err
	}
	var cleanup []func()
	defer func() {
		for i := len(cleanup) - 1; i >= 0; i-- {
			cleanup[i]()
		}
	}()
	api, stop, err := StartAPI(m, o.Dir)
	if err != nil {
		return nil, nil, err
	}
	cleanup = append(cleanup, stop)
	paths := []path{servicePath(libraryPath, m), servicePath("HTTP API", api)}
	if o.Self != "" {
		paths = append(paths, cliPath(o.Self, o.DataDir, o.Runsc))
	}
	execs, err := execSeries(ctx, o, paths, 3*n)
	if err != nil {
		return nil, nil, err
	}
	if o.Self != "" {
		startup, err := cliStartup(ctx, o.Self, o.DataDir, o.Runsc, 3*n)
		if err != nil {
			return nil, nil, err
		}
		execs = append(execs, startup...)
	}
	bg := context.WithoutCancel(ctx)
	start := func(touch bool) (*sandbox.Sandbox, error) {
		sb, err := m.Create(ctx, sandbox.CreateOptions{Start: true})
		if err != nil {
			return nil, err
		}
		cleanup = append(cleanup, func() { m.Remove(bg, sb.ID, true) })
		if touch {
			if exit, err := m.Exec(ctx, sb.ID, sandbox.Process{Args: touch100MB}, sandbox.Stdio{}); err != nil || exit.Code != 0 {
				return nil, fmt.Errorf("touch memory: %v %+v", err, exit)
			}
		}
		return sb, nil
	}
	stockN := 0
	stock := func(touch bool) (*gvisor.Stock, error) {
		stockN++
		id := fmt.Sprintf("stock-snap-%d", stockN)
		s, err := gvisor.NewStock(o.stock(), rootfs, filepath.Join(o.Dir, id), id)
		if err != nil {
			return nil, err
		}
		cleanup = append(cleanup, func() { s.Delete(bg) })
		if err := s.Run(ctx); err != nil {
			return nil, err
		}
		if touch {
			if err := s.Exec(ctx, touch100MB...); err != nil {
				return nil, err
			}
		}
		return s, nil
	}
	// stockFork is the stock pipeline for one copy: checkpoint the source
	// (none: dir holds an image already), then create and restore a new
	// sandbox from the image. With precreated, the copy is created before
	// the clock starts, as a restore target is.
	stockFork := func(src *gvisor.Stock, dir string, precreated bool) (time.Duration, error) {
		stockN++
		id := fmt.Sprintf("stock-copy-%d", stockN)
		cp, err := gvisor.NewStock(o.stock(), rootfs, filepath.Join(o.Dir, id), id)
		if err != nil {
			return 0, err
		}
		defer cp.Delete(bg)
		if precreated {
			if err := cp.Create(ctx); err != nil {
				return 0, err
			}
		}
		t := time.Now()
		if src != nil {
			if err := src.Checkpoint(ctx, dir); err != nil {
				return 0, err
			}
		}
		if !precreated {
			if err := cp.Create(ctx); err != nil {
				return 0, err
			}
		}
		if err := cp.Restore(ctx, dir); err != nil {
			return 0, err
		}
		if err := cp.Exec(ctx, "/usr/bin/true"); err != nil {
			return 0, err
		}
		return time.Since(t), nil
	}
	scratch := func() (string, error) { return os.MkdirTemp(o.Dir, "image-") }

	idle, err := start(false)
	if err != nil {
		return nil, nil, err
	}
	big, err := start(true)
	if err != nil {
		return nil, nil, err
	}
	stockIdle, err := stock(false)
	if err != nil {
		return nil, nil, err
	}
	stockBig, err := stock(true)
	if err != nil {
		return nil, nil, err
	}

	var (
		ckIdle       = pathSeries("checkpoint, idle", "runsc checkpoint --leave-running, idle", paths)
		stockCkIdle  = Series{Name: "runsc checkpoint --leave-running, idle"}
		ckBig        = Series{Name: "checkpoint, 100 MB touched", Baseline: "runsc checkpoint --leave-running, 100 MB touched"}
		stockCkBig   = Series{Name: "runsc checkpoint --leave-running, 100 MB touched"}
		restore      = Series{Name: "restore + exec true", Baseline: "runsc create + restore + exec true"}
		stockRestore = Series{Name: "runsc create + restore + exec true"}
		fork1        = Series{Name: "fork x1 until it answers exec", Baseline: "runsc checkpoint + create + restore + exec"}
		stockFork1   = Series{Name: "runsc checkpoint + create + restore + exec"}
		fork10       = Series{Name: "fork x10 until all answer exec", Baseline: "10 x (runsc checkpoint + create + restore + exec)"}
		stockFork10  = Series{Name: "10 x (runsc checkpoint + create + restore + exec)"}
		pool         = Series{Name: "create from warm pool + exec true", Baseline: "cold create + exec true"}
		cold         = Series{Name: "cold create + exec true"}
	)
	// timeCheckpoint checkpoints sb through each path (mine: a series
	// each), keeping the library's snapshot, then s with stock runsc.
	timeCheckpoint := func(sb *sandbox.Sandbox, s *gvisor.Stock, paths []path, mine []Series, theirs *Series) (string, error) {
		var snap string
		for i, p := range paths {
			t := time.Now()
			id, err := p.checkpoint(ctx, sb.ID)
			if err != nil {
				return "", err
			}
			mine[i].Samples = append(mine[i].Samples, time.Since(t))
			// Its seal (hashing, syncfs) runs on in the background: let it
			// finish untimed, so that it does not slow the next turn. (The
			// CLI's process waits for it before it exits.)
			snaps.Wait()
			if i == 0 {
				snap = id
			} else {
				snaps.Remove(ctx, id, nil)
			}
		}
		dir, err := scratch()
		if err != nil {
			return "", err
		}
		defer os.RemoveAll(dir)
		t := time.Now()
		if err := s.Checkpoint(ctx, dir); err != nil {
			return "", err
		}
		theirs.Samples = append(theirs.Samples, time.Since(t))
		return snap, nil
	}
	bigSeries := []Series{ckBig}
	for i := 0; i < n; i++ {
		snap, err := timeCheckpoint(idle, stockIdle, paths, ckIdle, &stockCkIdle)
		if err != nil {
			return nil, nil, err
		}
		bigSnap, err := timeCheckpoint(big, stockBig, paths[:1], bigSeries, &stockCkBig)
		if err != nil {
			return nil, nil, err
		}
		snaps.Remove(ctx, bigSnap, nil)

		t := time.Now()
		cp, err := m.Restore(ctx, snap, sandbox.RestoreOptions{})
		if err != nil {
			return nil, nil, err
		}
		if err := execTrue(ctx, m, cp.ID); err != nil {
			return nil, nil, err
		}
		restore.Samples = append(restore.Samples, time.Since(t))
		m.Remove(bg, cp.ID, true)
		snaps.Remove(ctx, snap, nil)

		dir, err := scratch()
		if err != nil {
			return nil, nil, err
		}
		if err := stockIdle.Checkpoint(ctx, dir); err != nil {
			return nil, nil, err
		}
		d, err := stockFork(nil, dir, false)
		if err != nil {
			return nil, nil, err
		}
		stockRestore.Samples = append(stockRestore.Samples, d)
		os.RemoveAll(dir)

		d, err = timeFork(ctx, m, idle.ID, 1)
		if err != nil {
			return nil, nil, err
		}
		fork1.Samples = append(fork1.Samples, d)
		if dir, err = scratch(); err != nil {
			return nil, nil, err
		}
		d, err = stockFork(stockIdle, dir, false)
		os.RemoveAll(dir)
		if err != nil {
			return nil, nil, err
		}
		stockFork1.Samples = append(stockFork1.Samples, d)
	}
	for i := 0; i < max(1, n/3); i++ {
		d, err := timeFork(ctx, m, idle.ID, 10)
		if err != nil {
			return nil, nil, err
		}
		fork10.Samples = append(fork10.Samples, d)
		// The stock pipeline has no fork: ten copies, one after another.
		var total time.Duration
		for range 10 {
			dir, err := scratch()
			if err != nil {
				return nil, nil, err
			}
			d, err := stockFork(stockIdle, dir, false)
			os.RemoveAll(dir)
			if err != nil {
				return nil, nil, err
			}
			total += d
		}
		stockFork10.Samples = append(stockFork10.Samples, total)
	}

	targets, err := targetSeries(ctx, o, snaps, paths, n, func(fork bool) (time.Duration, error) {
		dir, err := scratch()
		if err != nil {
			return 0, err
		}
		defer os.RemoveAll(dir)
		src := stockIdle
		if !fork {
			if err := stockIdle.Checkpoint(ctx, dir); err != nil {
				return 0, err
			}
			src = nil
		}
		return stockFork(src, dir, true)
	}, idle.ID)
	if err != nil {
		return nil, nil, err
	}

	if _, err := m.CreatePool(ctx, sandbox.PoolOptions{Name: "bench", Size: 1}); err != nil {
		return nil, nil, err
	}
	cleanup = append(cleanup, func() { m.RemovePool(bg, "bench") })
	for i := 0; i < n; i++ {
		if _, err := m.FillPool(ctx, "bench"); err != nil {
			return nil, nil, err
		}
		for _, s := range []*Series{&pool, &cold} {
			o := sandbox.CreateOptions{Start: true}
			if s == &pool {
				o.Pool = "bench"
			}
			t := time.Now()
			sb, err := m.Create(ctx, o)
			if err != nil {
				return nil, nil, err
			}
			if err := execTrue(ctx, m, sb.ID); err != nil {
				return nil, nil, err
			}
			s.Samples = append(s.Samples, time.Since(t))
			m.Remove(bg, sb.ID, true)
		}
	}

	hot, err := hotSeries(ctx, m, snaps, paths, n, idle.ID)
	if err != nil {
		return nil, nil, err
	}
	mem, err := forkMemory(ctx, m, idle.ID)
	if err != nil {
		return nil, nil, err
	}
	series := append(execs, ckIdle...)
	series = append(series, stockCkIdle, bigSeries[0], stockCkBig, restore, stockRestore, fork1, stockFork1, fork10, stockFork10)
	series = append(series, targets...)
	series = append(series, hot...)
	return append(series, pool, cold), mem, nil
}

// targetSeries measures restore and fork into a pool's restore targets,
// each beside stock runsc restoring into a sandbox it created beforehand
// (stock(fork); without fork, from an image saved untimed). The pool is
// full before each timed operation, ours or stock's, so that no refill
// competes with it.
func targetSeries(ctx context.Context, o Options, snaps *snapshot.Store, paths []path, n int, stock func(fork bool) (time.Duration, error), idle string) ([]Series, error) {
	m := o.Manager
	const pool = "bench-targets"
	if _, err := m.CreatePool(ctx, sandbox.PoolOptions{Name: pool, Targets: 10}); err != nil {
		return nil, err
	}
	defer m.RemovePool(context.WithoutCancel(ctx), pool)
	var (
		restore      = Series{Name: "restore into a restore target + exec true", Baseline: "runsc restore into a created sandbox + exec true"}
		stockRestore = Series{Name: "runsc restore into a created sandbox + exec true"}
		fork1        = pathSeries("fork x1 into a restore target until it answers exec", "runsc checkpoint + restore into a created sandbox + exec", paths)
		stockFork1   = Series{Name: "runsc checkpoint + restore into a created sandbox + exec"}
		fork10       = Series{Name: "fork x10 into restore targets until all answer exec", Baseline: "10 x (runsc checkpoint + restore into a created sandbox + exec)"}
		stockFork10  = Series{Name: "10 x (runsc checkpoint + restore into a created sandbox + exec)"}
	)
	// timePair times ours, then stock's, each on a full pool.
	timePair := func(mine, theirs *Series, ours func() (time.Duration, error), times int, fork bool) error {
		if err := fillTargets(ctx, m, pool); err != nil {
			return err
		}
		d, err := ours()
		if err != nil {
			return err
		}
		mine.Samples = append(mine.Samples, d)
		if err := fillTargets(ctx, m, pool); err != nil {
			return err
		}
		var total time.Duration
		for range times {
			d, err := stock(fork)
			if err != nil {
				return err
			}
			total += d
		}
		theirs.Samples = append(theirs.Samples, total)
		return nil
	}
	restoreOnce := func() (time.Duration, error) {
		snap, err := m.Checkpoint(ctx, idle, sandbox.CheckpointOptions{})
		if err != nil {
			return 0, err
		}
		defer snaps.Remove(context.WithoutCancel(ctx), snap.ID, nil)
		t := time.Now()
		cp, err := m.Restore(ctx, snap.ID, sandbox.RestoreOptions{})
		if err != nil {
			return 0, err
		}
		defer m.Remove(context.WithoutCancel(ctx), cp.ID, true)
		if err := execTrue(ctx, m, cp.ID); err != nil {
			return 0, err
		}
		return time.Since(t), nil
	}
	for range n {
		if err := timePair(&restore, &stockRestore, restoreOnce, 1, false); err != nil {
			return nil, err
		}
		// Each path, then stock (timePair), each on a full pool.
		for i, p := range paths[1:] {
			if err := fillTargets(ctx, m, pool); err != nil {
				return nil, err
			}
			d, err := forkExec(ctx, m, p, idle)
			if err != nil {
				return nil, err
			}
			fork1[i+1].Samples = append(fork1[i+1].Samples, d)
		}
		if err := timePair(&fork1[0], &stockFork1, func() (time.Duration, error) { return forkExec(ctx, m, paths[0], idle) }, 1, true); err != nil {
			return nil, err
		}
	}
	for range max(1, n/3) {
		if err := timePair(&fork10, &stockFork10, func() (time.Duration, error) { return timeFork(ctx, m, idle, 10) }, 10, true); err != nil {
			return nil, err
		}
	}
	return append(fork1, stockFork1, restore, stockRestore, fork10, stockFork10), nil
}

// hotSeries times restores that claim a hot copy (pool create --from
// --hot): resumed and given its identity, until it answers an exec. It is
// its own line, never mixed with live forks; the pool is refilled untimed
// before each.
func hotSeries(ctx context.Context, m *manager.Manager, snaps *snapshot.Store, paths []path, n int, idle string) ([]Series, error) {
	s := pathSeries("restore claimed from a hot pool + exec true", "runsc restore into a created sandbox + exec true", paths)
	bg := context.WithoutCancel(ctx)
	snap, err := m.Checkpoint(ctx, idle, sandbox.CheckpointOptions{})
	if err != nil {
		return nil, err
	}
	defer snaps.Remove(bg, snap.ID, nil)
	const pool = "bench-hot"
	if _, err := m.CreatePool(ctx, sandbox.PoolOptions{Name: pool, From: snap.ID, Hot: 1}); err != nil {
		return nil, err
	}
	defer m.RemovePool(bg, pool)
	for range n {
		for i, p := range paths {
			if _, err := m.FillPool(ctx, pool); err != nil {
				return nil, err
			}
			t := time.Now()
			cp, err := p.restore(ctx, snap.ID)
			if err != nil {
				return nil, err
			}
			err = p.exec(ctx, cp)
			s[i].Samples = append(s[i].Samples, time.Since(t))
			m.Remove(bg, cp, true)
			if err != nil {
				return nil, err
			}
		}
	}
	return s, nil
}

// fillTargets returns once pool holds all its restore targets; a
// background refill may be making them.
func fillTargets(ctx context.Context, m *manager.Manager, pool string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		if _, err := m.FillPool(ctx, pool); err != nil {
			return err
		}
		p, err := m.Pool(ctx, pool)
		if err != nil {
			return err
		}
		if p.TargetsReady >= p.Targets {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pool %s: %d of %d targets ready: %w", pool, p.TargetsReady, p.Targets, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func execTrue(ctx context.Context, m *manager.Manager, id string) error {
	exit, err := m.Exec(ctx, id, sandbox.Process{Args: []string{"true"}}, sandbox.Stdio{})
	if err != nil || exit.Code != 0 {
		return fmt.Errorf("exec true in %s: %v %+v", id, err, exit)
	}
	return nil
}

// timeFork forks n copies of id and waits until each answers an exec.
func timeFork(ctx context.Context, m *manager.Manager, id string, n int) (time.Duration, error) {
	t := time.Now()
	copies, err := m.Fork(ctx, id, sandbox.ForkOptions{N: n})
	if err != nil {
		return 0, err
	}
	defer func() {
		for _, c := range copies {
			m.Remove(context.WithoutCancel(ctx), c.ID, true)
		}
	}()
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, c := range copies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = execTrue(ctx, m, c.ID)
		}()
	}
	wg.Wait()
	d := time.Since(t)
	for _, err := range errs {
		if err != nil {
			return 0, err
		}
	}
	return d, nil
}

// forkMemory compares what an idle fork's sandbox uses with what its
// source uses: resident memory (anonymous and gVisor's memory file), which
// only that sandbox holds, and everything charged to it, page cache of the
// files it read (the checkpoint, runsc) included, which the host shares
// and can reclaim.
func forkMemory(ctx context.Context, m *manager.Manager, id string) ([]Memory, error) {
	copies, err := m.Fork(ctx, id, sandbox.ForkOptions{N: 3})
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, c := range copies {
			m.Remove(context.WithoutCancel(ctx), c.ID, true)
		}
	}()
	time.Sleep(time.Second) // let the copies settle
	stats := func(id string) (*sandbox.Stats, error) { return m.Stats(ctx, id) }
	src, err := stats(id)
	if err != nil {
		return nil, err
	}
	var resident, charged int64
	for _, c := range copies {
		st, err := stats(c.ID)
		if err != nil {
			return nil, err
		}
		resident += st.ResidentBytes
		charged += st.MemoryBytes
	}
	n := int64(len(copies))
	return []Memory{
		{Name: "one more idle fork, resident (mean of 3)", Bytes: resident / n, Baseline: "its idle source, resident", Base: src.ResidentBytes},
		{Name: "one more idle fork, with page cache (mean of 3)", Bytes: charged / n, Baseline: "its idle source, with page cache", Base: src.MemoryBytes},
	}, nil
}

// PrintMemory writes a table of memory figures.
func PrintMemory(w io.Writer, mem []Memory) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MEMORY\tBYTES\tBASELINE\tBASELINE BYTES")
	for _, x := range mem {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", x.Name, units.FormatBytes(x.Bytes), x.Baseline, units.FormatBytes(x.Base))
	}
	return tw.Flush()
}
