package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// SandboxTemplate is a reusable sandbox body that Sandboxes and warm
// pools name (agent-sandbox's SandboxTemplate).
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=sbxt
type SandboxTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec SandboxTemplateSpec `json:"spec"`
}

// SandboxTemplateSpec is the body every sandbox made from it starts with.
//
// +kubebuilder:validation:XValidation:rule="has(self.image) && size(self.image) > 0",message="a template needs an image"
type SandboxTemplateSpec struct {
	SandboxBody `json:",inline"`
}

// SandboxTemplateList is a list of SandboxTemplates.
//
// +kubebuilder:object:root=true
type SandboxTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SandboxTemplate `json:"items"`
}
