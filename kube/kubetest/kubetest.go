// Package kubetest starts a real kube-apiserver and etcd (envtest) with
// smolvm's CRDs installed, for the kube/ tests.
package kubetest

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"smolvm.dev/smolvm/kube/api/v1alpha1"
	"smolvm.dev/smolvm/tests/testenv"
)

// Cluster is a running API server with the CRDs of deploy/crds.
type Cluster struct {
	Config *rest.Config
	// Client knows the core types and smolvm.dev's.
	Client client.Client
	Scheme *k8sruntime.Scheme
}

// Start starts the API server for t and stops it when t ends; it skips t
// where testenv.Kube does. apiserverFlags ("name=value") replace
// envtest's own (it sets --allow-privileged=true, say).
func Start(t testing.TB, apiserverFlags ...string) *Cluster {
	t.Helper()
	apiserver, etcd := testenv.Kube(t)
	// controller-runtime logs through a process-wide logger, and prints
	// a stack trace when none is set; errors are what a test wants.
	ctrl.SetLogger(logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))
	scheme := k8sruntime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	env := &envtest.Environment{
		Scheme:                scheme,
		CRDDirectoryPaths:     []string{filepath.Join(testenv.Root(), "deploy", "crds")},
		ErrorIfCRDPathMissing: true,
		// The machine is shared: an API server's first start has taken
		// several seconds under load, past envtest's default of 20 s.
		ControlPlaneStartTimeout: 2 * time.Minute,
	}
	api := env.ControlPlane.GetAPIServer()
	api.Path = apiserver
	for _, f := range apiserverFlags {
		name, value, _ := strings.Cut(f, "=")
		api.Configure().Set(name, value)
	}
	env.ControlPlane.Etcd = &envtest.Etcd{Path: etcd}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start kube-apiserver and etcd: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stop kube-apiserver and etcd: %v", err)
		}
	})
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return &Cluster{Config: cfg, Client: c, Scheme: scheme}
}
