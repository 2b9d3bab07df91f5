package api_test

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	kubeapi "smolvm.dev/smolvm/kube/api"
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
		kubeapi.AnnotationEndpoint: "http://10.0.0.1:7070", kubeapi.AnnotationBackends: "gvisor,vm",
		kubeapi.AnnotationCPUs: "8", kubeapi.AnnotationMemory: "34359738368", kubeapi.AnnotationSandboxes: "3",
	}
	n, ok := kubeapi.NodeFromLease(lease(kubeapi.LeasePrefix+"a", full))
	if !ok || n.Name != "a" || n.Endpoint != "http://10.0.0.1:7070" || n.CPUs != 8 || n.Memory != 32<<30 || n.Sandboxes != 3 ||
		!n.Expires.Equal(renewed.Add(40*time.Second)) || !n.Offers("vm") || !n.Offers("") || n.Offers("kata") {
		t.Errorf("node a: %+v, %v", n, ok)
	}
	for name, l := range map[string]*coordinationv1.Lease{
		"another lease":  lease("kube-scheduler", full),
		"no node name":   lease(kubeapi.LeasePrefix, full),
		"no memory":      lease(kubeapi.LeasePrefix+"a", map[string]string{kubeapi.AnnotationBackends: "gvisor"}),
		"bad memory":     lease(kubeapi.LeasePrefix+"a", map[string]string{kubeapi.AnnotationMemory: "lots"}),
		"never renewed":  {ObjectMeta: metav1.ObjectMeta{Name: kubeapi.LeasePrefix + "a", Annotations: full}},
		"no memory left": lease(kubeapi.LeasePrefix+"a", map[string]string{kubeapi.AnnotationMemory: "0"}),
	} {
		if n, ok := kubeapi.NodeFromLease(l); ok {
			t.Errorf("%s: read as node %+v", name, n)
		}
	}
}
