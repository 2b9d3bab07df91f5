package node

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kclient "sigs.k8s.io/controller-runtime/pkg/client"

	"smolvm.dev/smolvm/kube/api/v1alpha1"
)

// The node registers in a Lease as kube/api/node.go's contract says,
// valid for Config.LeaseDuration and renewed four times in it.

// register keeps the node's Lease renewed until ctx ends.
func (d *daemon) register(ctx context.Context) error {
	t := time.NewTicker(d.LeaseDuration / 4)
	defer t.Stop()
	for {
		if err := d.renew(ctx); err != nil && ctx.Err() == nil {
			d.Log.Warn("renew node lease", "node", d.Node, "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// renew writes the Lease with the node's capacity and load now.
func (d *daemon) renew(ctx context.Context) error {
	sbs, err := d.Smolvm.List(ctx)
	if err != nil {
		return fmt.Errorf("list the node's sandboxes: %w", err)
	}
	mem, err := memTotal()
	if err != nil {
		return err
	}
	var l coordinationv1.Lease
	err = d.direct.Get(ctx, kclient.ObjectKey{Namespace: d.LeaseNamespace, Name: v1alpha1.LeasePrefix + d.Node}, &l)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("node lease: %w", err)
	}
	create := err != nil
	l.Namespace, l.Name = d.LeaseNamespace, v1alpha1.LeasePrefix+d.Node
	l.Annotations = map[string]string{
		v1alpha1.AnnotationEndpoint:  d.Endpoint,
		v1alpha1.AnnotationBackends:  strings.Join(d.Backends, ","),
		v1alpha1.AnnotationCPUs:      strconv.Itoa(runtime.NumCPU()),
		v1alpha1.AnnotationMemory:    strconv.FormatInt(mem, 10),
		v1alpha1.AnnotationSandboxes: strconv.Itoa(len(sbs)),
	}
	l.Spec.HolderIdentity = ptr.To(d.Node)
	l.Spec.LeaseDurationSeconds = ptr.To(int32(d.LeaseDuration / time.Second))
	l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
	if create {
		err = d.kube.Create(ctx, &l)
	} else {
		err = d.kube.Update(ctx, &l)
	}
	if err != nil {
		return fmt.Errorf("write node lease: %w", err)
	}
	return nil
}

// memTotal is the host's memory in bytes (/proc/meminfo's MemTotal).
func memTotal() (int64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, fmt.Errorf("host memory: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("host memory: MemTotal %q: %w", rest, err)
			}
			return kb * 1024, nil
		}
	}
	return 0, fmt.Errorf("host memory: no MemTotal in /proc/meminfo")
}
