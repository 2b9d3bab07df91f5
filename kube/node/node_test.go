package node_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kclient "sigs.k8s.io/controller-runtime/pkg/client"

	"smolvm.dev/smolvm/client"
	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/kube/api/v1alpha1"
	"smolvm.dev/smolvm/kube/kubetest"
	"smolvm.dev/smolvm/kube/node"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/tests/testenv"
	"smolvm.dev/smolvm/tests/testserve"
)

const ns = "default"

// setup starts an API server, a smolvm serve on loopback and a client of
// it; start runs the node daemon "n1" until the returned stop.
func setup(tb testing.TB) (*kubetest.Cluster, *testserve.Server, *client.Client, func(context.Context) (stop func())) {
	k := kubetest.Start(tb)
	srv := testserve.Start(tb, tb.TempDir(), testenv.Guest(tb))
	sc, err := client.New(srv.URL, srv.Token)
	if err != nil {
		tb.Fatal(err)
	}
	start := func(ctx context.Context) func() {
		dctx, dcancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- node.Run(dctx, node.Config{
				Node: "n1", Kube: k.Config, Smolvm: sc, Endpoint: srv.URL, Namespace: ns, LeaseNamespace: ns,
				Backends: []string{"gvisor"}, Resync: time.Second,
				Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
			})
		}()
		return func() {
			dcancel()
			if err := <-done; err != nil {
				tb.Errorf("node daemon: %v", err)
			}
		}
	}
	return k, srv, sc, start
}

