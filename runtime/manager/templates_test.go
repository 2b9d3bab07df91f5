package manager

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"smolvm.dev/smolvm/runtime/snapshot"
	"smolvm.dev/smolvm/runtime/tenant"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/tests/testimage"
)

// getPort sends one GET to port in sb through its agent, with no retry.
func (m *testManager) getPort(t *testing.T, sb *sandbox.Sandbox, port int) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := m.DialPort(ctx, sb.ID, port)
	if err != nil {
		t.Fatalf("port %d of %s: %v", port, sb.Name, err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// A started template's sandboxes are restores of the build's server: they
// answer at once, with the build's token, for every tenant when public; a
// tenant's own template is no other tenant's.
func TestTemplateStartedState(t *testing.T) {
	m := newManager(t)
	ctx := context.Background()
	for _, n := range []string{"a", "b"} {
		if _, err := m.Tenants().Add(ctx, n, sandbox.Quota{}); err != nil {
			t.Fatal(err)
		}
	}
	actx, bctx := tenant.With(ctx, "a"), tenant.With(ctx, "b")

	const delay = 1500 * time.Millisecond
	var log strings.Builder
	tmpl, err := m.BuildTemplate(ctx, sandbox.TemplateOptions{Name: "web", Public: true, Start: testimage.SlowServer(8080, delay),
		Ready: sandbox.Ready{URL: "http://localhost:8080/"}, Env: []string{"GREETING=built"}, Log: &log})
	if err != nil {
		t.Fatalf("build: %v\n%s", err, log.String())
	}
	if tmpl.Snapshot == "" || tmpl.ReadyAfter < delay {
		t.Fatalf("template %+v: want a snapshot, ready after at least %s", tmpl, delay)
	}
	if !strings.Contains(log.String(), "ready after") {
		t.Errorf("build log lacks the ready line:\n%s", log.String())
	}
	if sbs, _ := m.List(ctx); len(sbs) != 0 {
		t.Errorf("the build left %d sandboxes", len(sbs))
	}

	// The admin's and tenant b's copies: one GET each, at once.
	admin, err := m.Create(ctx, sandbox.CreateOptions{Image: "web", Start: true})
	if err != nil {
		t.Fatal(err)
	}
	first := m.getPort(t, admin, 8080)
	token, greeting, _ := strings.Cut(first, " ")
	if greeting != "built" {
		t.Errorf("answer %q: want the build's environment", first)
	}
	bsb, err := m.Create(bctx, sandbox.CreateOptions{Image: "web", Start: true, Config: sandbox.Config{Env: []string{"EXTRA=1"}}})
	if err != nil {
		t.Fatalf("tenant b, public template: %v", err)
	}
	if got := m.getPort(t, bsb, 8080); !strings.HasPrefix(got, token+" ") {
		t.Errorf("tenant b's copy answered %q, want the build's token %s", got, token)
	}
	if bsb.Tenant != "b" {
		t.Errorf("copy's tenant %q, want b", bsb.Tenant)
	}
	if out, _, _ := m.sh(t, bsb, `echo "$EXTRA"`); strings.TrimSpace(out) != "1" {
		t.Errorf("create's env in the copy: %q", out)
	}

	// What a restore cannot give is refused by name, not dropped.
	for what, c := range map[string]sandbox.Config{
		"a network":       {Network: &sandbox.Network{Mode: sandbox.NetEgress}},
		"volumes":         {Volumes: []sandbox.VolumeMount{{Name: "v", Path: "/v"}}},
		"limits":          {Limits: sandbox.Limits{Memory: 256 << 20}},
		"a user":          {User: "nobody"},
		"pause on expiry": {OnExpiry: sandbox.ExpiryPause},
	} {
		_, err := m.Create(ctx, sandbox.CreateOptions{Image: "web", Start: true, Config: c})
		if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "cannot take "+what) {
			t.Errorf("create from a started state with %s: %v", what, err)
		}
	}
	if _, err := m.Create(ctx, sandbox.CreateOptions{Image: "web", Start: true, Config: sandbox.Config{Network: &sandbox.Network{Mode: sandbox.NetNone}}}); err != nil {
		t.Errorf("create from a started state asking for no network: %v", err)
	}

	// The snapshot is the template's: snapshot rm refuses it.
	err = m.Snapshots().Remove(ctx, tmpl.Snapshot, func(id string) (bool, error) { return m.SnapshotInUse(ctx, id) })
	if !errors.Is(err, snapshot.ErrInUse) || !strings.Contains(err.Error(), "template web") {
		t.Errorf("snapshot rm of the template's state: %v", err)
	}

	// Tenant a's plain template: its image and env; b does not see it.
	if _, err := m.BuildTemplate(actx, sandbox.TemplateOptions{Name: "mine", Env: []string{"A=1"}}); err != nil {
		t.Fatal(err)
	}
	asb, err := m.Create(actx, sandbox.CreateOptions{Image: "mine", Start: true})
	if err != nil {
		t.Fatal(err)
	}
	if out, _, _ := m.sh(t, asb, `echo "$A"`); strings.TrimSpace(out) != "1" {
		t.Errorf("plain template's env: %q", out)
	}
	if _, err := m.Template(bctx, "mine"); !errors.Is(err, sandbox.ErrTemplateNotFound) {
		t.Errorf("b sees a's template: %v", err)
	}
	if _, err := m.Create(bctx, sandbox.CreateOptions{Image: "mine", Start: true}); err == nil {
		t.Error("b created from a's template")
	}
	if err := m.RemoveTemplate(bctx, "mine"); !errors.Is(err, sandbox.ErrTemplateNotFound) {
		t.Errorf("b removes a's template: %v", err)
	}
	list := func(ctx context.Context) string {
		ts, err := m.Templates(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var ns []string
		for _, t := range ts {
			ns = append(ns, t.Name)
		}
		return strings.Join(ns, ",")
	}
	if a, b, all := list(actx), list(bctx), list(ctx); a != "mine,web" || b != "web" || all != "mine,web" {
		t.Errorf("lists: a %q, b %q, admin %q", a, b, all)
	}
	if err := m.RemoveTemplate(bctx, "web"); !errors.Is(err, tenant.ErrAdminOnly) {
		t.Errorf("b removes the public template: %v", err)
	}
	if _, err := m.BuildTemplate(actx, sandbox.TemplateOptions{Name: "pub", Public: true}); !errors.Is(err, tenant.ErrAdminOnly) {
		t.Errorf("a publishes: %v", err)
	}

	// Removed while copies run: the template goes, its snapshot stays for them.
	if err := m.RemoveTemplate(ctx, "web"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Template(ctx, "web"); !errors.Is(err, sandbox.ErrTemplateNotFound) {
		t.Errorf("removed template: %v", err)
	}
	if _, err := m.Snapshots().Get(ctx, tmpl.Snapshot); err != nil {
		t.Errorf("the snapshot its copies came from: %v", err)
	}
}

// A start command that ends, or never gets ready, fails the build with
// its output, and leaves no template, sandbox or snapshot.
func TestTemplateNotReady(t *testing.T) {
	m := newManager(t)
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		start []string
		ready sandbox.Ready
		want  string
	}{
		{"exits", []string{"sh", "-c", "echo boom; exit 3"}, sandbox.Ready{Port: 9}, "boom"},
		{"slow", []string{"sh", "-c", "echo waiting; sleep 100"}, sandbox.Ready{File: "/tmp/never", Timeout: 2 * time.Second}, "within 2s"},
	} {
		_, err := m.BuildTemplate(ctx, sandbox.TemplateOptions{Name: c.name, Start: c.start, Ready: c.ready})
		if !errors.Is(err, sandbox.ErrNotReady) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrNotReady saying %q", c.name, err, c.want)
		}
	}
	for _, bad := range []sandbox.TemplateOptions{
		{Name: "../x"},
		{Name: "r", Ready: sandbox.Ready{Port: 80}},
		{Name: "u", Start: []string{"true"}, Ready: sandbox.Ready{URL: "http://example.com/"}},
		{Name: "i", Image: "no-such-image"},
	} {
		if _, err := m.BuildTemplate(ctx, bad); err == nil {
			t.Errorf("%+v: built", bad)
		}
	}
	ts, _ := m.Templates(ctx)
	sbs, _ := m.List(ctx)
	sns, _ := m.Snapshots().List(ctx)
	if len(ts)+len(sbs)+len(sns) != 0 {
		t.Errorf("left %d templates, %d sandboxes, %d snapshots", len(ts), len(sbs), len(sns))
	}
}

// A template with hot copies keeps them in its pool; a create claims one,
// and removing the template removes the pool.
func TestTemplateHot(t *testing.T) {
	m := newManager(t)
	ctx := context.Background()
	tmpl, err := m.BuildTemplate(ctx, sandbox.TemplateOptions{Name: "hot", Start: testimage.SlowServer(8081, 0), Ready: sandbox.Ready{Port: 8081}, Hot: 1})
	if err != nil {
		t.Fatal(err)
	}
	if p, err := m.Pool(ctx, tmpl.HotPool()); err != nil || p.HotReady != 1 || p.Snapshot != tmpl.Snapshot {
		t.Fatalf("hot pool: %+v, %v", p, err)
	}
	sb, err := m.Create(ctx, sandbox.CreateOptions{Image: "hot", Start: true})
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := m.Pool(ctx, tmpl.HotPool()); p.HotReady != 0 {
		t.Errorf("the create claimed no hot copy: %+v", p)
	}
	if got := m.getPort(t, sb, 8081); len(got) < 16 {
		t.Errorf("the claimed copy answered %q", got)
	}
	if _, err := m.BuildTemplate(ctx, sandbox.TemplateOptions{Name: "cold", Hot: 1}); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("hot copies without a start command: %v", err)
	}
	if err := m.RemoveTemplate(ctx, "hot"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Pool(ctx, tmpl.HotPool()); !errors.Is(err, sandbox.ErrPoolNotFound) {
		t.Errorf("the hot pool after template rm: %v", err)
	}
}

// A template keeps its image: image rm (ImageInUse) refuses it until the
// template goes.
func TestTemplateKeepsItsImage(t *testing.T) {
	m := newManager(t)
	ctx := context.Background()
	img := m.importImage(t, "keep/me:1", nil, layer(t, file{name: "a", mode: 0o644, body: []byte("x")}))
	if _, err := m.BuildTemplate(ctx, sandbox.TemplateOptions{Name: "keep", Image: "keep/me:1"}); err != nil {
		t.Fatal(err)
	}
	inUse := func(id string) (bool, error) { return ImageInUse(ctx, m.st, id) }
	if err := m.images.Remove(ctx, "keep/me:1", inUse); err == nil {
		t.Fatal("image rm removed a template's image")
	}
	if err := m.RemoveTemplate(ctx, "keep"); err != nil {
		t.Fatal(err)
	}
	if used, err := inUse(img.ID); err != nil || used {
		t.Errorf("after template rm: in use %v, %v", used, err)
	}
}
