package gateway_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kclient "sigs.k8s.io/controller-runtime/pkg/client"

	"smolvm.dev/smolvm/client"
	"smolvm.dev/smolvm/kube/api/v1alpha1"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/tests/testimage"
)

// sleeper is a sandbox body that stays up.
var sleeper = v1alpha1.SandboxBody{Image: sandbox.DefaultImage, Command: []string{"sleep", "infinity"}}

// put makes o in team-a.
func (c *cluster) put(tb testing.TB, o kclient.Object) {
	tb.Helper()
	o.SetNamespace("team-a")
	if err := c.k.Client.Create(context.Background(), o); err != nil {
		tb.Fatalf("create %s: %v", o.GetName(), err)
	}
}

// output runs args in sandbox id through cl and returns what it printed
// on stdout and stderr; a failed exec or a non-zero exit fails the test.
func output(tb testing.TB, cl *client.Client, id string, args ...string) string {
	tb.Helper()
	var out bytes.Buffer
	exit, err := cl.Exec(context.Background(), id, sandbox.Process{Args: args}, sandbox.Stdio{Stdout: &out, Stderr: &out})
	if err != nil || exit.Code != 0 {
		tb.Fatalf("exec %q in %s: %v %+v %s", args, id, err, exit, out.String())
	}
	return out.String()
}

