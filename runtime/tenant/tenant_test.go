package tenant_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/internal/store"
	"smolvm.dev/smolvm/runtime/tenant"
	"smolvm.dev/smolvm/sandbox"
)

func open(t *testing.T, dir string) *tenant.Store {
	t.Helper()
	st, err := store.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ts, err := tenant.Open(context.Background(), st)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

func TestTenantKeys(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	ts := open(t, dir)
	if _, err := ts.Add(ctx, "team-a", sandbox.Quota{Sandboxes: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := ts.Add(ctx, "team-a", sandbox.Quota{}); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("second add: %v, want already exists", err)
	}
	for _, bad := range []string{"admin", "../x", "", "a b"} {
		if _, err := ts.Add(ctx, bad, sandbox.Quota{}); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("add %q: %v, want invalid", bad, err)
		}
	}
	if _, err := ts.Add(ctx, "neg", sandbox.Quota{Memory: -1}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("negative quota: %v, want invalid", err)
	}
	var qe *sandbox.QuotaError
	if _, err := ts.SetQuota(ctx, "team-a", sandbox.Quota{CPUs: 1e308}); !errors.Is(err, errdefs.ErrInvalid) || !errors.As(err, &qe) || qe.Field != "cpus" {
		t.Errorf("a quota of 1e308 vCPUs: %v, want invalid naming cpus", err)
	}
	k, secret, err := ts.AddKey(ctx, "team-a")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(secret, tenant.KeyPrefix) || len(secret) != len(tenant.KeyPrefix)+64 {
		t.Fatalf("key %q: want %s and 64 hex digits", secret, tenant.KeyPrefix)
	}
	if name, ok := ts.Resolve(ctx, secret); !ok || name != "team-a" {
		t.Fatalf("resolve: %q %v", name, ok)
	}
	off := "0"
	if strings.HasSuffix(secret, off) {
		off = "1"
	}
	if _, ok := ts.Resolve(ctx, secret[:len(secret)-1]+off); ok {
		t.Fatal("a key one digit off resolves")
	}
	// Only the hash is stored: the secret appears nowhere in the database.
	st, err := store.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var n int
	if err := st.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM tenant_keys WHERE hash = ? OR id = ?`, secret, secret).Scan(&n); err != nil || n != 0 {
		t.Fatalf("secret stored in clear (%d rows, %v)", n, err)
	}
	// A second Store (another process: smolvm tenant key rm while serve
	// runs) revokes it, and the first sees that at once.
	other := open(t, dir)
	if err := other.RemoveKey(ctx, "team-a", k.ID); err != nil {
		t.Fatal(err)
	}
	if _, ok := ts.Resolve(ctx, secret); ok {
		t.Fatal("revoked key still resolves")
	}
	if err := other.RemoveKey(ctx, "team-a", k.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("second revoke: %v", err)
	}
	// Removing a tenant revokes its keys.
	_, secret2, err := ts.AddKey(ctx, "team-a")
	if err != nil {
		t.Fatal(err)
	}
	if err := ts.Remove(ctx, "team-a"); err != nil {
		t.Fatal(err)
	}
	if _, ok := ts.Resolve(ctx, secret2); ok {
		t.Fatal("key of a removed tenant resolves")
	}
	if _, _, err := ts.AddKey(ctx, "team-a"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("key for a removed tenant: %v", err)
	}
}

func TestTenantQuota(t *testing.T) {
	ctx := context.Background()
	ts := open(t, t.TempDir())
	if _, err := ts.Add(ctx, "b", sandbox.Quota{}); err != nil {
		t.Fatal(err)
	}
	want := sandbox.Quota{Sandboxes: 3, Memory: 2 << 30, CPUs: 1.5, SnapshotBytes: 1 << 30, Pools: 1, CreatesPerMinute: 10}
	if _, err := ts.SetQuota(ctx, "b", want); err != nil {
		t.Fatal(err)
	}
	got, err := ts.Quota(ctx, "b")
	if err != nil || got != want {
		t.Fatalf("quota %+v %v, want %+v", got, err, want)
	}
	if _, err := ts.SetQuota(ctx, "nobody", want); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("quota of nobody: %v", err)
	}
	list, err := ts.List(ctx)
	if err != nil || len(list) != 1 || list[0].Quota != want {
		t.Fatalf("list %+v %v", list, err)
	}
}

func TestTenantContext(t *testing.T) {
	ctx := context.Background()
	if _, scoped := tenant.Of(ctx); scoped || !tenant.Owns(ctx, "x") || !tenant.Owns(ctx, "") {
		t.Fatal("a plain context is not the admin's")
	}
	if _, scoped := tenant.Of(tenant.With(ctx, tenant.Admin)); scoped {
		t.Fatal("the admin is scoped")
	}
	a := tenant.With(ctx, "a")
	if name, scoped := tenant.Of(a); !scoped || name != "a" {
		t.Fatalf("Of: %q %v", name, scoped)
	}
	if !tenant.Owns(a, "a") || tenant.Owns(a, "b") || tenant.Owns(a, "") {
		t.Fatal("tenant a owns what it should not, or not its own")
	}
	if tenant.Owner(a) != "a" || tenant.Owner(ctx) != "" {
		t.Fatal("Owner")
	}
}
