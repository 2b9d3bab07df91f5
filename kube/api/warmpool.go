package api

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// SandboxWarmPool keeps ready sandboxes of a template for fast claims
// (agent-sandbox's SandboxWarmPool; smolvm pools on the nodes).
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=sbxwp
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyReplicas`
// +kubebuilder:printcolumn:name="Want",type=integer,JSONPath=`.spec.replicas`
type SandboxWarmPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   SandboxWarmPoolSpec   `json:"spec"`
	Status SandboxWarmPoolStatus `json:"status,omitempty"`
}

// LabelPool marks the Sandboxes a SandboxWarmPool keeps, with the
// pool's name; a claim removes it (and the pool's owner reference).
const LabelPool = "smolvm.dev/pool"

// SandboxWarmPoolSpec is the pool's size and body.
type SandboxWarmPoolSpec struct {
	// Replicas is how many ready sandboxes the pool keeps.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	Replicas int32 `json:"replicas"`
	// SandboxTemplateRef names the template the pool's sandboxes run.
	SandboxTemplateRef LocalRef `json:"sandboxTemplateRef"`
	// Hot keeps paused copies restored from a checkpoint, claimed by
	// resuming them (smolvm pool --hot).
	// +optional
	Hot bool `json:"hot,omitempty"`
}

// SandboxWarmPoolStatus counts the pool's ready sandboxes.
type SandboxWarmPoolStatus struct {
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// SandboxWarmPoolList is a list of SandboxWarmPools.
//
// +kubebuilder:object:root=true
type SandboxWarmPoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SandboxWarmPool `json:"items"`
}
