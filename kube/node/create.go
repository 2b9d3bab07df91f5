package node

import (
	"context"
	"fmt"

	kclient "sigs.k8s.io/controller-runtime/pkg/client"

	"smolvm.dev/smolvm/kube/api/v1alpha1"
	"smolvm.dev/smolvm/sandbox"
)

// createOptions turns a Sandbox's body, over its template's, into what
// smolvm serve creates.
func (r *sandboxes) createOptions(ctx context.Context, sb *v1alpha1.Sandbox, name string) (sandbox.CreateOptions, error) {
	body := sb.Spec.SandboxBody
	if ref := sb.Spec.SandboxTemplateRef; ref != nil {
		var tmpl v1alpha1.SandboxTemplate
		if err := r.direct.Get(ctx, kclient.ObjectKey{Namespace: sb.Namespace, Name: ref.Name}, &tmpl); err != nil {
			return sandbox.CreateOptions{}, fmt.Errorf("template %s: %w", ref.Name, err)
		}
		body = overlay(tmpl.Spec.SandboxBody, body)
	}
	cfg := sandbox.Config{Cmd: body.Command, WorkDir: body.WorkingDir, User: body.User, TTL: ttl(sb.Spec.TTLSeconds), Labels: sb.Spec.Labels}
	for _, e := range body.Env {
		cfg.Env = append(cfg.Env, e.Name+"="+e.Value)
	}
	if res := body.Resources; res != nil {
		if res.CPU != nil {
			cfg.Limits.CPUs = res.CPU.AsApproximateFloat64()
		}
		if res.Memory != nil {
			cfg.Limits.Memory = res.Memory.Value()
		}
		if res.Disk != nil {
			cfg.Limits.Disk = res.Disk.Value()
		}
		if res.Pids != nil {
			cfg.Limits.Pids = *res.Pids
		}
	}
	if n := body.Network; n != nil {
		cfg.Network = &sandbox.Network{Mode: sandbox.NetworkMode(n.Mode), Hosts: n.AllowHosts, CIDRs: n.AllowCIDRs}
		for _, p := range n.Ports {
			cfg.Network.Ports = append(cfg.Network.Ports, sandbox.Port{Port: int(p)})
		}
	}
	return sandbox.CreateOptions{Name: name, Image: body.Image, Config: cfg, Start: true, Backend: body.Backend}, nil
}

// overlay is base with every field that over sets replaced by over's.
func overlay(base, over v1alpha1.SandboxBody) v1alpha1.SandboxBody {
	if over.Image != "" {
		base.Image = over.Image
	}
	if len(over.Command) > 0 {
		base.Command = over.Command
	}
	if len(over.Env) > 0 {
		base.Env = over.Env
	}
	if over.WorkingDir != "" {
		base.WorkingDir = over.WorkingDir
	}
	if over.User != "" {
		base.User = over.User
	}
	if over.Backend != "" {
		base.Backend = over.Backend
	}
	if over.Resources != nil {
		base.Resources = over.Resources
	}
	if over.Network != nil {
		base.Network = over.Network
	}
	return base
}
