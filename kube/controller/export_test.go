package controller

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"smolvm.dev/smolvm/kube/api/v1alpha1"
)

// SetStatus is the binder's status write, for a test of its races.
func SetStatus(ctx context.Context, c client.Client, sb *v1alpha1.Sandbox, phase v1alpha1.SandboxPhase, typ string, st metav1.ConditionStatus, reason, msg string) error {
	b := &Binder{c: c, direct: c}
	return b.setStatus(ctx, sb, phase, typ, st, reason, msg)
}
