package main

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	kclient "sigs.k8s.io/controller-runtime/pkg/client"

	"smolvm.dev/smolvm/kube/api/v1alpha1"
	"smolvm.dev/smolvm/kube/kubetest"
)

// TestStatus prints a real API server's nodes (one live, one gone),
// sandboxes by node and phase, a warm pool and a snapshot.
func TestStatus(t *testing.T) {
	cl := kubetest.Start(t)
	ctx := context.Background()
	const leaseNS = "smolvm-system"
	cl.Namespace(t, leaseNS)
	create := func(o kclient.Object) {
		t.Helper()
		if err := cl.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	for name, renewed := range map[string]time.Time{"n1": time.Now(), "n2": time.Now().Add(-2 * time.Hour)} {
		create(&coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: leaseNS, Name: v1alpha1.LeasePrefix + name, Annotations: map[string]string{
				v1alpha1.AnnotationEndpoint: "http://" + name + ":7070", v1alpha1.AnnotationBackends: "gvisor", v1alpha1.AnnotationMemory: fmt.Sprint(8 << 30),
			}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(name), LeaseDurationSeconds: ptr.To[int32](40), RenewTime: &metav1.MicroTime{Time: renewed}},
		})
	}
	for name, st := range map[string]struct {
		node  string
		phase v1alpha1.SandboxPhase
	}{"a": {"n1", v1alpha1.PhaseRunning}, "b": {"n1", v1alpha1.PhaseRunning}, "c": {"n2", v1alpha1.PhaseLost}, "d": {"", ""}} {
		sb := &v1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Spec: v1alpha1.SandboxSpec{SandboxBody: v1alpha1.SandboxBody{Image: "host"}, NodeName: st.node}}
		create(sb)
		if st.phase != "" {
			sb.Status.Phase = st.phase
			if err := cl.Client.Status().Update(ctx, sb); err != nil {
				t.Fatal(err)
			}
		}
	}
	create(&v1alpha1.SandboxWarmPool{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "warm"}, Spec: v1alpha1.SandboxWarmPoolSpec{Replicas: 3, SandboxTemplateRef: &v1alpha1.LocalRef{Name: "t"}}})
	snap := &v1alpha1.SandboxSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "snap"}, Spec: v1alpha1.SandboxSnapshotSpec{SandboxRef: v1alpha1.LocalRef{Name: "a"}, NodeName: "n1"}}
	create(snap)
	snap.Status = v1alpha1.SandboxSnapshotStatus{Phase: v1alpha1.SnapshotReady, Nodes: []string{"n1", "n2"}, SizeBytes: 3 << 20}
	if err := cl.Client.Status().Update(ctx, snap); err != nil {
		t.Fatal(err)
	}

	var out strings.Builder
	if err := status(ctx, cl.Config, leaseNS, &out); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", out.String())
	for _, want := range []string{
		`n1\s+live\s+http://n1:7070\s+gvisor\s+8\.0 GiB\s+2 Running\n`,
		`n2\s+gone 1h59m\S+\s.*1 Lost\n`,
		`\(unbound\)\s+-\s+1 Pending\n`,
		`default/warm\s+0/3\s+template t\n`,
		`default/snap\s+Ready\s+n1,n2\s+3\.0 MiB\n`,
	} {
		if !regexp.MustCompile(want).MatchString(out.String()) {
			t.Errorf("status lacks %s", want)
		}
	}
}

// TestScheme: the binaries' scheme knows every kind they read, the
// gateway's Namespaces (quota annotations) among them; a kind missing
// from it fails only in a real deployment, since tests use envtest's.
func TestScheme(t *testing.T) {
	s, err := newScheme()
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []k8sruntime.Object{&corev1.Namespace{}, &coordinationv1.Lease{}, &v1alpha1.Sandbox{}, &v1alpha1.SandboxSnapshot{}, &v1alpha1.SandboxWarmPool{}, &v1alpha1.SandboxTemplate{}} {
		if _, _, err := s.ObjectKinds(o); err != nil {
			t.Errorf("%T: %v", o, err)
		}
	}
}
