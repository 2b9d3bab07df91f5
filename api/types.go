// Package api is the wire format of smolvm's native HTTP API: request and
// response bodies, stream events and error bodies, shared by the server and
// every client. It links none of the runtime.
package api

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"time"
	"unicode/utf8"

	"smolvm.dev/smolvm/internal/units"
	"smolvm.dev/smolvm/sandbox"
)

// Wire types shared by the server and the Go client.

// CreateRequest is the body of POST /v1/sandboxes.
type CreateRequest struct {
	Name  string `json:"name,omitempty"`
	Image string `json:"image,omitempty"`
	// Pool takes a ready sandbox from this pool (it implies start).
	Pool     string   `json:"pool,omitempty"`
	Cmd      []string `json:"cmd,omitempty"`
	Env      []string `json:"env,omitempty"`
	WorkDir  string   `json:"workdir,omitempty"`
	User     string   `json:"user,omitempty"`
	Hostname string   `json:"hostname,omitempty"`
	CPUs     float64  `json:"cpus,omitempty"`
	Memory   Bytes    `json:"memory,omitempty"`
	Pids     int64    `json:"pids,omitempty"`
	Disk     Bytes    `json:"disk,omitempty"`
	// Timeout is the time to live; absent means the server's default
	// (15m), 0 means none.
	Timeout     *Duration `json:"timeout,omitempty"`
	IdleTimeout Duration  `json:"idle_timeout,omitempty"`
	// OnExpiry is "stop" (the default) or "pause".
	OnExpiry string `json:"on_expiry,omitempty"`
	// TrustRepo is a repository root on the server whose trust policy every
	// command in the sandbox must pass.
	TrustRepo string `json:"policy,omitempty"`
	// Network is what the sandbox may reach; absent is mode none.
	Network *sandbox.Network `json:"network,omitempty"`
	// Labels tag the sandbox for usage by label.
	Labels map[string]string `json:"labels,omitempty"`
	// Volumes are the caller's volumes to mount (POST /v1/volumes).
	Volumes []sandbox.VolumeMount `json:"volumes,omitempty"`
	// Start defaults to true.
	Start *bool `json:"start,omitempty"`
	// Backend runs the sandbox; absent is the server's default (or the
	// pool's).
	Backend string `json:"backend,omitempty"`
}

// StopRequest is the optional body of POST /v1/sandboxes/{id}/stop.
type StopRequest struct {
	// Timeout is the grace period before SIGKILL (default 10s).
	Timeout *Duration `json:"timeout,omitempty"`
}

// TimeoutRequest is the body of POST /v1/sandboxes/{id}/timeout.
type TimeoutRequest struct {
	// Timeout is the new time to live, from now; 0 removes it.
	Timeout *Duration `json:"timeout"`
}

// ExecRequest is the body of POST /v1/sandboxes/{id}/exec and the first
// message of an exec WebSocket.
type ExecRequest struct {
	Args    []string `json:"args"`
	Env     []string `json:"env,omitempty"`
	WorkDir string   `json:"workdir,omitempty"`
	User    string   `json:"user,omitempty"`
	// Timeout kills the command after that long.
	Timeout Duration `json:"timeout,omitempty"`
	// Stdin is the command's whole input, for plain exec; a WebSocket
	// streams it instead.
	Stdin *string `json:"stdin,omitempty"`
	// TTY, Rows and Cols ask for a pseudo-terminal (WebSocket only).
	TTY  bool   `json:"tty,omitempty"`
	Rows uint16 `json:"rows,omitempty"`
	Cols uint16 `json:"cols,omitempty"`
}

// ExecEvent is one line of an exec stream (or one SSE event's data).
type ExecEvent struct {
	// Type is "stdout", "stderr", "exit" or "error".
	Type string `json:"type"`
	// Data is the output; Encoding is "base64" when it is not UTF-8.
	Data     string        `json:"data,omitempty"`
	Encoding string        `json:"encoding,omitempty"`
	Exit     *sandbox.Exit `json:"exit,omitempty"`
	// Error is a failure after the stream began.
	Error *Error `json:"error,omitempty"`
}

// Bytes returns the event's output bytes.
func (e ExecEvent) Bytes() ([]byte, error) { return decodeData(e.Data, e.Encoding) }

// LogEvent is one line of GET /v1/sandboxes/{id}/logs.
type LogEvent struct {
	Stream   string `json:"stream"`
	Data     string `json:"data"`
	Encoding string `json:"encoding,omitempty"`
}

