package controller_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"smolvm.dev/smolvm/kube/api/v1alpha1"
	"smolvm.dev/smolvm/kube/controller"
	"smolvm.dev/smolvm/kube/kubetest"
)

const leaseNS = "smolvm-system"

// world is an API server with the binder running against it.
type world struct {
	t testing.TB
	c client.Client
}

func start(t testing.TB) *world {
	t.Helper()
	cl := kubetest.Start(t)
	cl.Binder(t, leaseNS)
	return &world{t: t, c: cl.Client}
}

// node registers (or renews) a node's Lease, renewed at renewed.
func (w *world) node(name string, memGiB int64, backends string, renewed time.Time) {
	w.t.Helper()
	ctx := context.Background()
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: leaseNS, Name: v1alpha1.LeasePrefix + name}}
	err := w.c.Get(ctx, client.ObjectKeyFromObject(l), l)
	if err != nil && !apierrors.IsNotFound(err) {
		w.t.Fatal(err)
	}
	l.Annotations = map[string]string{
		v1alpha1.AnnotationEndpoint: "http://" + name + ":7070",
		v1alpha1.AnnotationBackends: backends,
		v1alpha1.AnnotationCPUs:     "2",
		v1alpha1.AnnotationMemory:   fmt.Sprint(memGiB << 30),
	}
	l.Spec.HolderIdentity = ptr.To(name)
	l.Spec.LeaseDurationSeconds = ptr.To[int32](3600)
	l.Spec.RenewTime = &metav1.MicroTime{Time: renewed}
	if apierrors.IsNotFound(err) {
		err = w.c.Create(ctx, l)
	} else {
		err = w.c.Update(ctx, l)
	}
	if err != nil {
		w.t.Fatal(err)
	}
}

func gib(n int64) *v1alpha1.Resources {
	return &v1alpha1.Resources{Memory: resource.NewQuantity(n<<30, resource.BinarySI)}
}

func (w *world) create(name string, spec v1alpha1.SandboxSpec) {
	w.t.Helper()
	if spec.Image == "" && spec.ForkFrom == nil {
		spec.Image = "debian:13"
	}
	if err := w.c.Create(context.Background(), &v1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Spec: spec}); err != nil {
		w.t.Fatalf("create %s: %v", name, err)
	}
}

