// Package node is the node daemon of smolvm on Kubernetes: it makes the
// Sandboxes and SandboxSnapshots bound to one node so through that node's
// smolvm serve (only through client/), reports their status, and
// registers the node in a Lease.
package node

import (
	"context"
	"errors"
	"fmt"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"log/slog"
	"net/url"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	kclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"smolvm.dev/smolvm/api"
	"smolvm.dev/smolvm/client"
	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/kube/api/v1alpha1"
)

// finalizer keeps a Sandbox or SandboxSnapshot until its node removed
// what it made for it.
const finalizer = "smolvm.dev/node"

// Config is one node daemon's.
type Config struct {
	// Node is the node's name: the spec.nodeName of its Sandboxes.
	Node string
	Kube *rest.Config
	// Smolvm is the node's smolvm serve.
	Smolvm *client.Client
	// Token is the API token the nodes' smolvm serve share: a node copies
	// a snapshot from another with it.
	Token string
	// Endpoint is that smolvm serve's URL as the cluster reaches it;
	// statuses' endpoints are under it.
	Endpoint string
	// Namespace limits the daemon to one namespace; "" is all.
	Namespace string
	// LeaseNamespace holds the node's Lease (its registration).
	LeaseNamespace string
	// LeaseDuration is how long the node counts as gone after its last
	// renewal (default 40 s, a kubelet's; whole seconds, at least 4).
	LeaseDuration time.Duration
	// Backends are the backends the node's smolvm serve runs.
	Backends []string
	// Resync re-reads each Sandbox's smolvm sandboxes this often, to
	// report what changed on the node (an exit, an expiry); 0 is 30 s.
	Resync time.Duration
	Log    *slog.Logger
}

// daemon is a running node daemon.
type daemon struct {
	Config
	// kube reads through the cache (this node's objects only); direct
	// reads objects of other nodes and templates, which it does not hold.
	kube   kclient.Client
	direct kclient.Reader
}

// as returns the node's smolvm serve acting as tenant (the admin for
// ""), adding the tenant there on its first use, with no quota: quotas
// are each node's (smolvm tenant quota), as tenants' keys are.
func (d *daemon) as(ctx context.Context, tenant string) (*client.Client, error) {
	if tenant == "" {
		return d.Smolvm, nil
	}
	_, err := d.Smolvm.CreateTenant(ctx, api.TenantRequest{Name: tenant})
	if err != nil && !errors.Is(err, errdefs.ErrAlreadyExists) {
		return nil, fmt.Errorf("tenant %s: %w", tenant, err)
	}
	return d.Smolvm.As(tenant), nil
}

// Run runs the node daemon until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	if cfg.Node == "" {
		return errors.New("node: no node name")
	}
	if cfg.Kube == nil || cfg.Smolvm == nil {
		return errors.New("node: no Kubernetes config or smolvm client")
	}
	if u, err := url.Parse(cfg.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("node: endpoint %q: want http://host:port or https://host:port", cfg.Endpoint)
	}
	if cfg.LeaseNamespace == "" {
		return errors.New("node: no namespace for the node's lease")
	}
	if cfg.Resync <= 0 {
		cfg.Resync = 30 * time.Second
	}
	if cfg.LeaseDuration <= 0 {
		cfg.LeaseDuration = 40 * time.Second
	}
	cfg.LeaseDuration = max(cfg.LeaseDuration.Truncate(time.Second), 4*time.Second)
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	if err := coordinationv1.AddToScheme(scheme); err != nil {
		return err
	}
	mine := fields.OneTermEqualSelector("spec.nodeName", cfg.Node)
	opts := cache.Options{ByObject: map[kclient.Object]cache.ByObject{
		&v1alpha1.Sandbox{}:         {Field: mine},
		&v1alpha1.SandboxSnapshot{}: {Field: mine},
	}}
	if cfg.Namespace != "" {
		opts.DefaultNamespaces = map[string]cache.Config{cfg.Namespace: {}}
	}
	mgr, err := manager.New(cfg.Kube, manager.Options{
		Scheme:                 scheme,
		Logger:                 logr.FromSlogHandler(cfg.Log.Handler()),
		Cache:                  opts,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		return fmt.Errorf("node %s: %w", cfg.Node, err)
	}
	d := &daemon{Config: cfg, kube: mgr.GetClient(), direct: mgr.GetAPIReader()}
	// Controller names are process-wide; a test runs several daemons.
	named := controller.Options{SkipNameValidation: ptr.To(true)}
	if err := ctrl.NewControllerManagedBy(mgr).Named("sandbox-" + cfg.Node).For(&v1alpha1.Sandbox{}).
		WithOptions(named).Complete(&sandboxes{d}); err != nil {
		return fmt.Errorf("node %s: %w", cfg.Node, err)
	}
	if err := ctrl.NewControllerManagedBy(mgr).Named("snapshot-" + cfg.Node).For(&v1alpha1.SandboxSnapshot{}).
		WithOptions(named).Complete(&snapshots{d}); err != nil {
		return fmt.Errorf("node %s: %w", cfg.Node, err)
	}
	if err := mgr.Add(manager.RunnableFunc(d.register)); err != nil {
		return err
	}
	if err := mgr.Add(manager.RunnableFunc(d.sweep)); err != nil {
		return err
	}
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("node %s: %w", cfg.Node, err)
	}
	return nil
}

