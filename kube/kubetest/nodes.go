package kubetest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"smolvm.dev/smolvm/client"
	"smolvm.dev/smolvm/kube/controller"
	"smolvm.dev/smolvm/kube/node"
	"smolvm.dev/smolvm/tests/testenv"
	"smolvm.dev/smolvm/tests/testserve"
)

// Namespace makes namespace ns, if it is not there yet.
func (c *Cluster) Namespace(t testing.TB, ns string) {
	t.Helper()
	err := c.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// binders numbers the binders one test process starts: controller-runtime
// refuses a controller name twice.
var binders atomic.Int32

// Binder runs the controller against c, its node Leases in leaseNS, until
// t ends; it returns once the binder is elected.
func (c *Cluster) Binder(t testing.TB, leaseNS string) {
	t.Helper()
	c.Namespace(t, leaseNS)
	ctx, cancel := context.WithCancel(context.Background())
	mgr, err := ctrl.NewManager(c.Config, controller.ManagerOptions(c.Scheme, leaseNS))
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(Writer{t}, nil))
	if err := controller.Setup(ctx, mgr, controller.Options{LeaseNamespace: leaseNS, Log: log, Name: fmt.Sprintf("binder-%d", binders.Add(1))}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	select {
	case <-mgr.Elected():
	case err := <-done:
		t.Fatalf("manager stopped before it was elected: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("not elected leader within a minute")
	}
}

// Writer logs to t, a line per write.
type Writer struct{ T testing.TB }

func (w Writer) Write(p []byte) (int, error) {
	w.T.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// Node is a node on this machine: a real smolvm serve on loopback and
// the node daemon beside it.
type Node struct {
	Name   string
	Dir    string // smolvm serve's data dir
	Serve  *testserve.Server
	Smolvm *client.Client
	stop   func()
}

// Node starts node name: a smolvm serve over a fresh data dir whose API
// token is token (nodes share one, as a gateway expects), and its node
// daemon over every namespace, registered in leaseNS. Both stop when t
// ends, or with Stop.
func (c *Cluster) Node(t testing.TB, name, token, leaseNS string) *Node {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "api-token"), []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := testserve.Start(t, dir, testenv.Guest(t))
	sc, err := client.New(srv.URL, srv.Token)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- node.Run(ctx, node.Config{
			Node: name, Kube: c.Config, Smolvm: sc, Token: token, Endpoint: srv.URL, LeaseNamespace: leaseNS,
			Backends: []string{"gvisor"}, Resync: time.Second,
			// Short, so a test sees a node go; long enough that a loaded
			// machine's stall does not look like one.
			LeaseDuration: 10 * time.Second,
			Log:           slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		})
	}()
	var stopped atomic.Bool
	n := &Node{Name: name, Dir: dir, Serve: srv, Smolvm: sc}
	n.stop = func() {
		if stopped.Swap(true) {
			return
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("node daemon %s: %v", name, err)
		}
	}
	t.Cleanup(func() {
		n.stop()
		// What a test left running would hold its data dir's files.
		sbs, _ := sc.List(context.Background())
		for _, s := range sbs {
			sc.Remove(context.Background(), s.ID, true)
		}
	})
	return n
}

// Stop stops the node daemon (its smolvm serve runs on).
func (n *Node) Stop() { n.stop() }
