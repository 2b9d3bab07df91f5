// Command smolvm-kube runs smolvm on Kubernetes: `smolvm-kube node` is the
// node daemon beside each node's `smolvm serve`, `smolvm-kube controller`
// binds Sandboxes to nodes (docs/kube.md). It is its own binary so that
// client-go never links into smolvm.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"

	"smolvm.dev/smolvm/client"
	"smolvm.dev/smolvm/kube/api/v1alpha1"
	"smolvm.dev/smolvm/kube/controller"
	"smolvm.dev/smolvm/kube/gateway"
	"smolvm.dev/smolvm/kube/node"
)

const usage = `usage:
  smolvm-kube node --node NAME --smolvm URL [flags]
      makes the Sandboxes with spec.nodeName=NAME so through the smolvm
      serve at URL, and registers the node in a Lease
  smolvm-kube controller [flags]
      binds Sandboxes to nodes (leader-elected)
  smolvm-kube gateway --keys FILE --node-token-file FILE [flags]
      serves E2B's API and smolvm's native API in front of the cluster
  smolvm-kube status [flags]
      prints the nodes, and the sandboxes, warm pools and snapshots on them
`

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "smolvm-kube:", err)
		os.Exit(2)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return errors.New(strings.TrimSpace(usage))
	}
	fs := flag.NewFlagSet("smolvm-kube "+args[0], flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), usage); fs.PrintDefaults() }
	kubeconfig := fs.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig file; empty is the in-cluster config")
	leaseNS := fs.String("lease-namespace", "kube-node-lease", "namespace of the nodes' Leases")
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	// controller-runtime logs through its global logger before a
	// manager's own is set, and prints a stack trace if there is none.
	ctrl.SetLogger(logr.FromSlogHandler(log.Handler()))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	kube := func() (*rest.Config, error) {
		cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig: %w", err)
		}
		return cfg, nil
	}
	switch args[0] {
	case "node":
		return runNode(ctx, fs, args[1:], kube, leaseNS, log)
	case "controller":
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		cfg, err := kube()
		if err != nil {
			return err
		}
		scheme, err := newScheme()
		if err != nil {
			return err
		}
		mgr, err := ctrl.NewManager(cfg, controller.ManagerOptions(scheme, *leaseNS))
		if err != nil {
			return fmt.Errorf("controller: %w", err)
		}
		if err := controller.Setup(ctx, mgr, controller.Options{LeaseNamespace: *leaseNS, Log: log}); err != nil {
			return err
		}
		return mgr.Start(ctx)
	case "gateway":
		return runGateway(ctx, fs, args[1:], kube, leaseNS, log)
	case "status":
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		cfg, err := kube()
		if err != nil {
			return err
		}
		return status(ctx, cfg, *leaseNS, os.Stdout)
	}
	return fmt.Errorf("unknown command %q\n%s", args[0], strings.TrimSpace(usage))
}

