package sandbox

import (
	"fmt"
	"io"
	"net/url"
	"strconv"
	"time"

	"smolvm.dev/smolvm/errdefs"
)

// Template is an image plus, optionally, a started state: a checkpoint
// of a sandbox of the image taken once its start command was ready. A
// sandbox created from a template with a snapshot is a restore of it (its
// server is already up); one without is a plain create of the image.
type Template struct {
	// Name may end in ":TAG" (E2B's tags): each tag is a template.
	Name string `json:"name"`
	// Build is the ID of the build that made it; a tag made from it
	// keeps it.
	Build string `json:"build"`
	// Tenant owns the template; "" is the admin. Public templates are
	// seen and used by every tenant.
	Tenant string `json:"tenant,omitempty"`
	Public bool   `json:"public,omitempty"`
	// Image is the reference the template was built from, ImageID the
	// image it runs whatever the reference points at now.
	Image   string `json:"image"`
	ImageID string `json:"image_id"`
	// Snapshot is the started state's snapshot ID, "" for none.
	Snapshot string `json:"snapshot,omitempty"`
	// Start is the start command, run as the sandbox's main process.
	Start   []string  `json:"start,omitempty"`
	Ready   Ready     `json:"ready,omitzero"`
	Env     []string  `json:"env,omitempty"`
	WorkDir string    `json:"workdir,omitempty"`
	User    string    `json:"user,omitempty"`
	Built   time.Time `json:"built"`
	// ReadyAfter is how long the start command took to be ready.
	ReadyAfter time.Duration `json:"ready_after,omitempty"`
	// Hot is how many restored, paused copies of the started state the
	// template's hot pool (HotPool) keeps for creates to claim.
	Hot int `json:"hot,omitempty"`
}

// HotPool is the name of the pool that keeps t's hot copies.
func (t *Template) HotPool() string { return "tmpl-" + t.Build }

// Ready is what tells a template's start command is ready; every check
// given must pass. None given is ready at once.
type Ready struct {
	Port int `json:"port,omitempty"` // a TCP port in the sandbox accepts
	// URL answers an HTTP GET with Status (default 200); its host must
	// be the sandbox's loopback (localhost or 127.0.0.1).
	URL     string        `json:"url,omitempty"`
	Status  int           `json:"status,omitempty"`
	File    string        `json:"file,omitempty"`    // exists in the sandbox
	Process string        `json:"process,omitempty"` // pgrep finds it (the image needs pgrep)
	Cmd     string        `json:"cmd,omitempty"`     // sh -c exits 0
	After   time.Duration `json:"after,omitempty"`   // this long has passed since the start
	// Timeout bounds the wait (default DefaultReadyTimeout).
	Timeout time.Duration `json:"timeout,omitempty"`
}

// TemplateOptions describe a template to build.
type TemplateOptions struct {
	Name  string
	Build string // the build's ID; default: a new one
	Image string // default: the builtin host image
	Start []string
	Ready Ready
	// Env, WorkDir and User are the started sandbox's, kept by every
	// sandbox created from the template.
	Env     []string
	WorkDir string
	User    string
	Limits  Limits
	Public  bool // every tenant may use it; only the admin may publish
	Backend string
	// Hot keeps that many copies of the started state restored and
	// paused in a pool (Template.HotPool): a create claims one, in a
	// resume's time rather than a restore's.
	Hot int
	// Log, if set, gets the build's progress lines and, when the start
	// command fails, its output.
	Log io.Writer
}

// Template bounds.
const (
	DefaultReadyTimeout = time.Minute
	MaxReadyTimeout     = 30 * time.Minute
)

// Errors callers match with errors.Is.
var (
	// ErrTemplateNotFound is a template that does not exist or that the
	// caller's tenant may not see.
	ErrTemplateNotFound = errdefs.New(errdefs.ErrNotFound, "no such template")
	// ErrNotReady is a template whose start command exited or did not
	// pass its ready check in time: the template needs fixing.
	ErrNotReady = errdefs.New(errdefs.ErrInvalid, "start command not ready")
)

// URLPort checks the ready URL and returns its port (80 if none is given).
func (r Ready) URLPort() (*url.URL, int, error) {
	u, err := url.Parse(r.URL)
	if err != nil || u.Scheme != "http" {
		return nil, 0, fmt.Errorf("%w: ready URL %q: want http://localhost:PORT/PATH", ErrInvalid, r.URL)
	}
	if h := u.Hostname(); h != "localhost" && h != "127.0.0.1" {
		return nil, 0, fmt.Errorf("%w: ready URL %q: the host must be localhost or 127.0.0.1 (the sandbox's loopback)", ErrInvalid, r.URL)
	}
	port := 80
	if p := u.Port(); p != "" {
		if port, err = strconv.Atoi(p); err != nil || port < 1 || port > 65535 {
			return nil, 0, fmt.Errorf("%w: ready URL %q: bad port", ErrInvalid, r.URL)
		}
	}
	return u, port, nil
}

// Check checks r's fields and fills its defaults.
func (r *Ready) Check() error {
	if r.Port < 0 || r.Port > 65535 {
		return fmt.Errorf("%w: ready port %d: want 1-65535", ErrInvalid, r.Port)
	}
	if r.URL != "" {
		if _, _, err := r.URLPort(); err != nil {
			return err
		}
	}
	if r.URL != "" && r.Status == 0 {
		r.Status = 200
	}
	if r.Status != 0 && r.Status < 100 || r.Status > 599 {
		return fmt.Errorf("%w: ready status %d: want 100-599", ErrInvalid, r.Status)
	}
	if r.After < 0 || r.Timeout < 0 {
		return fmt.Errorf("%w: ready after and timeout must not be negative", ErrInvalid)
	}
	if r.Timeout == 0 {
		r.Timeout = DefaultReadyTimeout
	}
	if r.Timeout > MaxReadyTimeout || r.After >= r.Timeout {
		return fmt.Errorf("%w: ready timeout %s: want more than after (%s) and at most %s", ErrInvalid, r.Timeout, r.After, MaxReadyTimeout)
	}
	return nil
}
