package sandbox

import "time"

// Image is a stored image.
type Image struct {
	ID      string      `json:"id"`     // "sha256:<hex>" digest of the image config
	Refs    []string    `json:"refs"`   // normalized names
	Layers  []string    `json:"layers"` // layer diffIDs, lowest first
	Config  ImageConfig `json:"config"`
	Size    int64       `json:"size"`    // unpacked bytes
	Created time.Time   `json:"created"` // when stored here
	Source  string      `json:"source"`  // "pull <ref>", "import <path>", "builtin"
	Builtin bool        `json:"builtin,omitempty"`
}

// ImageConfig is the part of the OCI image config that says how to run it.
type ImageConfig struct {
	Env        []string          `json:"env,omitempty"`
	Entrypoint []string          `json:"entrypoint,omitempty"`
	Cmd        []string          `json:"cmd,omitempty"`
	WorkingDir string            `json:"workingDir,omitempty"`
	User       string            `json:"user,omitempty"`
	Labels     map[string]string `json:"labels,omitempty"`
}
