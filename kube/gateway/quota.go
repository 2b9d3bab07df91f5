package gateway

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	kclient "sigs.k8s.io/controller-runtime/pkg/client"

	"smolvm.dev/smolvm/kube/api/v1alpha1"
)

// AnnotationMaxSandboxes on a Namespace caps how many sandboxes its API
// keys hold at once across the cluster: creates, forks' copies, restores
// and warm-pool claims through the gateway count against it (a pool's
// unclaimed sandboxes are the operator's, and do not). Absent is no cap.
const AnnotationMaxSandboxes = "smolvm.dev/max-sandboxes"

// errQuota is a create over its namespace's cap: E2B's 429, as a single
// smolvm serve answers a tenant over its quota.
var errQuota = errors.New("sandbox limit reached")

// quotas serialises each namespace's creates in this gateway, so that
// each counts the ones before it. Several gateway replicas each
// serialise their own: concurrent creates through two of them may pass a
// cap by one each.
type quotas struct {
	mu    sync.Mutex
	locks map[string]*sync.Mutex
}

func (q *quotas) lock(ns string) *sync.Mutex {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.locks == nil {
		q.locks = map[string]*sync.Mutex{}
	}
	l, ok := q.locks[ns]
	if !ok {
		l = &sync.Mutex{}
		q.locks[ns] = l
	}
	return l
}

// admit checks that ns may hold one more sandbox, and holds its lock
// until done is called, after the object that counts is written.
func (g *Gateway) admit(ctx context.Context, ns string) (done func(), err error) {
	l := g.quotas.lock(ns)
	l.Lock()
	if err := g.checkQuota(ctx, ns, 1); err != nil {
		l.Unlock()
		return nil, err
	}
	return l.Unlock, nil
}

// checkQuota reports whether ns may hold n more sandboxes.
func (g *Gateway) checkQuota(ctx context.Context, ns string, n int) error {
	r := g.direct()
	var o corev1.Namespace
	if err := r.Get(ctx, kclient.ObjectKey{Name: ns}, &o); err != nil {
		return fmt.Errorf("namespace %s: %w", ns, err)
	}
	v, ok := o.Annotations[AnnotationMaxSandboxes]
	if !ok {
		return nil
	}
	limit, err := strconv.Atoi(v)
	if err != nil || limit < 0 {
		return fmt.Errorf("namespace %s: %s is %q, not a count", ns, AnnotationMaxSandboxes, v)
	}
	var list v1alpha1.SandboxList
	if err := r.List(ctx, &list, kclient.InNamespace(ns)); err != nil {
		return fmt.Errorf("namespace %s: %w", ns, err)
	}
	used := 0
	for i := range list.Items {
		sb := &list.Items[i]
		if !sb.DeletionTimestamp.IsZero() || sb.Labels[v1alpha1.LabelPool] != "" {
			continue
		}
		switch sb.Status.Phase {
		case v1alpha1.PhaseFailed, v1alpha1.PhaseLost, v1alpha1.PhaseStopped:
			continue
		}
		used++
		if f := sb.Spec.ForkFrom; f != nil && f.Count > 1 {
			used += int(f.Count) - 1
		}
	}
	if used+n > limit {
		return fmt.Errorf("%w: namespace %s holds %d of its %d sandboxes (%s); remove one first", errQuota, ns, used, limit, AnnotationMaxSandboxes)
	}
	return nil
}

// direct is the reader that sees the latest writes.
func (g *Gateway) direct() kclient.Reader {
	if g.cfg.Direct != nil {
		return g.cfg.Direct
	}
	return g.cfg.Kube
}