// Bytes returns the entry's bytes.
func (e LogEvent) Bytes() ([]byte, error) { return decodeData(e.Data, e.Encoding) }

// WebSocket exec messages: binary messages carry a one-byte stream tag
// then the bytes; text messages carry JSON control.
const (
	StreamStdin  = 0
	StreamStdout = 1
	StreamStderr = 2
)

// WSControl is a text message on an exec WebSocket: from the client, a
// resize, a signal or stdin's end; from the server, the exit or an error.
type WSControl struct {
	Resize *sandbox.Size `json:"resize,omitempty"`
	Signal int           `json:"signal,omitempty"`
	EOF    bool          `json:"eof,omitempty"`
	Exit   *sandbox.Exit `json:"exit,omitempty"`
	Error  *Error        `json:"error,omitempty"`
}

// Duration is a time.Duration on the wire: a Go duration string ("90s")
// or a number of seconds; it is written as a string.
type Duration time.Duration

var (
	durationType = reflect.TypeFor[Duration]()
	bytesType    = reflect.TypeFor[Bytes]()
)

// UnmarshalJSON implements json.Unmarshaler.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	bad := &json.UnmarshalTypeError{Value: string(b), Type: durationType}
	switch v := v.(type) {
	case float64:
		if v < 0 || v > math.MaxInt64/float64(time.Second) {
			return bad
		}
		*d = Duration(v * float64(time.Second))
	case string:
		p, err := time.ParseDuration(v)
		if err != nil || p < 0 {
			return bad
		}
		*d = Duration(p)
	default:
		return bad
	}
	return nil
}

// MarshalJSON implements json.Marshaler.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// Bytes is a size on the wire: a number of bytes or a string with a unit
// ("512m").
type Bytes int64

// UnmarshalJSON implements json.Unmarshaler.
func (n *Bytes) UnmarshalJSON(b []byte) error {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	bad := &json.UnmarshalTypeError{Value: string(b), Type: bytesType}
	switch v := v.(type) {
	case float64:
		if v < 0 || v > math.MaxInt64 || v != math.Trunc(v) {
			return bad
		}
		*n = Bytes(v)
	case string:
		p, err := units.ParseBytes(v)
		if err != nil {
			return bad
		}
		*n = Bytes(p)
	default:
		return bad
	}
	return nil
}

// EncodeData renders output bytes as a string field, base64 when they are
// not valid UTF-8 (a chunk may split a character).
func EncodeData(p []byte) (data, encoding string) {
	if utf8.Valid(p) {
		return string(p), ""
	}
	return base64.StdEncoding.EncodeToString(p), "base64"
}

func decodeData(data, encoding string) ([]byte, error) {
	switch encoding {
	case "":
		return []byte(data), nil
	case "base64":
		return base64.StdEncoding.DecodeString(data)
	}
	return nil, fmt.Errorf("unknown encoding %q", encoding)
}

// ContentTypeTar marks a tar upload or asks for a tar download.
const ContentTypeTar = "application/x-tar"

// TunnelProtocol is what GET /v1/sandboxes/{id}/tunnel/{port} upgrades
// to: the connection then carries the port's bytes both ways, raw.
const TunnelProtocol = "smolvm-tcp"

// HeaderTenant, sent with the admin token, makes the request act as that
// tenant, which must exist: what it creates is the tenant's and counts
// against its quota, and it sees only the tenant's objects. The
// Kubernetes node daemon makes a Sandbox's spec.tenant so.
const HeaderTenant = "Smolvm-Tenant"

// NetworkUpdateRequest is the body of PUT /v1/sandboxes/{id}/network: the
// whole new policy. Published ports stay as they are.
type NetworkUpdateRequest struct {
	Mode  sandbox.NetworkMode `json:"mode"`
	Hosts []string            `json:"allow_hosts,omitempty"`
	CIDRs []string            `json:"allow_cidrs,omitempty"`
}

