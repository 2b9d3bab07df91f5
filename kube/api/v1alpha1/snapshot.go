package v1alpha1

import (
	"cmp"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SandboxSnapshot is a checkpoint of a Sandbox (memory, processes and
// files), or a template's started state, kept on the node that took it
// until copied elsewhere.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=sbxs
// +kubebuilder:selectablefield:JSONPath=`.spec.nodeName`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.spec.nodeName`
type SandboxSnapshot struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   SandboxSnapshotSpec   `json:"spec"`
	Status SandboxSnapshotStatus `json:"status,omitempty"`
}

// SandboxSnapshotSpec names the sandbox to checkpoint, or the template
// whose started state it is.
//
// +kubebuilder:validation:XValidation:rule="has(self.sandboxRef) != has(self.templateRef)",message="a snapshot names exactly one of sandboxRef or templateRef"
// +kubebuilder:validation:XValidation:rule="has(oldSelf.sandboxRef) == has(self.sandboxRef) && has(oldSelf.templateRef) == has(self.templateRef)",message="sandboxRef and templateRef cannot change"
type SandboxSnapshotSpec struct {
	// SandboxRef is the Sandbox to checkpoint; it keeps running.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="sandboxRef cannot change"
	SandboxRef LocalRef `json:"sandboxRef,omitzero"`
	// TemplateRef is the SandboxTemplate whose started state this is:
	// the gateway builds the template on spec.nodeName's smolvm serve,
	// named after this object (k-UID), and that node's daemon records the
	// build's checkpoint here, from where restores copy it like any
	// snapshot's.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="templateRef cannot change"
	TemplateRef *LocalRef `json:"templateRef,omitempty"`
	// NodeName is the node that takes the checkpoint: the sandbox's.
	// Left out, the controller sets it once the sandbox is bound (its
	// Scheduled condition says why it waits, or fails).
	// +optional
	// +kubebuilder:validation:XValidation:rule="size(oldSelf) == 0 || self == oldSelf",message="nodeName cannot change once set"
	NodeName string `json:"nodeName,omitempty"`
}

// SnapshotPhase is where a checkpoint is.
// +kubebuilder:validation:Enum=Pending;Saving;Ready;Failed
type SnapshotPhase string

// The phases of a SandboxSnapshot.
const (
	SnapshotPending SnapshotPhase = "Pending"
	SnapshotSaving  SnapshotPhase = "Saving"
	SnapshotReady   SnapshotPhase = "Ready"
	SnapshotFailed  SnapshotPhase = "Failed"
)

// SandboxSnapshotStatus is what the node daemon saved.
type SandboxSnapshotStatus struct {
	// +optional
	Phase SnapshotPhase `json:"phase,omitempty"`
	// ID is the snapshot's ID, the same in every node's store (a copy
	// keeps it).
	// +optional
	ID string `json:"id,omitempty"`
	// SandboxID is the smolvm sandbox checkpointed (E2B's sandboxID, by
	// which its snapshots are listed).
	// +optional
	SandboxID string `json:"sandboxID,omitempty"`
	// Tenant owns the snapshot: the sandbox's spec.tenant when it was
	// taken. Only that tenant's Sandboxes restore it, on every node.
	// +optional
	Tenant string `json:"tenant,omitempty"`
	// Image is the sandbox's image reference and ImageID the image it
	// ran: a node that copies the snapshot pulls Image when it has not
	// ImageID, and refuses another image under that reference.
	// +optional
	Image string `json:"image,omitempty"`
	// +optional
	ImageID string `json:"imageID,omitempty"`
	// Nodes hold a copy (the first took it).
	// +optional
	Nodes []string `json:"nodes,omitempty"`
	// SizeBytes is the checkpoint's size.
	// +optional
	SizeBytes int64 `json:"sizeBytes,omitempty"`
	// Copies are the copies nodes made of it for restores there.
	// +optional
	// +listType=map
	// +listMapKey=node
	Copies []SnapshotCopy `json:"copies,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// NotReady says where a snapshot that is not Ready is: its phase, and
// the reason and message of the first condition that is not true, the
// controller's Scheduled (its sandbox missing, not bound, lost) before
// the node's Ready (the sandbox not running yet, a failed checkpoint).
// Whatever waits on the snapshot repeats it, so that the wait says why.
func (s *SandboxSnapshot) NotReady() string {
	phase := cmp.Or(s.Status.Phase, SnapshotPending)
	for _, typ := range []string{ConditionScheduled, ConditionReady} {
		if c := meta.FindStatusCondition(s.Status.Conditions, typ); c != nil && c.Status != metav1.ConditionTrue {
			return fmt.Sprintf("%s (%s: %s)", phase, c.Reason, c.Message)
		}
	}
	return string(phase)
}

// SnapshotCopy is one node's copy of a snapshot, made from another's.
type SnapshotCopy struct {
	// Node made the copy; From is the node it was copied from.
	Node string `json:"node"`
	From string `json:"from"`
	// Milliseconds is the copy's time, from the export's start to the
	// import's end (each file checked against its digest).
	Milliseconds int64 `json:"milliseconds"`
	// Bytes is the snapshot's size.
	Bytes int64 `json:"bytes"`
	// Time is when the copy ended.
	Time metav1.Time `json:"time"`
}

// SandboxSnapshotList is a list of SandboxSnapshots.
//
// +kubebuilder:object:root=true
type SandboxSnapshotList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SandboxSnapshot `json:"items"`
}
