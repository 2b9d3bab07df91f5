package v1alpha1

import "k8s.io/apimachinery/pkg/api/resource"

// SandboxBody is what a sandbox runs; a Sandbox and a SandboxTemplate
// share it, and a Sandbox's fields override its template's.
type SandboxBody struct {
	// Image is the OCI image reference (or a local image's name) of the
	// root filesystem. Required unless the sandbox forks or names a
	// template.
	// +optional
	Image string `json:"image,omitempty"`
	// Command is the sandbox's main command; empty keeps the image's.
	// +optional
	Command []string `json:"command,omitempty"`
	// Env is added to the image's environment.
	// +optional
	// +listType=map
	// +listMapKey=name
	Env []EnvVar `json:"env,omitempty"`
	// WorkingDir is the main command's directory.
	// +optional
	WorkingDir string `json:"workingDir,omitempty"`
	// User runs the main command (name or uid[:gid]).
	// +optional
	User string `json:"user,omitempty"`
	// Backend runs the sandbox: gvisor (runsc) or vm (QEMU microvm);
	// empty is the node's default.
	// +optional
	// +kubebuilder:validation:Enum=gvisor;vm
	Backend string `json:"backend,omitempty"`
	// Resources bound the sandbox; empty is the node's defaults.
	// +optional
	Resources *Resources `json:"resources,omitempty"`
	// Network is what the sandbox may reach; absent is none.
	// +optional
	Network *NetworkPolicy `json:"network,omitempty"`
}

// EnvVar is one environment variable.
type EnvVar struct {
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:Pattern=`^[^=]+$`
	Name string `json:"name"`
	// +optional
	Value string `json:"value,omitempty"`
}

// Resources are a sandbox's limits.
type Resources struct {
	// CPU is the number of cores (e.g. 500m, 2).
	// +optional
	CPU *resource.Quantity `json:"cpu,omitempty"`
	// Memory is the memory limit (e.g. 512Mi).
	// +optional
	Memory *resource.Quantity `json:"memory,omitempty"`
	// Disk is the size of the writable layer.
	// +optional
	Disk *resource.Quantity `json:"disk,omitempty"`
	// Pids caps the number of processes.
	// +optional
	// +kubebuilder:validation:Minimum=1
	Pids *int64 `json:"pids,omitempty"`
}

// NetworkPolicy is what a sandbox may reach, as smolvm's --net flags say
// (docs/network.md).
// +kubebuilder:validation:XValidation:rule="self.mode != 'none' || (!has(self.allowHosts) && !has(self.allowCIDRs) && !has(self.ports))",message="allowHosts, allowCIDRs and ports need mode egress or full"
type NetworkPolicy struct {
	// Mode is none (no network), egress (only allowHosts and allowCIDRs)
	// or full.
	// +kubebuilder:validation:Enum=none;egress;full
	Mode string `json:"mode"`
	// AllowHosts are DNS names the sandbox may reach: exact or one
	// leading wildcard label (*.example.com).
	// +optional
	// +kubebuilder:validation:MaxItems=64
	AllowHosts []string `json:"allowHosts,omitempty"`
	// AllowCIDRs are destinations the sandbox may reach.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=64
	// +kubebuilder:validation:items:XValidation:rule="isCIDR(self)",message="allowCIDRs entries must be CIDRs"
	AllowCIDRs []string `json:"allowCIDRs,omitempty"`
	// Ports are the sandbox's TCP ports published on its node.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:Minimum=1
	// +kubebuilder:validation:items:Maximum=65535
	Ports []int32 `json:"ports,omitempty"`
}

// LocalRef names an object in the same namespace.
type LocalRef struct {
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
}
