package controller

import (
	"context"
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"smolvm.dev/smolvm/kube/api/v1alpha1"
)

// Condition reasons of a SandboxWarmPool.
const (
	ReasonFilled             = "Filled"
	ReasonFilling            = "Filling"
	ReasonWaitingForSnapshot = "WaitingForSnapshot"
)

// pools keeps each SandboxWarmPool's Sandboxes: that many objects of its
// template or restores of its snapshot (paused when hot), labelled
// v1alpha1.LabelPool and owned by the pool, which the binder places like
// any other (a restore beside the snapshot, or where it is copied). A
// claim (the gateway's) takes one by removing its label and owner, and
// the pool makes another.
type pools struct {
	c client.Client
}

func (p *pools) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var pool v1alpha1.SandboxWarmPool
	if err := p.c.Get(ctx, req.NamespacedName, &pool); err != nil {
		// Deleted: its Sandboxes go with it (owner references).
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !pool.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	if ref := pool.Spec.SandboxSnapshotRef; ref != nil {
		// Restores of a snapshot that is not there would fail and be
		// made again, over and over: wait for it instead.
		var snap v1alpha1.SandboxSnapshot
		err := p.c.Get(ctx, client.ObjectKey{Namespace: pool.Namespace, Name: ref.Name}, &snap)
		if client.IgnoreNotFound(err) != nil {
			return ctrl.Result{}, err
		}
		if err != nil || snap.Status.Phase != v1alpha1.SnapshotReady {
			msg := fmt.Sprintf("snapshot %s is not there", ref.Name)
			if err == nil {
				msg = fmt.Sprintf("snapshot %s is %s", ref.Name, snap.NotReady())
			}
			return ctrl.Result{RequeueAfter: 2 * time.Second}, p.setCondition(ctx, &pool, pool.Status.ReadyReplicas, metav1.ConditionFalse, ReasonWaitingForSnapshot, msg)
		}
	}
	var list v1alpha1.SandboxList
	if err := p.c.List(ctx, &list, client.InNamespace(pool.Namespace), client.MatchingLabels{v1alpha1.LabelPool: pool.Name}); err != nil {
		return ctrl.Result{}, err
	}
	var keep []*v1alpha1.Sandbox
	ready := int32(0)
	for i := range list.Items {
		sb := &list.Items[i]
		if !sb.DeletionTimestamp.IsZero() || !metav1.IsControlledBy(sb, &pool) {
			continue
		}
		switch sb.Status.Phase {
		case v1alpha1.PhaseFailed, v1alpha1.PhaseLost, v1alpha1.PhaseStopped:
			// Never claimable: replaced.
			if err := p.c.Delete(ctx, sb); client.IgnoreNotFound(err) != nil {
				return ctrl.Result{}, err
			}
			continue
		case pool.Spec.Ready():
			ready++
		}
		keep = append(keep, sb)
	}
	want := int(pool.Spec.Replicas)
	for range max(0, want-len(keep)) {
		sb := &v1alpha1.Sandbox{
			ObjectMeta: metav1.ObjectMeta{Namespace: pool.Namespace, GenerateName: pool.Name + "-", Labels: map[string]string{v1alpha1.LabelPool: pool.Name}},
			Spec:       pool.Spec.Member(),
		}
		sb.Spec.Paused = pool.Spec.Hot
		if err := controllerutil.SetControllerReference(&pool, sb, p.c.Scheme()); err != nil {
			return ctrl.Result{}, err
		}
		if err := p.c.Create(ctx, sb); err != nil {
			return ctrl.Result{}, fmt.Errorf("pool %s/%s: %w", pool.Namespace, pool.Name, err)
		}
	}
	if extra := len(keep) - want; extra > 0 {
		// The ones not ready yet go first.
		slices.SortStableFunc(keep, func(a, b *v1alpha1.Sandbox) int {
			return boolInt(a.Status.Phase == pool.Spec.Ready()) - boolInt(b.Status.Phase == pool.Spec.Ready())
		})
		for _, sb := range keep[:extra] {
			if err := p.c.Delete(ctx, sb); client.IgnoreNotFound(err) != nil {
				return ctrl.Result{}, err
			}
			if sb.Status.Phase == pool.Spec.Ready() {
				ready--
			}
		}
	}
	ready = min(ready, pool.Spec.Replicas)
	msg := fmt.Sprintf("%d of %d ready", ready, pool.Spec.Replicas)
	if ready < pool.Spec.Replicas {
		return ctrl.Result{}, p.setCondition(ctx, &pool, ready, metav1.ConditionFalse, ReasonFilling, msg)
	}
	return ctrl.Result{}, p.setCondition(ctx, &pool, ready, metav1.ConditionTrue, ReasonFilled, msg)
}

// setCondition writes the pool's ready count and Ready condition; a
// conflict is left to the next reconcile, which the change behind it
// brings.
func (p *pools) setCondition(ctx context.Context, pool *v1alpha1.SandboxWarmPool, ready int32, status metav1.ConditionStatus, reason, msg string) error {
	st := *pool.Status.DeepCopy()
	st.ReadyReplicas = ready
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: v1alpha1.ConditionReady, Status: status, Reason: reason, Message: msg, ObservedGeneration: pool.Generation})
	if equality.Semantic.DeepEqual(pool.Status, st) {
		return nil
	}
	pool.Status = st
	if err := p.c.Status().Update(ctx, pool); err != nil && !apierrors.IsConflict(err) {
		return fmt.Errorf("pool %s/%s status: %w", pool.Namespace, pool.Name, err)
	}
	return nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