// PullRequest is the body of POST /v1/images: the image Ref, pulled
// from its registry unless the server has it already (or Always).
type PullRequest struct {
	Ref string `json:"ref"`
	// Platform is "os/arch[/variant]"; absent is linux on the server's
	// architecture.
	Platform string `json:"platform,omitempty"`
	// Insecure allows plain HTTP to any registry (loopback, *.local and
	// private addresses always get it).
	Insecure bool `json:"insecure,omitempty"`
	// Always pulls even when the server has an image by that name, to
	// follow a tag that moved.
	Always bool `json:"always,omitempty"`
	// ID is the image the caller needs (a snapshot's, say), whole or a
	// prefix of at least 12 hex digits: when the server has it, Ref is
	// not looked at; a pull that gives another image is a conflict (the
	// tag has moved).
	ID string `json:"id,omitempty"`
}

// PoolRequest is the body of POST /v1/pools.
type PoolRequest struct {
	Name    string `json:"name,omitempty"`
	Image   string `json:"image,omitempty"`
	Size    int    `json:"size,omitempty"`
	Targets int    `json:"targets,omitempty"`
	// Backend runs the pool's sandboxes; absent is the server's default
	// (a hot pool's is its snapshot's).
	Backend string `json:"backend,omitempty"`
	// From and Hot make a hot pool: Hot copies restored from the snapshot
	// From, paused, which restores of it claim.
	From         string  `json:"from,omitempty"`
	Hot          int     `json:"hot,omitempty"`
	MemoryBudget Bytes   `json:"memory_budget,omitempty"`
	CPUs         float64 `json:"cpus,omitempty"`
	Memory       Bytes   `json:"memory,omitempty"`
	Pids         int64   `json:"pids,omitempty"`
	Disk         Bytes   `json:"disk,omitempty"`
	// Fill starts the pool's sandboxes before answering; otherwise the
	// pool fills when POST /v1/pools/{pool}/fill is called, or as
	// sandboxes are taken from it.
	Fill bool `json:"fill,omitempty"`
}

// CheckpointRequest is the optional body of POST …/checkpoint.
type CheckpointRequest struct {
	Name string `json:"name,omitempty"`
	// Stop stops the sandbox after the checkpoint instead of leaving it
	// running.
	Stop bool `json:"stop,omitempty"`
}

// RestoreRequest is the optional body of POST /v1/snapshots/{snapshot}/restore.
type RestoreRequest struct {
	Name string   `json:"name,omitempty"`
	TTL  Duration `json:"ttl,omitempty"` // replaces the snapshot's time to live
	// Labels, when present, replace the snapshot's labels.
	Labels map[string]string `json:"labels,omitempty"`
}

// ForkRequest is the optional body of POST …/fork.
type ForkRequest struct {
	// N is how many copies, 1 to sandbox.MaxFork (default 1: an
	// explicit 0 is refused).
	N          *int   `json:"n,omitempty"`
	NamePrefix string `json:"name_prefix,omitempty"`
}

// Error codes in error bodies; clients branch on them, not on messages.
const (
	CodeInvalid      = "invalid"      // 400: a malformed request; Field names what
	CodeUnauthorized = "unauthorized" // 401
	CodeDenied       = "denied"       // 403: the sandbox's trust policy refused
	CodeNotFound     = "not_found"    // 404: never existed, or removed (the message says when)
	CodeExpired      = "expired"      // 404: expired; ExpiredAt says when
	CodeConflict     = "conflict"     // 409: wrong state, name in use, budget reached (Class tells them apart; keep the codes, the SDKs branch on them)
	CodeTooLarge     = "too_large"    // 413: the limit is in the message
	CodeMethod       = "method"       // 405: the Allow header lists the methods
	CodeCannotStart  = "cannot_start" // 422: the main command could not start; Exit says why
	CodeCorrupt      = "corrupt"      // 422: stored data failed verification
	CodeBusy         = "busy"         // 429, 503: over the concurrency limit
	CodeInternal     = "internal"     // 500
	CodeUnsupported  = "unsupported"  // 501: not supported by the backend
	CodeUnavailable  = "unavailable"  // 503: the sandbox's agent cannot be reached now
	CodeTimeout      = "timeout"      // 504; 408: the request body came too slowly (serve --body-timeout)
)

