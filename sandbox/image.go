package sandbox

import (
	"context"
	"io"
	"time"

	"smolvm.dev/smolvm/errdefs"
)

// Errors of image stores, which callers match with errors.Is.
var (
	ErrImageNotFound   = errdefs.New(errdefs.ErrNotFound, "image not found")
	ErrInvalidImageRef = errdefs.New(errdefs.ErrInvalid, "invalid image reference")
)

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

// PullOptions describe a pull of an image from its registry.
type PullOptions struct {
	Progress func(PullProgress)
	// Insecure allows plain HTTP, for registries on localhost or a LAN.
	Insecure bool
	// Platform is "os/arch[/variant]"; the default is linux on the
	// architecture smolvm runs on.
	Platform string
}

// PullProgress reports one layer's progress through a pull or an import.
type PullProgress struct {
	Layer  string `json:"layer"` // diffID
	Done   int64  `json:"done"`
	Total  int64  `json:"total,omitempty"` // 0 when unknown
	Status string `json:"status"`          // "downloading", "extracting", "exists", "done"
}

// BuildOptions say what to build from a Dockerfile, and how.
type BuildOptions struct {
	// Dockerfile is the Dockerfile's content; Name is how messages name it.
	Dockerfile []byte
	Name       string
	// Context is the directory COPY and ADD read from.
	Context string
	// Tags name the result; none leaves it untagged (its ID is printed).
	Tags []string
	// Args are --build-arg values, overriding ARG defaults.
	Args map[string]string
	// Target is the stage to build; empty is the last.
	Target string
	// NoCache runs every step, and caches the results for later builds.
	NoCache bool
	// Network is what RUN steps may reach; nil is none.
	Network *Network
	// Backend runs the RUN steps; empty is the manager's default.
	Backend string
	// Insecure allows pulling base images over plain HTTP.
	Insecure bool
	// Progress receives docker's plain progress ("#3 [2/5] RUN …"); nil
	// prints nothing.
	Progress io.Writer
}

// Builder builds images (runtime/build's Builder).
type Builder interface {
	Build(ctx context.Context, o BuildOptions) (*Image, error)
}
