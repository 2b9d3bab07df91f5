// Command smolvm-kube runs smolvm on Kubernetes: `smolvm-kube node` is the
// node daemon beside each node's `smolvm serve` (docs/kube.md). It is its
// own binary so that client-go never links into smolvm.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"k8s.io/client-go/tools/clientcmd"

	"smolvm.dev/smolvm/client"
	"smolvm.dev/smolvm/kube/node"
)

const usage = `usage: smolvm-kube node --node NAME --smolvm URL [flags]

Runs the node daemon: makes the Sandboxes with spec.nodeName=NAME so
through the smolvm serve at URL, and registers the node in a Lease.
`

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "smolvm-kube:", err)
		os.Exit(2)
	}
}

func run(args []string) error {
	if len(args) == 0 || args[0] != "node" {
		return errors.New(strings.TrimSpace(usage))
	}
	fs := flag.NewFlagSet("smolvm-kube node", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), usage); fs.PrintDefaults() }
	var cfg node.Config
	fs.StringVar(&cfg.Node, "node", os.Getenv("NODE_NAME"), "this node's name (default $NODE_NAME, as a DaemonSet's downward API sets it)")
	smolvm := fs.String("smolvm", "", "the node's smolvm serve: http://host:port or unix:///path")
	token := fs.String("token", "", "smolvm serve's API token (default $SMOLVM_TOKEN)")
	fs.StringVar(&cfg.Endpoint, "endpoint", "", "smolvm serve's URL as the cluster reaches it (default --smolvm)")
	kubeconfig := fs.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig file; empty is the in-cluster config")
	fs.StringVar(&cfg.Namespace, "namespace", "", "watch only this namespace (default all)")
	fs.StringVar(&cfg.LeaseNamespace, "lease-namespace", "kube-node-lease", "namespace of the node's Lease")
	backends := fs.String("backends", "gvisor", "comma-separated backends the node's smolvm serve runs")
	fs.DurationVar(&cfg.Resync, "resync", 0, "re-read each Sandbox's state this often (default 30s)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *smolvm == "" {
		return errors.New("--smolvm is required")
	}
	if *token == "" {
		*token = os.Getenv("SMOLVM_TOKEN")
	}
	if cfg.Endpoint == "" {
		cfg.Endpoint = *smolvm
	}
	cfg.Backends = strings.Split(*backends, ",")
	var err error
	if cfg.Smolvm, err = client.New(*smolvm, *token); err != nil {
		return err
	}
	if cfg.Kube, err = clientcmd.BuildConfigFromFlags("", *kubeconfig); err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	cfg.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return node.Run(ctx, cfg)
}