// wait polls sandbox name until ok says so, for at most 30 s.
func (w *world) wait(name, what string, ok func(*v1alpha1.Sandbox) bool) *v1alpha1.Sandbox {
	w.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var sb v1alpha1.Sandbox
	for {
		err := w.c.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: name}, &sb)
		if err == nil && ok(&sb) {
			return &sb
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("%s: not %s within 30 s: %v; spec.nodeName %q, status %+v", name, what, err, sb.Spec.NodeName, sb.Status)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (w *world) bound(name string) string {
	w.t.Helper()
	return w.wait(name, "bound", func(sb *v1alpha1.Sandbox) bool { return sb.Spec.NodeName != "" }).Spec.NodeName
}

// waiting waits until name says it cannot be scheduled for reason.
func (w *world) waiting(name, reason string, phase v1alpha1.SandboxPhase) {
	w.t.Helper()
	sb := w.wait(name, "waiting with "+reason, func(sb *v1alpha1.Sandbox) bool {
		c := meta.FindStatusCondition(sb.Status.Conditions, v1alpha1.ConditionScheduled)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == reason && sb.Status.Phase == phase
	})
	if sb.Spec.NodeName != "" {
		w.t.Errorf("%s: bound to %s while it says %s", name, sb.Spec.NodeName, reason)
	}
}

// TestBinder runs the binder against a real API server with three
// registered nodes: spread by free memory, forks beside their source,
// restores where the snapshot is, a node gone marks its sandboxes Lost.
func TestBinder(t *testing.T) {
	w := start(t)
	ctx := context.Background()
	now := time.Now()
	w.node("n1", 8, "gvisor,vm", now)
	w.node("n2", 8, "gvisor", now)
	w.node("n3", 6, "gvisor", now)

	// Greedy by free memory, 1 GiB each from 8/8/6 GiB free: n1, n2
	// alternate until all three have 6 GiB, then n1, n2, n3 in turn.
	count := map[string]int{}
	for i := range 12 {
		w.create(fmt.Sprintf("s-%d", i), v1alpha1.SandboxSpec{SandboxBody: v1alpha1.SandboxBody{Resources: gib(1)}})
	}
	for i := range 12 {
		name := fmt.Sprintf("s-%d", i)
		count[w.bound(name)]++
		sb := w.wait(name, "scheduled", func(sb *v1alpha1.Sandbox) bool {
			return meta.IsStatusConditionTrue(sb.Status.Conditions, v1alpha1.ConditionScheduled)
		})
		if c := meta.FindStatusCondition(sb.Status.Conditions, v1alpha1.ConditionScheduled); c.Reason != controller.ReasonBound {
			t.Errorf("%s: scheduled for reason %q", name, c.Reason)
		}
	}
	if want := map[string]int{"n1": 5, "n2": 5, "n3": 2}; fmt.Sprint(count) != fmt.Sprint(want) {
		t.Errorf("12 sandboxes of 1 GiB spread %v over 8/8/6 GiB nodes, want %v", count, want)
	}

	// Only n1 offers vm; nothing has 16 GiB.
	w.create("vm", v1alpha1.SandboxSpec{SandboxBody: v1alpha1.SandboxBody{Backend: "vm", Resources: gib(1)}})
	if n := w.bound("vm"); n != "n1" {
		t.Errorf("a vm sandbox went to %s, the only vm node is n1", n)
	}
	w.create("huge", v1alpha1.SandboxSpec{SandboxBody: v1alpha1.SandboxBody{Resources: gib(16)}})
	w.waiting("huge", controller.ReasonNoNode, v1alpha1.PhasePending)

	// A fork goes beside its source even where memory is short, and
	// waits while its source is not placed.
	w.create("src", v1alpha1.SandboxSpec{NodeName: "n3"})
	w.create("fork", v1alpha1.SandboxSpec{ForkFrom: &v1alpha1.ForkFrom{Sandbox: "src", Count: 2}})
	if n := w.bound("fork"); n != "n3" {
		t.Errorf("a fork of a sandbox on n3 went to %s", n)
	}
	w.create("fork-huge", v1alpha1.SandboxSpec{ForkFrom: &v1alpha1.ForkFrom{Sandbox: "huge"}})
	w.waiting("fork-huge", controller.ReasonSourcePending, v1alpha1.PhasePending)
	w.create("fork-none", v1alpha1.SandboxSpec{ForkFrom: &v1alpha1.ForkFrom{Sandbox: "nope"}})
	w.waiting("fork-none", controller.ReasonSourceNotFound, v1alpha1.PhasePending)

	// A restore goes to a node holding its snapshot, and waits for one
	// that is not ready, woken when it is.
	snapshot := func(name string, phase v1alpha1.SnapshotPhase, nodes ...string) {
		t.Helper()
		s := &v1alpha1.SandboxSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Spec: v1alpha1.SandboxSnapshotSpec{SandboxRef: v1alpha1.LocalRef{Name: "src"}}}
		if err := w.c.Get(ctx, client.ObjectKeyFromObject(s), s); apierrors.IsNotFound(err) {
			if err := w.c.Create(ctx, s); err != nil {
				t.Fatal(err)
			}
		}
		// The binder binds it beside src meanwhile (TestSnapshotBinder).
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := w.c.Get(ctx, client.ObjectKeyFromObject(s), s); err != nil {
				return err
			}
			s.Status.Phase, s.Status.Nodes = phase, nodes
			return w.c.Status().Update(ctx, s)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	snapshot("snap", v1alpha1.SnapshotReady, "n2")
	w.create("restore", v1alpha1.SandboxSpec{ForkFrom: &v1alpha1.ForkFrom{Snapshot: "snap"}})
	if n := w.bound("restore"); n != "n2" {
		t.Errorf("a restore of a snapshot on n2 went to %s", n)
	}
	snapshot("later", v1alpha1.SnapshotSaving)
	w.create("restore-later", v1alpha1.SandboxSpec{ForkFrom: &v1alpha1.ForkFrom{Snapshot: "later"}})
	w.waiting("restore-later", controller.ReasonSnapshotPending, v1alpha1.PhasePending)
	snapshot("later", v1alpha1.SnapshotReady, "n3")
	if n := w.bound("restore-later"); n != "n3" {
		t.Errorf("a restore of a snapshot on n3 went to %s", n)
	}
	// One its holder has no room for goes where there is room, and that
	// node copies the snapshot.
	w.node("n4", 64, "gvisor", now) // huge (16 GiB) and its fork go there too
	w.create("restore-copy", v1alpha1.SandboxSpec{ForkFrom: &v1alpha1.ForkFrom{Snapshot: "snap"}, SandboxBody: v1alpha1.SandboxBody{Resources: gib(12)}})
	if n := w.bound("restore-copy"); n != "n4" {
		t.Errorf("a 12 GiB restore of a snapshot on an 8 GiB n2 went to %s, want n4", n)
	}
	sb := w.wait("restore-copy", "scheduled", func(sb *v1alpha1.Sandbox) bool {
		return meta.IsStatusConditionTrue(sb.Status.Conditions, v1alpha1.ConditionScheduled)
	})
	if c := meta.FindStatusCondition(sb.Status.Conditions, v1alpha1.ConditionScheduled); !strings.Contains(c.Message, "copies snapshot snap") {
		t.Errorf("restore-copy scheduled with %q", c.Message)
	}

	// n3 stops renewing: what it held is Lost, never rebound; the rest
	// is untouched, and nothing new goes there.
	var onN3 []string
	var all v1alpha1.SandboxList
	if err := w.c.List(ctx, &all); err != nil {
		t.Fatal(err)
	}
	for _, sb := range all.Items {
		if sb.Spec.NodeName == "n3" {
			onN3 = append(onN3, sb.Name)
		}
	}
	sort.Strings(onN3)
	if len(onN3) != 5 {
		t.Fatalf("on n3: %v, want two s-N, src, fork and restore-later", onN3)
	}
	w.node("n3", 6, "gvisor", now.Add(-2*time.Hour))
	for _, name := range onN3 {
		sb := w.wait(name, "lost", func(sb *v1alpha1.Sandbox) bool { return sb.Status.Phase == v1alpha1.PhaseLost })
		if c := meta.FindStatusCondition(sb.Status.Conditions, v1alpha1.ConditionReady); c == nil || c.Reason != controller.ReasonNodeLost || sb.Spec.NodeName != "n3" {
			t.Errorf("%s: lost with %+v on %q", name, c, sb.Spec.NodeName)
		}
	}
	w.create("fork-lost", v1alpha1.SandboxSpec{ForkFrom: &v1alpha1.ForkFrom{Sandbox: "src"}})
	w.waiting("fork-lost", controller.ReasonSourceLost, v1alpha1.PhaseFailed)
	w.create("after", v1alpha1.SandboxSpec{SandboxBody: v1alpha1.SandboxBody{Resources: gib(1)}})
	if n := w.bound("after"); n == "n3" {
		t.Error("a sandbox went to n3 after it was gone")
	}
	if err := w.c.List(ctx, &all); err != nil {
		t.Fatal(err)
	}
	for _, sb := range all.Items {
		if sb.Spec.NodeName != "n3" && sb.Status.Phase == v1alpha1.PhaseLost {
			t.Errorf("%s on %s is Lost", sb.Name, sb.Spec.NodeName)
		}
	}
}

// BenchmarkBind100 is the controller's time to bind 100 Sandboxes
// across three nodes, from the first create until the last is bound.
func BenchmarkBind100(b *testing.B) {
	w := start(b)
	ctx := context.Background()
	for _, n := range []string{"n1", "n2", "n3"} {
		w.node(n, 1024, "gvisor", time.Now())
	}
	const n = 100
	var samples []time.Duration
	for i := range b.N {
		t0 := time.Now()
		for j := range n {
			w.create(fmt.Sprintf("b%d-%d", i, j), v1alpha1.SandboxSpec{})
		}
		spread := map[string]int{}
		for j := range n {
			spread[w.bound(fmt.Sprintf("b%d-%d", i, j))]++
		}
		samples = append(samples, time.Since(t0))
		if len(spread) != 3 {
			b.Errorf("100 sandboxes spread over %v", spread)
		}
		if err := w.c.DeleteAllOf(ctx, &v1alpha1.Sandbox{}, client.InNamespace("default")); err != nil {
			b.Fatal(err)
		}
	}
	sort.Slice(samples, func(i, j int) bool { return samples[i] < samples[j] })
	b.ReportMetric(float64(samples[len(samples)/2].Milliseconds()), "bind100-p50-ms")
	b.ReportMetric(float64(samples[len(samples)-1].Milliseconds()), "bind100-max-ms")
}

// TestStatusRace writes the binder's Scheduled condition from a copy
// read before the node reported the sandbox Failed: the node's Ready
// condition and phase stay, beside the binder's condition.
func TestStatusRace(t *testing.T) {
	cl := kubetest.Start(t)
	ctx := context.Background()
	sb := &v1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "raced"}, Spec: v1alpha1.SandboxSpec{SandboxBody: v1alpha1.SandboxBody{Image: "debian:13"}}}
	if err := cl.Client.Create(ctx, sb); err != nil {
		t.Fatal(err)
	}
	stale := sb.DeepCopy()
	sb.Status.Phase = v1alpha1.PhaseFailed
	meta.SetStatusCondition(&sb.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: "CreateFailed", Message: "image not found"})
	if err := cl.Client.Status().Update(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if err := controller.SetStatus(ctx, cl.Client, stale, "", v1alpha1.ConditionScheduled, metav1.ConditionTrue, controller.ReasonBound, "bound"); err != nil {
		t.Fatal(err)
	}
	var got v1alpha1.Sandbox
	if err := cl.Client.Get(ctx, client.ObjectKeyFromObject(sb), &got); err != nil {
		t.Fatal(err)
	}
	ready := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady)
	sched := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionScheduled)
	if got.Status.Phase != v1alpha1.PhaseFailed || ready == nil || ready.Reason != "CreateFailed" || sched == nil || sched.Reason != controller.ReasonBound {
		t.Fatalf("status after the race: %+v", got.Status)
	}
	// A sandbox gone meanwhile is no error.
	if err := cl.Client.Delete(ctx, &got); err != nil {
		t.Fatal(err)
	}
	if err := controller.SetStatus(ctx, cl.Client, &got, v1alpha1.PhaseLost, v1alpha1.ConditionReady, metav1.ConditionFalse, "NodeLost", "gone"); err != nil {
		t.Fatalf("status of a deleted sandbox: %v", err)
	}
}