// sandboxIn waits until Sandbox name in team-a is in phase want.
func (c *cluster) sandboxIn(tb testing.TB, name string, want v1alpha1.SandboxPhase) *v1alpha1.Sandbox {
	tb.Helper()
	var sb v1alpha1.Sandbox
	deadline := time.Now().Add(2 * time.Minute)
	for {
		err := c.k.Client.Get(context.Background(), kclient.ObjectKey{Namespace: "team-a", Name: name}, &sb)
		if err == nil && sb.Status.Phase == want {
			return &sb
		}
		if err == nil && sb.Status.Phase == v1alpha1.PhaseFailed {
			tb.Fatalf("sandbox %s failed: %+v", name, sb.Status.Conditions)
		}
		if time.Now().After(deadline) {
			tb.Fatalf("sandbox %s not %s in 2 min: %v %+v", name, want, err, sb.Status)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// snapshotReady waits until SandboxSnapshot name in team-a is Ready.
func (c *cluster) snapshotReady(tb testing.TB, name string) *v1alpha1.SandboxSnapshot {
	tb.Helper()
	var s v1alpha1.SandboxSnapshot
	deadline := time.Now().Add(2 * time.Minute)
	for {
		err := c.k.Client.Get(context.Background(), kclient.ObjectKey{Namespace: "team-a", Name: name}, &s)
		if err == nil && s.Status.Phase == v1alpha1.SnapshotReady {
			return &s
		}
		if time.Now().After(deadline) {
			tb.Fatalf("snapshot %s not Ready in 2 min: %v %+v", name, err, s.Status)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSnapshotCopy restores a snapshot taken on n1 on n2: n2 copies it
// from n1 (recorded in the snapshot's status, with its time), and the
// restored sandbox has the source's files and processes; a second
// restore there copies nothing. The sandboxes are a tenant's, and so is
// the copy. The sandboxes are reached through the gateway.
func TestSnapshotCopy(t *testing.T) {
	c := start(t)
	ctx := context.Background()
	gw := c.client(t, keyA)
	c.put(t, &v1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "src"}, Spec: v1alpha1.SandboxSpec{SandboxBody: sleeper, NodeName: "n1", Tenant: "acme"}})
	src := c.sandboxIn(t, "src", v1alpha1.PhaseRunning)
	run := func(id, script string) string { return output(t, gw, id, "sh", "-c", script) }
	run(src.Status.Instances[0].ID, "echo kept > /tmp/state; sleep 1000 & echo $! > /tmp/pid")

	c.put(t, &v1alpha1.SandboxSnapshot{ObjectMeta: metav1.ObjectMeta{Name: "snap"}, Spec: v1alpha1.SandboxSnapshotSpec{SandboxRef: v1alpha1.LocalRef{Name: "src"}, NodeName: "n1"}})
	c.snapshotReady(t, "snap")
	c.put(t, &v1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "far"}, Spec: v1alpha1.SandboxSpec{ForkFrom: &v1alpha1.ForkFrom{Snapshot: "snap"}, NodeName: "n2", Tenant: "acme"}})
	far := c.sandboxIn(t, "far", v1alpha1.PhaseRunning)
	if got := run(far.Status.Instances[0].ID, "cat /tmp/state; kill -0 $(cat /tmp/pid) && echo alive"); got != "kept\nalive\n" {
		t.Fatalf("the restore on n2 has %q, want the source's file and process", got)
	}
	snap := c.snapshotReady(t, "snap")
	if !slices.Equal(snap.Status.Nodes, []string{"n1", "n2"}) || len(snap.Status.Copies) != 1 || snap.Status.Tenant != "acme" {
		t.Fatalf("snapshot status after the copy: %+v", snap.Status)
	}
	cp := snap.Status.Copies[0]
	if cp.Node != "n2" || cp.From != "n1" || cp.Milliseconds <= 0 || cp.Bytes != snap.Status.SizeBytes {
		t.Fatalf("copy recorded as %+v (snapshot of %d bytes)", cp, snap.Status.SizeBytes)
	}
	t.Logf("copied %d bytes n1 -> n2 in %d ms", cp.Bytes, cp.Milliseconds)
	if got, err := c.nodes[1].Smolvm.Snapshots(ctx); err != nil || len(got) != 1 || got[0].ID != snap.Status.ID || got[0].Tenant != "acme" {
		t.Fatalf("n2's snapshots: %v %+v", err, got)
	}

	// A second restore on n2 uses the copy there.
	c.put(t, &v1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "far2"}, Spec: v1alpha1.SandboxSpec{ForkFrom: &v1alpha1.ForkFrom{Snapshot: "snap"}, NodeName: "n2", Tenant: "acme"}})
	far2 := c.sandboxIn(t, "far2", v1alpha1.PhaseRunning)
	if got := run(far2.Status.Instances[0].ID, "cat /tmp/state"); strings.TrimSpace(got) != "kept" {
		t.Fatalf("the second restore on n2 has %q", got)
	}
	if again := c.snapshotReady(t, "snap"); len(again.Status.Copies) != 1 || !again.Status.Copies[0].Time.Equal(&cp.Time) {
		t.Fatalf("a second restore copied again: %+v", again.Status.Copies)
	}

	// The snapshot object deleted (its restores first): its holder removes
	// its own through the finalizer, and n2's sweep removes the copy.
	for _, name := range []string{"far", "far2"} {
		if err := gw.Remove(ctx, name, true); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.k.Client.Delete(ctx, snap); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		left := 0
		for _, n := range c.nodes {
			got, err := n.Smolvm.Snapshots(ctx)
			if err != nil {
				t.Fatal(err)
			}
			left += len(got)
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d smolvm snapshots left 30 s after their object was deleted", left)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestImagePull runs Sandboxes of images only a registry on loopback
// has: a node pulls a Sandbox's image, as a kubelet would; a node
// restoring a snapshot taken elsewhere pulls the snapshot's image before
// copying it, and refuses the image its tag names now if that is not the
// snapshot's; an image the registry lacks fails the Sandbox with the
// registry's answer.
func TestImagePull(t *testing.T) {
	c := start(t)
	ctx := context.Background()
	reg := testimage.Serve(t)
	ref, id := reg.Push(t, "team/app:1", map[string]string{"/marker": "one"})
	ref2, id2 := reg.Push(t, "team/app:2", map[string]string{"/marker": "two"})
	has := func(n int, id string) bool {
		t.Helper()
		imgs, err := c.nodes[n].Smolvm.Images(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(imgs, func(img sandbox.Image) bool { return img.ID == id })
	}
	marker := func(n int, sb *v1alpha1.Sandbox) string {
		t.Helper()
		return output(t, c.nodes[n].Smolvm, sb.Status.Instances[0].ID, testimage.Program, "/marker")
	}
	failure := func(name string) string {
		t.Helper()
		sb := c.sandboxIn(t, name, v1alpha1.PhaseFailed)
		return meta.FindStatusCondition(sb.Status.Conditions, "Ready").Message
	}

	// Two sources on n1, each pulled there, and a snapshot of each.
	for i, r := range []string{ref, ref2} {
		name := fmt.Sprintf("src%d", i+1)
		c.put(t, &v1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.SandboxSpec{SandboxBody: v1alpha1.SandboxBody{Image: r}, NodeName: "n1"}})
		c.put(t, &v1alpha1.SandboxSnapshot{ObjectMeta: metav1.ObjectMeta{Name: name + "-snap"}, Spec: v1alpha1.SandboxSnapshotSpec{SandboxRef: v1alpha1.LocalRef{Name: name}, NodeName: "n1"}})
	}
	if got := marker(0, c.sandboxIn(t, "src1", v1alpha1.PhaseRunning)); got != "/marker: one\n" {
		t.Fatalf("src1 runs %q", got)
	}
	if snap := c.snapshotReady(t, "src2-snap"); snap.Status.Image != ref2 || snap.Status.ImageID != id2 {
		t.Fatalf("the snapshot records image %q %q, want %s %s", snap.Status.Image, snap.Status.ImageID, ref2, id2)
	}
	c.snapshotReady(t, "src1-snap")
	if has(1, id) || has(1, id2) {
		t.Fatal("n2 has the images before any restore there")
	}

	// A restore on n2 pulls the snapshot's image there, then copies it.
	c.put(t, &v1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "far"}, Spec: v1alpha1.SandboxSpec{ForkFrom: &v1alpha1.ForkFrom{Snapshot: "src2-snap"}, NodeName: "n2"}})
	if got := marker(1, c.sandboxIn(t, "far", v1alpha1.PhaseRunning)); got != "/marker: two\n" {
		t.Fatalf("the restore on n2 runs %q", got)
	}
	if !has(1, id2) {
		t.Fatal("n2 restored without the image")
	}

	// The first tag moves: n2 will not restore the snapshot on the image
	// the tag names now, and copies nothing.
	reg.Push(t, "team/app:1", map[string]string{"/marker": "moved"})
	c.put(t, &v1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "moved"}, Spec: v1alpha1.SandboxSpec{ForkFrom: &v1alpha1.ForkFrom{Snapshot: "src1-snap"}, NodeName: "n2"}})
	if msg := failure("moved"); !strings.Contains(msg, "tag has moved") || !strings.Contains(msg, id) {
		t.Fatalf("a restore over a moved tag: %q", msg)
	}
	if snap := c.snapshotReady(t, "src1-snap"); len(snap.Status.Copies) != 0 {
		t.Fatalf("copied despite the wrong image: %+v", snap.Status.Copies)
	}

	// An image the registry lacks, and a registry that is not there.
	for name, image := range map[string]string{"none": reg.Host + "/team/none:1", "gone": "127.0.0.1:1/team/app:1"} {
		c.put(t, &v1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.SandboxSpec{SandboxBody: v1alpha1.SandboxBody{Image: image}}})
		if msg := failure(name); !strings.Contains(msg, image) || !strings.Contains(msg, "pulling it failed") {
			t.Fatalf("a Sandbox of %s: %q", image, msg)
		}
	}
}
