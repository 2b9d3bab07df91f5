package gateway

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kclient "sigs.k8s.io/controller-runtime/pkg/client"

	"smolvm.dev/smolvm/kube/api/v1alpha1"
	"smolvm.dev/smolvm/sandbox"
)

// What changes a sandbox's life, through its Sandbox object.

func networkPolicy(p *sandbox.Network) *v1alpha1.NetworkPolicy {
	if p == nil {
		return nil
	}
	np := &v1alpha1.NetworkPolicy{Mode: string(p.Mode), AllowHosts: p.Hosts, AllowCIDRs: p.CIDRs}
	for _, port := range p.Ports {
		np.Ports = append(np.Ports, int32(port.Port))
	}
	return np
}

// create makes a Sandbox in ns, named name or else generated from
// prefix, with annotations, and waits until it runs; one that does not is
// deleted, so a failed create leaves nothing behind.
func (g *Gateway) create(ctx context.Context, ns, name, prefix string, spec v1alpha1.SandboxSpec, annotations map[string]string) (*v1alpha1.Sandbox, error) {
	sb := &v1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, GenerateName: prefix, Annotations: annotations}, Spec: spec}
	done, err := g.admit(ctx, ns)
	if err != nil {
		return nil, err
	}
	err = g.cfg.Kube.Create(ctx, sb)
	done()
	if err != nil {
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	// A failed object is deleted, so its name (maybe generated) would
	// name nothing.
	what := "the new sandbox"
	if name != "" {
		what = "sandbox " + name
	}
	ready, err := g.waitPhase(ctx, kclient.ObjectKeyFromObject(sb), what, v1alpha1.PhaseRunning)
	if err != nil {
		// The request's context may be what ended.
		if derr := g.cfg.Kube.Delete(context.WithoutCancel(ctx), sb); derr != nil && !apierrors.IsNotFound(derr) {
			g.cfg.Log.Warn("delete a sandbox that did not start", "sandbox", sb.Name, "err", derr)
		}
		return nil, err
	}
	return ready, nil
}

// setPaused sets sb's spec.paused and waits until its node made it so.
func (g *Gateway) setPaused(ctx context.Context, sb *v1alpha1.Sandbox, paused bool) (*v1alpha1.Sandbox, error) {
	patch := kclient.MergeFrom(sb.DeepCopy())
	sb.Spec.Paused = paused
	if err := g.cfg.Kube.Patch(ctx, sb, patch); err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", sb.Name, err)
	}
	want := v1alpha1.PhaseRunning
	if paused {
		want = v1alpha1.PhasePaused
	}
	return g.waitPhase(ctx, kclient.ObjectKeyFromObject(sb), "sandbox "+sb.Name, want)
}

// remove deletes sb and waits until its node removed its sandboxes. A
// fork's copies are one object: removing one is removing all, so that is
// refused.
func (g *Gateway) remove(ctx context.Context, sb *v1alpha1.Sandbox) error {
	if n := len(sb.Status.Instances); n > 1 {
		return &phaseError{http.StatusConflict, fmt.Sprintf("the sandbox is one of %d copies of Sandbox %s/%s; delete that object to remove them all", n, sb.Namespace, sb.Name)}
	}
	if err := g.cfg.Kube.Delete(ctx, sb); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete sandbox %s: %w", sb.Name, err)
	}
	return g.waitGone(ctx, sb)
}

// eachNode calls fn for each live node holding sandboxes of ns, with the
// IDs of those sandboxes and the object of each. A node that is gone is
// skipped: its sandboxes are Lost, which no list shows.
func (g *Gateway) eachNode(ctx context.Context, ns string, fn func(base *url.URL, ids map[string]*v1alpha1.Sandbox) error) error {
	var list v1alpha1.SandboxList
	if err := g.cfg.Kube.List(ctx, &list, kclient.InNamespace(ns)); err != nil {
		return fmt.Errorf("list sandboxes: %w", err)
	}
	type node struct {
		base *url.URL
		ids  map[string]*v1alpha1.Sandbox
	}
	nodes := map[string]*node{}
	for i := range list.Items {
		sb := &list.Items[i]
		if len(sb.Status.Instances) == 0 {
			continue
		}
		n := nodes[sb.Status.NodeName]
		if n == nil {
			base, err := g.node(ctx, sb)
			if err != nil {
				continue
			}
			n = &node{base: base, ids: map[string]*v1alpha1.Sandbox{}}
			nodes[sb.Status.NodeName] = n
		}
		for _, in := range sb.Status.Instances {
			n.ids[in.ID] = sb
		}
	}
	for _, name := range slices.Sorted(maps.Keys(nodes)) {
		if err := fn(nodes[name].base, nodes[name].ids); err != nil {
			return fmt.Errorf("node %s: %w", name, err)
		}
	}
	return nil
}
