package gateway

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kclient "sigs.k8s.io/controller-runtime/pkg/client"

	"smolvm.dev/smolvm/kube/api/v1alpha1"
)

// AnnotationClaimedFrom records on a claimed Sandbox the warm pool it
// came from.
const AnnotationClaimedFrom = "smolvm.dev/claimed-from"

// pool returns warm pool name in ns, or nil if there is none.
func (g *Gateway) pool(ctx context.Context, ns, name string) (*v1alpha1.SandboxWarmPool, error) {
	var p v1alpha1.SandboxWarmPool
	err := g.cfg.Kube.Get(ctx, kclient.ObjectKey{Namespace: ns, Name: name}, &p)
	if apierrors.IsNotFound(err) || apierrors.IsInvalid(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("warm pool %s: %w", name, err)
	}
	return &p, nil
}

// claim takes a ready Sandbox of pool: the first whose pool label and
// owner reference it removes, under the object's resourceVersion, so
// that two claims never take the same one; the pool then makes another.
// nil when none is ready.
func (g *Gateway) claim(ctx context.Context, pool *v1alpha1.SandboxWarmPool) (*v1alpha1.Sandbox, error) {
	// A claimed sandbox becomes the namespace's, and counts.
	done, err := g.admit(ctx, pool.Namespace)
	if err != nil {
		return nil, err
	}
	defer done()
	var list v1alpha1.SandboxList
	if err := g.cfg.Kube.List(ctx, &list, kclient.InNamespace(pool.Namespace), kclient.MatchingLabels{v1alpha1.LabelPool: pool.Name}); err != nil {
		return nil, fmt.Errorf("warm pool %s: %w", pool.Name, err)
	}
	for i := range list.Items {
		sb := &list.Items[i]
		if sb.Status.Phase != pool.Spec.Ready() || len(sb.Status.Instances) == 0 || !sb.DeletionTimestamp.IsZero() || !metav1.IsControlledBy(sb, pool) {
			continue
		}
		patch := kclient.MergeFromWithOptions(sb.DeepCopy(), kclient.MergeFromWithOptimisticLock{})
		delete(sb.Labels, v1alpha1.LabelPool)
		sb.OwnerReferences = nil
		sb.Spec.Paused = false // a hot one: its claimer resumes it now
		if sb.Annotations == nil {
			sb.Annotations = map[string]string{}
		}
		sb.Annotations[AnnotationClaimedFrom] = pool.Name
		switch err := g.cfg.Kube.Patch(ctx, sb, patch); {
		case err == nil:
			return sb, nil
		case apierrors.IsConflict(err), apierrors.IsNotFound(err):
			// Another claim (or the pool) got there first.
		default:
			return nil, fmt.Errorf("claim from warm pool %s: %w", pool.Name, err)
		}
	}
	return nil, nil
}
