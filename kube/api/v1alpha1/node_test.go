package v1alpha1_test

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"smolvm.dev/smolvm/kube/api/v1alpha1"
)

// TestNodeFromLease: a node's Lease reads back as what it offers; a
// Lease of another kind, or one that says too little, is not a node.
func TestNodeFromLease(t *testing.T) {
	renewed := time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC)
	lease := func(name string, ann map[string]string) *coordinationv1.Lease {
		return &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: ann},
			Spec:       coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: renewed}, LeaseDurationSeconds: ptr.To[int32](40)},
		}
	}
	full := map[string]string{
		v1alpha1.AnnotationEndpoint: "http://10.0.0.1:7070", v1alpha1.AnnotationBackends: "gvisor,vm",
		v1alpha1.AnnotationCPUs: "8", v1alpha1.AnnotationMemory: "34359738368", v1alpha1.AnnotationSandboxes: "3",
	}
	n, ok := v1alpha1.NodeFromLease(lease(v1alpha1.LeasePrefix+"a", full))
	if !ok || n.Name != "a" || n.Endpoint != "http://10.0.0.1:7070" || n.CPUs != 8 || n.Memory != 32<<30 || n.Sandboxes != 3 ||
		!n.Expires.Equal(renewed.Add(40*time.Second)) || !n.Offers("vm") || !n.Offers("") || n.Offers("kata") {
		t.Errorf("node a: %+v, %v", n, ok)
	}
	for name, l := range map[string]*coordinationv1.Lease{
		"another lease":  lease("kube-scheduler", full),
		"no node name":   lease(v1alpha1.LeasePrefix, full),
		"no memory":      lease(v1alpha1.LeasePrefix+"a", map[string]string{v1alpha1.AnnotationBackends: "gvisor"}),
		"bad memory":     lease(v1alpha1.LeasePrefix+"a", map[string]string{v1alpha1.AnnotationMemory: "lots"}),
		"never renewed":  {ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.LeasePrefix + "a", Annotations: full}},
		"no memory left": lease(v1alpha1.LeasePrefix+"a", map[string]string{v1alpha1.AnnotationMemory: "0"}),
	} {
		if n, ok := v1alpha1.NodeFromLease(l); ok {
			t.Errorf("%s: read as node %+v", name, n)
		}
	}
}