// Error is the JSON body of every error response.
type Error struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"error"`
	// Class is the error's class (errdefs.Name), for errors that have one.
	// It is finer than Code: several classes share 409 "conflict".
	Class string `json:"class,omitempty"`
	// Field is the request field a 400 is about.
	Field string `json:"field,omitempty"`
	// ExpiredAt is when an expired sandbox expired.
	ExpiredAt *time.Time `json:"expired_at,omitempty"`
	// Exit is why a sandbox's main command could not start (127: not
	// found, 126: not executable).
	Exit *sandbox.Exit `json:"exit,omitempty"`
}

func (e *Error) Error() string { return e.Message }

// TenantRequest is the body of POST /v1/tenants.
type TenantRequest struct {
	Name  string        `json:"name"`
	Quota sandbox.Quota `json:"quota"`
}

// NewKey is the answer to POST /v1/tenants/{tenant}/keys: the key's
// secret, shown this once.
type NewKey struct {
	sandbox.TenantKey
	Tenant string `json:"tenant"`
	Key    string `json:"key"`
}

// BrowserStartRequest is the body of POST /v1/browsers/golden: boot
// Chromium and checkpoint it as the golden browser.
type BrowserStartRequest struct {
	Golden string              `json:"golden,omitempty"`
	Image  string              `json:"image,omitempty"`
	Mode   sandbox.NetworkMode `json:"mode,omitempty"` // egress (default) or full
	Hosts  []string            `json:"allow_hosts,omitempty"`
	CIDRs  []string            `json:"allow_cidrs,omitempty"`
	// Timeout bounds the wait for Chromium's DevTools endpoint.
	Timeout Duration `json:"timeout,omitempty"`
}

// BrowserRequest is the body of POST /v1/browsers: a fresh browser from
// the golden. Network, if set, replaces the golden's allow-list.
type BrowserRequest struct {
	Golden  string                `json:"golden,omitempty"`
	Name    string                `json:"name,omitempty"`
	TTL     Duration              `json:"ttl,omitempty"`
	Network *NetworkUpdateRequest `json:"network,omitempty"`
}

// Browser is a running browser: its sandbox, and its CDP endpoints on the
// server's host.
type Browser struct {
	ID        string     `json:"id"`
	Name      string     `json:"name"`
	CDP       string     `json:"cdp_url"`
	HTTP      string     `json:"http_url"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// ScreenshotRequest is the body of POST /v1/browsers/screenshot; the answer
// is the PNG (image/png).
type ScreenshotRequest struct {
	Golden   string   `json:"golden,omitempty"`
	URL      string   `json:"url"`
	FullPage bool     `json:"full_page,omitempty"`
	Width    int      `json:"width,omitempty"`
	Height   int      `json:"height,omitempty"`
	Timeout  Duration `json:"timeout,omitempty"`
}

// AgentRunRequest is the body of POST /v1/agent/runs: the options of
// `smolvm agent run --task`. Repo is a git work tree on the server's host
// (copied, never written); zero budgets take the runner's defaults.
type AgentRunRequest struct {
	Task string `json:"task"`
	Repo string `json:"repo"`
	// Test is the test command (default: detected from the repository).
	Test string `json:"test,omitempty"`
	// Agent is "builtin" (the default: the server's SMOLVM_MODEL_*
	// model) or an agent CLI command line run in the sandbox.
	Agent string `json:"agent,omitempty"`
	AgentBudget
}

// AgentBudget is what a run may spend and how it treats its tests; a
// start and a resume take the same.
type AgentBudget struct {
	MaxIterations    int      `json:"max_iterations,omitempty"`
	MaxTime          Duration `json:"max_time,omitempty"`
	MaxTokens        int      `json:"max_tokens,omitempty"`
	MaxCost          float64  `json:"max_cost,omitempty"`
	TestTimeout      Duration `json:"test_timeout,omitempty"`
	FlakyReruns      int      `json:"flaky_reruns,omitempty"`
	StuckAfter       int      `json:"stuck_after,omitempty"`
	AllowTestChanges bool     `json:"allow_test_changes,omitempty"`
}

// AgentResumeRequest is the body of POST /v1/agent/runs/{id}/resume:
// `smolvm agent resume --from`. The run keeps its repository, task and
// test command and continues from iteration From's checkpoint; Agent
// defaults to the one the run used ("builtin" for the built-in agent,
// whatever its model); the budget counts from now.
type AgentResumeRequest struct {
	From  int    `json:"from"`
	Agent string `json:"agent,omitempty"`
	AgentBudget
}

// AgentUsage is what an agent spent.
type AgentUsage struct {
	InputTokens  int     `json:"input_tokens"`
	OutputTokens int     `json:"output_tokens"`
	CostUSD      float64 `json:"cost_usd"`
}

