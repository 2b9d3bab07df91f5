package v1alpha1

import (
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
)

// A node registers as a Lease (coordination.k8s.io), as kubelets
// heartbeat: named LeasePrefix+node in the node daemon's namespace and
// renewed while it runs, its annotations saying what the node offers. A
// Lease not renewed within its duration is a node gone. The node daemon
// writes it and the controller reads it.
const (
	LeasePrefix         = "smolvm-node-"
	AnnotationEndpoint  = "smolvm.dev/endpoint"
	AnnotationBackends  = "smolvm.dev/backends"
	AnnotationCPUs      = "smolvm.dev/cpus"
	AnnotationMemory    = "smolvm.dev/memory-bytes"
	AnnotationSandboxes = "smolvm.dev/sandboxes"
)

// Node is what a node's Lease says of it; not an API object.
//
// +kubebuilder:object:generate=false
type Node struct {
	Name     string
	Endpoint string // its smolvm serve
	Backends []string
	CPUs     int
	Memory   int64 // bytes
	// Sandboxes is how many sandboxes it held at the last renewal.
	Sandboxes int
	// Expires is when the node counts as gone unless renewed.
	Expires time.Time
}

// NodeFromLease reads a node's Lease; ok is false for a Lease that is
// not a node's or says too little to place sandboxes on.
func NodeFromLease(l *coordinationv1.Lease) (n Node, ok bool) {
	name, ok := strings.CutPrefix(l.Name, LeasePrefix)
	if !ok || name == "" || l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil {
		return Node{}, false
	}
	a := l.Annotations
	n = Node{
		Name:     name,
		Endpoint: a[AnnotationEndpoint],
		Expires:  l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second),
	}
	if b := a[AnnotationBackends]; b != "" {
		n.Backends = strings.Split(b, ",")
	}
	var err error
	if n.Memory, err = strconv.ParseInt(a[AnnotationMemory], 10, 64); err != nil || n.Memory <= 0 {
		return Node{}, false
	}
	n.CPUs, _ = strconv.Atoi(a[AnnotationCPUs])
	n.Sandboxes, _ = strconv.Atoi(a[AnnotationSandboxes])
	return n, true
}

// Offers reports whether the node runs backend ("" is any node's default).
func (n Node) Offers(backend string) bool {
	if backend == "" {
		return true
	}
	for _, b := range n.Backends {
		if b == backend {
			return true
		}
	}
	return false
}
