// Package v1alpha1 holds smolvm's Kubernetes resources (group smolvm.dev,
// version v1alpha1): Sandbox, SandboxTemplate, SandboxWarmPool and
// SandboxSnapshot, shaped like kubernetes-sigs/agent-sandbox where they
// overlap. deploy/crds is generated from these types (TestCRDsMatchTypes).
//
// +kubebuilder:object:generate=true
// +groupName=smolvm.dev
// +versionName=v1alpha1
package v1alpha1

// What controller-gen and the API server make of the markers in this
// package (each cost a failure that only a real API server showed):
//   - The versionName marker above is needed: without it controller-gen
//     names the CRDs' version after the Go package (the old kube/api made
//     version "api"), the CRDs were Established and every client call said
//     "no matches for kind". TestCRDsMatchTypes cannot see that.
//   - Every struct here gets a generated deepcopy (object:generate=true
//     above): a plain helper type (Node, read from a Lease) needs its own
//     kubebuilder:object:generate=false marker, or TestCRDsMatchTypes
//     fails (and its time.Time field would not compile in the deepcopy).
//   - gofmt rewrites two single quotes in a doc comment to a closing
//     double quote, which breaks a CEL rule in an XValidation marker:
//     write size(self.x) > 0, not a comparison with the empty string.
//   - A CEL transition rule on an optional field runs only when the old
//     and the new object both have it: a rule self == oldSelf on forkFrom
//     let an update drop or add it. Immutability of an optional field is
//     a rule on its parent (spec) with has(oldSelf.x) == has(self.x).
//   - CEL on list items is costed by the list's and the strings' bounds:
//     isCIDR(self) on allowCIDRs items without items:MaxLength exceeded
//     the rule cost budget, and the API server refused the whole CRD.

//go:generate go run sigs.k8s.io/controller-tools/cmd/controller-gen@v0.23.0 object crd:crdVersions=v1 paths=. output:crd:dir=../../../deploy/crds
