package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	kclient "sigs.k8s.io/controller-runtime/pkg/client"

	"smolvm.dev/smolvm/client"
	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/kube/api/v1alpha1"
)

// copySnapshot copies snap to this node's smolvm serve from a live node
// holding it, streaming its export into an import there (every file
// checked against its digest), and records the copy in snap's status:
// this node among its Nodes, the copy's time among its Copies.
func (d *daemon) copySnapshot(ctx context.Context, snap *v1alpha1.SandboxSnapshot) error {
	from, base, err := d.holder(ctx, snap)
	if err != nil {
		return err
	}
	peer, err := client.New(base, d.Token)
	if err != nil {
		return err
	}
	// The copy is owned as the original is.
	smolvm, err := d.as(ctx, snap.Status.Tenant)
	if err != nil {
		return err
	}
	// Its image first: without it the copy could not be restored. A
	// snapshot copy carries no image (POST /v1/snapshots/import keeps the
	// record's image ID); an image imported from a local layout is on no
	// registry, so it must be imported on each node by hand.
	if err := d.ensureImage(ctx, snap.Status.Image, snap.Status.ImageID); err != nil {
		return fmt.Errorf("copy snapshot %s: %w", snap.Name, err)
	}
	t0 := time.Now()
	rc, err := peer.ExportSnapshot(ctx, snap.Status.ID)
	if errors.Is(err, errdefs.ErrConflict) {
		// Not sealed yet: its digest is being computed on the holder.
		return &waiting{"WaitingForSeal", fmt.Sprintf("snapshot %s is not sealed on %s yet: %v", snap.Name, from, err)}
	}
	if err != nil {
		return fmt.Errorf("copy snapshot %s from %s: %w", snap.Name, from, err)
	}
	defer rc.Close()
	got, _, err := smolvm.ImportSnapshot(ctx, rc, snapshotName(snap))
	if err != nil {
		return fmt.Errorf("copy snapshot %s from %s: %w", snap.Name, from, err)
	}
	done := time.Now()
	d.Log.Info("copied snapshot", "snapshot", key(snap), "from", from, "node", d.Node, "bytes", got.Size, "took", done.Sub(t0))
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var cur v1alpha1.SandboxSnapshot
		if err := d.direct.Get(ctx, kclient.ObjectKeyFromObject(snap), &cur); err != nil {
			return err
		}
		if !slices.Contains(cur.Status.Nodes, d.Node) {
			cur.Status.Nodes = append(cur.Status.Nodes, d.Node)
		}
		c := v1alpha1.SnapshotCopy{Node: d.Node, From: from, Milliseconds: done.Sub(t0).Milliseconds(), Bytes: got.Size, Time: metav1.NewTime(done)}
		cur.Status.Copies = slices.DeleteFunc(cur.Status.Copies, func(c v1alpha1.SnapshotCopy) bool { return c.Node == d.Node })
		cur.Status.Copies = append(cur.Status.Copies, c)
		if err := d.kube.Status().Update(ctx, &cur); err != nil {
			return err
		}
		*snap = cur
		return nil
	})
}

// holder is a live node holding snap, and its smolvm serve's URL.
func (d *daemon) holder(ctx context.Context, snap *v1alpha1.SandboxSnapshot) (name, endpoint string, err error) {
	for _, n := range snap.Status.Nodes {
		if n == d.Node {
			continue
		}
		var l coordinationv1.Lease
		if err := d.direct.Get(ctx, kclient.ObjectKey{Namespace: d.LeaseNamespace, Name: v1alpha1.LeasePrefix + n}, &l); err != nil {
			continue
		}
		if node, ok := v1alpha1.NodeFromLease(&l); ok && node.Endpoint != "" && time.Now().Before(node.Expires) {
			return n, node.Endpoint, nil
		}
	}
	return "", "", &waiting{"WaitingForHolder", fmt.Sprintf("no live node holds snapshot %s (held by %v)", snap.Name, snap.Status.Nodes)}
}
