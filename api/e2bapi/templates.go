package e2bapi

import "time"

// E2B's template API (the SDK's Template.build and friends), as smolvm
// serves it.

// BuildRequest is the body of POST /v3/templates: a build of the
// template Name ("name" or "name:tag"), also tagged with Tags.
type BuildRequest struct {
	Name     string   `json:"name"`
	Alias    string   `json:"alias,omitempty"` // deprecated name of Name
	Tags     []string `json:"tags,omitempty"`
	CPUCount int      `json:"cpuCount,omitempty"`
	MemoryMB int64    `json:"memoryMB,omitempty"`
	// MinFreeDiskMb is accepted and ignored: the writable layer grows as
	// sandboxes' do.
	MinFreeDiskMb int64  `json:"minFreeDiskMb,omitempty"`
	TeamID        string `json:"teamID,omitempty"`
}

// BuildRequested answers BuildRequest.
type BuildRequested struct {
	TemplateID string   `json:"templateID"`
	BuildID    string   `json:"buildID"`
	Public     bool     `json:"public"`
	Aliases    []string `json:"aliases"`
	Names      []string `json:"names"`
	Tags       []string `json:"tags"`
}

// FileUpload answers GET /templates/{id}/files/{hash}: where to PUT the
// tar of a COPY step's files, unless they are already Present.
type FileUpload struct {
	Present bool              `json:"present"`
	URL     string            `json:"url,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
}

// BuildStart is the body of POST /v2/templates/{id}/builds/{build}: the
// base (FromImage or FromTemplate), the steps, and the start and ready
// commands.
type BuildStart struct {
	FromImage         string         `json:"fromImage,omitempty"`
	FromTemplate      string         `json:"fromTemplate,omitempty"`
	FromImageRegistry map[string]any `json:"fromImageRegistry,omitempty"`
	Steps             []TemplateStep `json:"steps"`
	StartCmd          string         `json:"startCmd,omitempty"`
	ReadyCmd          string         `json:"readyCmd,omitempty"`
	Force             bool           `json:"force,omitempty"`
}

// TemplateStep is one step of a build: RUN, COPY, ENV, WORKDIR or USER
// with its arguments as the SDK gives them.
type TemplateStep struct {
	Type         string   `json:"type"`
	Args         []string `json:"args,omitempty"`
	FilesHash    string   `json:"filesHash,omitempty"`
	Force        bool     `json:"force,omitempty"`
	ForceUpload  bool     `json:"forceUpload,omitempty"`
	ResolveLinks bool     `json:"resolveSymlinks,omitempty"`
	Gzip         *bool    `json:"gzip,omitempty"`
}

// BuildInfo answers GET /templates/{id}/builds/{build}/status.
type BuildInfo struct {
	TemplateID string      `json:"templateID"`
	BuildID    string      `json:"buildID"`
	Status     string      `json:"status"` // waiting, building, ready or error
	LogEntries []LogEntry  `json:"logEntries"`
	Logs       []string    `json:"logs"`
	Reason     *BuildError `json:"reason,omitempty"`
}

// LogEntry is one line of a build's log.
type LogEntry struct {
	Timestamp time.Time `json:"timestamp"`
	Level     string    `json:"level"` // debug, info, warn or error
	Message   string    `json:"message"`
	Step      string    `json:"step,omitempty"`
}

// BuildError says why a build failed.
type BuildError struct {
	Message    string     `json:"message"`
	Step       string     `json:"step,omitempty"`
	LogEntries []LogEntry `json:"logEntries,omitempty"`
}

// AliasInfo answers GET /templates/aliases/{alias}.
type AliasInfo struct {
	TemplateID string `json:"templateID"`
	Public     bool   `json:"public"`
}

// TagsRequest is the body of POST /templates/tags (Target "name:tag",
// the build to tag) and of DELETE /templates/tags (Name).
type TagsRequest struct {
	Target string   `json:"target,omitempty"`
	Name   string   `json:"name,omitempty"`
	Tags   []string `json:"tags"`
}

// TagsAssigned answers POST /templates/tags.
type TagsAssigned struct {
	BuildID string   `json:"buildID"`
	Tags    []string `json:"tags"`
}

// TemplateTag is one of GET /templates/{id}/tags's answer.
type TemplateTag struct {
	Tag       string    `json:"tag"`
	BuildID   string    `json:"buildID"`
	CreatedAt time.Time `json:"createdAt"`
}
