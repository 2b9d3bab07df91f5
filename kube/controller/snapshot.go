package controller

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"smolvm.dev/smolvm/kube/api/v1alpha1"
)

// snapshots binds each SandboxSnapshot that names no node to its
// sandbox's node: only that node's daemon watches it (spec.nodeName is
// its field selector), and only that node holds the memory to
// checkpoint. The gateway names the node itself; a snapshot made with
// kubectl (only sandboxRef, as docs/kube.md shows) would otherwise never
// be taken. The Scheduled condition says why one is not bound yet.
type snapshots struct{ *Binder }

func (r *snapshots) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var snap v1alpha1.SandboxSnapshot
	if err := r.c.Get(ctx, req.NamespacedName, &snap); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	// Bound already (the node's from then on), being deleted, or failed
	// for good.
	if snap.Spec.NodeName != "" || snap.DeletionTimestamp != nil || snap.Status.Phase == v1alpha1.SnapshotFailed {
		return reconcile.Result{}, nil
	}
	nodes, err := r.nodes(ctx)
	if err != nil {
		return reconcile.Result{}, err
	}
	node, reason, msg, err := r.besideSandbox(ctx, snap.Namespace, snap.Spec.SandboxRef.Name, liveNodes(nodes))
	if err != nil {
		return reconcile.Result{}, err
	}
	if node == "" {
		phase := v1alpha1.SnapshotPending
		if reason == ReasonSourceLost {
			phase = v1alpha1.SnapshotFailed // the memory went with the node
		}
		return reconcile.Result{RequeueAfter: retry}, r.setSnapshotStatus(ctx, &snap, phase, metav1.ConditionFalse, reason, msg)
	}
	patch := client.MergeFrom(snap.DeepCopy())
	snap.Spec.NodeName = node
	if err := r.c.Patch(ctx, &snap, patch); err != nil {
		return reconcile.Result{}, fmt.Errorf("bind snapshot %s/%s to %s: %w", snap.Namespace, snap.Name, node, err)
	}
	r.o.Log.Info("bound", "snapshot", req.NamespacedName, "node", node)
	msg = fmt.Sprintf("on the node of sandbox %s", snap.Spec.SandboxRef.Name)
	return reconcile.Result{}, r.setSnapshotStatus(ctx, &snap, "", metav1.ConditionTrue, ReasonBound, msg)
}

// setSnapshotStatus sets snap's phase (unless empty) and its Scheduled
// condition, beside the node's Ready.
func (r *snapshots) setSnapshotStatus(ctx context.Context, snap *v1alpha1.SandboxSnapshot, phase v1alpha1.SnapshotPhase, st metav1.ConditionStatus, reason, msg string) error {
	return r.patchStatus(ctx, snap, func() {
		if phase != "" {
			snap.Status.Phase = phase
		}
		meta.SetStatusCondition(&snap.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionScheduled, Status: st, Reason: reason, Message: msg, ObservedGeneration: snap.Generation})
	})
}

// snapshotsOf are the unbound snapshots of sandbox obj: its bind, or its
// node's loss, decides theirs.
func (b *Binder) snapshotsOf(ctx context.Context, obj client.Object) []reconcile.Request {
	var list v1alpha1.SandboxSnapshotList
	if err := b.c.List(ctx, &list, client.InNamespace(obj.GetNamespace())); err != nil {
		b.o.Log.Warn("list snapshots", "namespace", obj.GetNamespace(), "err", err)
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		s := &list.Items[i]
		if s.Spec.NodeName == "" && s.Spec.SandboxRef.Name == obj.GetName() {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(s)})
		}
	}
	return out
}
