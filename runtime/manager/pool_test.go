package manager

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"smolvm.dev/smolvm/runtime/snapshot"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/tests/testimage"
)

func TestPool(t *testing.T) {
	m := newManager(t)
	ctx := context.Background()
	if _, err := m.CreatePool(ctx, sandbox.PoolOptions{Name: "p", Size: 2}); err != nil {
		t.Fatal(err)
	}
	if made, err := m.FillPool(ctx, "p"); err != nil || made != 2 {
		t.Fatalf("fill: %d, %v", made, err)
	}
	if p, err := m.Pool(ctx, "p"); err != nil || p.Ready != 2 || p.MemoryUsed <= 0 {
		t.Fatalf("pool after fill: %+v, %v", p, err)
	}
	if sbs, _ := m.List(ctx); len(sbs) != 0 {
		t.Fatalf("waiting sandboxes are listed: %d", len(sbs))
	}

	sb, err := m.Create(ctx, sandbox.CreateOptions{Pool: "p", Name: "web1", Config: sandbox.Config{Env: []string{"A=1"}, WorkDir: "/tmp", TTL: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	if sb.State != sandbox.StateRunning || sb.Name != "web1" || sb.ExpiresAt == nil || time.Until(*sb.ExpiresAt) < 59*time.Minute {
		t.Fatalf("claimed: %+v", sb)
	}
	out, errOut, _ := m.sh(t, sb, "hostname; echo $A $SMOLVM_SANDBOX_NAME $SMOLVM_SANDBOX_ID; pwd")
	if want := "web1\n1 web1 " + sb.ID + "\n/tmp\n"; out != want {
		t.Fatalf("claimed sandbox sees %q (%s), want %q", out, errOut, want)
	}
	if sbs, _ := m.List(ctx); len(sbs) != 1 || sbs[0].ID != sb.ID {
		t.Fatalf("after the claim, ls shows %d sandboxes", len(sbs))
	}
	if p, _ := m.Pool(ctx, "p"); p.Ready != 1 {
		t.Fatalf("%d ready after one claim, want 1", p.Ready)
	}

	// Two claimers at once never get the same sandbox; the second pool
	// member runs out, and the other falls back to a cold start.
	var wg sync.WaitGroup
	got := make([]*sandbox.Sandbox, 2)
	errs := make([]error, 2)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = m.Create(ctx, sandbox.CreateOptions{Pool: "p"})
		}()
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil || got[0].ID == got[1].ID {
		t.Fatalf("concurrent claims: %v %v", errs, got)
	}
	for _, s := range got {
		if out, _, _ := m.sh(t, s, "echo $SMOLVM_SANDBOX_NAME"); out != s.Name+"\n" {
			t.Fatalf("%s sees name %q", s.Name, out)
		}
	}
	if made, err := m.FillPool(ctx, "p"); err != nil || made != 2 {
		t.Fatalf("refill: %d, %v", made, err)
	}

	if err := m.RemovePool(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	rs, _ := listRecords(ctx, m.st, "p", false)
	if len(rs) != 0 {
		t.Fatalf("%d sandboxes of a removed pool remain", len(rs))
	}
	if _, err := m.Get(ctx, "web1"); err != nil {
		t.Fatalf("a claimed sandbox went with its pool: %v", err)
	}
}

func TestPoolBadInput(t *testing.T) {
	m := newManager(t)
	ctx := context.Background()
	for _, o := range []sandbox.PoolOptions{{Size: 0}, {Size: sandbox.MaxPoolSize + 1}, {Size: -1, Targets: 1}, {Targets: sandbox.MaxPoolSize + 1},
		{Size: 1, Name: "../x"}, {Size: 1, MemoryBudget: -1}, {Size: 1, Image: "nope:1"}} {
		if _, err := m.CreatePool(ctx, o); err == nil {
			t.Errorf("CreatePool(%+v) succeeded", o)
		}
	}
	if _, err := m.CreatePool(ctx, sandbox.PoolOptions{Name: "tight", Size: 3, MemoryBudget: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.CreatePool(ctx, sandbox.PoolOptions{Name: "tight", Size: 1}); !errors.Is(err, sandbox.ErrNameInUse) {
		t.Errorf("second pool named tight: %v", err)
	}
	if made, err := m.FillPool(ctx, "tight"); made != 0 || !errors.Is(err, sandbox.ErrPoolBudget) {
		t.Errorf("fill over budget: %d, %v", made, err)
	}
	if _, err := m.Create(ctx, sandbox.CreateOptions{Pool: "nope"}); !errors.Is(err, sandbox.ErrPoolNotFound) {
		t.Errorf("create from a missing pool: %v", err)
	}
	bad := []sandbox.CreateOptions{
		{Pool: "tight", Config: sandbox.Config{Cmd: []string{"sleep", "1"}}},
		{Pool: "tight", Config: sandbox.Config{Limits: sandbox.Limits{Memory: 512 << 20}}},
		{Pool: "tight", Image: "other"},
	}
	for _, o := range bad {
		if _, err := m.Create(ctx, o); !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "pool") && !strings.Contains(err.Error(), "main command") {
			t.Errorf("create %+v: %v", o, err)
		}
	}
	if err := m.RemovePool(ctx, "nope"); !errors.Is(err, sandbox.ErrPoolNotFound) {
		t.Errorf("remove a missing pool: %v", err)
	}
}

// targetIDs lists the restore targets waiting in pool.
func targetIDs(t *testing.T, m *testManager, pool string) map[string]bool {
	t.Helper()
	return memberIDs(t, m, pool, sandbox.StateCreated)
}

// memberIDs lists the members of pool waiting in state.
func memberIDs(t *testing.T, m *testManager, pool string, state sandbox.State) map[string]bool {
	t.Helper()
	rs, err := listRecords(context.Background(), m.st, pool, false)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, r := range rs {
		if r.State == state {
			ids[r.ID] = true
		}
	}
	return ids
}

// TestHotPool: a pool of copies restored ahead of time from a snapshot,
// paused; a restore of that snapshot claims one, which resumes as the
// copy asked for (name, hostname, machine ID, environment) with the
// snapshot's memory and files. Idle hot copies count against the pool's
// memory budget, and the snapshot cannot go while the pool holds it.
func TestHotPool(t *testing.T) {
	m := newManager(t)
	ctx := context.Background()
	src := m.run(t, sandbox.Config{Env: []string{"WHO=src"}, Labels: map[string]string{"from": "src"}})
	m.startKV(t, src)
	if got := m.kv(t, src, "set a 1"); got != "ok" {
		t.Fatal(got)
	}
	m.sh(t, src, "echo on-disk > /root/f")
	snap, err := m.Checkpoint(ctx, src.ID, sandbox.CheckpointOptions{Name: "hot-src"})
	if err != nil {
		t.Fatal(err)
	}

	for _, o := range []sandbox.PoolOptions{{Name: "x", Hot: 1}, {Name: "x", From: "hot-src"}, {Name: "x", From: "hot-src", Hot: 1, Size: 1},
		{Name: "x", From: "hot-src", Hot: sandbox.MaxPoolSize + 1}} {
		if _, err := m.CreatePool(ctx, o); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("CreatePool(%+v): %v, want ErrInvalid", o, err)
		}
	}
	if _, err := m.CreatePool(ctx, sandbox.PoolOptions{Name: "x", From: "no-such-snap", Hot: 1}); !errors.Is(err, snapshot.ErrNotFound) {
		t.Errorf("CreatePool from a missing snapshot: %v", err)
	}

	p, err := m.CreatePool(ctx, sandbox.PoolOptions{Name: "hot", From: "hot-src", Hot: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.RemovePool(context.Background(), "hot") })
	if p.Snapshot != snap.ID || p.Limits != src.Config.Limits {
		t.Fatalf("hot pool %+v: want the snapshot's ID and limits", p)
	}
	if made, err := m.FillPool(ctx, "hot"); err != nil || made != 2 {
		t.Fatalf("fill: %d, %v", made, err)
	}
	if p, err = m.Pool(ctx, "hot"); err != nil || p.HotReady != 2 || p.MemoryUsed <= 0 {
		t.Fatalf("hot pool after fill: %+v, %v", p, err)
	}
	waiting := memberIDs(t, m, "hot", sandbox.StatePaused)

	if _, err := m.Restore(ctx, "hot-src", sandbox.RestoreOptions{TTL: -time.Second}); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("restore with a negative TTL: %v, want ErrInvalid", err)
	}
	if _, err := m.Restore(ctx, "hot-src", sandbox.RestoreOptions{Labels: map[string]string{"a=b": "c"}}); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("restore with a bad label: %v, want ErrInvalid", err)
	}
	cp, err := m.Restore(ctx, "hot-src", sandbox.RestoreOptions{Name: "claimed", TTL: time.Hour, Labels: map[string]string{"from": "hot"}})
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(cp.Config.Labels, map[string]string{"from": "hot"}) {
		t.Errorf("claimed copy's labels %v, want the restore's", cp.Config.Labels)
	}
	if !waiting[cp.ID] || cp.Name != "claimed" || cp.State != sandbox.StateRunning || cp.Snapshot != snap.ID {
		t.Fatalf("restore with a hot pool: %+v, want one of %v, running", cp, waiting)
	}
	checkTTL(t, "claimed copy", cp, time.Hour)
	if got := m.kv(t, cp, "get a"); got != "1" {
		t.Errorf("claimed copy's memory: get a = %q", got)
	}
	out, _, _ := m.sh(t, cp, "cat /root/f; hostname; echo $WHO $SMOLVM_SANDBOX_NAME")
	if want := "on-disk\nclaimed\nsrc claimed\n"; out != want {
		t.Errorf("claimed copy sees %q, want %q", out, want)
	}
	if m.identity(t, cp) == m.identity(t, src) {
		t.Error("the claimed copy has its source's identity")
	}
	if p, _ = m.Pool(ctx, "hot"); p.HotReady != 1 {
		t.Errorf("%d hot copies left after a claim, want 1", p.HotReady)
	}
	if sbs, _ := m.List(ctx); len(sbs) != 2 {
		t.Errorf("hot copies are listed: %d sandboxes, want 2", len(sbs))
	}

	// The pool pins its snapshot, by name.
	err = m.Snapshots().Remove(ctx, "hot-src", func(id string) (bool, error) { return m.SnapshotInUse(ctx, id) })
	if !errors.Is(err, snapshot.ErrInUse) || !strings.Contains(err.Error(), "hot pool hot") {
		t.Errorf("snapshot rm under a hot pool: %v, want ErrInUse naming the pool", err)
	}

	// Idle hot copies count against the budget: the error says so.
	if _, err := m.CreatePool(ctx, sandbox.PoolOptions{Name: "tiny", From: "hot-src", Hot: 3, MemoryBudget: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	if made, err := m.FillPool(ctx, "tiny"); !errors.Is(err, sandbox.ErrPoolBudget) || made != 0 || !strings.Contains(err.Error(), "hot copies") {
		t.Errorf("fill over the budget: %d, %v", made, err)
	}
	if err := m.RemovePool(ctx, "tiny"); err != nil {
		t.Fatal(err)
	}

	// Without hot copies, a restore restores.
	if err := m.RemovePool(ctx, "hot"); err != nil {
		t.Fatal(err)
	}
	cold, err := m.Restore(ctx, "hot-src", sandbox.RestoreOptions{TTL: 2 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if waiting[cold.ID] {
		t.Error("a restore after the pool's removal got one of its copies")
	}
	checkTTL(t, "restored copy", cold, 2*time.Hour)
	if !maps.Equal(cold.Config.Labels, src.Config.Labels) {
		t.Errorf("restored copy's labels %v, want its source's %v", cold.Config.Labels, src.Config.Labels)
	}
	relabelled, err := m.Restore(ctx, "hot-src", sandbox.RestoreOptions{Labels: map[string]string{"from": "cold"}})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := m.Get(ctx, relabelled.ID); err != nil || !maps.Equal(got.Config.Labels, map[string]string{"from": "cold"}) {
		t.Errorf("restored copy's labels %v (%v), want the restore's", got.Config.Labels, err)
	}
	if got := m.kv(t, cold, "get a"); got != "1" {
		t.Errorf("restored copy: get a = %q", got)
	}
}

func TestRestoreTargets(t *testing.T) {
	m := newManager(t)
	ctx := context.Background()
	if _, err := m.CreatePool(ctx, sandbox.PoolOptions{Name: "t", Targets: 3}); err != nil {
		t.Fatal(err)
	}
	if made, err := m.FillPool(ctx, "t"); err != nil || made != 3 {
		t.Fatalf("fill: %d, %v", made, err)
	}
	p, err := m.Pool(ctx, "t")
	if err != nil || p.TargetsReady != 3 || p.Ready != 0 || p.MemoryUsed <= 0 {
		t.Fatalf("pool after fill: %+v, %v", p, err)
	}
	if sbs, _ := m.List(ctx); len(sbs) != 0 {
		t.Fatalf("restore targets are listed: %d", len(sbs))
	}
	// A target is no sandbox to take for create: the pool has no started
	// members, so create falls back to a cold start.
	plain, err := m.Create(ctx, sandbox.CreateOptions{Pool: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if targetIDs(t, m, "t")[plain.ID] || len(targetIDs(t, m, "t")) != 3 {
		t.Fatalf("create --pool took a restore target")
	}

	src := m.run(t, sandbox.Config{Env: []string{"WHO=src"}})
	if _, _, exit := m.sh(t, src, "echo state > /root/f"); exit.Code != 0 {
		t.Fatal(exit)
	}
	waiting := targetIDs(t, m, "t")
	copies, err := m.Fork(ctx, src.ID, sandbox.ForkOptions{N: 1, NamePrefix: "c"})
	if err != nil {
		t.Fatal(err)
	}
	c := copies[0]
	if !waiting[c.ID] || c.Name != "c-1" || c.ForkedFrom != src.ID || c.State != sandbox.StateRunning {
		t.Fatalf("fork into a target: %+v (targets %v)", c, waiting)
	}
	out, errOut, _ := m.sh(t, c, "cat /root/f; hostname; echo $WHO $SMOLVM_SANDBOX_NAME $SMOLVM_SANDBOX_ID")
	if want := "state\nc-1\nsrc c-1 " + c.ID + "\n"; out != want {
		t.Fatalf("copy in a target sees %q (%s), want %q", out, errOut, want)
	}
	if got, err := m.Get(ctx, "c-1"); err != nil || got.ForkedFrom != src.ID || got.Config.Hostname != "c-1" {
		t.Fatalf("stored copy: %+v, %v", got, err)
	}
	if p, _ := m.Pool(ctx, "t"); p.TargetsReady != 2 {
		t.Fatalf("%d targets after a fork, want 2", p.TargetsReady)
	}

	// A restore takes one too, and its record names the snapshot, so the
	// snapshot cannot be removed under it.
	snap, err := m.Checkpoint(ctx, src.ID, sandbox.CheckpointOptions{Name: "s"})
	if err != nil {
		t.Fatal(err)
	}
	waiting = targetIDs(t, m, "t")
	r, err := m.Restore(ctx, snap.ID, sandbox.RestoreOptions{Name: "r"})
	if err != nil {
		t.Fatal(err)
	}
	if !waiting[r.ID] {
		t.Fatalf("restore did not use a target")
	}
	if inUse, err := m.SnapshotInUse(ctx, snap.ID); err != nil || !inUse {
		t.Fatalf("snapshot in use by a restored target: %v, %v", inUse, err)
	}
	if out, _, _ := m.sh(t, r, "cat /root/f; echo $SMOLVM_SANDBOX_NAME"); out != "state\nr\n" {
		t.Fatalf("restored target sees %q", out)
	}

	// A target that died while it waited is skipped.
	for id := range targetIDs(t, m, "t") {
		r := lookupT(t, m, id)
		if err := r.be.Delete(ctx, &r.spec); err != nil {
			t.Fatal(err)
		}
	}
	copies, err = m.Fork(ctx, src.ID, sandbox.ForkOptions{N: 2})
	if err != nil {
		t.Fatalf("fork with a dead target: %v", err)
	}
	for _, c := range copies {
		if out, _, _ := m.sh(t, c, "cat /root/f"); out != "state\n" {
			t.Fatalf("copy %s sees %q", c.Name, out)
		}
	}
	if n := len(targetIDs(t, m, "t")); n != 0 {
		t.Fatalf("%d dead targets left in the pool", n)
	}

	if err := m.RemovePool(ctx, "t"); err != nil {
		t.Fatal(err)
	}
}

// TestRestoreTargetsImageMoved: targets made before the pool's tag moved
// hold the old image, so they serve no copy of the new one.
func TestRestoreTargetsImageMoved(t *testing.T) {
	m := newManager(t)
	ctx := context.Background()
	hello := testimage.Idle(t)
	version := func(v string) *sandbox.Image {
		return m.importImage(t, "smolvm.local/moving:1", nil, layer(t, file{"bin/", 0o755, nil}, file{"bin/hello", 0o755, hello},
			file{"etc/", 0o755, nil}, file{"etc/msg", 0o644, []byte(v)}))
	}
	version("v1")
	m.filledPool(t, sandbox.PoolOptions{Name: "t", Image: "smolvm.local/moving:1", Targets: 1})
	stale := targetIDs(t, m, "t")
	v2 := version("v2")
	src, err := m.Create(ctx, sandbox.CreateOptions{Image: "smolvm.local/moving:1", Start: true})
	if err != nil {
		t.Fatal(err)
	}
	copies, err := m.Fork(ctx, src.ID, sandbox.ForkOptions{N: 1})
	if err != nil {
		t.Fatal(err)
	}
	c := copies[0]
	if stale[c.ID] || c.ImageID != v2.ID {
		t.Fatalf("copy of a v2 sandbox: %+v, stale targets %v", c, stale)
	}
	var out bytes.Buffer
	if exit, err := m.Exec(ctx, c.ID, sandbox.Process{Args: []string{"/bin/hello", "/etc/msg"}}, sandbox.Stdio{Stdout: &out}); err != nil || exit.Code != 0 || out.String() != "/etc/msg: v2\n" {
		t.Fatalf("copy sees %q: %v %+v", out.String(), err, exit)
	}
	for id := range stale {
		if _, err := lookup(ctx, m.st, id); !errors.Is(err, sandbox.ErrNotFound) {
			t.Fatalf("the stale target is still there: %v", err)
		}
	}
}

// TestRestoreTargetsFit: a target serves only copies of its own image and
// limits, and a fork that fails gives back nothing it took.
func TestRestoreTargetsFit(t *testing.T) {
	m := newManager(t)
	ctx := context.Background()
	m.filledPool(t, sandbox.PoolOptions{Name: "t", Targets: 2})
	other := m.run(t, sandbox.Config{Limits: sandbox.Limits{Memory: 512 << 20}})
	copies, err := m.Fork(ctx, other.ID, sandbox.ForkOptions{N: 1})
	if err != nil {
		t.Fatal(err)
	}
	if targetIDs(t, m, "t")[copies[0].ID] || len(targetIDs(t, m, "t")) != 2 {
		t.Fatalf("a copy with other limits went into a target")
	}

	// Copy 2 of 3 fails on a taken name: the targets copies 1 and 3 took
	// are removed with them, not listed.
	src := m.run(t, sandbox.Config{})
	taken, err := m.Create(ctx, sandbox.CreateOptions{Name: "k-2", Start: true})
	if err != nil {
		t.Fatal(err)
	}
	before, _ := m.List(ctx)
	if _, err := m.Fork(ctx, src.ID, sandbox.ForkOptions{N: 3, NamePrefix: "k"}); !errors.Is(err, sandbox.ErrNameInUse) {
		t.Fatalf("fork onto a taken name: %v", err)
	}
	after, _ := m.List(ctx)
	if len(after) != len(before) {
		t.Fatalf("a failed fork left %d sandboxes, had %d", len(after), len(before))
	}
	if _, err := m.Get(ctx, taken.ID); err != nil {
		t.Fatalf("the sandbox whose name clashed: %v", err)
	}
}

// checkTTL checks that sb lives ttl from its start, as RestoreOptions.TTL
// asked, and that the record says so too.
func checkTTL(t *testing.T, what string, sb *sandbox.Sandbox, ttl time.Duration) {
	t.Helper()
	if sb.Config.TTL != ttl || sb.ExpiresAt == nil || sb.StartedAt == nil || !sb.ExpiresAt.Equal(sb.StartedAt.Add(ttl)) {
		t.Errorf("%s: TTL %s, started %v, expires %v; want %s from its start", what, sb.Config.TTL, sb.StartedAt, sb.ExpiresAt, ttl)
	}
}

// TestHotPoolWarm: a hot copy of a sandbox labelled sandbox.LabelWarm is
// sent its GET between restore and pause (here through the agent: no
// network), the source is not; a copy that does not answer is not pooled.
func TestHotPoolWarm(t *testing.T) {
	m := newManager(t)
	ctx := context.Background()
	const server = `import http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        open("/tmp/hits", "a").write(self.path + "\n")
        self.send_response(200)
        self.end_headers()
s = http.server.HTTPServer(("127.0.0.1", 8000), H)
open("/tmp/up", "w").close()
s.serve_forever()
`
	src := m.run(t, sandbox.Config{Cmd: []string{"python3", "-c", server}, Labels: map[string]string{sandbox.LabelWarm: "8000/warmed"}})
	if _, _, exit := m.sh(t, src, "i=0; while [ ! -e /tmp/up ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; [ -e /tmp/up ]"); exit.Code != 0 {
		t.Fatal("the server did not start")
	}
	if _, err := m.Checkpoint(ctx, src.ID, sandbox.CheckpointOptions{Name: "warm-src"}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.CreatePool(ctx, sandbox.PoolOptions{Name: "warm", From: "warm-src", Hot: 1}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.RemovePool(context.Background(), "warm") })
	if made, err := m.FillPool(ctx, "warm"); err != nil || made != 1 {
		t.Fatalf("fill: %d, %v", made, err)
	}
	cp, err := m.Restore(ctx, "warm-src", sandbox.RestoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if out, _, _ := m.sh(t, cp, "cat /tmp/hits"); out != "/warmed\n" {
		t.Errorf("the hot copy's requests: %q, want the warm-up's alone", out)
	}
	if out, _, _ := m.sh(t, src, "cat /tmp/hits 2>/dev/null"); out != "" {
		t.Errorf("the source was asked %q", out)
	}

	// Nothing answers on 8001: the copy is discarded, the fill fails.
	bad := m.run(t, sandbox.Config{Labels: map[string]string{sandbox.LabelWarm: "8001/"}})
	if _, err := m.Checkpoint(ctx, bad.ID, sandbox.CheckpointOptions{Name: "cold-src"}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.CreatePool(ctx, sandbox.PoolOptions{Name: "cold", From: "cold-src", Hot: 1}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.RemovePool(context.Background(), "cold") })
	if made, err := m.FillPool(ctx, "cold"); err == nil || made != 0 || !strings.Contains(err.Error(), "warm hot copy") {
		t.Errorf("fill of a copy that does not answer: %d, %v", made, err)
	}
	if p, err := m.Pool(ctx, "cold"); err != nil || p.HotReady != 0 {
		t.Errorf("pool after the failed fill: %+v, %v", p, err)
	}
}
