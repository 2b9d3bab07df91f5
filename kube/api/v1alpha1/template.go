package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// SandboxTemplate is a reusable sandbox body that Sandboxes and warm
// pools name (agent-sandbox's SandboxTemplate), and smolvm's template
// (docs/templates.md) when built through the gateway: an image plus,
// optionally, a started state, a SandboxSnapshot of a sandbox whose
// command (the start command) passed its ready check.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=sbxt
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.nodeName`
// +kubebuilder:printcolumn:name="Snapshot",type=string,JSONPath=`.status.snapshot`
type SandboxTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec SandboxTemplateSpec `json:"spec"`
	// +optional
	Status SandboxTemplateStatus `json:"status,omitempty"`
}

// SandboxTemplateSpec is the body every sandbox made from it starts with.
//
// +kubebuilder:validation:XValidation:rule="has(self.image) && size(self.image) > 0",message="a template needs an image"
type SandboxTemplateSpec struct {
	SandboxBody `json:",inline"`
	// Ready is the check the command passed before the started state was
	// taken (docs/templates.md); set by the gateway's build.
	// +optional
	Ready *ReadyCheck `json:"ready,omitempty"`
}

// ReadyCheck is a template's ready check (smolvm's sandbox.Ready): every
// check given must pass.
type ReadyCheck struct {
	// +optional
	Port int32 `json:"port,omitempty"`
	// +optional
	URL string `json:"url,omitempty"`
	// +optional
	Status int32 `json:"status,omitempty"`
	// +optional
	File string `json:"file,omitempty"`
	// +optional
	Process string `json:"process,omitempty"`
	// +optional
	Cmd string `json:"cmd,omitempty"`
	// +optional
	After *metav1.Duration `json:"after,omitempty"`
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`
}

// SandboxTemplateStatus is the gateway's build of the template.
type SandboxTemplateStatus struct {
	// Build is the ID of the smolvm build on NodeName.
	// +optional
	Build string `json:"build,omitempty"`
	// NodeName built it.
	// +optional
	NodeName string `json:"nodeName,omitempty"`
	// ImageID is the image it was built from, whatever spec.image names
	// now.
	// +optional
	ImageID string `json:"imageID,omitempty"`
	// Snapshot is the SandboxSnapshot holding the started state (its
	// templateRef names this template), and SnapshotID its smolvm ID;
	// empty for a template without one.
	// +optional
	Snapshot string `json:"snapshot,omitempty"`
	// +optional
	SnapshotID string `json:"snapshotID,omitempty"`
	// Built is when the build ended.
	// +optional
	Built *metav1.Time `json:"built,omitempty"`
	// ReadyAfter is how long the command took to pass its ready check.
	// +optional
	ReadyAfter *metav1.Duration `json:"readyAfter,omitempty"`
}

// SandboxTemplateList is a list of SandboxTemplates.
//
// +kubebuilder:object:root=true
type SandboxTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SandboxTemplate `json:"items"`
}
