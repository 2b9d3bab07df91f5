package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kclient "sigs.k8s.io/controller-runtime/pkg/client"

	"smolvm.dev/smolvm/kube/api/v1alpha1"
)

// poll is how often a wait reads the cache: it is memory, and a create's
// answer waits on it.
const poll = 5 * time.Millisecond

// phaseError is a sandbox that did not reach the phase a request waited
// for; status is the HTTP status that says why.
type phaseError struct {
	status int
	msg    string
}

func (e *phaseError) Error() string { return e.msg }

// statusOf is the HTTP status of a wait's or a lookup's error.
func statusOf(err error) int {
	var pe *phaseError
	switch {
	case errors.As(err, &pe):
		return pe.status
	case errors.Is(err, errNotFound):
		return http.StatusNotFound
	case errors.Is(err, errQuota):
		return http.StatusTooManyRequests
	case errors.Is(err, errNodeGone):
		return http.StatusServiceUnavailable
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
		return http.StatusBadRequest
	case apierrors.IsAlreadyExists(err), apierrors.IsConflict(err):
		return http.StatusConflict
	case apierrors.IsForbidden(err):
		return http.StatusForbidden
	}
	return http.StatusInternalServerError
}

// waitPhase waits until the Sandbox key names is in phase want, and
// returns it. A sandbox that fails, is lost or stops instead is an error
// carrying its Ready condition's message; one still unscheduled at the
// deadline carries its Scheduled condition's. Errors call it what.
func (g *Gateway) waitPhase(ctx context.Context, key kclient.ObjectKey, what string, want v1alpha1.SandboxPhase) (*v1alpha1.Sandbox, error) {
	ctx, cancel := context.WithTimeout(ctx, g.cfg.Ready)
	defer cancel()
	t := time.NewTicker(poll)
	defer t.Stop()
	var sb v1alpha1.Sandbox
	for {
		err := g.cfg.Kube.Get(ctx, key, &sb)
		switch {
		case apierrors.IsNotFound(err):
			// The cache may not have seen a create yet: wait on.
		case err != nil && ctx.Err() == nil:
			return nil, fmt.Errorf("%s: %w", what, err)
		case err == nil && sb.Status.Phase == want && sb.Status.ObservedGeneration >= sb.Generation:
			return &sb, nil
		case err == nil && (sb.Status.Phase == v1alpha1.PhaseFailed || sb.Status.Phase == v1alpha1.PhaseLost || sb.Status.Phase == v1alpha1.PhaseStopped):
			return nil, &phaseError{http.StatusUnprocessableEntity, fmt.Sprintf("%s is %s: %s", what, sb.Status.Phase, condition(sb.Status.Conditions, v1alpha1.ConditionReady))}
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			why := condition(sb.Status.Conditions, v1alpha1.ConditionScheduled)
			if sb.Spec.NodeName != "" {
				why = condition(sb.Status.Conditions, v1alpha1.ConditionReady)
			}
			return nil, &phaseError{http.StatusServiceUnavailable, fmt.Sprintf("%s not %s within %s (%s): %s", what, want, g.cfg.Ready, orPending(sb.Status.Phase), why)}
		}
	}
}

// waitGone waits until obj, a Sandbox or a SandboxSnapshot that was
// deleted, is gone: its node removed what it made and the finalizer.
func (g *Gateway) waitGone(ctx context.Context, obj kclient.Object) error {
	ctx, cancel := context.WithTimeout(ctx, g.cfg.Ready)
	defer cancel()
	t := time.NewTicker(poll)
	defer t.Stop()
	key := kclient.ObjectKeyFromObject(obj)
	for {
		if err := g.cfg.Kube.Get(ctx, key, obj); apierrors.IsNotFound(err) {
			return nil
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return &phaseError{http.StatusServiceUnavailable, fmt.Sprintf("%s: deleted, but its node has not removed it within %s", key.Name, g.cfg.Ready)}
		}
	}
}

func condition(conds []metav1.Condition, typ string) string {
	if c := meta.FindStatusCondition(conds, typ); c != nil {
		return c.Reason + ": " + c.Message
	}
	return "no " + typ + " condition yet"
}

func orPending(p v1alpha1.SandboxPhase) v1alpha1.SandboxPhase {
	if p == "" {
		return v1alpha1.PhasePending
	}
	return p
}
