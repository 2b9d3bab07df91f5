package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// Sandbox is one smolvm sandbox (or, forked with a count, that many
// copies) on the node its spec.nodeName names.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=sbx
// +kubebuilder:selectablefield:JSONPath=`.spec.nodeName`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.spec.nodeName`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Sandbox struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   SandboxSpec   `json:"spec"`
	Status SandboxStatus `json:"status,omitempty"`
}

// SandboxSpec is the sandbox the user wants.
//
// +kubebuilder:validation:XValidation:rule="has(self.forkFrom) || has(self.sandboxTemplateRef) || (has(self.image) && size(self.image) > 0)",message="image is required unless the sandbox forks or names a template"
// +kubebuilder:validation:XValidation:rule="!has(self.forkFrom) || !has(self.sandboxTemplateRef)",message="a fork takes its body from its source, not from a template"
// +kubebuilder:validation:XValidation:rule="has(oldSelf.forkFrom) == has(self.forkFrom) && (!has(self.forkFrom) || self.forkFrom == oldSelf.forkFrom)",message="forkFrom cannot change"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.nodeName) || size(oldSelf.nodeName) == 0 || (has(self.nodeName) && self.nodeName == oldSelf.nodeName)",message="nodeName cannot change once set"
type SandboxSpec struct {
	SandboxBody `json:",inline"`

	// SandboxTemplateRef names a SandboxTemplate whose body fills what
	// this spec leaves empty (agent-sandbox's SandboxClaim field).
	// +optional
	SandboxTemplateRef *LocalRef `json:"sandboxTemplateRef,omitempty"`
	// ForkFrom makes the sandbox a copy of a running sandbox or of a
	// snapshot, memory and all, instead of a fresh boot. It cannot change.
	// +optional
	ForkFrom *ForkFrom `json:"forkFrom,omitempty"`
	// NodeName is the node whose daemon makes the sandbox; the
	// controller sets it, and it cannot change once set. Each node lists
	// only its own (a selectable field).
	// +optional
	NodeName string `json:"nodeName,omitempty"`
	// Tenant is the smolvm tenant the sandbox belongs to (docs/tenants.md).
	// +optional
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`
	Tenant string `json:"tenant,omitempty"`
	// TTLSeconds stops the sandbox that long after it started; absent
	// or 0 is no limit.
	// +optional
	// +kubebuilder:validation:Minimum=0
	TTLSeconds *int64 `json:"ttlSeconds,omitempty"`
	// Labels are the smolvm sandbox's labels (E2B's metadata, through
	// the gateway): usage by label sums them.
	// +optional
	// +kubebuilder:validation:MaxProperties=32
	Labels map[string]string `json:"labels,omitempty"`
	// Paused freezes the sandbox in memory while true.
	// +optional
	Paused bool `json:"paused,omitempty"`
}

// ForkFrom is the source of a fork: exactly one of Sandbox and Snapshot.
//
// +kubebuilder:validation:XValidation:rule="has(self.sandbox) != has(self.snapshot)",message="forkFrom names exactly one of sandbox or snapshot"
type ForkFrom struct {
	// Sandbox is a Sandbox in this namespace, checkpointed for the fork
	// and left running.
	// +optional
	// +kubebuilder:validation:MinLength=1
	Sandbox string `json:"sandbox,omitempty"`
	// Snapshot is a SandboxSnapshot in this namespace.
	// +optional
	// +kubebuilder:validation:MinLength=1
	Snapshot string `json:"snapshot,omitempty"`
	// Count is how many copies one checkpoint makes.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=64
	Count int32 `json:"count,omitempty"`
}

// SandboxPhase is where a sandbox is in its life.
// +kubebuilder:validation:Enum=Pending;Creating;Running;Paused;Stopped;Failed;Lost
type SandboxPhase string

// The phases: Pending waits for a node; Lost means its node went away
// with its memory (it is never silently recreated empty).
const (
	PhasePending  SandboxPhase = "Pending"
	PhaseCreating SandboxPhase = "Creating"
	PhaseRunning  SandboxPhase = "Running"
	PhasePaused   SandboxPhase = "Paused"
	PhaseStopped  SandboxPhase = "Stopped"
	PhaseFailed   SandboxPhase = "Failed"
	PhaseLost     SandboxPhase = "Lost"
)

// Condition types of a Sandbox (and of a SandboxSnapshot: Ready once
// saved, Scheduled once bound to its sandbox's node).
const (
	// ConditionReady is true while the sandbox runs and its agent answers.
	ConditionReady = "Ready"
	// ConditionScheduled is true once the controller bound the sandbox
	// (or the snapshot) to a node; while false, its reason says why it
	// waits.
	ConditionScheduled = "Scheduled"
)

// SandboxStatus is what the node daemon observed.
type SandboxStatus struct {
	// +optional
	Phase SandboxPhase `json:"phase,omitempty"`
	// NodeName is the node that holds the sandbox.
	// +optional
	NodeName string `json:"nodeName,omitempty"`
	// Endpoint is the sandbox's URL on its node's smolvm serve
	// (…/v1/sandboxes/ID); the first copy's for a fork with a count.
	// +optional
	Endpoint string `json:"endpoint,omitempty"`
	// Instances are the smolvm sandboxes this object owns: one, or a
	// fork's copies.
	// +optional
	Instances []Instance `json:"instances,omitempty"`
	// ObservedGeneration is the spec generation the status reflects.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Instance is one smolvm sandbox on the node.
type Instance struct {
	// ID is the sandbox's ID on its node.
	ID string `json:"id"`
	// Endpoint is its URL on the node's smolvm serve.
	Endpoint string `json:"endpoint"`
}

// SandboxList is a list of Sandboxes.
//
// +kubebuilder:object:root=true
type SandboxList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Sandbox `json:"items"`
}