func runNode(ctx context.Context, fs *flag.FlagSet, args []string, kube func() (*rest.Config, error), leaseNS *string, log *slog.Logger) error {
	var cfg node.Config
	fs.StringVar(&cfg.Node, "node", os.Getenv("NODE_NAME"), "this node's name (default $NODE_NAME, as a DaemonSet's downward API sets it)")
	smolvm := fs.String("smolvm", "", "the node's smolvm serve: http://host:port or unix:///path")
	token := fs.String("token", "", "smolvm serve's API token (default $SMOLVM_TOKEN)")
	tokenFile := fs.String("token-file", "", "read the API token from this file: the api-token in smolvm serve's data dir, shared read-only")
	fs.StringVar(&cfg.Endpoint, "endpoint", "", "smolvm serve's URL as the cluster reaches it (default --smolvm)")
	fs.StringVar(&cfg.Namespace, "namespace", "", "watch only this namespace (default all)")
	backends := fs.String("backends", "gvisor", "comma-separated backends the node's smolvm serve runs")
	fs.DurationVar(&cfg.Resync, "resync", 0, "re-read each Sandbox's state this often (default 30s)")
	fs.DurationVar(&cfg.LeaseDuration, "lease-duration", 40*time.Second, "the node counts as gone this long after its last renewal")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *smolvm == "" {
		return errors.New("--smolvm is required")
	}
	if *tokenFile != "" {
		b, err := os.ReadFile(*tokenFile)
		if err != nil {
			return fmt.Errorf("--token-file: %w", err)
		}
		*token = strings.TrimSpace(string(b))
	}
	if *token == "" {
		*token = os.Getenv("SMOLVM_TOKEN")
	}
	if cfg.Endpoint == "" {
		cfg.Endpoint = *smolvm
	}
	cfg.LeaseNamespace, cfg.Backends, cfg.Log, cfg.Token = *leaseNS, strings.Split(*backends, ","), log, *token
	var err error
	if cfg.Smolvm, err = client.New(*smolvm, *token); err != nil {
		return err
	}
	if cfg.Kube, err = kube(); err != nil {
		return err
	}
	return node.Run(ctx, cfg)
}

func runGateway(ctx context.Context, fs *flag.FlagSet, args []string, kube func() (*rest.Config, error), leaseNS *string, log *slog.Logger) error {
	listen := fs.String("listen", ":8080", "address to serve on (plain HTTP: put TLS in front, as an Ingress does)")
	keysFile := fs.String("keys", "", "API keys: one \"NAMESPACE KEY\" per line, # comments; a key acts in its namespace only")
	tokenFile := fs.String("node-token-file", "", "the API token every node's smolvm serve shares")
	domain := fs.String("domain", "", "PORT-ID.DOMAIN reaches a sandbox's port (E2B's getHost); point *.DOMAIN at the gateway")
	ttl := fs.Duration("default-ttl", 15*time.Minute, "time to live of a sandbox created without one")
	if err := fs.Parse(args); err != nil {
		return err
	}
	keys, err := gateway.ReadKeys(*keysFile)
	if err != nil {
		return err
	}
	tok, err := os.ReadFile(*tokenFile)
	if err != nil {
		return fmt.Errorf("--node-token-file: %w", err)
	}
	cfg, err := kube()
	if err != nil {
		return err
	}
	scheme, err := newScheme()
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(cfg, gateway.ManagerOptions(scheme, *leaseNS))
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	if err := gateway.Setup(ctx, mgr.GetCache()); err != nil {
		return err
	}
	g, err := gateway.New(gateway.Config{
		Kube: mgr.GetClient(), Direct: mgr.GetAPIReader(), LeaseNamespace: *leaseNS, Keys: keys, NodeToken: strings.TrimSpace(string(tok)),
		Domain: *domain, DefaultTTL: *ttl, Log: log,
	})
	if err != nil {
		return err
	}
	srv := &http.Server{Addr: *listen, Handler: g, ReadHeaderTimeout: 30 * time.Second}
	errc := make(chan error, 2)
	go func() { errc <- mgr.Start(ctx) }()
	go func() {
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			errc <- errors.New("gateway: cache did not sync")
			return
		}
		log.Info("serving", "at", *listen)
		errc <- srv.ListenAndServe()
	}()
	select {
	case err = <-errc:
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv.Shutdown(shut)
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// newScheme knows smolvm.dev's types, Leases and Namespaces (their
// quota annotation): all smolvm-kube reads. Tests run on kubetest's
// scheme (all of client-go's kinds), so a new kind read in production
// must be added here, or it fails only in a real cluster ("no kind is
// registered"); TestScheme lists them.
func newScheme() (*k8sruntime.Scheme, error) {
	s := k8sruntime.NewScheme()
	return s, errors.Join(v1alpha1.AddToScheme(s), coordinationv1.AddToScheme(s), corev1.AddToScheme(s))
}
