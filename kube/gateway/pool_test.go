package gateway_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kclient "sigs.k8s.io/controller-runtime/pkg/client"

	"smolvm.dev/smolvm/client"
	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/kube/api/v1alpha1"
	"smolvm.dev/smolvm/kube/gateway"
	"smolvm.dev/smolvm/sandbox"
)

// pooled waits until warm pool name has want ready sandboxes of its own
// (running, or paused in a hot pool), and returns them by smolvm ID with
// their nodes.
func (c *cluster) pooled(tb testing.TB, name string, want int) map[string]string {
	tb.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var pool v1alpha1.SandboxWarmPool
		if err := c.k.Client.Get(context.Background(), kclient.ObjectKey{Namespace: "team-a", Name: name}, &pool); err != nil {
			tb.Fatal(err)
		}
		var list v1alpha1.SandboxList
		if err := c.k.Client.List(context.Background(), &list, kclient.InNamespace("team-a"), kclient.MatchingLabels{v1alpha1.LabelPool: name}); err != nil {
			tb.Fatal(err)
		}
		ids := map[string]string{}
		for _, sb := range list.Items {
			if sb.Status.Phase == pool.Spec.Ready() && sb.DeletionTimestamp.IsZero() {
				ids[sb.Status.Instances[0].ID] = sb.Spec.NodeName
			}
		}
		if len(ids) == want && len(list.Items) == want && pool.Status.ReadyReplicas == int32(want) {
			return ids
		}
		if time.Now().After(deadline) {
			tb.Fatalf("warm pool %s: %d ready of %d objects, status %+v; want %d", name, len(ids), len(list.Items), pool.Status, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestWarmPool keeps a SandboxWarmPool of two across the two nodes; the
// native API and E2B's claim from it through the gateway, and it refills;
// emptied, a claim makes a fresh sandbox of its template.
func TestWarmPool(t *testing.T) {
	c := start(t)
	ctx := context.Background()
	gw := c.client(t, keyA)
	c.put(t, &v1alpha1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Name: "tmpl"}, Spec: v1alpha1.SandboxTemplateSpec{SandboxBody: sleeper}})
	pool := &v1alpha1.SandboxWarmPool{ObjectMeta: metav1.ObjectMeta{Name: "warm"}, Spec: v1alpha1.SandboxWarmPoolSpec{Replicas: 2, SandboxTemplateRef: &v1alpha1.LocalRef{Name: "tmpl"}}}
	c.put(t, pool)
	first := c.pooled(t, "warm", 2)
	nodes := map[string]bool{}
	for _, n := range first {
		nodes[n] = true
	}
	if len(nodes) != 2 {
		t.Errorf("the pool's two sandboxes are on %v, want one per node", first)
	}

	// The native API lists the namespace's warm pools.
	if pools, err := gw.Pools(ctx); err != nil || len(pools) != 1 || pools[0].Name != "warm" || pools[0].Size != 2 {
		t.Fatalf("the warm pools through the gateway: %v %+v", err, pools)
	}
	if pools, err := c.client(t, keyB).Pools(ctx); err != nil || len(pools) != 0 {
		t.Fatalf("team b's warm pools: %v %+v", err, pools)
	}

	t0 := time.Now()
	sb, err := gw.Create(ctx, sandbox.CreateOptions{Pool: "warm", Start: true, Config: sandbox.Config{TTL: 10 * time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("native claim: %v", time.Since(t0))
	if _, ok := first[sb.ID]; !ok || sb.State != sandbox.StateRunning || sb.ExpiresAt == nil {
		t.Fatalf("native claim got %s (%s, expires %v), not one of the pool's %v", sb.ID, sb.State, sb.ExpiresAt, first)
	}
	var out struct {
		SandboxID       string `json:"sandboxID"`
		EnvdAccessToken string `json:"envdAccessToken"`
		TemplateID      string `json:"templateID"`
	}
	t0 = time.Now()
	if code := call(t, "POST", c.URL+"/sandboxes", keyA, `{"templateID":"warm","timeout":300}`, &out); code != http.StatusCreated {
		t.Fatalf("E2B claim: %d", code)
	}
	t.Logf("E2B claim: %v", time.Since(t0))
	if _, ok := first[out.SandboxID]; !ok || out.SandboxID == sb.ID || out.EnvdAccessToken == "" {
		t.Fatalf("E2B claim got %+v, not the pool's other sandbox of %v", out, first)
	}
	// The template asked for, as on a single serve; not the pool's image.
	if out.TemplateID != "warm" {
		t.Errorf("E2B claim reports template %q, want warm", out.TemplateID)
	}
	var claimed v1alpha1.SandboxList
	if err := c.k.Client.List(ctx, &claimed, kclient.InNamespace("team-a")); err != nil {
		t.Fatal(err)
	}
	for _, o := range claimed.Items {
		if id := o.Status.Instances; len(id) > 0 && (id[0].ID == sb.ID || id[0].ID == out.SandboxID) {
			if o.Labels[v1alpha1.LabelPool] != "" || len(o.OwnerReferences) != 0 || o.Annotations[gateway.AnnotationClaimedFrom] != "warm" {
				t.Errorf("claimed %s keeps %v %v %v", o.Name, o.Labels, o.OwnerReferences, o.Annotations)
			}
		}
	}

	// It refills with two new ones.
	refilled := c.pooled(t, "warm", 2)
	for id := range refilled {
		if id == sb.ID || id == out.SandboxID {
			t.Fatalf("the refilled pool holds a claimed sandbox: %v", refilled)
		}
	}

	// Emptied, a claim makes one of its template; bad claims are refused.
	if err := c.k.Client.Get(ctx, kclient.ObjectKeyFromObject(pool), pool); err != nil {
		t.Fatal(err)
	}
	pool.Spec.Replicas = 0
	if err := c.k.Client.Update(ctx, pool); err != nil {
		t.Fatal(err)
	}
	c.pooled(t, "warm", 0)
	fresh, err := gw.Create(ctx, sandbox.CreateOptions{Pool: "warm", Start: true})
	if err != nil || fresh.State != sandbox.StateRunning || slices.Contains([]string{sb.ID, out.SandboxID}, fresh.ID) {
		t.Fatalf("claim from an empty pool: %v %+v", err, fresh)
	}
	if _, err := gw.Create(ctx, sandbox.CreateOptions{Pool: "nope", Start: true}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("claim from a missing pool: %v", err)
	}
	if _, err := gw.Create(ctx, sandbox.CreateOptions{Pool: "warm", Image: "other", Start: true}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("claim with an image: %v", err)
	}
}

// TestHotPool keeps a hot pool of a snapshot: paused restores of a
// sandbox's checkpoint, taken after its setup (the snapshot names no
// node: the controller binds it beside the sandbox). A claim through either
// API resumes one, which holds the setup's files and processes, and
// stays running; the pool refills; a pool of a snapshot that is not
// there waits for it and makes nothing.
func TestHotPool(t *testing.T) {
	c := start(t)
	ctx := context.Background()
	gw := c.client(t, keyA)
	c.put(t, &v1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "src"}, Spec: v1alpha1.SandboxSpec{SandboxBody: sleeper, NodeName: "n1"}})
	src := c.sandboxIn(t, "src", v1alpha1.PhaseRunning)
	sh := func(id, script string) string { return output(t, gw, id, "sh", "-c", script) }
	sh(src.Status.Instances[0].ID, "echo set-up > /tmp/state; sleep 1000 & echo $! > /tmp/pid")
	// Only sandboxRef, as kubectl users write it: the controller binds
	// it to src's node, which takes it.
	c.put(t, &v1alpha1.SandboxSnapshot{ObjectMeta: metav1.ObjectMeta{Name: "setup"}, Spec: v1alpha1.SandboxSnapshotSpec{SandboxRef: v1alpha1.LocalRef{Name: "src"}}})
	if snap := c.snapshotReady(t, "setup"); snap.Spec.NodeName != "n1" || !slices.Equal(snap.Status.Nodes, []string{"n1"}) {
		t.Fatalf("a snapshot of a sandbox on n1: node %q, status %+v", snap.Spec.NodeName, snap.Status)
	}

	c.put(t, &v1alpha1.SandboxWarmPool{ObjectMeta: metav1.ObjectMeta{Name: "hot"}, Spec: v1alpha1.SandboxWarmPoolSpec{Replicas: 2, SandboxSnapshotRef: &v1alpha1.LocalRef{Name: "setup"}, Hot: true}})
	first := c.pooled(t, "hot", 2)
	node := func(id string) *client.Client {
		return c.nodes[slices.Index([]string{"n1", "n2"}, first[id])].Smolvm
	}
	for id := range first {
		if s, err := node(id).Get(ctx, id); err != nil || s.State != sandbox.StatePaused {
			t.Fatalf("pool member %s on its node: %v %+v", id, err, s)
		}
	}

	t0 := time.Now()
	sb, err := gw.Create(ctx, sandbox.CreateOptions{Pool: "hot", Start: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("native claim of a hot copy: %v", time.Since(t0))
	if _, ok := first[sb.ID]; !ok || sb.State != sandbox.StateRunning {
		t.Fatalf("native claim got %s (%s), not a resumed one of the pool's %v", sb.ID, sb.State, first)
	}
	if got := sh(sb.ID, "cat /tmp/state; kill -0 $(cat /tmp/pid) && echo alive"); got != "set-up\nalive\n" {
		t.Fatalf("the claimed copy has %q, want the setup's file and process", got)
	}
	var out struct {
		SandboxID string `json:"sandboxID"`
	}
	t0 = time.Now()
	if code := call(t, "POST", c.URL+"/sandboxes", keyA, `{"templateID":"hot","timeout":300}`, &out); code != http.StatusCreated {
		t.Fatalf("E2B claim: %d", code)
	}
	t.Logf("E2B claim of a hot copy: %v", time.Since(t0))
	if _, ok := first[out.SandboxID]; !ok || out.SandboxID == sb.ID {
		t.Fatalf("E2B claim got %+v, not the pool's other copy of %v", out, first)
	}

	// It refills; the claimed stay running (the node does not pause
	// them again).
	refilled := c.pooled(t, "hot", 2)
	for id := range first {
		if _, ok := refilled[id]; ok {
			t.Fatalf("the refilled pool holds a claimed copy: %v", refilled)
		}
		if s, err := node(id).Get(ctx, id); err != nil || s.State != sandbox.StateRunning {
			t.Fatalf("claimed %s after the refill: %v %+v", id, err, s)
		}
	}

	// A pool of a snapshot that is not there makes nothing meanwhile.
	c.put(t, &v1alpha1.SandboxWarmPool{ObjectMeta: metav1.ObjectMeta{Name: "orphan"}, Spec: v1alpha1.SandboxWarmPoolSpec{Replicas: 2, SandboxSnapshotRef: &v1alpha1.LocalRef{Name: "nope"}}})
	deadline := time.Now().Add(30 * time.Second)
	for {
		var pool v1alpha1.SandboxWarmPool
		if err := c.k.Client.Get(ctx, kclient.ObjectKey{Namespace: "team-a", Name: "orphan"}, &pool); err != nil {
			t.Fatal(err)
		}
		if cond := meta.FindStatusCondition(pool.Status.Conditions, v1alpha1.ConditionReady); cond != nil {
			if cond.Reason != "WaitingForSnapshot" || !strings.Contains(cond.Message, "nope") {
				t.Fatalf("pool of a missing snapshot: %+v", cond)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("pool of a missing snapshot: no condition in 30 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	var members v1alpha1.SandboxList
	if err := c.k.Client.List(ctx, &members, kclient.InNamespace("team-a"), kclient.MatchingLabels{v1alpha1.LabelPool: "orphan"}); err != nil || len(members.Items) != 0 {
		t.Fatalf("pool of a missing snapshot made %v %d", err, len(members.Items))
	}
}
