package controller

import (
	"context"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	kubeapi "smolvm.dev/smolvm/kube/api"
)

// Condition reasons of a SandboxWarmPool.
const (
	ReasonFilled      = "Filled"
	ReasonFilling     = "Filling"
	ReasonUnsupported = "Unsupported"
)

// pools keeps each SandboxWarmPool's Sandboxes: that many objects of its
// template, labelled kubeapi.LabelPool and owned by the pool, which the
// binder spreads over the nodes like any other. A claim (the gateway's)
// takes one by removing its label and owner, and the pool makes another.
type pools struct {
	c client.Client
}

func (p *pools) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var pool kubeapi.SandboxWarmPool
	if err := p.c.Get(ctx, req.NamespacedName, &pool); err != nil {
		// Deleted: its Sandboxes go with it (owner references).
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !pool.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	if pool.Spec.Hot {
		// Paused copies of a checkpoint per node need the snapshot on
		// each: not done yet, and said rather than filled cold.
		return ctrl.Result{}, p.setCondition(ctx, &pool, pool.Status.ReadyReplicas, metav1.ConditionFalse, ReasonUnsupported, "hot pools are not kept on Kubernetes yet; set hot: false")
	}
	var list kubeapi.SandboxList
	if err := p.c.List(ctx, &list, client.InNamespace(pool.Namespace), client.MatchingLabels{kubeapi.LabelPool: pool.Name}); err != nil {
		return ctrl.Result{}, err
	}
	var keep []*kubeapi.Sandbox
	ready := int32(0)
	for i := range list.Items {
		sb := &list.Items[i]
		if !sb.DeletionTimestamp.IsZero() || !metav1.IsControlledBy(sb, &pool) {
			continue
		}
		switch sb.Status.Phase {
		case kubeapi.PhaseFailed, kubeapi.PhaseLost, kubeapi.PhaseStopped:
			// Never claimable: replaced.
			if err := p.c.Delete(ctx, sb); client.IgnoreNotFound(err) != nil {
				return ctrl.Result{}, err
			}
			continue
		case kubeapi.PhaseRunning:
			ready++
		}
		keep = append(keep, sb)
	}
	want := int(pool.Spec.Replicas)
	for range max(0, want-len(keep)) {
		sb := &kubeapi.Sandbox{
			ObjectMeta: metav1.ObjectMeta{Namespace: pool.Namespace, GenerateName: pool.Name + "-", Labels: map[string]string{kubeapi.LabelPool: pool.Name}},
			Spec:       kubeapi.SandboxSpec{SandboxTemplateRef: &pool.Spec.SandboxTemplateRef},
		}
		if err := controllerutil.SetControllerReference(&pool, sb, p.c.Scheme()); err != nil {
			return ctrl.Result{}, err
		}
		if err := p.c.Create(ctx, sb); err != nil {
			return ctrl.Result{}, fmt.Errorf("pool %s/%s: %w", pool.Namespace, pool.Name, err)
		}
	}
	if extra := len(keep) - want; extra > 0 {
		// The ones not ready yet go first.
		slices.SortStableFunc(keep, func(a, b *kubeapi.Sandbox) int {
			return boolInt(a.Status.Phase == kubeapi.PhaseRunning) - boolInt(b.Status.Phase == kubeapi.PhaseRunning)
		})
		for _, sb := range keep[:extra] {
			if err := p.c.Delete(ctx, sb); client.IgnoreNotFound(err) != nil {
				return ctrl.Result{}, err
			}
			if sb.Status.Phase == kubeapi.PhaseRunning {
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
func (p *pools) setCondition(ctx context.Context, pool *kubeapi.SandboxWarmPool, ready int32, status metav1.ConditionStatus, reason, msg string) error {
	st := *pool.Status.DeepCopy()
	st.ReadyReplicas = ready
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: kubeapi.ConditionReady, Status: status, Reason: reason, Message: msg, ObservedGeneration: pool.Generation})
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
