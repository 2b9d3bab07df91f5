package sandbox

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"smolvm.dev/smolvm/backend"
)

func TestPool(t *testing.T) {
	m := newManager(t)
	ctx := context.Background()
	if _, err := m.CreatePool(ctx, PoolOptions{Name: "p", Size: 2}); err != nil {
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

	sb, err := m.Create(ctx, CreateOptions{Pool: "p", Name: "web1", Config: Config{Env: []string{"A=1"}, WorkDir: "/tmp", TTL: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	if sb.State != StateRunning || sb.Name != "web1" || sb.ExpiresAt == nil || time.Until(*sb.ExpiresAt) < 59*time.Minute {
		t.Fatalf("claimed: %+v", sb)
	}
	out, errOut, _ := m.sh(t, sb, "hostname; echo $A $SMOLVM_SANDBOX_NAME $SMOLVM_SANDBOX_ID; pwd")
	if want := "sb-" + sb.ID + "\n1 web1 " + sb.ID + "\n/tmp\n"; out != want {
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
	got := make([]*Sandbox, 2)
	errs := make([]error, 2)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = m.Create(ctx, CreateOptions{Pool: "p"})
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
	for _, o := range []PoolOptions{{Size: 0}, {Size: MaxPoolSize + 1}, {Size: 1, Name: "../x"}, {Size: 1, MemoryBudget: -1}, {Size: 1, Image: "nope:1"}} {
		if _, err := m.CreatePool(ctx, o); err == nil {
			t.Errorf("CreatePool(%+v) succeeded", o)
		}
	}
	if _, err := m.CreatePool(ctx, PoolOptions{Name: "tight", Size: 3, MemoryBudget: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.CreatePool(ctx, PoolOptions{Name: "tight", Size: 1}); !errors.Is(err, ErrNameInUse) {
		t.Errorf("second pool named tight: %v", err)
	}
	if made, err := m.FillPool(ctx, "tight"); made != 0 || !errors.Is(err, ErrPoolBudget) {
		t.Errorf("fill over budget: %d, %v", made, err)
	}
	if _, err := m.Create(ctx, CreateOptions{Pool: "nope"}); !errors.Is(err, ErrPoolNotFound) {
		t.Errorf("create from a missing pool: %v", err)
	}
	bad := []CreateOptions{
		{Pool: "tight", Config: Config{Cmd: []string{"sleep", "1"}}},
		{Pool: "tight", Config: Config{Limits: backend.Limits{Memory: 512 << 20}}},
		{Pool: "tight", Image: "other"},
	}
	for _, o := range bad {
		if _, err := m.Create(ctx, o); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "pool") && !strings.Contains(err.Error(), "main command") {
			t.Errorf("create %+v: %v", o, err)
		}
	}
	if err := m.RemovePool(ctx, "nope"); !errors.Is(err, ErrPoolNotFound) {
		t.Errorf("remove a missing pool: %v", err)
	}
}
