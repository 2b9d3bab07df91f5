package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	ctrl "sigs.k8s.io/controller-runtime"
	kclient "sigs.k8s.io/controller-runtime/pkg/client"

	"smolvm.dev/smolvm/client"
	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/kube/api/v1alpha1"
	"smolvm.dev/smolvm/sandbox"
)

// sandboxes reconciles this node's Sandboxes.
type sandboxes struct{ *daemon }

// waiting is a Sandbox that cannot be made yet (its fork source or
// snapshot is not ready); it is tried again shortly.
type waiting struct{ reason, msg string }

func (w *waiting) Error() string { return w.msg }

// transient reports whether err is worth trying again shortly, and why:
// a source not ready yet, one busy (another checkpoint), or a node short
// of something for now are no failure of the spec.
func transient(err error) (reason string, ok bool) {
	var w *waiting
	switch {
	case errors.As(err, &w):
		return w.reason, true
	case errors.Is(err, errdefs.ErrConflict) || errors.Is(err, errdefs.ErrUnavailable):
		return "Retrying", true
	}
	return "", false
}

// Names key the smolvm sandboxes by the object's UID, so that a daemon
// restarted mid-create finds what it made instead of making it twice:
// "k-UID", or "k-UID-1" … "k-UID-N" for a fork's or a restore's copies
// (smolvm's own fork naming).
func prefix(sb *v1alpha1.Sandbox) string { return "k-" + string(sb.UID) }

func instanceNames(sb *v1alpha1.Sandbox) []string {
	if sb.Spec.ForkFrom == nil {
		return []string{prefix(sb)}
	}
	n := max(int(sb.Spec.ForkFrom.Count), 1)
	names := make([]string, n)
	for i := range names {
		names[i] = prefix(sb) + "-" + strconv.Itoa(i+1)
	}
	return names
}

func (r *sandboxes) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return quiet(r.reconcile(ctx, req))
}

func (r *sandboxes) reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var sb v1alpha1.Sandbox
	nodeName := func() string { return sb.Spec.NodeName }
	if res, done, err := r.admit(ctx, req, &sb, nodeName, func() error { return r.remove(ctx, &sb) }); done {
		return res, err
	}
	have, missing, err := r.lookup(ctx, &sb)
	if err != nil {
		return ctrl.Result{}, err
	}
	switch {
	case len(missing) > 0 && wasMade(&sb):
		// It ran here and is gone (the node lost its state): report it,
		// never make it again empty under the same object.
		return ctrl.Result{}, r.lost(ctx, &sb, missing)
	case len(missing) > 0:
		made, err := r.make(ctx, &sb, missing)
		have = append(have, made...)
		if reason, ok := transient(err); ok {
			return ctrl.Result{RequeueAfter: time.Second}, r.setStatus(ctx, &sb, have, v1alpha1.PhasePending, reason, err.Error())
		}
		if err != nil {
			r.Log.Warn("make sandbox", "sandbox", key(&sb), "node", r.Node, "err", err)
			return ctrl.Result{RequeueAfter: r.Resync}, r.setStatus(ctx, &sb, have, v1alpha1.PhaseFailed, "CreateFailed", err.Error())
		}
	}
	for i, s := range have {
		now, err := r.pause(ctx, &sb, s)
		if err != nil {
			return ctrl.Result{}, r.setStatus(ctx, &sb, have, v1alpha1.PhaseFailed, "PauseFailed", err.Error())
		}
		have[i] = now
	}
	phase, reason := phaseOf(have)
	return ctrl.Result{RequeueAfter: r.Resync}, r.setStatus(ctx, &sb, have, phase, reason, "")
}

// wasMade reports whether the node made all of the object's sandboxes
// once (a failed restore of some copies was not).
func wasMade(sb *v1alpha1.Sandbox) bool {
	switch sb.Status.Phase {
	case v1alpha1.PhaseRunning, v1alpha1.PhasePaused, v1alpha1.PhaseStopped, v1alpha1.PhaseLost:
		return true
	}
	return false
}

// lost marks the object Lost, keeping the instances it had.
func (r *sandboxes) lost(ctx context.Context, sb *v1alpha1.Sandbox, missing []string) error {
	st := *sb.Status.DeepCopy()
	st.Phase = v1alpha1.PhaseLost
	setReady(&st.Conditions, false, "GoneFromNode", fmt.Sprintf("%s gone from node %s", strings.Join(missing, ", "), r.Node), sb.Generation)
	if equality.Semantic.DeepEqual(sb.Status, st) {
		return nil
	}
	sb.Status = st
	return r.writeStatus(ctx, sb)
}

