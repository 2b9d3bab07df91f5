package gateway_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kclient "sigs.k8s.io/controller-runtime/pkg/client"

	"smolvm.dev/smolvm/client"
	"smolvm.dev/smolvm/errdefs"
	kubeapi "smolvm.dev/smolvm/kube/api"
	"smolvm.dev/smolvm/kube/gateway"
	"smolvm.dev/smolvm/sandbox"
)

// pooled waits until warm pool name has want ready sandboxes of its own,
// and returns them by smolvm ID with their nodes.
func (c *cluster) pooled(tb testing.TB, name string, want int) map[string]string {
	tb.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var list kubeapi.SandboxList
		if err := c.k.Client.List(context.Background(), &list, kclient.InNamespace("team-a"), kclient.MatchingLabels{kubeapi.LabelPool: name}); err != nil {
			tb.Fatal(err)
		}
		ids := map[string]string{}
		for _, sb := range list.Items {
			if sb.Status.Phase == kubeapi.PhaseRunning && sb.DeletionTimestamp.IsZero() {
				ids[sb.Status.Instances[0].ID] = sb.Spec.NodeName
			}
		}
		var pool kubeapi.SandboxWarmPool
		err := c.k.Client.Get(context.Background(), kclient.ObjectKey{Namespace: "team-a", Name: name}, &pool)
		if err == nil && len(ids) == want && len(list.Items) == want && pool.Status.ReadyReplicas == int32(want) {
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
	gw, err := client.New(c.URL, keyA)
	if err != nil {
		t.Fatal(err)
	}
	c.put(t, &kubeapi.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Name: "tmpl"}, Spec: kubeapi.SandboxTemplateSpec{SandboxBody: sleeper}})
	pool := &kubeapi.SandboxWarmPool{ObjectMeta: metav1.ObjectMeta{Name: "warm"}, Spec: kubeapi.SandboxWarmPoolSpec{Replicas: 2, SandboxTemplateRef: kubeapi.LocalRef{Name: "tmpl"}}}
	c.put(t, pool)
	first := c.pooled(t, "warm", 2)
	nodes := map[string]bool{}
	for _, n := range first {
		nodes[n] = true
	}
	if len(nodes) != 2 {
		t.Errorf("the pool's two sandboxes are on %v, want one per node", first)
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
	}
	t0 = time.Now()
	if code := call(t, "POST", c.URL+"/sandboxes", keyA, `{"templateID":"warm","timeout":300}`, &out); code != http.StatusCreated {
		t.Fatalf("E2B claim: %d", code)
	}
	t.Logf("E2B claim: %v", time.Since(t0))
	if _, ok := first[out.SandboxID]; !ok || out.SandboxID == sb.ID || out.EnvdAccessToken == "" {
		t.Fatalf("E2B claim got %+v, not the pool's other sandbox of %v", out, first)
	}
	var claimed kubeapi.SandboxList
	if err := c.k.Client.List(ctx, &claimed, kclient.InNamespace("team-a")); err != nil {
		t.Fatal(err)
	}
	for _, o := range claimed.Items {
		if id := o.Status.Instances; len(id) > 0 && (id[0].ID == sb.ID || id[0].ID == out.SandboxID) {
			if o.Labels[kubeapi.LabelPool] != "" || len(o.OwnerReferences) != 0 || o.Annotations[gateway.AnnotationClaimedFrom] != "warm" {
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