// AgentTests is what one run of the test command showed.
type AgentTests struct {
	Format  string   `json:"format"`
	Exit    int      `json:"exit"`
	Passed  int      `json:"passed"`
	Failed  int      `json:"failed"`
	Skipped int      `json:"skipped"`
	Failing []string `json:"failing,omitempty"`
}

// AgentRun is an agent run: State is running, resolved, stopped or
// failed; Best the iteration with most tests passing; Verdict its tests
// on the base commit's pristine test files. Elapsed is in seconds.
type AgentRun struct {
	ID           string      `json:"id"`
	Created      time.Time   `json:"created"`
	Repo         string      `json:"repo"`
	Task         string      `json:"task"`
	Test         string      `json:"test"`
	Agent        string      `json:"agent"`
	State        string      `json:"state"`
	Reason       string      `json:"reason,omitempty"`
	Best         int         `json:"best"`
	BaseSnapshot string      `json:"base_snapshot,omitempty"`
	Verdict      *AgentTests `json:"verdict,omitempty"`
	// Evidence is the review evidence of the change (once ended with a
	// verdict).
	Evidence *AgentEvidence `json:"evidence,omitempty"`
	Flaky    []string       `json:"flaky,omitempty"`
	Usage    AgentUsage     `json:"usage"`
	Elapsed  float64        `json:"elapsed"`
}

// AgentEvidence is what a reviewer reads of a run's change: Verdict is
// proven (every code hunk pinned by a test, no regressions), needs
// review (Reason names the unpinned hunks) or unresolved; the
// fail-to-pass and pass-to-pass tests (SWE-bench's), regressions, added
// tests that pass on the base already, each hunk's pin and the diff
// coverage. Elapsed is what gathering it took, in seconds.
type AgentEvidence struct {
	Verdict      string        `json:"verdict"`
	Reason       string        `json:"reason,omitempty"`
	FailToPass   []string      `json:"fail_to_pass"`
	PassToPass   []string      `json:"pass_to_pass"`
	PassToFail   []string      `json:"pass_to_fail,omitempty"`
	ProveNothing []string      `json:"prove_nothing,omitempty"`
	Hunks        []AgentHunk   `json:"hunks,omitempty"`
	Coverage     AgentCoverage `json:"coverage"`
	Elapsed      float64       `json:"elapsed"`
}

// AgentHunk is one hunk of the final diff: Pinned when the tests fail
// with only it reverted (By: those tests); Test for a test file's hunk,
// which pinning does not judge.
type AgentHunk struct {
	File   string   `json:"file"`
	Header string   `json:"header"`
	Test   bool     `json:"test,omitempty"`
	Pinned bool     `json:"pinned"`
	By     []string `json:"by,omitempty"`
	Note   string   `json:"note,omitempty"`
}

// AgentCoverage is which changed lines the tests executed: Tool is
// "node-v8", "go-cover", "python-trace" ("+"-joined when several
// measured), or empty when nothing was measured (Note says why). Files
// is the same per measured file.
type AgentCoverage struct {
	Tool        string              `json:"tool,omitempty"`
	Changed     int                 `json:"changed"`
	Executed    int                 `json:"executed"`
	Missed      []string            `json:"missed,omitempty"`
	NotMeasured int                 `json:"not_measured,omitempty"`
	Note        string              `json:"note,omitempty"`
	Files       []AgentFileCoverage `json:"files,omitempty"`
}

// AgentFileCoverage is one changed file's measured lines: Missed are
// the lines no test ran.
type AgentFileCoverage struct {
	File     string `json:"file"`
	Tool     string `json:"tool"`
	Changed  int    `json:"changed"`
	Executed int    `json:"executed"`
	Missed   []int  `json:"missed,omitempty"`
}

