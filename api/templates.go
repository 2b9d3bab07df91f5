package api

import (
	"time"

	"smolvm.dev/smolvm/sandbox"
)

// TemplateRequest is the body of POST /v1/templates: a template named
// Name of Image, started by Start until Ready passes (no Start: the
// image alone). Building again under a name replaces the template.
type TemplateRequest struct {
	Name  string         `json:"name"`
	Image string         `json:"image,omitempty"`
	Start []string       `json:"start,omitempty"`
	Ready *TemplateReady `json:"ready,omitempty"`
	// Env, WorkDir and User are the started sandbox's, which every
	// sandbox made from the template keeps.
	Env     []string `json:"env,omitempty"`
	WorkDir string   `json:"workdir,omitempty"`
	User    string   `json:"user,omitempty"`
	// Public lets every tenant use it (admin only).
	Public bool `json:"public,omitempty"`
	// Hot keeps that many copies of the started state restored and
	// paused in a pool, which creates claim.
	Hot     int     `json:"hot,omitempty"`
	Backend string  `json:"backend,omitempty"`
	CPUs    float64 `json:"cpus,omitempty"`
	Memory  Bytes   `json:"memory,omitempty"`
	Pids    int64   `json:"pids,omitempty"`
	Disk    Bytes   `json:"disk,omitempty"`
}

// TemplateReady is a template's ready check (sandbox.Ready): every check
// given must pass.
type TemplateReady struct {
	Port    int      `json:"port,omitempty"`
	URL     string   `json:"url,omitempty"`
	Status  int      `json:"status,omitempty"`
	File    string   `json:"file,omitempty"`
	Process string   `json:"process,omitempty"`
	Cmd     string   `json:"cmd,omitempty"`
	After   Duration `json:"after,omitempty"`
	Timeout Duration `json:"timeout,omitempty"`
}

// Options is what the runtime builds from r.
func (r TemplateRequest) Options() sandbox.TemplateOptions {
	o := sandbox.TemplateOptions{Name: r.Name, Image: r.Image, Start: r.Start, Env: r.Env, WorkDir: r.WorkDir, User: r.User,
		Public: r.Public, Backend: r.Backend, Hot: r.Hot,
		Limits: sandbox.Limits{CPUs: r.CPUs, Memory: int64(r.Memory), Pids: r.Pids, Disk: int64(r.Disk)}}
	if q := r.Ready; q != nil {
		o.Ready = sandbox.Ready{Port: q.Port, URL: q.URL, Status: q.Status, File: q.File, Process: q.Process, Cmd: q.Cmd,
			After: time.Duration(q.After), Timeout: time.Duration(q.Timeout)}
	}
	return o
}

// NewTemplateRequest is the request that builds o on a smolvm serve (a
// cluster gateway's build on one node): the inverse of Options.
func NewTemplateRequest(o sandbox.TemplateOptions) TemplateRequest {
	r := o.Ready
	return TemplateRequest{Name: o.Name, Image: o.Image, Start: o.Start, Env: o.Env, WorkDir: o.WorkDir, User: o.User,
		Public: o.Public, Hot: o.Hot, Backend: o.Backend,
		CPUs: o.Limits.CPUs, Memory: Bytes(o.Limits.Memory), Pids: o.Limits.Pids, Disk: Bytes(o.Limits.Disk),
		Ready: &TemplateReady{Port: r.Port, URL: r.URL, Status: r.Status, File: r.File, Process: r.Process, Cmd: r.Cmd,
			After: Duration(r.After), Timeout: Duration(r.Timeout)}}
}
