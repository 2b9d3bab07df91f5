// Package v1alpha1 holds smolvm's Kubernetes resources (group smolvm.dev,
// version v1alpha1): Sandbox, SandboxTemplate, SandboxWarmPool and
// SandboxSnapshot, shaped like kubernetes-sigs/agent-sandbox where they
// overlap. deploy/crds is generated from these types (TestCRDsMatchTypes).
//
// +kubebuilder:object:generate=true
// +groupName=smolvm.dev
// +versionName=v1alpha1
package v1alpha1

//go:generate go run sigs.k8s.io/controller-tools/cmd/controller-gen@v0.23.0 object crd:crdVersions=v1 paths=. output:crd:dir=../../../deploy/crds
