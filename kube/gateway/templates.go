package gateway

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	kclient "sigs.k8s.io/controller-runtime/pkg/client"

	"smolvm.dev/smolvm/api"
	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/kube/api/v1alpha1"
	"smolvm.dev/smolvm/sandbox"
)

// Templates through the gateway (docs/templates.md) are the namespace's
// SandboxTemplates, so a tenant sees its own only, and another's answers
// as a missing one. A build runs on one node's smolvm serve, through its
// /v1/templates, under the name of a SandboxSnapshot whose templateRef
// names the template (k-UID); that node's daemon records the build's
// checkpoint in it, and a sandbox created from the template is a restore
// of it, which a node that lacks it copies first (kube/node's copy path,
// as for any snapshot).

// BuildTemplate builds (or rebuilds) the template o.Name in ctx's
// namespace: its started state on one node, recorded as a SandboxSnapshot,
// then the SandboxTemplate. A rebuild's former started state goes once
// the new one is recorded.
func (c *cluster) BuildTemplate(ctx context.Context, o sandbox.TemplateOptions) (*sandbox.Template, error) {
	n, err := ns(ctx)
	if err != nil {
		return nil, err
	}
	if errs := validation.IsDNS1123Subdomain(o.Name); len(errs) > 0 {
		// It is the object's name; E2B's NAME:TAG has no object to be.
		return nil, errdefs.New(errdefs.ErrInvalid, fmt.Sprintf("name %q: in the cluster a template's name is its SandboxTemplate's, a DNS subdomain name: %s", o.Name, strings.Join(errs, "; ")))
	}
	switch {
	case o.Public:
		return nil, errdefs.New(errdefs.ErrDenied, "public: a template through the gateway is its namespace's, and no key acts as the admin")
	case o.Hot != 0:
		return nil, unsupported("hot copies", "a SandboxWarmPool of the template's started state (sandboxSnapshotRef, hot: true) keeps restored copies paused")
	case len(o.Start) == 0 && o.Ready != (sandbox.Ready{}):
		return nil, errdefs.New(errdefs.ErrInvalid, "ready: a ready check needs a start command")
	}
	// Checked here too, before any object is made, and with its defaults
	// filled as the template records them.
	if err := o.Ready.Check(); err != nil {
		return nil, fmt.Errorf("build template %s: %w", o.Name, err)
	}
	old, err := c.templateObject(ctx, n, o.Name)
	if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return nil, err
	}
	t := &v1alpha1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: n, Name: o.Name}}
	if old != nil {
		t = old.DeepCopy()
	}
	if t.Spec, err = c.templateSpec(o); err != nil {
		return nil, err
	}
	t.Status = v1alpha1.SandboxTemplateStatus{Built: &metav1.Time{Time: time.Now()}}
	var snap *v1alpha1.SandboxSnapshot
	if len(o.Start) > 0 {
		var built *sandbox.Template
		if snap, built, err = c.startedState(ctx, n, o); err != nil {
			return nil, err
		}
		t.Status = v1alpha1.SandboxTemplateStatus{Build: built.Build, NodeName: snap.Spec.NodeName, ImageID: built.ImageID,
			Snapshot: snap.Name, SnapshotID: snap.Status.ID, Built: &metav1.Time{Time: built.Built},
			ReadyAfter: &metav1.Duration{Duration: built.ReadyAfter}}
	}
	if err := c.saveTemplate(ctx, t, old != nil); err != nil {
		if snap != nil {
			c.g.cfg.Kube.Delete(context.WithoutCancel(ctx), snap)
		}
		return nil, err
	}
	if snap != nil {
		c.own(ctx, t, snap)
	}
	if old != nil && old.Status.Snapshot != "" {
		c.dropStartedState(ctx, old)
	}
	// A create naming it next, through this gateway, is not taken for an
	// image's.
	if err := c.g.cached(ctx, t, false); err != nil {
		return nil, err
	}
	return templateRecord(t), nil
}

// saveTemplate creates t, or updates it when it replaces one, and writes
// its status.
func (c *cluster) saveTemplate(ctx context.Context, t *v1alpha1.SandboxTemplate, replace bool) error {
	status := t.Status
	var err error
	if replace {
		err = c.g.cfg.Kube.Update(ctx, t)
	} else {
		err = c.g.cfg.Kube.Create(ctx, t)
	}
	if err != nil {
		return nodeError(fmt.Errorf("template %s: %w", t.Name, err))
	}
	t.Status = status
	if err := c.g.cfg.Kube.Status().Update(ctx, t); err != nil {
		return nodeError(fmt.Errorf("template %s: status: %w", t.Name, err))
	}
	return nil
}