// quiet turns a write that lost a race (the binder, the gateway or the
// daemon's own last write changed the object first) into a retry: it is
// routine, and not an error to log.
func quiet(res ctrl.Result, err error) (ctrl.Result, error) {
	if apierrors.IsConflict(err) {
		return ctrl.Result{RequeueAfter: 200 * time.Millisecond}, nil
	}
	return res, err
}

// key names an object in errors and logs.
func key(o kclient.Object) string {
	return types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}.String()
}

// endpoint is the URL of sandbox id on this node's smolvm serve.
func (d *daemon) endpoint(id string) string {
	return d.Endpoint + "/v1/sandboxes/" + url.PathEscape(id)
}

// setReady sets the Ready condition among conds.
func setReady(conds *[]metav1.Condition, ready bool, reason, msg string, generation int64) {
	status := metav1.ConditionFalse
	if ready {
		status = metav1.ConditionTrue
	}
	meta.SetStatusCondition(conds, metav1.Condition{
		Type: v1alpha1.ConditionReady, Status: status, Reason: reason, Message: msg, ObservedGeneration: generation,
	})
}

// writeStatus writes o's status through the status subresource.
func (d *daemon) writeStatus(ctx context.Context, o kclient.Object) error {
	if err := d.kube.Status().Update(ctx, o); err != nil {
		return fmt.Errorf("status of %s: %w", key(o), err)
	}
	return nil
}

// admit reads req's object into o for a reconcile and puts the node's
// finalizer on it. done says there is nothing more to do: the object is
// gone or not this node's (nodeName reads o), or it is being deleted, and
// then removeAll removed what the node made for it and the finalizer went.
func (d *daemon) admit(ctx context.Context, req ctrl.Request, o kclient.Object, nodeName func() string, removeAll func() error) (res ctrl.Result, done bool, err error) {
	if err := d.kube.Get(ctx, req.NamespacedName, o); err != nil {
		return ctrl.Result{}, true, kclient.IgnoreNotFound(err)
	}
	if nodeName() != d.Node {
		return ctrl.Result{}, true, nil
	}
	if !o.GetDeletionTimestamp().IsZero() {
		if !controllerutil.ContainsFinalizer(o, finalizer) {
			return ctrl.Result{}, true, nil
		}
		err := removeAll()
		if _, ok := transient(err); ok {
			// Busy, as a snapshot is while sandboxes restored from it
			// are being removed too.
			return ctrl.Result{RequeueAfter: time.Second}, true, nil
		}
		if err != nil {
			return ctrl.Result{}, true, err
		}
		controllerutil.RemoveFinalizer(o, finalizer)
		if err := d.kube.Update(ctx, o); err != nil {
			return ctrl.Result{}, true, fmt.Errorf("remove finalizer of %s: %w", key(o), err)
		}
		return ctrl.Result{}, true, nil
	}
	if controllerutil.AddFinalizer(o, finalizer) {
		if err := d.kube.Update(ctx, o); err != nil {
			return ctrl.Result{}, true, fmt.Errorf("add finalizer to %s: %w", key(o), err)
		}
	}
	return ctrl.Result{}, false, nil
}
