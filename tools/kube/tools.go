//go:build tools

// Package kube records kube-apiserver as a build dependency, so that the
// Kubernetes version the kube tests run against is pinned by this module's
// go.mod and go.sum, away from smolvm's own.
package kube

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
