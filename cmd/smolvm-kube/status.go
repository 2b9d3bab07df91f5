package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/rest"
	kclient "sigs.k8s.io/controller-runtime/pkg/client"

	"smolvm.dev/smolvm/kube/api/v1alpha1"
)

// status prints what the cluster's smolvm holds: each registered node
// (live or gone, from its Lease) with its sandboxes by phase, then the
// warm pools and snapshots.
func status(ctx context.Context, cfg *rest.Config, leaseNS string, w io.Writer) error {
	scheme, err := newScheme()
	if err != nil {
		return err
	}
	c, err := kclient.New(cfg, kclient.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("status: %w", err)
	}
	var leases coordinationv1.LeaseList
	var sbs v1alpha1.SandboxList
	var pools v1alpha1.SandboxWarmPoolList
	var snaps v1alpha1.SandboxSnapshotList
	for _, l := range []struct {
		list kclient.ObjectList
		opts []kclient.ListOption
	}{{&leases, []kclient.ListOption{kclient.InNamespace(leaseNS)}}, {&sbs, nil}, {&pools, nil}, {&snaps, nil}} {
		if err := c.List(ctx, l.list, l.opts...); err != nil {
			return fmt.Errorf("status: list %T: %w", l.list, err)
		}
	}
	phases := map[string]map[v1alpha1.SandboxPhase]int{}
	for _, sb := range sbs.Items {
		node := sb.Spec.NodeName
		if node == "" {
			node = "(unbound)"
		}
		if phases[node] == nil {
			phases[node] = map[v1alpha1.SandboxPhase]int{}
		}
		phase := sb.Status.Phase
		if phase == "" {
			phase = v1alpha1.PhasePending
		}
		phases[node][phase]++
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSTATE\tENDPOINT\tBACKENDS\tMEMORY\tSANDBOXES")
	now := time.Now()
	seen := map[string]bool{}
	for i := range leases.Items {
		n, ok := v1alpha1.NodeFromLease(&leases.Items[i])
		if !ok {
			continue
		}
		seen[n.Name] = true
		state := "live"
		if now.After(n.Expires) {
			state = fmt.Sprintf("gone %s", now.Sub(n.Expires).Round(time.Second))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.1f GiB\t%s\n", n.Name, state, n.Endpoint, strings.Join(n.Backends, ","), float64(n.Memory)/(1<<30), counts(phases[n.Name]))
	}
	for _, node := range slices.Sorted(maps.Keys(phases)) {
		if !seen[node] {
			state := "no Lease"
			if node == "(unbound)" {
				state = "-"
			}
			fmt.Fprintf(tw, "%s\t%s\t\t\t\t%s\n", node, state, counts(phases[node]))
		}
	}
	if len(pools.Items) > 0 {
		fmt.Fprintln(tw, "\nWARM POOL\tREADY\tFROM")
		for _, p := range pools.Items {
			var from string
			if ref := p.Spec.SandboxSnapshotRef; ref != nil {
				from = "snapshot " + ref.Name
			} else if ref := p.Spec.SandboxTemplateRef; ref != nil {
				from = "template " + ref.Name
			}
			if p.Spec.Hot {
				from += " (hot)"
			}
			fmt.Fprintf(tw, "%s/%s\t%d/%d\t%s\n", p.Namespace, p.Name, p.Status.ReadyReplicas, p.Spec.Replicas, from)
		}
	}
	if len(snaps.Items) > 0 {
		fmt.Fprintln(tw, "\nSNAPSHOT\tPHASE\tNODES\tSIZE")
		for _, s := range snaps.Items {
			fmt.Fprintf(tw, "%s/%s\t%s\t%s\t%.1f MiB\n", s.Namespace, s.Name, s.Status.Phase, strings.Join(s.Status.Nodes, ","), float64(s.Status.SizeBytes)/(1<<20))
		}
	}
	return tw.Flush()
}

// counts says how many sandboxes are in each phase, e.g. "3 Running, 1 Lost".
func counts(m map[v1alpha1.SandboxPhase]int) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, p := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%d %s", m[p], p))
	}
	return strings.Join(parts, ", ")
}
