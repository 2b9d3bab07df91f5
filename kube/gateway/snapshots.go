package gateway

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kclient "sigs.k8s.io/controller-runtime/pkg/client"

	"smolvm.dev/smolvm/api"
	"smolvm.dev/smolvm/api/e2bapi"
	"smolvm.dev/smolvm/kube/api/v1alpha1"
	"smolvm.dev/smolvm/sandbox"
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
		if s.Status.Phase == v1alpha1.SnapshotReady && !owned {
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
	var list v1alpha1.SandboxList
	if err := g.cfg.Kube.List(ctx, &list, kclient.InNamespace(s.Namespace)); err != nil {
		return fmt.Errorf("list sandboxes: %w", err)
	}
	for _, sb := range list.Items {
		if f := sb.Spec.ForkFrom; f != nil && f.Snapshot == s.Name {
			return &phaseError{http.StatusConflict, fmt.Sprintf("snapshot %s is in use: Sandbox %s was restored from it", s.Name, sb.Name)}
		}
	}
	if err := g.cfg.Kube.Delete(ctx, s); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete snapshot %s: %w", s.Name, err)
	}
	return g.waitGone(ctx, s)
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

// e2bSnapshot answers createSnapshot.
func (g *Gateway) e2bSnapshot(w http.ResponseWriter, r *http.Request) {
	var req e2bapi.SnapshotRequest
	if err := decode(r, &req); err != nil {
		writeE2B(w, http.StatusBadRequest, err.Error())
		return
	}
	src, _, ok := g.e2bLookup(w, r)
	if !ok {
		return
	}
	s, err := g.checkpoint(r.Context(), src, req.Name)
	if err != nil {
		writeE2B(w, statusOf(err), err.Error())
		return
	}
	writeJSON(w, http.StatusCreated, e2bSnapshotJSON(s))
}

func e2bSnapshotJSON(s *v1alpha1.SandboxSnapshot) e2bapi.Snapshot {
	return e2bapi.Snapshot{SnapshotID: s.Status.ID, Names: []string{s.Name}}
}