// lookup finds the object's smolvm sandboxes by name.
func (r *sandboxes) lookup(ctx context.Context, sb *v1alpha1.Sandbox) (have []*sandbox.Sandbox, missing []string, err error) {
	for _, name := range instanceNames(sb) {
		s, err := r.Smolvm.Get(ctx, name)
		switch {
		case errors.Is(err, sandbox.ErrExpired):
			// Its time to live ended: the server answers with the error
			// only, which is of class NotFound, so this case comes first.
			have = append(have, &sandbox.Sandbox{ID: name, Name: name, State: sandbox.StateExpired, Reason: err.Error()})
		case errors.Is(err, errdefs.ErrNotFound):
			missing = append(missing, name)
		case err != nil:
			return nil, nil, fmt.Errorf("sandbox %s of %s: %w", name, key(sb), err)
		default:
			have = append(have, s)
		}
	}
	return have, missing, nil
}

// make creates the missing sandboxes: a fresh boot, a fork of a running
// Sandbox on this node, or restores of a snapshot this node holds.
func (r *sandboxes) make(ctx context.Context, sb *v1alpha1.Sandbox, missing []string) ([]*sandbox.Sandbox, error) {
	// The sandboxes are the tenant's, and so is what they come from: a
	// fork's source and a restore's snapshot of another tenant are not
	// found.
	smolvm, err := r.as(ctx, sb.Spec.Tenant)
	if err != nil {
		return nil, err
	}
	from := sb.Spec.ForkFrom
	switch {
	case from == nil:
		switch started, err := r.startedState(ctx, sb); {
		case err != nil:
			return nil, err
		case started != "":
			return r.restore(ctx, smolvm, sb, started, missing)
		}
		o, err := r.createOptions(ctx, sb, missing[0])
		if err != nil {
			return nil, err
		}
		if err := r.ensureImage(ctx, o.Image, ""); err != nil {
			return nil, err
		}
		s, err := smolvm.Create(ctx, o)
		if err != nil {
			return nil, err // "create: …": the log and the condition name the object
		}
		return []*sandbox.Sandbox{s}, nil
	case from.Sandbox != "":
		var src v1alpha1.Sandbox
		if err := r.direct.Get(ctx, kclient.ObjectKey{Namespace: sb.Namespace, Name: from.Sandbox}, &src); err != nil {
			return nil, fmt.Errorf("fork source %s: %w", from.Sandbox, err)
		}
		if src.Spec.NodeName != r.Node {
			return nil, fmt.Errorf("fork source %s is on node %q, not %s", from.Sandbox, src.Spec.NodeName, r.Node)
		}
		if src.Status.Phase != v1alpha1.PhaseRunning || len(src.Status.Instances) == 0 {
			return nil, &waiting{"WaitingForSource", fmt.Sprintf("fork source %s is %s", from.Sandbox, orPending(src.Status.Phase))}
		}
		// A fork is all or nothing, so missing is every copy.
		copies, err := smolvm.Fork(ctx, src.Status.Instances[0].ID, sandbox.ForkOptions{N: len(missing), NamePrefix: prefix(sb)})
		if err != nil {
			return nil, fmt.Errorf("fork %s: %w", from.Sandbox, err)
		}
		return copies, nil
	default:
		return r.restore(ctx, smolvm, sb, from.Snapshot, missing)
	}
}

// restore makes the missing sandboxes restores of the SandboxSnapshot
// named snapName, copying it here first when this node lacks it.
func (r *sandboxes) restore(ctx context.Context, smolvm *client.Client, sb *v1alpha1.Sandbox, snapName string, missing []string) ([]*sandbox.Sandbox, error) {
	var snap v1alpha1.SandboxSnapshot
	if err := r.direct.Get(ctx, kclient.ObjectKey{Namespace: sb.Namespace, Name: snapName}, &snap); err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", snapName, err)
	}
	if snap.Status.Phase != v1alpha1.SnapshotReady || snap.Status.ID == "" {
		return nil, &waiting{"WaitingForSnapshot", fmt.Sprintf("snapshot %s is %s", snapName, snap.NotReady())}
	}
	if !slices.Contains(snap.Status.Nodes, r.Node) {
		// Bound here with no room on its holders: copy it first.
		if err := r.copySnapshot(ctx, &snap); err != nil {
			return nil, err
		}
	}
	var made []*sandbox.Sandbox
	for _, name := range missing {
		s, err := smolvm.Restore(ctx, snap.Status.ID, sandbox.RestoreOptions{Name: name, TTL: ttl(sb.Spec.TTLSeconds), Labels: sb.Spec.Labels})
		if err != nil {
			return made, fmt.Errorf("restore %s: %w", snapName, err)
		}
		made = append(made, s)
	}
	return made, nil
}