// cached waits until the gateway's cache holds t as last written (gone
// false) or no longer holds it (gone true): the answer about a template
// then holds for the next request through this gateway.
func (g *Gateway) cached(ctx context.Context, t *v1alpha1.SandboxTemplate, gone bool) error {
	ctx, cancel := context.WithTimeout(ctx, g.cfg.Ready)
	defer cancel()
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		var now v1alpha1.SandboxTemplate
		err := g.cfg.Kube.Get(ctx, kclient.ObjectKeyFromObject(t), &now)
		if gone && apierrors.IsNotFound(err) || !gone && err == nil && now.ResourceVersion == t.ResourceVersion {
			return nil
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return nodeError(&phaseError{http.StatusServiceUnavailable, fmt.Sprintf("template %s: written, but the gateway's cache has not seen it within %s", t.Name, g.cfg.Ready)})
		}
	}
}

// own makes t the owner of its started state's snapshot, so that
// Kubernetes' garbage collector deletes it with t when t is deleted
// without the gateway (kubectl delete sandboxtemplate). The snapshot is
// made before t, whose UID the reference needs. A failure is logged: the
// template works without it, and the gateway's removal deletes both.
func (c *cluster) own(ctx context.Context, t *v1alpha1.SandboxTemplate, snap *v1alpha1.SandboxSnapshot) {
	patch := kclient.MergeFrom(snap.DeepCopy())
	snap.OwnerReferences = append(snap.OwnerReferences, metav1.OwnerReference{APIVersion: v1alpha1.GroupVersion.String(), Kind: "SandboxTemplate", Name: t.Name, UID: t.UID})
	if err := c.g.cfg.Kube.Patch(ctx, snap, patch); err != nil {
		c.g.cfg.Log.Warn("own a template's started state", "template", t.Namespace+"/"+t.Name, "snapshot", snap.Name, "err", err)
	}
}

// startedState builds o on a node and returns the SandboxSnapshot its
// daemon recorded the checkpoint in, once Ready, with the node's template.
// On failure nothing is left: the object's deletion has the node remove
// what the build made.
func (c *cluster) startedState(ctx context.Context, n string, o sandbox.TemplateOptions) (*v1alpha1.SandboxSnapshot, *sandbox.Template, error) {
	node, base, err := c.g.buildNode(ctx, o.Backend)
	if err != nil {
		return nil, nil, nodeError(err)
	}
	cl, err := c.client(base)
	if err != nil {
		return nil, nil, err
	}
	// The node pulls the image it lacks, as it does a Sandbox's.
	image := cmp.Or(o.Image, sandbox.DefaultImage)
	if _, err := cl.PullImage(ctx, api.PullRequest{Ref: image}); err != nil {
		return nil, nil, fmt.Errorf("template %s: image %s on node %s: %w", o.Name, image, node, err)
	}
	snap := &v1alpha1.SandboxSnapshot{
		ObjectMeta: metav1.ObjectMeta{Namespace: n, GenerateName: o.Name + "-started-"},
		Spec:       v1alpha1.SandboxSnapshotSpec{TemplateRef: &v1alpha1.LocalRef{Name: o.Name}, NodeName: node},
	}
	if err := c.g.cfg.Kube.Create(ctx, snap); err != nil {
		return nil, nil, nodeError(fmt.Errorf("template %s: snapshot: %w", o.Name, err))
	}
	drop := func() { c.g.cfg.Kube.Delete(context.WithoutCancel(ctx), snap) }
	req := api.NewTemplateRequest(o)   // public and hot were refused above
	req.Name = "k-" + string(snap.UID) // the node daemon finds it by this name
	built, err := cl.BuildTemplate(ctx, req)
	if err != nil {
		drop()
		return nil, nil, fmt.Errorf("template %s: build on node %s: %w", o.Name, node, err)
	}
	ready, err := c.g.waitSnapshot(ctx, kclient.ObjectKeyFromObject(snap))
	if err != nil {
		drop()
		return nil, nil, nodeError(fmt.Errorf("template %s: %w", o.Name, err))
	}
	return ready, built, nil
}

// buildNode picks the live node that builds a template: of those offering
// backend (any, for ""), the one holding the fewest sandboxes at its last
// renewal. The binder's memory accounting is the controller's; a build
// is one sandbox for the start command's time.
func (g *Gateway) buildNode(ctx context.Context, backend string) (string, *url.URL, error) {
	var leases coordinationv1.LeaseList
	if err := g.cfg.Kube.List(ctx, &leases, kclient.InNamespace(g.cfg.LeaseNamespace)); err != nil {
		return "", nil, fmt.Errorf("list nodes: %w", err)
	}
	var best *v1alpha1.Node
	for i := range leases.Items {
		n, ok := v1alpha1.NodeFromLease(&leases.Items[i])
		if !ok || n.Endpoint == "" || time.Now().After(n.Expires) || (backend != "" && !slices.Contains(n.Backends, backend)) {
			continue
		}
		if best == nil || n.Sandboxes < best.Sandboxes || (n.Sandboxes == best.Sandboxes && n.Name < best.Name) {
			best = &n
		}
	}
	if best == nil {
		return "", nil, fmt.Errorf("no live node offers backend %q to build the template on: %w", cmp.Or(backend, "(default)"), errNodeGone)
	}
	base, err := g.nodeURL(ctx, best.Name)
	return best.Name, base, err
}