// TestSnapshotBinder makes SandboxSnapshots that name only their
// sandbox, as kubectl users write them: each is bound to its sandbox's
// node, waits while the sandbox is missing or not bound (and so does a
// restore of it, saying why), fails when the sandbox's node is gone, and
// one that names its node is left alone.
func TestSnapshotBinder(t *testing.T) {
	w := start(t)
	ctx := context.Background()
	now := time.Now()
	w.node("n1", 8, "gvisor", now)
	w.node("n2", 8, "gvisor", now)
	w.node("gone", 8, "gvisor", now.Add(-2*time.Hour))

	snapshot := func(name, sandbox, node string) {
		t.Helper()
		s := &v1alpha1.SandboxSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Spec: v1alpha1.SandboxSnapshotSpec{SandboxRef: v1alpha1.LocalRef{Name: sandbox}, NodeName: node}}
		if err := w.c.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	wait := func(name, what string, ok func(*v1alpha1.SandboxSnapshot, *metav1.Condition) bool) *v1alpha1.SandboxSnapshot {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		var s v1alpha1.SandboxSnapshot
		for {
			err := w.c.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, &s)
			if err == nil && ok(&s, meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionScheduled)) {
				return &s
			}
			if time.Now().After(deadline) {
				t.Fatalf("snapshot %s: not %s within 30 s: %v; spec.nodeName %q, status %+v", name, what, err, s.Spec.NodeName, s.Status)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waiting := func(name, reason string, phase v1alpha1.SnapshotPhase, mentions string) {
		t.Helper()
		s := wait(name, "waiting with "+reason, func(s *v1alpha1.SandboxSnapshot, c *metav1.Condition) bool {
			return c != nil && c.Status == metav1.ConditionFalse && c.Reason == reason && s.Status.Phase == phase
		})
		if c := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionScheduled); !strings.Contains(c.Message, mentions) || s.Spec.NodeName != "" {
			t.Errorf("snapshot %s: %q on %q, want a message naming %s and no node", name, c.Message, s.Spec.NodeName, mentions)
		}
	}
	bound := func(name, node string) {
		t.Helper()
		s := wait(name, "bound", func(s *v1alpha1.SandboxSnapshot, c *metav1.Condition) bool {
			return s.Spec.NodeName != "" && c != nil && c.Status == metav1.ConditionTrue
		})
		if c := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionScheduled); s.Spec.NodeName != node || c.Reason != controller.ReasonBound {
			t.Errorf("snapshot %s: bound to %s (%s), want %s", name, s.Spec.NodeName, c.Reason, node)
		}
	}

	// Beside its sandbox, on the node it was given.
	w.create("a", v1alpha1.SandboxSpec{NodeName: "n2"})
	snapshot("a-snap", "a", "")
	bound("a-snap", "n2")

	// A missing sandbox: said, and a restore of the snapshot says it too.
	snapshot("early", "later", "")
	waiting("early", controller.ReasonSourceNotFound, v1alpha1.SnapshotPending, "later not found")
	w.create("restore-early", v1alpha1.SandboxSpec{ForkFrom: &v1alpha1.ForkFrom{Snapshot: "early"}})
	sb := w.wait("restore-early", "waiting for its snapshot", func(sb *v1alpha1.Sandbox) bool {
		c := meta.FindStatusCondition(sb.Status.Conditions, v1alpha1.ConditionScheduled)
		return c != nil && c.Reason == controller.ReasonSnapshotPending
	})
	if c := meta.FindStatusCondition(sb.Status.Conditions, v1alpha1.ConditionScheduled); !strings.Contains(c.Message, "later not found") {
		t.Errorf("a restore of a snapshot of a missing sandbox says %q", c.Message)
	}
	// Made, it waits for a node (none has 16 GiB), and the snapshot with it;
	// bound, the snapshot follows.
	w.create("later", v1alpha1.SandboxSpec{SandboxBody: v1alpha1.SandboxBody{Resources: gib(16)}})
	waiting("early", controller.ReasonSourcePending, v1alpha1.SnapshotPending, "later is not on a node yet")
	w.node("big", 64, "gvisor", now)
	if n := w.bound("later"); n != "big" {
		t.Fatalf("a 16 GiB sandbox went to %s", n)
	}
	bound("early", "big")

	// The memory went with its node: failed, never bound.
	w.create("orphan", v1alpha1.SandboxSpec{NodeName: "gone"})
	snapshot("orphan-snap", "orphan", "")
	waiting("orphan-snap", controller.ReasonSourceLost, v1alpha1.SnapshotFailed, "node gone")

	// One that names its node (the gateway's) is the node's alone.
	snapshot("named", "a", "n2")
	time.Sleep(time.Second)
	var named v1alpha1.SandboxSnapshot
	if err := w.c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "named"}, &named); err != nil || len(named.Status.Conditions) != 0 {
		t.Errorf("a snapshot bound at birth: %v %+v", err, named.Status)
	}
}
