package node

import (
	"context"
	"fmt"
	"time"

	"smolvm.dev/smolvm/api"
)

// pullTimeout bounds a pull, so that a registry that stops answering
// mid-layer does not hold a reconcile worker for good.
const pullTimeout = 10 * time.Minute

// ensureImage makes sure this node's smolvm serve has image ref, pulling
// it from its registry when it has not, as a kubelet pulls a Pod's. id,
// when given, is the image needed (a snapshot's): it is what is looked
// for, and a pull that gives another image fails. "" is the default
// image, which every node has.
//
// A failed pull fails the Sandbox with the registry's answer rather than
// leaving it Pending: a wrong name would wait forever, and a gateway
// create waiting on it would time out with nothing said.
func (d *daemon) ensureImage(ctx context.Context, ref, id string) error {
	if ref == "" {
		return nil
	}
	pullCtx, cancel := context.WithTimeout(ctx, pullTimeout)
	defer cancel()
	if _, err := d.Smolvm.PullImage(pullCtx, api.PullRequest{Ref: ref, ID: id}); err != nil {
		if ctx.Err() != nil {
			return err // the daemon is stopping
		}
		// %v: the pull's class (unavailable, conflict) is not the
		// Sandbox's, which would then be retried as waiting.
		return fmt.Errorf("image %s is not on node %s, and pulling it failed: %v", ref, d.Node, err)
	}
	return nil
}

// imageRef is a reference that names image id on this node ("" if none
// does): what a node copying a snapshot of it pulls.
func (d *daemon) imageRef(ctx context.Context, id string) (string, error) {
	imgs, err := d.Smolvm.Images(ctx)
	if err != nil {
		return "", fmt.Errorf("list images: %w", err)
	}
	for _, img := range imgs {
		if img.ID == id && len(img.Refs) > 0 {
			return img.Refs[0], nil
		}
	}
	return "", nil
}
