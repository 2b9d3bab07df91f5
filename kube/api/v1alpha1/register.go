package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the group and version of every resource here.
var GroupVersion = schema.GroupVersion{Group: "smolvm.dev", Version: "v1alpha1"}

// AddToScheme registers the resources with a scheme (clients, envtest).
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&Sandbox{}, &SandboxList{},
		&SandboxTemplate{}, &SandboxTemplateList{},
		&SandboxWarmPool{}, &SandboxWarmPoolList{},
		&SandboxSnapshot{}, &SandboxSnapshotList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
