package gateway_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kclient "sigs.k8s.io/controller-runtime/pkg/client"

	"smolvm.dev/smolvm/api"
	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/kube/api/v1alpha1"
	"smolvm.dev/smolvm/sandbox"
)

// TestTemplates builds a template with a started state through the
// gateway (a Python HTTP server as the start command, ready when its port
// accepts) and creates sandboxes from it: one through each API of the
// gateway, and one bound to the node that did not build it, which copies
// the started state there. Each is a restore: the server answers the first request,
// and the file the start command wrote before it was checkpointed holds
// the build's time in both. Another key neither sees nor uses it, and
// its removal takes the build off its node.
func TestTemplates(t *testing.T) {
	c := start(t)
	ctx := context.Background()
	a, b := c.client(t, keyA), c.client(t, keyB)

	built, err := a.BuildTemplate(ctx, api.TemplateRequest{Name: "web",
		Start: []string{"sh", "-c", "date +%s%N > /tmp/started; exec python3 -m http.server 8000 --directory /tmp"},
		Env:   []string{"WHO=web"}, Ready: &api.TemplateReady{Port: 8000}})
	if err != nil {
		t.Fatal(err)
	}
	if built.Name != "web" || built.Snapshot == "" || built.Tenant != "team-a" || built.ReadyAfter <= 0 || built.Ready.Port != 8000 {
		t.Fatalf("built %+v, want web with a started state, team-a's", built)
	}
	var tmpl v1alpha1.SandboxTemplate
	if err := c.k.Client.Get(ctx, kclient.ObjectKey{Namespace: "team-a", Name: "web"}, &tmpl); err != nil {
		t.Fatal(err)
	}
	buildNode := tmpl.Status.NodeName
	other := map[string]string{"n1": "n2", "n2": "n1"}[buildNode]
	if other == "" || tmpl.Status.Snapshot == "" || tmpl.Status.SnapshotID != built.Snapshot {
		t.Fatalf("template status %+v, want its build node and started state", tmpl.Status)
	}
	t.Logf("built on %s, ready after %s", buildNode, built.ReadyAfter)

	// first GETs the server of sandbox id once, through the gateway's port
	// route: a restore answers at once, with no retry.
	first := func(id string) {
		t.Helper()
		if code := call(t, "GET", c.URL+"/v1/sandboxes/"+id+"/ports/8000/started", keyA, "", nil); code != http.StatusOK {
			t.Fatalf("the first GET of %s's server answered %d, want 200", id, code)
		}
	}
	started := func(id string) string { return output(t, a, id, "sh", "-c", "cat /tmp/started; echo $WHO") }

	// Through the gateway: the binder places it (beside the started state).
	near, err := a.Create(ctx, sandbox.CreateOptions{Image: "web", Start: true})
	if err != nil {
		t.Fatal(err)
	}
	first(near.ID)
	want := started(near.ID)
	if !strings.HasSuffix(want, "\nweb\n") {
		t.Fatalf("the template's sandbox has %q, want the start's time and the template's environment", want)
	}

	// E2B's create naming it: a Sandbox naming the template, which its
	// node makes a restore of the started state too.
	var e2b struct {
		SandboxID string `json:"sandboxID"`
	}
	if code := call(t, "POST", c.URL+"/sandboxes", keyA, `{"templateID":"web","timeout":300}`, &e2b); code != http.StatusCreated {
		t.Fatalf("E2B's create from the template: %d", code)
	}
	first(e2b.SandboxID)
	if got := started(e2b.SandboxID); got != want {
		t.Fatalf("E2B's sandbox of the template has %q, want the build's %q", got, want)
	}

	// On the other node: a restore of the started state there, as the
	// gateway makes it, copied from the build node first.
	c.put(t, &v1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "far"},
		Spec: v1alpha1.SandboxSpec{ForkFrom: &v1alpha1.ForkFrom{Snapshot: tmpl.Status.Snapshot}, NodeName: other}})
	far := c.sandboxIn(t, "far", v1alpha1.PhaseRunning)
	first(far.Status.Instances[0].ID)
	if got := started(far.Status.Instances[0].ID); got != want {
		t.Fatalf("the sandbox on %s has %q, want the build's %q", other, got, want)
	}
	snap := c.snapshotReady(t, tmpl.Status.Snapshot)
	if !slices.Equal(snap.Status.Nodes, []string{buildNode, other}) || len(snap.Status.Copies) != 1 || snap.Status.Copies[0].From != buildNode {
		t.Fatalf("started state's status after the copy: %+v", snap.Status)
	}
	if o := snap.OwnerReferences; len(o) != 1 || o[0].Kind != "SandboxTemplate" || o[0].UID != tmpl.UID {
		t.Fatalf("started state's owners: %+v, want the template", o)
	}

	// The started state is the template's: not listed as a snapshot, not
	// removed as one.
	if snaps, err := a.Snapshots(ctx); err != nil || len(snaps) != 0 {
		t.Fatalf("team-a's snapshots: %v %+v, want none", err, snaps)
	}
	if err := a.RemoveSnapshot(ctx, built.Snapshot); !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "template web") {
		t.Fatalf("removing the started state as a snapshot: %v, want a conflict naming the template", err)
	}
	// A started template's sandboxes keep the build's main process.
	if _, err := a.Create(ctx, sandbox.CreateOptions{Image: "web", Start: true, Config: sandbox.Config{Cmd: []string{"true"}}}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("a create from the template with a command: %v, want invalid", err)
	}

	// Another key: a template it lacks, as for a name never built.
	if ts, err := b.Templates(ctx); err != nil || len(ts) != 0 {
		t.Fatalf("team-b's templates: %v %+v, want none", err, ts)
	}
	for _, name := range []string{"web", "never-built"} {
		if _, err := b.Template(ctx, name); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("team-b's template %s: %v, want not found", name, err)
		}
		if err := b.RemoveTemplate(ctx, name); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("team-b removing template %s: %v, want not found", name, err)
		}
	}
	if _, err := b.Restore(ctx, built.Snapshot, sandbox.RestoreOptions{}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("team-b restoring the started state: %v, want not found", err)
	}
	if ts, err := a.Templates(ctx); err != nil || len(ts) != 1 || ts[0].Name != "web" || ts[0].Snapshot != built.Snapshot {
		t.Fatalf("team-a's templates: %v %+v", err, ts)
	}
	// A public template would be every namespace's; no key is the admin.
	if _, err := a.BuildTemplate(ctx, api.TemplateRequest{Name: "pub", Public: true}); !errors.Is(err, errdefs.ErrDenied) {
		t.Fatalf("a public template through the gateway: %v, want denied", err)
	}

	// A start command that ends is the template's fault, and its build
	// leaves no object behind.
	if _, err := a.BuildTemplate(ctx, api.TemplateRequest{Name: "broken", Start: []string{"sh", "-c", "echo bye; exit 3"},
		Ready: &api.TemplateReady{Port: 8000}}); !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "bye") {
		t.Fatalf("a build whose start command exits: %v, want invalid with its output", err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		var snaps v1alpha1.SandboxSnapshotList
		if err := c.k.Client.List(ctx, &snaps, kclient.InNamespace("team-a")); err != nil {
			t.Fatal(err)
		}
		left := slices.ContainsFunc(snaps.Items, func(s v1alpha1.SandboxSnapshot) bool {
			return s.Spec.TemplateRef != nil && s.Spec.TemplateRef.Name == "broken"
		})
		if err := c.k.Client.Get(ctx, kclient.ObjectKey{Namespace: "team-a", Name: "broken"}, &v1alpha1.SandboxTemplate{}); !left && apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a minute after a failed build its objects remain: %+v", snaps.Items)
		}
	}

	// A rebuild replaces the started state; the former one's object goes,
	// while the sandboxes restored from it run on.
	rebuilt, err := a.BuildTemplate(ctx, api.TemplateRequest{Name: "web",
		Start: []string{"sh", "-c", "date +%s%N > /tmp/started; exec python3 -m http.server 8000 --directory /tmp"},
		Env:   []string{"WHO=web"}, Ready: &api.TemplateReady{Port: 8000}})
	if err != nil || rebuilt.Snapshot == built.Snapshot {
		t.Fatalf("rebuild: %v %+v, want a new started state", err, rebuilt)
	}
	gone(t, c, tmpl.Status.Snapshot)
	again, err := a.Create(ctx, sandbox.CreateOptions{Image: "web", Start: true})
	if err != nil {
		t.Fatal(err)
	}
	first(again.ID)
	if got := started(again.ID); got == want || started(near.ID) != want {
		t.Fatalf("after the rebuild a new sandbox has %q and an old one %q, want the new build's and the old %q", got, started(near.ID), want)
	}
	if err := c.k.Client.Get(ctx, kclient.ObjectKey{Namespace: "team-a", Name: "web"}, &tmpl); err != nil {
		t.Fatal(err)
	}

	// Removal: the template, then its started state and its build on
	// its node, once no sandbox restored from it is left.
	for _, id := range []string{near.ID, far.Name, e2b.SandboxID, again.ID} {
		if err := a.Remove(ctx, id, true); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.RemoveTemplate(ctx, "web"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Template(ctx, "web"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("the removed template: %v, want not found", err)
	}
	gone(t, c, tmpl.Status.Snapshot)
	for _, n := range c.nodes {
		if ts, err := n.Smolvm.Templates(ctx); err != nil || len(ts) != 0 {
			t.Fatalf("%s's templates after the removal: %v %+v, want none", n.Name, err, ts)
		}
	}
}

// gone waits until team-a's SandboxSnapshot name is gone: its node removed
// what it made for it.
func gone(tb testing.TB, c *cluster, name string) {
	tb.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		err := c.k.Client.Get(context.Background(), kclient.ObjectKey{Namespace: "team-a", Name: name}, &v1alpha1.SandboxSnapshot{})
		if apierrors.IsNotFound(err) {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("snapshot %s not gone a minute after its deletion: %v", name, err)
		}
	}
}