// templateSpec is the SandboxTemplate o describes. Its command is the
// start command, so that a Sandbox naming the template by
// sandboxTemplateRef (E2B's templateID) runs it, booted afresh.
func (c *cluster) templateSpec(o sandbox.TemplateOptions) (v1alpha1.SandboxTemplateSpec, error) {
	body, err := c.spec(sandbox.CreateOptions{Image: cmp.Or(o.Image, sandbox.DefaultImage), Start: true, Backend: o.Backend,
		Config: sandbox.Config{Cmd: o.Start, Env: o.Env, WorkDir: o.WorkDir, User: o.User, Limits: o.Limits}})
	if err != nil {
		return v1alpha1.SandboxTemplateSpec{}, err
	}
	spec := v1alpha1.SandboxTemplateSpec{SandboxBody: body.SandboxBody}
	if len(o.Start) > 0 {
		r := o.Ready
		spec.Ready = &v1alpha1.ReadyCheck{Port: int32(r.Port), URL: r.URL, Status: int32(r.Status), File: r.File, Process: r.Process, Cmd: r.Cmd,
			After: &metav1.Duration{Duration: r.After}, Timeout: &metav1.Duration{Duration: r.Timeout}}
	}
	return spec, nil
}

// templateRecord is t as a single smolvm serve describes a template; the
// tenant is its namespace. A SandboxTemplate made with kubectl is a
// template without a started state.
func templateRecord(t *v1alpha1.SandboxTemplate) *sandbox.Template {
	out := &sandbox.Template{Name: t.Name, Build: t.Status.Build, Tenant: t.Namespace, Image: t.Spec.Image, ImageID: t.Status.ImageID,
		Snapshot: t.Status.SnapshotID, WorkDir: t.Spec.WorkingDir, User: t.Spec.User, Built: t.CreationTimestamp.Time}
	if t.Status.Built != nil {
		out.Built = t.Status.Built.Time
	}
	for _, e := range t.Spec.Env {
		out.Env = append(out.Env, e.Name+"="+e.Value)
	}
	if t.Status.Snapshot == "" {
		return out
	}
	out.Start = t.Spec.Command
	if d := t.Status.ReadyAfter; d != nil {
		out.ReadyAfter = d.Duration
	}
	if r := t.Spec.Ready; r != nil {
		out.Ready = sandbox.Ready{Port: int(r.Port), URL: r.URL, Status: int(r.Status), File: r.File, Process: r.Process, Cmd: r.Cmd}
		if r.After != nil {
			out.Ready.After = r.After.Duration
		}
		if r.Timeout != nil {
			out.Ready.Timeout = r.Timeout.Duration
		}
	}
	return out
}

// templateObject is the SandboxTemplate name in namespace n; another
// namespace's, and a name no object can have, are not found.
func (c *cluster) templateObject(ctx context.Context, n, name string) (*v1alpha1.SandboxTemplate, error) {
	missing := fmt.Errorf("template %s: %w", name, sandbox.ErrTemplateNotFound)
	if len(validation.IsDNS1123Subdomain(name)) > 0 {
		return nil, missing
	}
	var t v1alpha1.SandboxTemplate
	switch err := c.g.cfg.Kube.Get(ctx, kclient.ObjectKey{Namespace: n, Name: name}, &t); {
	case err == nil:
		return &t, nil
	case apierrors.IsNotFound(err):
		return nil, missing
	default:
		return nil, nodeError(fmt.Errorf("template %s: %w", name, err))
	}
}

// TagTemplate would be E2B's tags, NAME:TAG, which no object is named.
func (*cluster) TagTemplate(context.Context, string, string) (*sandbox.Template, error) {
	return nil, unsupported("tagging a template", "a template's name is its SandboxTemplate's; build it under each name")
}

func (c *cluster) Template(ctx context.Context, name string) (*sandbox.Template, error) {
	n, err := ns(ctx)
	if err != nil {
		return nil, err
	}
	t, err := c.templateObject(ctx, n, name)
	if err != nil {
		return nil, err
	}
	return templateRecord(t), nil
}