// AgentViolation is a guard's reason to reject a change.
type AgentViolation struct {
	Rule   string `json:"rule"`
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// AgentIteration is one step of a run: the change (Diff against the base
// commit), the tests (nil when the guard rejected it: Violations say
// why) and its checkpoint.
type AgentIteration struct {
	N          int              `json:"n"`
	Parent     int              `json:"parent"`
	Created    time.Time        `json:"created"`
	Commit     string           `json:"commit,omitempty"`
	Snapshot   string           `json:"snapshot,omitempty"`
	Diff       string           `json:"diff,omitempty"`
	Tests      *AgentTests      `json:"tests,omitempty"`
	Violations []AgentViolation `json:"violations,omitempty"`
	Flaky      []string         `json:"flaky,omitempty"`
	Usage      AgentUsage       `json:"usage"`
	Note       string           `json:"note,omitempty"`
}

// AgentRunLog is GET /v1/agent/runs/{id}: the run and its iterations.
type AgentRunLog struct {
	Run        AgentRun         `json:"run"`
	Iterations []AgentIteration `json:"iterations"`
}

// AgentProgress is the Data of an "agent.PHASE" event on /v1/events
// (PHASE: started, base, agent, rejected, tests, verdict, done): the
// tests passing and failing (flaky aside), tokens, cost and seconds
// elapsed so far.
type AgentProgress struct {
	Run       string  `json:"run"`
	Iteration int     `json:"iteration"`
	Phase     string  `json:"phase"`
	Passed    int     `json:"passed"`
	Failed    int     `json:"failed"`
	Flaky     int     `json:"flaky"`
	Tokens    int     `json:"tokens"`
	CostUSD   float64 `json:"cost_usd"`
	Elapsed   float64 `json:"elapsed"`
	Note      string  `json:"note,omitempty"`
}

// BranchRun is a fan-out (`smolvm branch fanout`): agent branches forked
// from one set-up checkpoint, each judged by the repository's own CI, then
// merged through a merge queue into Integration. Times are in seconds.
type BranchRun struct {
	ID      string    `json:"id"`
	Created time.Time `json:"created"`
	Repo    string    `json:"repo"`
	// Mode is best-of-n (one task, one winner) or split (one sub-task
	// per branch, all that pass merge).
	Mode         string   `json:"mode"`
	Task         string   `json:"task,omitempty"`
	Setup        string   `json:"setup,omitempty"`
	CI           BranchCI `json:"ci"`
	Base         string   `json:"base"`
	Snapshot     string   `json:"snapshot,omitempty"`
	SetupElapsed float64  `json:"setup_elapsed"`
	State        string   `json:"state"`
	Reason       string   `json:"reason,omitempty"`
	Elapsed      float64  `json:"elapsed"`
	Integration  string   `json:"integration,omitempty"`
	Summary      string   `json:"summary,omitempty"`
	// Branches is how many branches the run has, Green how many passed CI.
	Branches int `json:"branches"`
	Green    int `json:"green"`
}

// BranchCI is a fan-out's CI: the command, where it came from, and the
// steps of a GitHub job it could not run.
type BranchCI struct {
	Command     string   `json:"command"`
	Source      string   `json:"source"`
	Unsupported []string `json:"unsupported,omitempty"`
}

// Branch is one branch of a fan-out: its CI result on its best change
// (Tests) and the change's summary.
type Branch struct {
	K             int         `json:"k"`
	Name          string      `json:"name"`
	Task          string      `json:"task"`
	Agent         string      `json:"agent"`
	State         string      `json:"state"`
	Reason        string      `json:"reason,omitempty"`
	AgentRun      string      `json:"agent_run,omitempty"`
	Commit        string      `json:"commit,omitempty"`
	Tests         *AgentTests `json:"tests,omitempty"`
	Flaky         []string    `json:"flaky,omitempty"`
	DiffLines     int         `json:"diff_lines"`
	Interventions int         `json:"interventions"`
	Iterations    int         `json:"iterations"`
	Usage         AgentUsage  `json:"usage"`
	Elapsed       float64     `json:"elapsed"`
	// Last is the branch's latest progress.
	Last *AgentProgress `json:"last,omitempty"`
}

// BranchStep is one step of a merge queue, in order: rank, winner,
// merge, conflict (Files), resolve, ci, merged, ejected, done. Branch is
// 0 for the run as a whole; Tests is the CI that decided it.
type BranchStep struct {
	N       int         `json:"n"`
	Created time.Time   `json:"created"`
	Branch  int         `json:"branch"`
	Kind    string      `json:"kind"`
	Target  string      `json:"target,omitempty"`
	Commit  string      `json:"commit,omitempty"`
	Files   []string    `json:"files,omitempty"`
	Tests   *AgentTests `json:"tests,omitempty"`
	Note    string      `json:"note,omitempty"`
}

// BranchRunLog is GET /v1/agent/branches/{id}: a fan-out, its branches
// and its merge queue's steps.
type BranchRunLog struct {
	Run      BranchRun    `json:"run"`
	Branches []Branch     `json:"branches"`
	Steps    []BranchStep `json:"steps"`
}
