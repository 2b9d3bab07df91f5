package v1alpha1_test

import (
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"smolvm.dev/smolvm/kube/api/v1alpha1"
	"smolvm.dev/smolvm/kube/kubetest"
)

func sandbox(name string, spec v1alpha1.SandboxSpec) *v1alpha1.Sandbox {
	return &v1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: spec}
}

func image(node string) v1alpha1.SandboxSpec {
	return v1alpha1.SandboxSpec{SandboxBody: v1alpha1.SandboxBody{Image: "debian:13"}, NodeName: node}
}

// TestAPIServer installs deploy/crds into a real kube-apiserver: valid
// objects are stored, invalid ones refused with the schema's or the CEL
// rule's message, and a node's field-selected list and watch see only
// its own Sandboxes.
func TestAPIServer(t *testing.T) {
	k := kubetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := k.Client

	t.Run("valid", func(t *testing.T) {
		tmpl := &v1alpha1.SandboxTemplate{
			ObjectMeta: metav1.ObjectMeta{Name: "python", Namespace: "default"},
			Spec: v1alpha1.SandboxTemplateSpec{SandboxBody: v1alpha1.SandboxBody{
				Image: "python:3.13", Command: []string{"sleep", "infinity"}, Backend: "gvisor",
				Env:     []v1alpha1.EnvVar{{Name: "A", Value: "1"}},
				Network: &v1alpha1.NetworkPolicy{Mode: "egress", AllowHosts: []string{"pypi.org"}, AllowCIDRs: []string{"10.1.0.0/16"}, Ports: []int32{8080}},
			}},
		}
		objs := []client.Object{
			tmpl,
			sandbox("plain", v1alpha1.SandboxSpec{SandboxBody: v1alpha1.SandboxBody{Image: "debian:13"}, Tenant: "team-a", TTLSeconds: ptr.To[int64](0), Paused: true}),
			sandbox("from-template", v1alpha1.SandboxSpec{SandboxTemplateRef: &v1alpha1.LocalRef{Name: "python"}}),
			sandbox("fork", v1alpha1.SandboxSpec{ForkFrom: &v1alpha1.ForkFrom{Sandbox: "plain"}}),
			sandbox("restore", v1alpha1.SandboxSpec{ForkFrom: &v1alpha1.ForkFrom{Snapshot: "snap", Count: 64}}),
			&v1alpha1.SandboxWarmPool{
				ObjectMeta: metav1.ObjectMeta{Name: "python", Namespace: "default"},
				Spec:       v1alpha1.SandboxWarmPoolSpec{Replicas: 3, SandboxTemplateRef: &v1alpha1.LocalRef{Name: "python"}, Hot: true},
			},
			&v1alpha1.SandboxSnapshot{
				ObjectMeta: metav1.ObjectMeta{Name: "snap", Namespace: "default"},
				Spec:       v1alpha1.SandboxSnapshotSpec{SandboxRef: v1alpha1.LocalRef{Name: "plain"}},
			},
			&v1alpha1.SandboxSnapshot{
				ObjectMeta: metav1.ObjectMeta{Name: "started", Namespace: "default"},
				Spec:       v1alpha1.SandboxSnapshotSpec{TemplateRef: &v1alpha1.LocalRef{Name: "python"}, NodeName: "node-a"},
			},
		}
		for _, o := range objs {
			if err := c.Create(ctx, o); err != nil {
				t.Fatalf("create %T %s: %v", o, o.GetName(), err)
			}
		}
		var fork v1alpha1.Sandbox
		if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "fork"}, &fork); err != nil {
			t.Fatal(err)
		}
		if fork.Spec.ForkFrom.Count != 1 {
			t.Errorf("forkFrom.count defaulted to %d, want 1", fork.Spec.ForkFrom.Count)
		}
		fork.Status = v1alpha1.SandboxStatus{Phase: v1alpha1.PhaseRunning, NodeName: "n1", Instances: []v1alpha1.Instance{{ID: "abc", Endpoint: "http://n1/v1/sandboxes/abc"}}}
		if err := c.Status().Update(ctx, &fork); err != nil {
			t.Fatalf("status update: %v", err)
		}
		fork.Status.Phase = "Exploded"
		if err := c.Status().Update(ctx, &fork); !apierrors.IsInvalid(err) {
			t.Errorf("status phase Exploded: %v, want invalid", err)
		}
	})

	t.Run("invalid", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			obj  client.Object
			want string
		}{
			{"no image", sandbox("x", v1alpha1.SandboxSpec{}), "image is required unless the sandbox forks or names a template"},
			{"fork both", sandbox("x", v1alpha1.SandboxSpec{ForkFrom: &v1alpha1.ForkFrom{Sandbox: "a", Snapshot: "b"}}), "forkFrom names exactly one of sandbox or snapshot"},
			{"fork neither", sandbox("x", v1alpha1.SandboxSpec{ForkFrom: &v1alpha1.ForkFrom{Count: 2}}), "forkFrom names exactly one of sandbox or snapshot"},
			{"fork and template", sandbox("x", v1alpha1.SandboxSpec{ForkFrom: &v1alpha1.ForkFrom{Sandbox: "a"}, SandboxTemplateRef: &v1alpha1.LocalRef{Name: "python"}}), "a fork takes its body from its source, not from a template"},
			{"count high", sandbox("x", v1alpha1.SandboxSpec{ForkFrom: &v1alpha1.ForkFrom{Sandbox: "a", Count: 65}}), "spec.forkFrom.count: Invalid value: 65: spec.forkFrom.count in body should be less than or equal to 64"},
			{"count negative", sandbox("x", v1alpha1.SandboxSpec{ForkFrom: &v1alpha1.ForkFrom{Sandbox: "a", Count: -1}}), "should be greater than or equal to 1"},
			{"negative ttl", sandbox("x", v1alpha1.SandboxSpec{SandboxBody: v1alpha1.SandboxBody{Image: "debian:13"}, TTLSeconds: ptr.To[int64](-5)}), "spec.ttlSeconds in body should be greater than or equal to 0"},
			{"bad backend", sandbox("x", v1alpha1.SandboxSpec{SandboxBody: v1alpha1.SandboxBody{Image: "debian:13", Backend: "docker"}}), `Unsupported value: "docker"`},
			{"ports without network", sandbox("x", v1alpha1.SandboxSpec{SandboxBody: v1alpha1.SandboxBody{Image: "debian:13", Network: &v1alpha1.NetworkPolicy{Mode: "none", Ports: []int32{80}}}}), "allowHosts, allowCIDRs and ports need mode egress or full"},
			{"bad cidr", sandbox("x", v1alpha1.SandboxSpec{SandboxBody: v1alpha1.SandboxBody{Image: "debian:13", Network: &v1alpha1.NetworkPolicy{Mode: "egress", AllowCIDRs: []string{"10.0.0.300/8"}}}}), "allowCIDRs entries must be CIDRs"},
			{"bad tenant", sandbox("x", v1alpha1.SandboxSpec{SandboxBody: v1alpha1.SandboxBody{Image: "debian:13"}, Tenant: "../x"}), "spec.tenant in body should match"},
			{"template without image", &v1alpha1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "default"}}, "a template needs an image"},
			{"pool too big", &v1alpha1.SandboxWarmPool{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "default"}, Spec: v1alpha1.SandboxWarmPoolSpec{Replicas: 1001, SandboxTemplateRef: &v1alpha1.LocalRef{Name: "python"}}}, "should be less than or equal to 1000"},
			{"pool of nothing", &v1alpha1.SandboxWarmPool{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "default"}, Spec: v1alpha1.SandboxWarmPoolSpec{Replicas: 1}}, "a pool names exactly one of sandboxTemplateRef or sandboxSnapshotRef"},
			{"pool of both", &v1alpha1.SandboxWarmPool{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "default"}, Spec: v1alpha1.SandboxWarmPoolSpec{Replicas: 1, SandboxTemplateRef: &v1alpha1.LocalRef{Name: "python"}, SandboxSnapshotRef: &v1alpha1.LocalRef{Name: "s"}}}, "a pool names exactly one of sandboxTemplateRef or sandboxSnapshotRef"},
			{"snapshot of nothing", &v1alpha1.SandboxSnapshot{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "default"}}, "a snapshot names exactly one of sandboxRef or templateRef"},
			{"snapshot of both", &v1alpha1.SandboxSnapshot{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "default"}, Spec: v1alpha1.SandboxSnapshotSpec{SandboxRef: v1alpha1.LocalRef{Name: "plain"}, TemplateRef: &v1alpha1.LocalRef{Name: "python"}}}, "a snapshot names exactly one of sandboxRef or templateRef"},
		} {
			err := c.Create(ctx, tc.obj)
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: %v, want invalid with %q", tc.name, err, tc.want)
			}
		}
	})

	t.Run("immutable", func(t *testing.T) {
		sb := sandbox("bound", image("node-a"))
		if err := c.Create(ctx, sb); err != nil {
			t.Fatal(err)
		}
		sb.Spec.NodeName = "node-b"
		if err := c.Update(ctx, sb); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "nodeName cannot change once set") {
			t.Errorf("rebind: %v, want nodeName cannot change once set", err)
		}
		sb.Spec.NodeName = ""
		if err := c.Update(ctx, sb); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "nodeName cannot change once set") {
			t.Errorf("unbind: %v, want nodeName cannot change once set", err)
		}
		var fork v1alpha1.Sandbox
		if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "restore"}, &fork); err != nil {
			t.Fatal(err)
		}
		fork.Spec.ForkFrom.Count = 2
		if err := c.Update(ctx, &fork); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "forkFrom cannot change") {
			t.Errorf("change forkFrom: %v, want forkFrom cannot change", err)
		}
		fork.Spec.ForkFrom = nil
		fork.Spec.Image = "debian:13"
		if err := c.Update(ctx, &fork); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "forkFrom cannot change") {
			t.Errorf("drop forkFrom: %v, want forkFrom cannot change", err)
		}
		// Binding an unbound sandbox is allowed: that is the controller's job.
		var plain v1alpha1.Sandbox
		if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "plain"}, &plain); err != nil {
			t.Fatal(err)
		}
		plain.Spec.NodeName = "node-a"
		if err := c.Update(ctx, &plain); err != nil {
			t.Errorf("bind: %v", err)
		}
	})

	t.Run("node selection", func(t *testing.T) {
		ns := client.InNamespace("default")
		for _, n := range []string{"a1", "b1"} {
			if err := c.Create(ctx, sandbox("sel-"+n, image("node-"+n[:1]))); err != nil {
				t.Fatal(err)
			}
		}
		onA := client.MatchingFields{"spec.nodeName": "node-a"}
		var list v1alpha1.SandboxList
		if err := c.List(ctx, &list, ns, onA); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, s := range list.Items {
			if s.Spec.NodeName != "node-a" {
				t.Errorf("node-a's list has %s on %q", s.Name, s.Spec.NodeName)
			}
			names = append(names, s.Name)
		}
		if strings.Join(names, ",") != "bound,plain,sel-a1" {
			t.Errorf("node-a's list: %v, want bound, plain, sel-a1", names)
		}
		if err := c.List(ctx, &list, ns, client.MatchingFields{"spec.image": "debian:13"}); err == nil {
			t.Error("a field selector on spec.image, which is not selectable, was served")
		}

		wc, err := client.NewWithWatch(k.Config, client.Options{Scheme: k.Scheme})
		if err != nil {
			t.Fatal(err)
		}
		w, err := wc.Watch(ctx, &v1alpha1.SandboxList{}, ns, onA, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		// node-b's sandbox first: a watch that let it through would
		// deliver it before node-a's.
		for _, n := range []string{"b2", "a2"} {
			if err := c.Create(ctx, sandbox("sel-"+n, image("node-"+n[:1]))); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case ev := <-w.ResultChan():
			s, ok := ev.Object.(*v1alpha1.Sandbox)
			if ev.Type != watch.Added || !ok || s.Name != "sel-a2" {
				t.Errorf("node-a's watch saw %s %#v first, want sel-a2 added", ev.Type, ev.Object)
			}
		case <-ctx.Done():
			t.Fatal("node-a's watch saw nothing")
		}
	})
}