// Templates lists the namespace's templates by name.
func (c *cluster) Templates(ctx context.Context) ([]*sandbox.Template, error) {
	n, err := ns(ctx)
	if err != nil {
		return nil, err
	}
	var list v1alpha1.SandboxTemplateList
	if err := c.g.cfg.Kube.List(ctx, &list, kclient.InNamespace(n)); err != nil {
		return nil, nodeError(fmt.Errorf("list templates: %w", err))
	}
	out := []*sandbox.Template{}
	for i := range list.Items {
		out = append(out, templateRecord(&list.Items[i]))
	}
	slices.SortFunc(out, func(a, b *sandbox.Template) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// RemoveTemplate deletes the template and its started state's
// SandboxSnapshot, whose node then removes the build (its checkpoint stays
// while sandboxes restored from it remain, as on a single smolvm serve).
func (c *cluster) RemoveTemplate(ctx context.Context, name string) error {
	n, err := ns(ctx)
	if err != nil {
		return err
	}
	t, err := c.templateObject(ctx, n, name)
	if err != nil {
		return err
	}
	if err := c.g.cfg.Kube.Delete(ctx, t); err != nil && !apierrors.IsNotFound(err) {
		return nodeError(fmt.Errorf("remove template %s: %w", name, err))
	}
	c.dropStartedState(ctx, t)
	return c.g.cached(ctx, t, true)
}

// dropStartedState deletes t's started state's SandboxSnapshot, without
// waiting for its nodes: the template no longer names it. A failure
// leaves the object to kubectl (docs/kube.md).
func (c *cluster) dropStartedState(ctx context.Context, t *v1alpha1.SandboxTemplate) {
	if t.Status.Snapshot == "" {
		return
	}
	snap := &v1alpha1.SandboxSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: t.Namespace, Name: t.Status.Snapshot}}
	if err := c.g.cfg.Kube.Delete(context.WithoutCancel(ctx), snap); err != nil && !apierrors.IsNotFound(err) {
		c.g.cfg.Log.Warn("delete a template's former started state", "template", t.Namespace+"/"+t.Name, "snapshot", snap.Name, "err", err)
	}
}

// fromTemplate creates a sandbox of template t for o: a restore of its
// started state, placed beside it or on a node that copies it, or a
// Sandbox naming t (sandboxTemplateRef), o's environment added to t's.
func (c *cluster) fromTemplate(ctx context.Context, n string, t *v1alpha1.SandboxTemplate, o sandbox.CreateOptions) (*sandbox.Sandbox, error) {
	o.Image = t.Spec.Image
	spec, err := c.spec(o)
	if err != nil {
		return nil, err
	}
	if t.Status.Snapshot == "" {
		spec.Image, spec.SandboxTemplateRef = "", &v1alpha1.LocalRef{Name: t.Name}
		// A Sandbox's env replaces its template's whole (kube/node's
		// overlay); a single serve adds the create's to the template's.
		spec.Env = mergeEnv(t.Spec.Env, spec.Env)
		return c.createNamed(ctx, n, o.Name, spec)
	}
	cfg := o.Config
	switch {
	case len(cfg.Cmd) > 0:
		return nil, errdefs.New(errdefs.ErrInvalid, fmt.Sprintf("cmd: template %s has a started state: its main process is its start command, %q", t.Name, t.Spec.Command))
	case len(cfg.Env) > 0 || cfg.WorkDir != "" || cfg.User != "" || cfg.Network != nil || cfg.Limits != (sandbox.Limits{}) || o.Backend != "":
		// A restore keeps what the checkpoint ran with; a single serve
		// adds the environment, which a node's restore cannot be given.
		return nil, errdefs.New(errdefs.ErrInvalid, fmt.Sprintf("env, workdir, user, network, limits, backend: template %s has a started state, whose sandboxes keep the build's", t.Name))
	}
	s, err := c.snapshot(ctx, t.Status.Snapshot)
	if err != nil {
		return nil, fmt.Errorf("template %s: started state: %w", t.Name, err)
	}
	return c.createNamed(ctx, n, o.Name, restoreSpec(s, cfg.Labels, cfg.TTL))
}

// mergeEnv is base with over's variables added, over's winning.
func mergeEnv(base, over []v1alpha1.EnvVar) []v1alpha1.EnvVar {
	out := slices.DeleteFunc(slices.Clone(base), func(e v1alpha1.EnvVar) bool {
		return slices.ContainsFunc(over, func(o v1alpha1.EnvVar) bool { return o.Name == e.Name })
	})
	return append(out, over...)
}

// createNamed makes a Sandbox of spec in n, named name (else generated),
// and answers with its node's view once it runs.
func (c *cluster) createNamed(ctx context.Context, n, name string, spec v1alpha1.SandboxSpec) (*sandbox.Sandbox, error) {
	prefix := "sbx-"
	if name != "" {
		// A name is the object's own; Kubernetes refuses one in use.
		prefix = ""
	}
	sb, err := c.g.create(ctx, n, name, prefix, spec, nil)
	if err != nil {
		return nil, nodeError(err)
	}
	return c.get(ctx, sb, sb.Status.Instances[0].ID)
}