// startedState is the SandboxSnapshot holding the started state of the
// template sb names, "" for none: a Sandbox naming a template built
// through the gateway (E2B's templateID, a warm pool's member) is a
// restore of it, as on a single smolvm serve. The restore keeps the
// build's command and environment, which sb cannot replace; its network
// and limits too, as on a single serve.
func (r *sandboxes) startedState(ctx context.Context, sb *v1alpha1.Sandbox) (string, error) {
	ref := sb.Spec.SandboxTemplateRef
	if ref == nil {
		return "", nil
	}
	var tmpl v1alpha1.SandboxTemplate
	if err := r.direct.Get(ctx, kclient.ObjectKey{Namespace: sb.Namespace, Name: ref.Name}, &tmpl); err != nil {
		return "", fmt.Errorf("template %s: %w", ref.Name, err)
	}
	if tmpl.Status.Snapshot != "" && (len(sb.Spec.Command) > 0 || len(sb.Spec.Env) > 0) {
		return "", fmt.Errorf("template %s has a started state, whose sandboxes keep its start command and environment: command and env cannot be given", ref.Name)
	}
	return tmpl.Status.Snapshot, nil
}

func orPending[P ~string](p P) P {
	if p == "" {
		return "Pending"
	}
	return p
}

func ttl(seconds *int64) time.Duration {
	if seconds == nil {
		return 0
	}
	return time.Duration(*seconds) * time.Second
}

// pause makes s paused or running as the spec says.
func (r *sandboxes) pause(ctx context.Context, sb *v1alpha1.Sandbox, s *sandbox.Sandbox) (*sandbox.Sandbox, error) {
	switch {
	case sb.Spec.Paused && s.State == sandbox.StateRunning:
		// A hot pool's sandbox claimed since the cache's copy was read
		// has been resumed by its claimer: asked afresh, not paused
		// again under it.
		var now v1alpha1.Sandbox
		if err := r.direct.Get(ctx, kclient.ObjectKeyFromObject(sb), &now); err != nil || !now.Spec.Paused {
			return s, kclient.IgnoreNotFound(err)
		}
		return r.Smolvm.Pause(ctx, s.ID)
	case !sb.Spec.Paused && s.State == sandbox.StatePaused:
		return r.Smolvm.Resume(ctx, s.ID)
	}
	return s, nil
}

// phaseOf is the phase of the object's sandboxes: the first one's, which
// a fork's copies share at birth.
func phaseOf(have []*sandbox.Sandbox) (v1alpha1.SandboxPhase, string) {
	switch have[0].State {
	case sandbox.StateRunning:
		return v1alpha1.PhaseRunning, "Running"
	case sandbox.StatePaused:
		return v1alpha1.PhasePaused, "Paused"
	case sandbox.StateStopped, sandbox.StateExpired:
		return v1alpha1.PhaseStopped, "Stopped"
	}
	return v1alpha1.PhaseCreating, "Creating"
}

// setStatus writes the status the node sees, if it changed.
func (r *sandboxes) setStatus(ctx context.Context, sb *v1alpha1.Sandbox, have []*sandbox.Sandbox, phase v1alpha1.SandboxPhase, reason, msg string) error {
	st := v1alpha1.SandboxStatus{Phase: phase, NodeName: r.Node, ObservedGeneration: sb.Generation, Conditions: slices.Clone(sb.Status.Conditions)}
	for _, s := range have {
		st.Instances = append(st.Instances, v1alpha1.Instance{ID: s.ID, Endpoint: r.endpoint(s.ID)})
	}
	if len(st.Instances) > 0 {
		st.Endpoint = st.Instances[0].Endpoint
	}
	if msg == "" && len(have) > 0 && have[0].Reason != "" {
		msg = have[0].Reason
	}
	setReady(&st.Conditions, phase == v1alpha1.PhaseRunning, reason, msg, sb.Generation)
	if equality.Semantic.DeepEqual(sb.Status, st) {
		return nil
	}
	sb.Status = st
	return r.writeStatus(ctx, sb)
}

// remove removes the object's smolvm sandboxes.
func (r *sandboxes) remove(ctx context.Context, sb *v1alpha1.Sandbox) error {
	for _, name := range instanceNames(sb) {
		if err := r.Smolvm.Remove(ctx, name, true); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			return fmt.Errorf("remove %s of %s: %w", name, key(sb), err)
		}
	}
	return nil
}