// e2bSnapshots answers listSnapshots, filtered by the sandbox they were
// taken of and by name.
func (g *Gateway) e2bSnapshots(w http.ResponseWriter, r *http.Request) {
	f, err := e2bapi.ParseSnapshotFilter(r.URL.Query())
	if err != nil {
		writeE2B(w, http.StatusBadRequest, err.Error())
		return
	}
	all, err := g.snapshots(r.Context(), namespace(r))
	if err != nil {
		writeE2B(w, statusOf(err), err.Error())
		return
	}
	out := []e2bapi.Snapshot{}
	for _, s := range all {
		if f.Match(s.Status.SandboxID, []string{s.Name}) {
			out = append(out, e2bSnapshotJSON(s))
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// e2bDeleteTemplate answers deleteSnapshot (DELETE /templates/{id}).
func (g *Gateway) e2bDeleteTemplate(w http.ResponseWriter, r *http.Request) {
	s, err := g.snapshot(r.Context(), namespace(r), r.PathValue("template"))
	if err == nil {
		err = g.deleteSnapshot(r.Context(), s)
	}
	if err != nil {
		writeE2B(w, statusOf(err), err.Error())
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// nativeCheckpoint answers POST /v1/sandboxes/{id}/checkpoint; the
// sandbox keeps running.
func (g *Gateway) nativeCheckpoint(w http.ResponseWriter, r *http.Request) {
	var req api.CheckpointRequest
	if err := decode(r, &req); err != nil {
		writeNative(w, http.StatusBadRequest, api.CodeInvalid, err.Error())
		return
	}
	if req.Stop {
		writeNative(w, http.StatusBadRequest, api.CodeInvalid, "stop: not served by the cluster gateway; delete the sandbox after the checkpoint")
		return
	}
	src, _, ok := g.nativeLookup(w, r)
	if !ok {
		return
	}
	s, err := g.checkpoint(r.Context(), src, req.Name)
	if err != nil {
		writeNativeErr(w, err)
		return
	}
	g.nativeSnapshot(w, r, s, http.StatusCreated)
}

// nativeSnapshot answers with a holder node's record of s, as the
// cluster names it: the object's name, and its Sandbox's.
func (g *Gateway) nativeSnapshot(w http.ResponseWriter, r *http.Request, s *v1alpha1.SandboxSnapshot, status int) {
	var out sandbox.Snapshot
	err := errors.New("no live node holds it")
	for _, node := range s.Status.Nodes {
		var base *url.URL
		if base, err = g.nodeURL(r.Context(), node); err != nil {
			continue
		}
		var code int
		if code, err = g.fwd.call(r.Context(), "GET", base, "/v1/snapshots/"+url.PathEscape(s.Status.ID), nil, &out); err == nil && code != http.StatusOK {
			err = fmt.Errorf("node %s answered %d", node, code)
		}
		if err == nil {
			break
		}
	}
	if err != nil {
		writeNative(w, http.StatusBadGateway, api.CodeUnavailable, fmt.Sprintf("snapshot %s: %v", s.Name, err))
		return
	}
	out.Name, out.Names, out.Lineage.SandboxName = s.Name, []string{s.Name}, s.Spec.SandboxRef.Name
	writeJSON(w, status, out)
}

// nativeSnapshots answers GET /v1/snapshots from the objects: a record
// per snapshot without its files, which GET /v1/snapshots/{s} gives.
func (g *Gateway) nativeSnapshots(w http.ResponseWriter, r *http.Request) {
	all, err := g.snapshots(r.Context(), namespace(r))
	if err != nil {
		writeNativeErr(w, err)
		return
	}
	out := []sandbox.Snapshot{}
	for _, s := range all {
		out = append(out, sandbox.Snapshot{
			ID: s.Status.ID, Name: s.Name, Names: []string{s.Name}, Created: s.CreationTimestamp.Time, Size: s.Status.SizeBytes,
			Lineage: sandbox.Lineage{Sandbox: s.Status.SandboxID, SandboxName: s.Spec.SandboxRef.Name},
		})
	}
	writeJSON(w, http.StatusOK, out)
}

func (g *Gateway) nativeSnapshotLookup(w http.ResponseWriter, r *http.Request) (*v1alpha1.SandboxSnapshot, bool) {
	s, err := g.snapshot(r.Context(), namespace(r), r.PathValue("snapshot"))
	if err != nil {
		writeNativeErr(w, err)
		return nil, false
	}
	return s, true
}

func (g *Gateway) nativeGetSnapshot(w http.ResponseWriter, r *http.Request) {
	if s, ok := g.nativeSnapshotLookup(w, r); ok {
		g.nativeSnapshot(w, r, s, http.StatusOK)
	}
}

func (g *Gateway) nativeDeleteSnapshot(w http.ResponseWriter, r *http.Request) {
	s, ok := g.nativeSnapshotLookup(w, r)
	if !ok {
		return
	}
	if err := g.deleteSnapshot(r.Context(), s); err != nil {
		writeNativeErr(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// nativeRestore answers POST /v1/snapshots/{snapshot}/restore: a Sandbox
// restoring it, placed beside the snapshot or on a node that copies it.
func (g *Gateway) nativeRestore(w http.ResponseWriter, r *http.Request) {
	var req api.RestoreRequest
	if err := decode(r, &req); err != nil {
		writeNative(w, http.StatusBadRequest, api.CodeInvalid, err.Error())
		return
	}
	if req.TTL < 0 {
		writeNative(w, http.StatusBadRequest, api.CodeInvalid, "ttl: must not be negative")
		return
	}
	s, ok := g.nativeSnapshotLookup(w, r)
	if !ok {
		return
	}
	prefix := "sbx-"
	if req.Name != "" {
		prefix = ""
	}
	sb, err := g.create(r.Context(), s.Namespace, req.Name, prefix, restoreSpec(s, req.Labels, time.Duration(req.TTL)), nil)
	if err != nil {
		writeNativeErr(w, err)
		return
	}
	g.nativeGet(w, r, sb, sb.Status.Instances[0].ID, http.StatusCreated)
}
