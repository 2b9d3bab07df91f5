// Package controller binds Sandboxes to nodes (beside a fork's source,
// where a snapshot is, else where the most memory is free), marks the
// sandboxes of a node gone as Lost, and keeps warm pools filled.
package controller

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kretry "k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"smolvm.dev/smolvm/kube/api/v1alpha1"
	"smolvm.dev/smolvm/sandbox"
)

// Condition reasons the controller writes.
const (
	ReasonBound           = "Bound"
	ReasonNoNode          = "NoNodeFits"
	ReasonSourceNotFound  = "SourceNotFound"
	ReasonSourcePending   = "SourcePending"
	ReasonSourceLost      = "SourceLost"
	ReasonSnapshotPending = "SnapshotNotReady"
	ReasonSnapshotLost    = "SnapshotUnavailable"
	ReasonTemplate        = "TemplateNotFound"
	ReasonNodeLost        = "NodeLost"
)

// nodeIndex indexes Sandboxes by spec.nodeName in the manager's cache.
const nodeIndex = "spec.nodeName"

// retry is how soon a sandbox that cannot be bound yet is tried again,
// besides the watches that wake it sooner.
const retry = 5 * time.Second

// Options configure the controller.
type Options struct {
	// LeaseNamespace holds the nodes' Leases; the manager's cache must
	// watch Leases there.
	LeaseNamespace string
	// DefaultMemory counts a sandbox without resources.memory (default
	// smolvm's own default limit).
	DefaultMemory int64
	// Name is the controller's (default smolvm-binder): controller-runtime
	// wants names unique in a process, for its metrics.
	Name string
	Log  *slog.Logger
}

// Binder is the Sandbox reconciler.
type Binder struct {
	c client.Client
	// direct reads the API server itself: a status write that lost a
	// race is redone over what the winner wrote, which the cache may not
	// hold yet.
	direct client.Reader
	o      Options
	// assumed are binds made but maybe not yet in the cache, so that a
	// burst of creates does not all land on the node that looked free.
	mu      sync.Mutex
	assumed map[types.UID]assumption
}

type assumption struct {
	node   string
	memory int64
}

