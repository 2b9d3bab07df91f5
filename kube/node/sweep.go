package node

import (
	"context"
	"errors"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/kube/api/v1alpha1"
)

// sweep removes, every Resync, the smolvm sandboxes and snapshots this
// node made for objects that no longer exist: those deleted while the
// daemon was down, and snapshot copies, which only their holder's
// finalizer guards. It runs only over every namespace: a daemon limited
// to one cannot tell another namespace's objects from deleted ones.
func (d *daemon) sweep(ctx context.Context) error {
	if d.Namespace != "" {
		return nil
	}
	t := time.NewTicker(d.Resync)
	defer t.Stop()
	for {
		if err := d.sweepOnce(ctx); err != nil && ctx.Err() == nil {
			d.Log.Warn("sweep", "node", d.Node, "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// owner is the object UID a smolvm name "k-UID" or "k-UID-N" carries.
func owner(name string) (types.UID, bool) {
	rest, ok := strings.CutPrefix(name, "k-")
	const uidLen = 36 // 8-4-4-4-12
	if !ok || len(rest) < uidLen || (len(rest) > uidLen && rest[uidLen] != '-') {
		return "", false
	}
	return types.UID(rest[:uidLen]), true
}

func (d *daemon) sweepOnce(ctx context.Context) error {
	// What the node holds is listed before the objects: anything made
	// after this list is not looked at, and anything in it was made for
	// an object that existed before the objects' list.
	sbs, err := d.Smolvm.List(ctx)
	if err != nil {
		return err
	}
	snaps, err := d.Smolvm.Snapshots(ctx)
	if err != nil {
		return err
	}
	var objs v1alpha1.SandboxList
	if err := d.direct.List(ctx, &objs); err != nil {
		return err
	}
	var snapObjs v1alpha1.SandboxSnapshotList
	if err := d.direct.List(ctx, &snapObjs); err != nil {
		return err
	}
	live := map[types.UID]bool{}
	for i := range objs.Items {
		live[objs.Items[i].UID] = true
	}
	for i := range snapObjs.Items {
		live[snapObjs.Items[i].UID] = true
	}
	for _, s := range sbs {
		if uid, ok := owner(s.Name); ok && !live[uid] {
			d.Log.Info("sweep: removing a sandbox whose object is gone", "node", d.Node, "sandbox", s.Name)
			if err := d.Smolvm.Remove(ctx, s.ID, true); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
				return err
			}
		}
	}
	for _, s := range snaps {
		for _, name := range s.Names {
			if uid, ok := owner(name); ok && !live[uid] {
				d.Log.Info("sweep: removing a snapshot whose object is gone", "node", d.Node, "snapshot", name)
				// One a sandbox here was restored from stays until it goes.
				if err := d.Smolvm.RemoveSnapshot(ctx, s.ID); err != nil && !errors.Is(err, errdefs.ErrNotFound) && !errors.Is(err, errdefs.ErrConflict) {
					return err
				}
				break
			}
		}
	}
	return nil
}
