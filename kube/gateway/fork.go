package gateway

import (
	"context"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kclient "sigs.k8s.io/controller-runtime/pkg/client"

	"smolvm.dev/smolvm/kube/api/v1alpha1"
)

// fork copies src n times through Kubernetes objects: one SandboxSnapshot
// of src (owned by it, so that it goes with it), then one Sandbox per copy
// restoring it, which the binder places beside the snapshot. Each copy is
// an object of its own, removed on its own. ttl is each copy's time to
// live (0: none), and annotations each copy's. It returns the copies in
// order; a copy that did not start is an error in its place.
func (g *Gateway) fork(ctx context.Context, src *v1alpha1.Sandbox, n int, prefix string, ttl time.Duration, annotations map[string]string) ([]*v1alpha1.Sandbox, []error, error) {
	if len(src.Status.Instances) != 1 || src.Status.Phase != v1alpha1.PhaseRunning {
		return nil, nil, &phaseError{409, fmt.Sprintf("sandbox %s is %s with %d sandboxes: a fork needs one running sandbox", src.Name, orPending(src.Status.Phase), len(src.Status.Instances))}
	}
	// Each copy is admitted as it is made; asked first too, so that a
	// fork over the cap checkpoints nothing.
	if err := g.checkQuota(ctx, src.Namespace, n); err != nil {
		return nil, nil, err
	}
	snap := &v1alpha1.SandboxSnapshot{
		ObjectMeta: metav1.ObjectMeta{Namespace: src.Namespace, GenerateName: src.Name + "-fork-"},
		Spec:       v1alpha1.SandboxSnapshotSpec{SandboxRef: v1alpha1.LocalRef{Name: src.Name}, NodeName: src.Spec.NodeName},
	}
	snap.OwnerReferences = []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "Sandbox", Name: src.Name, UID: src.UID}}
	if err := g.cfg.Kube.Create(ctx, snap); err != nil {
		return nil, nil, fmt.Errorf("fork %s: snapshot: %w", src.Name, err)
	}
	if _, err := g.waitSnapshot(ctx, kclient.ObjectKeyFromObject(snap)); err != nil {
		return nil, nil, fmt.Errorf("fork %s: %w", src.Name, err)
	}
	spec := v1alpha1.SandboxSpec{ForkFrom: &v1alpha1.ForkFrom{Snapshot: snap.Name, Count: 1}, TTLSeconds: ptr.To(int64(ttl / time.Second))}
	copies, errs := make([]*v1alpha1.Sandbox, n), make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { copies[i], errs[i] = g.create(ctx, src.Namespace, "", prefix, spec, annotations) })
	}
	wg.Wait()
	return copies, errs, nil
}

// waitSnapshot waits until the SandboxSnapshot key names is Ready, and
// returns it.
func (g *Gateway) waitSnapshot(ctx context.Context, key kclient.ObjectKey) (*v1alpha1.SandboxSnapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, g.cfg.Ready)
	defer cancel()
	t := time.NewTicker(poll)
	defer t.Stop()
	var s v1alpha1.SandboxSnapshot
	for {
		if err := g.cfg.Kube.Get(ctx, key, &s); err == nil {
			switch s.Status.Phase {
			case v1alpha1.SnapshotReady:
				return &s, nil
			case v1alpha1.SnapshotFailed:
				return nil, &phaseError{422, fmt.Sprintf("snapshot %s failed: %s", key.Name, condition(s.Status.Conditions, v1alpha1.ConditionReady))}
			}
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil, &phaseError{503, fmt.Sprintf("snapshot %s not Ready within %s: %s", key.Name, g.cfg.Ready, condition(s.Status.Conditions, v1alpha1.ConditionReady))}
		}
	}
}
