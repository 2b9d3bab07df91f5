package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	ctrl "sigs.k8s.io/controller-runtime"
	kclient "sigs.k8s.io/controller-runtime/pkg/client"

	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/kube/api/v1alpha1"
	"smolvm.dev/smolvm/sandbox"
)

// snapshots reconciles this node's SandboxSnapshots: a checkpoint of the
// Sandbox each names, taken once.
type snapshots struct{ *daemon }

func (r *snapshots) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return quiet(r.reconcile(ctx, req))
}

func (r *snapshots) reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var snap v1alpha1.SandboxSnapshot
	nodeName := func() string { return snap.Spec.NodeName }
	if res, done, err := r.admit(ctx, req, &snap, nodeName, func() error { return r.remove(ctx, &snap) }); done {
		return res, err
	}
	if snap.Status.Phase == v1alpha1.SnapshotReady || snap.Status.Phase == v1alpha1.SnapshotFailed {
		return ctrl.Result{}, nil
	}
	s, err := r.checkpoint(ctx, &snap)
	if reason, ok := transient(err); ok {
		return ctrl.Result{RequeueAfter: time.Second}, r.setStatus(ctx, &snap, nil, v1alpha1.SnapshotPending, reason, err.Error())
	}
	if err != nil {
		return ctrl.Result{}, r.setStatus(ctx, &snap, nil, v1alpha1.SnapshotFailed, "CheckpointFailed", err.Error())
	}
	return ctrl.Result{}, r.setStatus(ctx, &snap, s, v1alpha1.SnapshotReady, "Saved", "")
}

// snapshotName keys the smolvm snapshot by the object's UID, as sandboxes are.
func snapshotName(snap *v1alpha1.SandboxSnapshot) string { return "k-" + string(snap.UID) }

// checkpoint returns the object's smolvm snapshot, taking it unless a
// daemon before a restart already did.
func (r *snapshots) checkpoint(ctx context.Context, snap *v1alpha1.SandboxSnapshot) (*sandbox.Snapshot, error) {
	all, err := r.Smolvm.Snapshots(ctx)
	if err != nil {
		return nil, fmt.Errorf("list snapshots for %s: %w", key(snap), err)
	}
	for i := range all {
		if slices.Contains(all[i].Names, snapshotName(snap)) {
			return &all[i], nil
		}
	}
	if snap.Spec.TemplateRef != nil {
		return r.startedState(ctx, snap, all)
	}
	var src v1alpha1.Sandbox
	if err := r.direct.Get(ctx, kclient.ObjectKey{Namespace: snap.Namespace, Name: snap.Spec.SandboxRef.Name}, &src); err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", snap.Spec.SandboxRef.Name, err)
	}
	if src.Spec.NodeName != r.Node {
		return nil, fmt.Errorf("sandbox %s is on node %q, not %s", src.Name, src.Spec.NodeName, r.Node)
	}
	if src.Status.Phase != v1alpha1.PhaseRunning || len(src.Status.Instances) == 0 {
		return nil, &waiting{"WaitingForSandbox", fmt.Sprintf("sandbox %s is %s", src.Name, orPending(src.Status.Phase))}
	}
	// The snapshot is the sandbox's tenant's.
	smolvm, err := r.as(ctx, src.Spec.Tenant)
	if err != nil {
		return nil, err
	}
	s, err := smolvm.Checkpoint(ctx, src.Status.Instances[0].ID, sandbox.CheckpointOptions{Name: snapshotName(snap)})
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s for %s: %w", src.Name, key(snap), err)
	}
	return s, nil
}

// startedState is the checkpoint of the template the gateway builds on
// this node for snap (named as snap's smolvm snapshot would be, k-UID),
// among all, the node's snapshots. Until the build ends there is no such
// template, and the snapshot waits.
func (r *snapshots) startedState(ctx context.Context, snap *v1alpha1.SandboxSnapshot, all []sandbox.Snapshot) (*sandbox.Snapshot, error) {
	t, err := r.Smolvm.Template(ctx, snapshotName(snap))
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, &waiting{"WaitingForBuild", fmt.Sprintf("template %s is not built on %s yet", snap.Spec.TemplateRef.Name, r.Node)}
	}
	if err != nil {
		return nil, fmt.Errorf("template of %s: %w", key(snap), err)
	}
	for i := range all {
		if all[i].ID == t.Snapshot {
			return &all[i], nil
		}
	}
	return nil, fmt.Errorf("template %s built on %s has no started state (snapshot %q)", snap.Spec.TemplateRef.Name, r.Node, t.Snapshot)
}

func (r *snapshots) setStatus(ctx context.Context, snap *v1alpha1.SandboxSnapshot, s *sandbox.Snapshot, phase v1alpha1.SnapshotPhase, reason, msg string) error {
	st := *snap.Status.DeepCopy()
	st.Phase = phase
	if s != nil {
		ref, err := r.imageRef(ctx, s.ImageID)
		if err != nil {
			return err
		}
		st.ID, st.SandboxID, st.Tenant, st.SizeBytes, st.Nodes = s.ID, s.Lineage.Sandbox, s.Tenant, s.Size, []string{r.Node}
		st.Image, st.ImageID = ref, s.ImageID
	}
	setReady(&st.Conditions, s != nil, reason, msg, snap.Generation)
	if equality.Semantic.DeepEqual(snap.Status, st) {
		return nil
	}
	snap.Status = st
	return r.writeStatus(ctx, snap)
}

// remove removes the smolvm snapshot; a template's started state goes
// with the template built for it, which removes it unless sandboxes
// restored from it remain (then it stays, as on a single smolvm serve).
func (r *snapshots) remove(ctx context.Context, snap *v1alpha1.SandboxSnapshot) error {
	if snap.Spec.TemplateRef != nil {
		if err := r.Smolvm.RemoveTemplate(ctx, snapshotName(snap)); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			return fmt.Errorf("remove the template of %s: %w", key(snap), err)
		}
	}
	if err := r.Smolvm.RemoveSnapshot(ctx, snapshotName(snap)); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return fmt.Errorf("remove snapshot of %s: %w", key(snap), err)
	}
	return nil
}