// Setup registers the controller with mgr.
func Setup(ctx context.Context, mgr ctrl.Manager, o Options) error {
	if o.LeaseNamespace == "" {
		return fmt.Errorf("controller: no namespace for the nodes' leases")
	}
	if o.DefaultMemory <= 0 {
		o.DefaultMemory = sandbox.DefaultMemory
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Name == "" {
		o.Name = "smolvm-binder"
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &v1alpha1.Sandbox{}, nodeIndex, func(obj client.Object) []string {
		if n := obj.(*v1alpha1.Sandbox).Spec.NodeName; n != "" {
			return []string{n}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("controller: index sandboxes by node: %w", err)
	}
	b := &Binder{c: mgr.GetClient(), direct: mgr.GetAPIReader(), o: o, assumed: map[types.UID]assumption{}}
	// A pooled Sandbox changing (ready, claimed, gone) wakes its pool.
	if err := ctrl.NewControllerManagedBy(mgr).Named(o.Name + "-pools").For(&v1alpha1.SandboxWarmPool{}).
		Owns(&v1alpha1.Sandbox{}).Complete(&pools{c: mgr.GetClient()}); err != nil {
		return fmt.Errorf("controller: warm pools: %w", err)
	}
	// A Sandbox bound or lost decides its snapshots' node.
	if err := ctrl.NewControllerManagedBy(mgr).Named(o.Name+"-snapshots").For(&v1alpha1.SandboxSnapshot{}).
		Watches(&v1alpha1.Sandbox{}, handler.EnqueueRequestsFromMapFunc(b.snapshotsOf)).
		Complete(&snapshots{b}); err != nil {
		return fmt.Errorf("controller: snapshots: %w", err)
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(o.Name).
		For(&v1alpha1.Sandbox{}).
		// A node's Lease changing (registered, renewed, gone) wakes its
		// sandboxes and every one still waiting for a node.
		Watches(&coordinationv1.Lease{}, handler.EnqueueRequestsFromMapFunc(b.leaseSandboxes)).
		// A snapshot becoming ready wakes the restores waiting for it.
		Watches(&v1alpha1.SandboxSnapshot{}, handler.EnqueueRequestsFromMapFunc(b.unbound)).
		// One worker: each bind sees the ones before it.
		WithOptions(controller.Options{MaxConcurrentReconciles: 1}).
		Complete(b)
}

func (b *Binder) leaseSandboxes(ctx context.Context, obj client.Object) []reconcile.Request {
	l := obj.(*coordinationv1.Lease)
	if l.Namespace != b.o.LeaseNamespace {
		return nil
	}
	n, ok := v1alpha1.NodeFromLease(l)
	if !ok {
		return nil
	}
	var list v1alpha1.SandboxList
	if err := b.c.List(ctx, &list, client.MatchingFields{nodeIndex: n.Name}); err != nil {
		b.o.Log.Warn("list a node's sandboxes", "node", n.Name, "err", err)
		return nil
	}
	return append(requests(list.Items), b.unbound(ctx, obj)...)
}

// unbound are the sandboxes waiting for a node.
func (b *Binder) unbound(ctx context.Context, _ client.Object) []reconcile.Request {
	var list v1alpha1.SandboxList
	if err := b.c.List(ctx, &list); err != nil {
		b.o.Log.Warn("list sandboxes", "err", err)
		return nil
	}
	var waiting []v1alpha1.Sandbox
	for _, sb := range list.Items {
		if sb.Spec.NodeName == "" {
			waiting = append(waiting, sb)
		}
	}
	return requests(waiting)
}

func requests(sbs []v1alpha1.Sandbox) []reconcile.Request {
	out := make([]reconcile.Request, len(sbs))
	for i, sb := range sbs {
		out[i] = reconcile.Request{NamespacedName: types.NamespacedName{Namespace: sb.Namespace, Name: sb.Name}}
	}
	return out
}

// Reconcile binds an unbound sandbox, or watches the node of a bound one.
func (b *Binder) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var sb v1alpha1.Sandbox
	if err := b.c.Get(ctx, req.NamespacedName, &sb); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if sb.DeletionTimestamp != nil {
		return reconcile.Result{}, nil
	}
	nodes, err := b.nodes(ctx)
	if err != nil {
		return reconcile.Result{}, err
	}
	if sb.Spec.NodeName != "" {
		return b.watchNode(ctx, &sb, nodes)
	}
	node, reason, msg, err := b.choose(ctx, &sb, nodes)
	if err != nil {
		return reconcile.Result{}, err
	}
	if node == "" {
		phase := v1alpha1.PhasePending
		if reason == ReasonSourceLost {
			phase = v1alpha1.PhaseFailed // its memory went with its node
		}
		return reconcile.Result{RequeueAfter: retry}, b.setStatus(ctx, &sb, phase, v1alpha1.ConditionScheduled, metav1.ConditionFalse, reason, msg)
	}
	patch := client.MergeFrom(sb.DeepCopy())
	sb.Spec.NodeName = node
	if err := b.c.Patch(ctx, &sb, patch); err != nil {
		return reconcile.Result{}, fmt.Errorf("bind %s/%s to %s: %w", sb.Namespace, sb.Name, node, err)
	}
	mem, err := b.memory(ctx, &sb)
	if err != nil {
		return reconcile.Result{}, err
	}
	b.mu.Lock()
	b.assumed[sb.UID] = assumption{node, mem}
	b.mu.Unlock()
	b.o.Log.Info("bound", "sandbox", req.NamespacedName, "node", node, "why", msg)
	return reconcile.Result{}, b.setStatus(ctx, &sb, "", v1alpha1.ConditionScheduled, metav1.ConditionTrue, ReasonBound, msg)
}

// watchNode marks sb Lost once its node is gone, and otherwise looks
// again when the node's Lease would expire.
func (b *Binder) watchNode(ctx context.Context, sb *v1alpha1.Sandbox, nodes map[string]v1alpha1.Node) (reconcile.Result, error) {
	n, ok := nodes[sb.Spec.NodeName]
	if ok && time.Now().Before(n.Expires) {
		return reconcile.Result{RequeueAfter: time.Until(n.Expires) + time.Second}, nil
	}
	if sb.Status.Phase == v1alpha1.PhaseLost {
		return reconcile.Result{}, nil
	}
	return reconcile.Result{}, b.setStatus(ctx, sb, v1alpha1.PhaseLost, v1alpha1.ConditionReady, metav1.ConditionFalse, ReasonNodeLost,
		fmt.Sprintf("node %s stopped renewing its lease; the sandbox's memory went with it", sb.Spec.NodeName))
}

// setStatus sets sb's phase (unless empty) and one condition.
func (b *Binder) setStatus(ctx context.Context, sb *v1alpha1.Sandbox, phase v1alpha1.SandboxPhase, typ string, st metav1.ConditionStatus, reason, msg string) error {
	return b.patchStatus(ctx, sb, func() {
		if phase != "" {
			sb.Status.Phase = phase
		}
		meta.SetStatusCondition(&sb.Status.Conditions, metav1.Condition{Type: typ, Status: st, Reason: reason, Message: msg, ObservedGeneration: sb.Generation})
	})
}

// patchStatus writes the status change makes to o, if it changes
// anything. The write holds o's resourceVersion, and is redone (change
// over a fresh read) when another writer came first: the node daemon
// reports an object's own Ready condition (a failed create, say) the
// moment the bind reaches it, and a plain merge patch would replace that
// list of conditions with this stale one.
func (b *Binder) patchStatus(ctx context.Context, o client.Object, change func()) error {
	err := kretry.RetryOnConflict(kretry.DefaultRetry, func() error {
		base := o.DeepCopyObject().(client.Object)
		change()
		if equality.Semantic.DeepEqual(base, o) {
			return nil
		}
		err := b.c.Status().Patch(ctx, o, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
		if apierrors.IsConflict(err) {
			if rerr := b.direct.Get(ctx, client.ObjectKeyFromObject(o), o); rerr != nil {
				return rerr
			}
		}
		return err
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("status of %s/%s: %w", o.GetNamespace(), o.GetName(), err)
	}
	return nil
}

// nodes are the registered nodes, live or not, by name.
func (b *Binder) nodes(ctx context.Context) (map[string]v1alpha1.Node, error) {
	var leases coordinationv1.LeaseList
	if err := b.c.List(ctx, &leases, client.InNamespace(b.o.LeaseNamespace)); err != nil {
		return nil, fmt.Errorf("list node leases: %w", err)
	}
	nodes := map[string]v1alpha1.Node{}
	for i := range leases.Items {
		if n, ok := v1alpha1.NodeFromLease(&leases.Items[i]); ok {
			nodes[n.Name] = n
		}
	}
	return nodes, nil
}

// choose picks sb's node, or says why there is none yet.
func (b *Binder) choose(ctx context.Context, sb *v1alpha1.Sandbox, nodes map[string]v1alpha1.Node) (node, reason, msg string, err error) {
	live := liveNodes(nodes)
	if f := sb.Spec.ForkFrom; f != nil && f.Sandbox != "" {
		// A fork goes where its source's memory is, or nowhere.
		node, reason, msg, err := b.besideSandbox(ctx, sb.Namespace, f.Sandbox, live)
		if node != "" {
			msg = fmt.Sprintf("beside its source %s", f.Sandbox)
		}
		return node, reason, msg, err
	}
	body, err := b.body(ctx, sb)
	if err != nil {
		return "", ReasonTemplate, err.Error(), nil
	}
	need, backend := b.need(sb, body), body.Backend
	candidates := live
	why := "most free memory"
	if f := sb.Spec.ForkFrom; f != nil {
		// A restore goes to a node holding the snapshot.
		var snap v1alpha1.SandboxSnapshot
		if err := b.c.Get(ctx, types.NamespacedName{Namespace: sb.Namespace, Name: f.Snapshot}, &snap); err != nil {
			if apierrors.IsNotFound(err) {
				return "", ReasonSourceNotFound, fmt.Sprintf("snapshot %s not found", f.Snapshot), nil
			}
			return "", "", "", err
		}
		if snap.Status.Phase != v1alpha1.SnapshotReady {
			return "", ReasonSnapshotPending, fmt.Sprintf("snapshot %s is not Ready: %s", f.Snapshot, snap.NotReady()), nil
		}
		candidates = map[string]v1alpha1.Node{}
		for _, name := range snap.Status.Nodes {
			if n, ok := live[name]; ok {
				candidates[name] = n
			}
		}
		if len(candidates) == 0 {
			return "", ReasonSnapshotLost, fmt.Sprintf("no live node holds snapshot %s (held by %v)", f.Snapshot, snap.Status.Nodes), nil
		}
		why = fmt.Sprintf("holds snapshot %s; most free memory of those", f.Snapshot)
	}
	used, err := b.used(ctx)
	if err != nil {
		return "", "", "", err
	}
	best := pick(candidates, used, backend, need)
	if best == "" && sb.Spec.ForkFrom != nil {
		// No holder has room: another node copies the snapshot from one.
		best, why = pick(live, used, backend, need), fmt.Sprintf("most free memory; copies snapshot %s, as no holder has room", sb.Spec.ForkFrom.Snapshot)
	}
	if best == "" {
		return "", ReasonNoNode, fmt.Sprintf("no live node offers backend %q with %d bytes free (%d nodes live)", backend, need, len(live)), nil
	}
	return best, ReasonBound, why, nil
}

// liveNodes are the nodes whose Lease has not lapsed.
func liveNodes(nodes map[string]v1alpha1.Node) map[string]v1alpha1.Node {
	live := map[string]v1alpha1.Node{}
	for name, n := range nodes {
		if time.Now().Before(n.Expires) {
			live[name] = n
		}
	}
	return live
}

// besideSandbox is the node of sandbox name in ns, where a fork or a
// snapshot of it must go (its memory is there and nowhere else), or,
// with node "", the reason and message why there is none: it is missing,
// not bound yet (both worth waiting for), or its node is gone (never).
func (b *Binder) besideSandbox(ctx context.Context, ns, name string, live map[string]v1alpha1.Node) (node, reason, msg string, err error) {
	var src v1alpha1.Sandbox
	if err := b.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &src); err != nil {
		if apierrors.IsNotFound(err) {
			return "", ReasonSourceNotFound, fmt.Sprintf("sandbox %s not found", name), nil
		}
		return "", "", "", err
	}
	switch _, ok := live[src.Spec.NodeName]; {
	case src.Spec.NodeName == "":
		return "", ReasonSourcePending, fmt.Sprintf("sandbox %s is not on a node yet", name), nil
	case !ok || src.Status.Phase == v1alpha1.PhaseLost:
		return "", ReasonSourceLost, fmt.Sprintf("sandbox %s was on node %s, which is gone", name, src.Spec.NodeName), nil
	}
	return src.Spec.NodeName, ReasonBound, "", nil
}

// pick is the candidate offering backend with the most memory free, at
// least need; "" if none.
func pick(candidates map[string]v1alpha1.Node, used map[string]int64, backend string, need int64) string {
	best, bestFree := "", int64(0)
	for _, name := range slices.Sorted(maps.Keys(candidates)) {
		n := candidates[name]
		free := n.Memory - used[name]
		if !n.Offers(backend) || free < need {
			continue
		}
		if best == "" || free > bestFree {
			best, bestFree = name, free
		}
	}
	return best
}

// used is the memory of the sandboxes bound to each node, the assumed
// binds the cache has not shown yet included.
func (b *Binder) used(ctx context.Context) (map[string]int64, error) {
	var list v1alpha1.SandboxList
	if err := b.c.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	used := map[string]int64{}
	seen := map[types.UID]*v1alpha1.Sandbox{}
	for i := range list.Items {
		sb := &list.Items[i]
		seen[sb.UID] = sb
		if sb.Spec.NodeName == "" || done(sb.Status.Phase) {
			continue
		}
		mem, err := b.memory(ctx, sb)
		if err != nil {
			mem = b.o.DefaultMemory
		}
		used[sb.Spec.NodeName] += mem
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for uid, a := range b.assumed {
		switch sb, ok := seen[uid]; {
		case ok && sb.Spec.NodeName == "":
			used[a.node] += a.memory // bound, but the cache has not seen it yet
		default:
			delete(b.assumed, uid) // the cache caught up, or it was deleted
		}
	}
	return used, nil
}

func done(p v1alpha1.SandboxPhase) bool {
	return p == v1alpha1.PhaseStopped || p == v1alpha1.PhaseFailed || p == v1alpha1.PhaseLost
}

// memory is what sb will use on its node.
func (b *Binder) memory(ctx context.Context, sb *v1alpha1.Sandbox) (int64, error) {
	body, err := b.body(ctx, sb)
	if err != nil {
		return 0, err
	}
	return b.need(sb, body), nil
}

// need is the memory of sb with body (its own and its template's): its
// limit, or the default, times its copies.
func (b *Binder) need(sb *v1alpha1.Sandbox, body v1alpha1.SandboxBody) int64 {
	mem := b.o.DefaultMemory
	if r := body.Resources; r != nil && r.Memory != nil {
		mem = r.Memory.Value()
	}
	if f := sb.Spec.ForkFrom; f != nil && f.Count > 1 {
		mem *= int64(f.Count)
	}
	return mem
}

// body is sb's own body, its template's filling what it leaves empty.
func (b *Binder) body(ctx context.Context, sb *v1alpha1.Sandbox) (v1alpha1.SandboxBody, error) {
	body := sb.Spec.SandboxBody
	ref := sb.Spec.SandboxTemplateRef
	if ref == nil {
		return body, nil
	}
	var t v1alpha1.SandboxTemplate
	if err := b.c.Get(ctx, types.NamespacedName{Namespace: sb.Namespace, Name: ref.Name}, &t); err != nil {
		return body, fmt.Errorf("template %s: %w", ref.Name, err)
	}
	if body.Backend == "" {
		body.Backend = t.Spec.Backend
	}
	if body.Resources == nil {
		body.Resources = t.Spec.Resources
	}
	return body, nil
}

// ManagerOptions are the manager options the controller runs under:
// leader election in leaseNamespace (one binder at a time, so binds see
// each other), Leases cached only there, no metrics or probe listeners
// unless the caller sets them.
func ManagerOptions(scheme *k8sruntime.Scheme, leaseNamespace string) ctrl.Options {
	return ctrl.Options{
		Scheme:                  scheme,
		LeaderElection:          true,
		LeaderElectionID:        "smolvm-binder",
		LeaderElectionNamespace: leaseNamespace,
		Metrics:                 metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:  "0",
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&coordinationv1.Lease{}: {Namespaces: map[string]cache.Config{leaseNamespace: {}}},
		}},
	}
}
