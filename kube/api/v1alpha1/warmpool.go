package v1alpha1

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

// SandboxWarmPoolSpec is the pool's size and what its sandboxes start
// from: a template's fresh boot, or a snapshot's restore.
//
// +kubebuilder:validation:XValidation:rule="has(self.sandboxTemplateRef) != has(self.sandboxSnapshotRef)",message="a pool names exactly one of sandboxTemplateRef or sandboxSnapshotRef"
type SandboxWarmPoolSpec struct {
	// Replicas is how many ready sandboxes the pool keeps.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	Replicas int32 `json:"replicas"`
	// SandboxTemplateRef names the template the pool's sandboxes boot.
	// +optional
	SandboxTemplateRef *LocalRef `json:"sandboxTemplateRef,omitempty"`
	// SandboxSnapshotRef names a SandboxSnapshot the pool's sandboxes
	// are restored from, beside its holders or on nodes that copy it: a
	// claim gets the checkpoint's memory, processes and files at once,
	// setup already done.
	// +optional
	SandboxSnapshotRef *LocalRef `json:"sandboxSnapshotRef,omitempty"`
	// Hot keeps the pool's sandboxes paused, so they use no CPU while
	// they wait; a claim resumes one (smolvm pool --hot).
	// +optional
	Hot bool `json:"hot,omitempty"`
}

// Member is the Sandbox spec the pool's sandboxes are made with, and a
// claim's fallback when none is ready (unpaused).
func (s *SandboxWarmPoolSpec) Member() SandboxSpec {
	if s.SandboxSnapshotRef != nil {
		return SandboxSpec{ForkFrom: &ForkFrom{Snapshot: s.SandboxSnapshotRef.Name}}
	}
	return SandboxSpec{SandboxTemplateRef: s.SandboxTemplateRef}
}

// Ready is the phase of the pool's sandboxes that a claim takes.
func (s *SandboxWarmPoolSpec) Ready() SandboxPhase {
	if s.Hot {
		return PhasePaused
	}
	return PhaseRunning
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
