package gateway_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kclient "sigs.k8s.io/controller-runtime/pkg/client"

	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/kube/api/v1alpha1"
	"smolvm.dev/smolvm/kube/gateway"
	"smolvm.dev/smolvm/sandbox"
)

// TestQuota caps team-a at two sandboxes with its Namespace's
// annotation: a third create, a fork's copy and a warm-pool claim are
// refused through both APIs (the pool's own sandboxes not counting);
// one removed, the next create goes through; the other namespace is not
// capped; a cap that is not a count fails creates with a message saying
// so.
func TestQuota(t *testing.T) {
	c := start(t)
	ctx := context.Background()
	a := c.client(t, keyA)
	b := c.client(t, keyB)
	annotate := func(v string) {
		t.Helper()
		var ns corev1.Namespace
		if err := c.k.Client.Get(ctx, kclient.ObjectKey{Name: "team-a"}, &ns); err != nil {
			t.Fatal(err)
		}
		if ns.Annotations == nil {
			ns.Annotations = map[string]string{}
		}
		ns.Annotations[gateway.AnnotationMaxSandboxes] = v
		if err := c.k.Client.Update(ctx, &ns); err != nil {
			t.Fatal(err)
		}
	}
	c.put(t, &v1alpha1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Name: "tmpl"}, Spec: v1alpha1.SandboxTemplateSpec{SandboxBody: sleeper}})
	c.put(t, &v1alpha1.SandboxWarmPool{ObjectMeta: metav1.ObjectMeta{Name: "warm"}, Spec: v1alpha1.SandboxWarmPoolSpec{Replicas: 1, SandboxTemplateRef: &v1alpha1.LocalRef{Name: "tmpl"}}})
	c.pooled(t, "warm", 1)
	annotate("2")

	base := sandbox.CreateOptions{Image: sandbox.DefaultImage, Start: true}
	first, err := a.Create(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Create(ctx, base); err != nil {
		t.Fatalf("the second of two: %v", err)
	}
	refused := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, errdefs.ErrQuota) {
			t.Fatalf("%s over the cap: %v, want a quota error", what, err)
		}
	}
	_, err = a.Create(ctx, base)
	refused("a native create", err)
	_, err = a.Fork(ctx, first.ID, sandbox.ForkOptions{N: 1})
	refused("a fork", err)
	var snaps v1alpha1.SandboxSnapshotList
	if err := c.k.Client.List(ctx, &snaps, kclient.InNamespace("team-a")); err != nil || len(snaps.Items) != 0 {
		t.Fatalf("a fork over the cap checkpointed: %v %d", err, len(snaps.Items))
	}
	_, err = a.Create(ctx, sandbox.CreateOptions{Pool: "warm", Start: true})
	refused("a native claim", err)
	for _, body := range []string{`{"templateID":"base"}`, `{"templateID":"warm"}`} {
		if code := call(t, "POST", c.URL+"/sandboxes", keyA, body, nil); code != http.StatusTooManyRequests {
			t.Fatalf("E2B create %s over the cap: %d, want 429", body, code)
		}
	}
	if _, err := b.Create(ctx, base); err != nil {
		t.Fatalf("team-b, not capped: %v", err)
	}
	var objs v1alpha1.SandboxList
	if err := c.k.Client.List(ctx, &objs, kclient.InNamespace("team-a"), kclient.MatchingLabels{v1alpha1.LabelPool: "warm"}); err != nil || len(objs.Items) != 1 {
		t.Fatalf("the pool's sandbox: %v %d", err, len(objs.Items))
	}

	// One removed: a claim fits again.
	if err := a.Remove(ctx, first.ID, true); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Create(ctx, sandbox.CreateOptions{Pool: "warm", Start: true}); err != nil {
		t.Fatalf("a claim under the cap: %v", err)
	}
	_, err = a.Create(ctx, base)
	refused("a create after the claim", err)

	annotate("lots")
	if _, err := a.Create(ctx, base); err == nil || !strings.Contains(err.Error(), "not a count") {
		t.Fatalf("a cap that is not a count: %v", err)
	}
}