// TestNodeDaemon runs the node daemon against a real kube-apiserver and
// a real smolvm serve on loopback: a Sandbox bound to the node runs and
// answers an exec through its endpoint; pause, a checkpoint, a fork and a
// restore of two copies go through the node's smolvm serve; one bound to
// another node is left alone; a restarted daemon (its statuses wiped)
// finds what it made instead of making it again; a deleted Sandbox's
// sandbox is removed.
func TestNodeDaemon(t *testing.T) {
	k, srv, sc, start := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	c := k.Client

	stop := start(ctx)

	body := v1alpha1.SandboxBody{Image: sandbox.DefaultImage, Command: []string{"sleep", "infinity"}}
	create := func(name, nodeName string, spec v1alpha1.SandboxSpec) *v1alpha1.Sandbox {
		t.Helper()
		spec.NodeName = nodeName
		sb := &v1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: spec}
		if err := c.Create(ctx, sb); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		return sb
	}
	// poll calls done until it says so, failing the test on its error
	// or when ctx ends.
	poll := func(what string, done func() (bool, error)) {
		t.Helper()
		for {
			ok, err := done()
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if ok {
				return
			}
			select {
			case <-ctx.Done():
				t.Fatalf("%s: timed out", what)
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	// wait polls the Sandbox until ok; a Failed phase fails the test.
	wait := func(name string, ok func(*v1alpha1.Sandbox) bool) *v1alpha1.Sandbox {
		t.Helper()
		var sb v1alpha1.Sandbox
		poll("sandbox "+name, func() (bool, error) {
			if err := c.Get(ctx, kclient.ObjectKey{Namespace: ns, Name: name}, &sb); err != nil {
				return false, err
			}
			if sb.Status.Phase == v1alpha1.PhaseFailed {
				return false, fmt.Errorf("failed: %+v", sb.Status.Conditions)
			}
			return ok(&sb), nil
		})
		return &sb
	}
	phase := func(p v1alpha1.SandboxPhase) func(*v1alpha1.Sandbox) bool {
		return func(sb *v1alpha1.Sandbox) bool { return sb.Status.Phase == p }
	}
	update := func(name string, change func(*v1alpha1.Sandbox)) {
		t.Helper()
		var sb v1alpha1.Sandbox
		if err := c.Get(ctx, kclient.ObjectKey{Namespace: ns, Name: name}, &sb); err != nil {
			t.Fatal(err)
		}
		change(&sb)
		if err := c.Update(ctx, &sb); err != nil {
			t.Fatalf("update %s: %v", name, err)
		}
	}

	create("a", "n1", v1alpha1.SandboxSpec{SandboxBody: body})
	other := create("other", "n2", v1alpha1.SandboxSpec{SandboxBody: body})
	a := wait("a", phase(v1alpha1.PhaseRunning))
	if len(a.Status.Instances) != 1 || a.Status.NodeName != "n1" || a.Status.Endpoint != srv.URL+"/v1/sandboxes/"+a.Status.Instances[0].ID {
		t.Fatalf("a's status: %+v", a.Status)
	}
	id := a.Status.Instances[0].ID
	var out bytes.Buffer
	if exit, err := sc.Exec(ctx, id, sandbox.Process{Args: []string{"sh", "-c", "echo hi from $(hostname) > /tmp/mark; cat /tmp/mark"}}, sandbox.Stdio{Stdout: &out}); err != nil || exit.Code != 0 {
		t.Fatalf("exec in a: %v %+v", err, exit)
	}
	if !strings.HasPrefix(out.String(), "hi from") {
		t.Errorf("exec in a said %q", out.String())
	}

	var lease coordinationv1.Lease
	poll("node lease", func() (bool, error) {
		err := c.Get(ctx, kclient.ObjectKey{Namespace: ns, Name: v1alpha1.LeasePrefix + "n1"}, &lease)
		return err == nil, kclient.IgnoreNotFound(err)
	})
	if n, ok := v1alpha1.NodeFromLease(&lease); !ok || n.Name != "n1" || n.Endpoint != srv.URL || !n.Offers("gvisor") || n.Offers("vm") || n.CPUs < 1 || time.Until(n.Expires) < 20*time.Second {
		t.Errorf("node lease says %+v (%v): %+v", n, ok, lease)
	}

	update("a", func(sb *v1alpha1.Sandbox) { sb.Spec.Paused = true })
	wait("a", phase(v1alpha1.PhasePaused))
	if s, err := sc.Get(ctx, id); err != nil || s.State != sandbox.StatePaused {
		t.Fatalf("a after pause: %v %+v", err, s)
	}
	update("a", func(sb *v1alpha1.Sandbox) { sb.Spec.Paused = false })
	wait("a", phase(v1alpha1.PhaseRunning))

	snap := &v1alpha1.SandboxSnapshot{
		ObjectMeta: metav1.ObjectMeta{Name: "snap", Namespace: ns},
		Spec:       v1alpha1.SandboxSnapshotSpec{SandboxRef: v1alpha1.LocalRef{Name: "a"}, NodeName: "n1"},
	}
	if err := c.Create(ctx, snap); err != nil {
		t.Fatal(err)
	}
	poll("snapshot", func() (bool, error) {
		if err := c.Get(ctx, kclient.ObjectKeyFromObject(snap), snap); err != nil {
			return false, err
		}
		if snap.Status.Phase == v1alpha1.SnapshotFailed {
			return false, fmt.Errorf("failed: %+v", snap.Status.Conditions)
		}
		return snap.Status.Phase == v1alpha1.SnapshotReady, nil
	})
	if snap.Status.ID == "" || snap.Status.SizeBytes == 0 || len(snap.Status.Nodes) != 1 {
		t.Errorf("snapshot's status: %+v", snap.Status)
	}
	create("fork", "n1", v1alpha1.SandboxSpec{ForkFrom: &v1alpha1.ForkFrom{Sandbox: "a"}})
	create("restored", "n1", v1alpha1.SandboxSpec{ForkFrom: &v1alpha1.ForkFrom{Snapshot: "snap", Count: 2}})
	fork := wait("fork", phase(v1alpha1.PhaseRunning))
	restored := wait("restored", phase(v1alpha1.PhaseRunning))
	if len(restored.Status.Instances) != 2 {
		t.Errorf("restored has %d instances, want 2", len(restored.Status.Instances))
	}
	// Copies keep the source's memory and files: the mark a wrote.
	for _, in := range append(fork.Status.Instances, restored.Status.Instances...) {
		out.Reset()
		if exit, err := sc.Exec(ctx, in.ID, sandbox.Process{Args: []string{"cat", "/tmp/mark"}}, sandbox.Stdio{Stdout: &out}); err != nil || exit.Code != 0 || !strings.HasPrefix(out.String(), "hi from") {
			t.Errorf("copy %s: %v %+v %q", in.ID, err, exit, out.String())
		}
	}

	all, err := sc.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range all {
		if strings.Contains(s.Name, string(other.UID)) {
			t.Errorf("node n1 made %s for a Sandbox bound to n2", s.Name)
		}
	}
	if len(all) != 4 {
		t.Errorf("smolvm serve holds %d sandboxes, want 4 (a, fork, 2 restored)", len(all))
	}

	// A restart that lost the statuses too (as a crash between create
	// and the status write would): the daemon must find its sandboxes by
	// name, not make new ones.
	stop()
	for _, name := range []string{"a", "fork", "restored"} {
		var sb v1alpha1.Sandbox
		if err := c.Get(ctx, kclient.ObjectKey{Namespace: ns, Name: name}, &sb); err != nil {
			t.Fatal(err)
		}
		sb.Status = v1alpha1.SandboxStatus{}
		if err := c.Status().Update(ctx, &sb); err != nil {
			t.Fatal(err)
		}
	}
	stop = start(ctx)
	defer func() { stop() }()
	for _, name := range []string{"a", "fork", "restored"} {
		wait(name, phase(v1alpha1.PhaseRunning))
	}
	if a = wait("a", phase(v1alpha1.PhaseRunning)); a.Status.Instances[0].ID != id {
		t.Errorf("after the restart a is %s, was %s", a.Status.Instances[0].ID, id)
	}
	if again, err := sc.List(ctx); err != nil || len(again) != len(all) {
		t.Errorf("after the restart smolvm serve holds %d sandboxes (%v), want %d", len(again), err, len(all))
	}

	// Deleting the objects removes what the node made for them.
	for _, o := range []kclient.Object{a, fork, restored, snap} {
		if err := c.Delete(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	for _, o := range []kclient.Object{a, fork, restored, snap} {
		poll(o.GetName()+" let go", func() (bool, error) {
			err := c.Get(ctx, kclient.ObjectKeyFromObject(o), o)
			return apierrors.IsNotFound(err), kclient.IgnoreNotFound(err)
		})
	}
	if _, err := sc.Get(ctx, id); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("a's sandbox after delete: %v, want not found", err)
	}
	if left, err := sc.List(ctx); err != nil || len(left) != 0 {
		t.Errorf("after the deletes smolvm serve holds %d sandboxes (%v)", len(left), err)
	}
	if snaps, err := sc.Snapshots(ctx); err != nil || len(snaps) != 0 {
		t.Errorf("after the deletes smolvm serve holds %d snapshots (%v)", len(snaps), err)
	}
}

// BenchmarkCreate is the cost of going through Kubernetes without the
// controller: a Sandbox bound to the node, from its create until its
// status says Running (API server, the daemon's watch, smolvm serve,
// the status write, a watch back), against a direct Create through the
// Go client on the same smolvm serve in the same run. Each iteration
// does both, one at a time, each removed before the other starts.
func BenchmarkCreate(b *testing.B) {
	k, _, sc, start := setup(b)
	ctx := context.Background()
	defer start(ctx)()
	wc, err := kclient.NewWithWatch(k.Config, kclient.Options{Scheme: k.Scheme})
	if err != nil {
		b.Fatal(err)
	}
	body := v1alpha1.SandboxBody{Image: sandbox.DefaultImage, Command: []string{"sleep", "infinity"}}
	var viaKube, direct []time.Duration
	viaKubeOnce := func(name string) {
		w, err := wc.Watch(ctx, &v1alpha1.SandboxList{}, kclient.InNamespace(ns), kclient.MatchingFields{"metadata.name": name})
		if err != nil {
			b.Fatal(err)
		}
		defer w.Stop()
		sb := &v1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: v1alpha1.SandboxSpec{SandboxBody: body, NodeName: "n1"}}
		t0 := time.Now()
		if err := wc.Create(ctx, sb); err != nil {
			b.Fatal(err)
		}
		for ev := range w.ResultChan() {
			if s, ok := ev.Object.(*v1alpha1.Sandbox); ok && s.Status.Phase == v1alpha1.PhaseRunning {
				break
			} else if ok && s.Status.Phase == v1alpha1.PhaseFailed {
				b.Fatalf("%s failed: %+v", name, s.Status.Conditions)
			}
		}
		viaKube = append(viaKube, time.Since(t0))
		// Gone before the next one (and before the daemon stops): the
		// node removes its sandbox first.
		if err := wc.Delete(ctx, sb); err != nil {
			b.Fatal(err)
		}
		for !apierrors.IsNotFound(wc.Get(ctx, kclient.ObjectKeyFromObject(sb), sb)) {
			time.Sleep(50 * time.Millisecond)
		}
	}
	directOnce := func(name string) {
		t0 := time.Now()
		s, err := sc.Create(ctx, sandbox.CreateOptions{Name: name, Image: body.Image, Config: sandbox.Config{Cmd: body.Command}, Start: true})
		if err != nil {
			b.Fatal(err)
		}
		direct = append(direct, time.Since(t0))
		if err := sc.Remove(ctx, s.ID, true); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	// One at a time, the order alternating, so neither runs beside the
	// other's sandbox or always second.
	for i := range b.N {
		name := fmt.Sprintf("bench-%d", i)
		if i%2 == 0 {
			viaKubeOnce(name)
			directOnce(name + "-direct")
		} else {
			directOnce(name + "-direct")
			viaKubeOnce(name)
		}
	}
	b.StopTimer()
	for _, m := range []struct {
		unit string
		d    []time.Duration
	}{{"kube", viaKube}, {"direct", direct}} {
		slices.Sort(m.d)
		b.ReportMetric(float64(m.d[len(m.d)/2].Milliseconds()), m.unit+"-p50-ms")
		b.ReportMetric(float64(m.d[(len(m.d)*99)/100].Milliseconds()), m.unit+"-p99-ms")
	}
	load, _ := os.ReadFile("/proc/loadavg")
	b.Logf("load average: %s", strings.TrimSpace(string(load)))
}

func TestOwner(t *testing.T) {
	const uid = "0f8e3a5c-2b1d-4c7e-9a6f-1e2d3c4b5a69"
	for name, want := range map[string]string{
		"k-" + uid: uid, "k-" + uid + "-3": uid,
		"k-" + uid + "x": "", "k-short": "", uid: "", "dev": "",
	} {
		got, ok := node.Owner(name)
		if string(got) != want || ok != (want != "") {
			t.Errorf("owner(%q) = %q, %t; want %q", name, got, ok, want)
		}
	}
}

// TestTenants: a Sandbox's spec.tenant makes its smolvm sandbox that
// tenant's (the tenant added on first use), and so its snapshot; a
// Sandbox of another tenant can neither fork it nor restore the
// snapshot, and fails saying so.
func TestTenants(t *testing.T) {
	k, _, sc, start := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := k.Client
	defer start(ctx)()

	get := func(key kclient.ObjectKey, o kclient.Object, done func() bool) {
		t.Helper()
		for {
			if err := c.Get(ctx, key, o); err == nil && done() {
				return
			}
			select {
			case <-ctx.Done():
				t.Fatalf("%s: timed out: %+v", key.Name, o)
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	run := func(name, tenant string, spec v1alpha1.SandboxSpec) *v1alpha1.Sandbox {
		t.Helper()
		spec.NodeName, spec.Tenant = "n1", tenant
		sb := &v1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: spec}
		if err := c.Create(ctx, sb); err != nil {
			t.Fatal(err)
		}
		get(kclient.ObjectKeyFromObject(sb), sb, func() bool {
			return sb.Status.Phase == v1alpha1.PhaseRunning || sb.Status.Phase == v1alpha1.PhaseFailed
		})
		return sb
	}
	owner := func(sb *v1alpha1.Sandbox) string {
		t.Helper()
		s, err := sc.Get(ctx, sb.Status.Instances[0].ID)
		if err != nil {
			t.Fatal(err)
		}
		return s.Tenant
	}

	src := run("src", "acme", v1alpha1.SandboxSpec{SandboxBody: v1alpha1.SandboxBody{Image: sandbox.DefaultImage, Command: []string{"sleep", "infinity"}}})
	if src.Status.Phase != v1alpha1.PhaseRunning || owner(src) != "acme" {
		t.Fatalf("acme's sandbox: %+v", src.Status)
	}
	snap := &v1alpha1.SandboxSnapshot{ObjectMeta: metav1.ObjectMeta{Name: "snap", Namespace: ns}, Spec: v1alpha1.SandboxSnapshotSpec{SandboxRef: v1alpha1.LocalRef{Name: "src"}, NodeName: "n1"}}
	if err := c.Create(ctx, snap); err != nil {
		t.Fatal(err)
	}
	get(kclient.ObjectKeyFromObject(snap), snap, func() bool { return snap.Status.Phase == v1alpha1.SnapshotReady })
	if snap.Status.Tenant != "acme" {
		t.Fatalf("the snapshot's tenant: %+v", snap.Status)
	}
	if cp := run("copy", "acme", v1alpha1.SandboxSpec{ForkFrom: &v1alpha1.ForkFrom{Snapshot: "snap"}}); cp.Status.Phase != v1alpha1.PhaseRunning || owner(cp) != "acme" {
		t.Fatalf("acme's restore: %+v", cp.Status)
	}
	for name, from := range map[string]*v1alpha1.ForkFrom{"other-restore": {Snapshot: "snap"}, "other-fork": {Sandbox: "src"}} {
		sb := run(name, "other", v1alpha1.SandboxSpec{ForkFrom: from})
		ready := meta.FindStatusCondition(sb.Status.Conditions, v1alpha1.ConditionReady)
		if sb.Status.Phase != v1alpha1.PhaseFailed || ready == nil || !regexp.MustCompile(`not found|never existed`).MatchString(ready.Message) {
			t.Errorf("%s, of tenant other: %+v", name, sb.Status)
		}
	}
	var list v1alpha1.SandboxList
	if err := c.List(ctx, &list, kclient.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		if err := c.Delete(ctx, &list.Items[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Delete(ctx, snap); err != nil {
		t.Fatal(err)
	}
	// The node removes them all, whoever's they were.
	for {
		sbs, err := sc.List(ctx)
		snaps, serr := sc.Snapshots(ctx)
		if err == nil && serr == nil && len(sbs) == 0 && len(snaps) == 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("left on the node: %d sandboxes, %d snapshots (%v %v)", len(sbs), len(snaps), err, serr)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
