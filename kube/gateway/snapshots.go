package gateway

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kclient "sigs.k8s.io/controller-runtime/pkg/client"

	"smolvm.dev/smolvm/kube/api/v1alpha1"
)

// Snapshots made through the gateway (E2B's createSnapshot, the native
// checkpoint) are SandboxSnapshots. Unlike a fork's, they are not owned by
// their sandbox: they outlive it, until deleted. Clients know them by the
// smolvm snapshot's ID, the same on every node that holds a copy, or by
// the object's name.

// indexSnapshotID indexes SandboxSnapshots by their smolvm IDs.
const indexSnapshotID = "status.id"

func indexSnapshots(o kclient.Object) []string {
	if id := o.(*v1alpha1.SandboxSnapshot).Status.ID; id != "" {
		return []string{id}
	}
	return nil
}

// checkpoint makes a SandboxSnapshot of src named name (generated when
// ""), and returns it once its node saved it.
func (g *Gateway) checkpoint(ctx context.Context, src *v1alpha1.Sandbox, name string) (*v1alpha1.SandboxSnapshot, error) {
	switch {
	case len(src.Status.Instances) != 1:
		return nil, &phaseError{http.StatusConflict, fmt.Sprintf("the sandbox is one of %d copies of Sandbox %s/%s: make a SandboxSnapshot of a single sandbox", len(src.Status.Instances), src.Namespace, src.Name)}
	case src.Status.Phase != v1alpha1.PhaseRunning:
		return nil, &phaseError{http.StatusConflict, fmt.Sprintf("sandbox %s is %s: only a running sandbox is checkpointed", src.Status.Instances[0].ID, orPending(src.Status.Phase))}
	}
	snap := &v1alpha1.SandboxSnapshot{
		ObjectMeta: metav1.ObjectMeta{Namespace: src.Namespace, Name: name},
		Spec:       v1alpha1.SandboxSnapshotSpec{SandboxRef: v1alpha1.LocalRef{Name: src.Name}, NodeName: src.Spec.NodeName},
	}
	if name == "" {
		snap.GenerateName = src.Name + "-snap-"
	}
	if err := g.cfg.Kube.Create(ctx, snap); err != nil {
		return nil, fmt.Errorf("name: %w", err)
	}
	return g.waitSnapshot(ctx, kclient.ObjectKeyFromObject(snap))
}

// snapshots returns the namespace's saved snapshots, oldest first; a
// fork's (owned by its source) are its own business and left out.
func (g *Gateway) snapshots(ctx context.Context, ns string) ([]*v1alpha1.SandboxSnapshot, error) {
	var list v1alpha1.SandboxSnapshotList
	if err := g.cfg.Kube.List(ctx, &list, kclient.InNamespace(ns)); err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	var out []*v1alpha1.SandboxSnapshot
	for i := range list.Items {
		s := &list.Items[i]
		owned := slices.ContainsFunc(s.OwnerReferences, func(o metav1.OwnerReference) bool { return o.Kind == "Sandbox" })
		if s.Status.Phase == v1alpha1.SnapshotReady && !owned && s.Spec.TemplateRef == nil { // a template's is its own business too
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b *v1alpha1.SandboxSnapshot) int {
		return cmp.Or(a.CreationTimestamp.Compare(b.CreationTimestamp.Time), cmp.Compare(a.Name, b.Name))
	})
	return out, nil
}

// snapshot finds the SandboxSnapshot ref names in ns: by its smolvm ID
// or by its name.
func (g *Gateway) snapshot(ctx context.Context, ns, ref string) (*v1alpha1.SandboxSnapshot, error) {
	var list v1alpha1.SandboxSnapshotList
	if err := g.cfg.Kube.List(ctx, &list, kclient.InNamespace(ns), kclient.MatchingFields{indexSnapshotID: ref}); err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", ref, err)
	}
	if len(list.Items) > 0 {
		return &list.Items[0], nil
	}
	var s v1alpha1.SandboxSnapshot
	switch err := g.cfg.Kube.Get(ctx, kclient.ObjectKey{Namespace: ns, Name: ref}, &s); {
	case err == nil:
		return &s, nil
	case apierrors.IsNotFound(err), apierrors.IsInvalid(err):
		return nil, fmt.Errorf("snapshot %q: %w", ref, errNotFound)
	default:
		return nil, fmt.Errorf("snapshot %s: %w", ref, err)
	}
}

// deleteSnapshot deletes s once no Sandbox restores from it (409 while
// one does, as on a single smolvm serve), and waits until its node
// removed it.
func (g *Gateway) deleteSnapshot(ctx context.Context, s *v1alpha1.SandboxSnapshot) error {
	if t := s.Spec.TemplateRef; t != nil {
		return &phaseError{http.StatusConflict, fmt.Sprintf("snapshot %s is the started state of template %s: remove the template", s.Name, t.Name)}
	}
	switch user, err := g.snapshotUser(ctx, s); {
	case err == nil:
		return &phaseError{http.StatusConflict, fmt.Sprintf("snapshot %s is in use: Sandbox %s was restored from it", s.Name, user)}
	case !errors.Is(err, errNotFound):
		return err
	}
	if err := g.cfg.Kube.Delete(ctx, s); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete snapshot %s: %w", s.Name, err)
	}
	return g.waitGone(ctx, s)
}

// snapshotUser is the name of a Sandbox restored from s, or errNotFound.
func (g *Gateway) snapshotUser(ctx context.Context, s *v1alpha1.SandboxSnapshot) (string, error) {
	var list v1alpha1.SandboxList
	if err := g.cfg.Kube.List(ctx, &list, kclient.InNamespace(s.Namespace)); err != nil {
		return "", fmt.Errorf("list sandboxes: %w", err)
	}
	for _, sb := range list.Items {
		if f := sb.Spec.ForkFrom; f != nil && f.Snapshot == s.Name {
			return sb.Name, nil
		}
	}
	return "", fmt.Errorf("snapshot %s: no user: %w", s.Name, errNotFound)
}

// restoreSpec is a Sandbox restoring s: the copy keeps the snapshot's
// environment, network and (for ttl 0) time to live, as on a single
// smolvm serve; labels, when not nil, replace the snapshot's.
func restoreSpec(s *v1alpha1.SandboxSnapshot, labels map[string]string, ttl time.Duration) v1alpha1.SandboxSpec {
	spec := v1alpha1.SandboxSpec{ForkFrom: &v1alpha1.ForkFrom{Snapshot: s.Name, Count: 1}, Labels: labels}
	if ttl > 0 {
		spec.TTLSeconds = ptr.To(int64(ttl / time.Second))
	}
	return spec
}
