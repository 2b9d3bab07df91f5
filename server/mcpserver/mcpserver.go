// Package mcpserver exposes smolvm sandboxes to AI agents as Model Context Protocol tools.
package mcpserver

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/workflow/browser"
)

// MaxOutput bounds what one exec or file read returns to the model: a tool
// result lands in a context window, so more is cut and said to be cut.
const MaxOutput = 1 << 20

// Service is what the tools drive: sandbox.Service, and the removal of
// the snapshots sandbox_checkpoint makes. The local manager and the
// client (smolvm mcp --host) both have it.
type Service interface {
	sandbox.Service
	// RemoveSnapshot deletes a snapshot no sandbox or pool rests on.
	RemoveSnapshot(ctx context.Context, ref string) error
}

// New returns an MCP server whose tools drive m. version is smolvm's; dial
// reaches browsers' published DevTools ports (nil: directly).
func New(m Service, version string, dial browser.Dialer) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "smolvm", Version: version}, &mcp.ServerOptions{
		Instructions: "smolvm sandboxes are isolated machines (gVisor); those made here have no network. Create one, " +
			"run commands and move files in it; checkpoint, restore and fork it to branch work. " +
			"Sandboxes are named by ID or name.",
	})
	s.AddReceivingMiddleware(classify)
	t := &tools{m: m, dial: dial}
	mcp.AddTool(s, &mcp.Tool{Name: "sandbox_create", Description: "Create and start a sandbox. Returns its ID."}, t.create)
	mcp.AddTool(s, &mcp.Tool{Name: "sandbox_list", Description: "List sandboxes and their states."}, t.list)
	mcp.AddTool(s, &mcp.Tool{Name: "sandbox_remove", Description: "Stop and remove a sandbox."}, t.remove)
	mcp.AddTool(s, &mcp.Tool{Name: "sandbox_exec", Description: "Run a shell command (sh -c) in a running sandbox; returns exit code, stdout and stderr."}, t.exec)
	mcp.AddTool(s, &mcp.Tool{Name: "file_read", Description: "Read a file from a sandbox. Text comes back as is, other bytes as base64."}, t.readFile)
	mcp.AddTool(s, &mcp.Tool{Name: "file_write", Description: "Write a file in a sandbox, creating parent directories."}, t.writeFile)
	mcp.AddTool(s, &mcp.Tool{Name: "sandbox_checkpoint", Description: "Save a running sandbox (memory, processes, files) as a snapshot; it keeps running."}, t.checkpoint)
	mcp.AddTool(s, &mcp.Tool{Name: "sandbox_restore", Description: "Start a new sandbox from a snapshot."}, t.restore)
	mcp.AddTool(s, &mcp.Tool{Name: "snapshot_remove", Description: "Remove a snapshot that sandbox_checkpoint made, once nothing restored from it still needs it."}, t.removeSnapshot)
	mcp.AddTool(s, &mcp.Tool{Name: "sandbox_fork", Description: "Make running copies of a running sandbox."}, t.fork)
	mcp.AddTool(s, &mcp.Tool{Name: "browser_screenshot", Description: "Take a PNG screenshot of a web page in a fresh headless Chromium " +
		"(restored from the golden browser that `smolvm browser start` made; its network policy applies), removed afterwards."}, t.screenshot)
	return s
}

type tools struct {
	m    Service
	dial browser.Dialer
}

// MetaClass is the _meta key of a tool error's class (errdefs.Name).
const MetaClass = "smolvm.dev/class"

// classify marks a tool error that has a class: its text starts with the
// class ("not_found: no such sandbox ..."), for the model, and the result's
// _meta names it under MetaClass, for programs.
func classify(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		// A call the SDK refuses (an unknown tool) is a nil result.
		tr, ok := res.(*mcp.CallToolResult)
		if !ok || tr == nil || !tr.IsError {
			return res, err
		}
		if class := errdefs.Name(tr.GetError()); class != "" {
			tr.Meta = mcp.Meta{MetaClass: class}
			tr.Content = []mcp.Content{&mcp.TextContent{Text: class + ": " + tr.GetError().Error()}}
		}
		return res, err
	}
}

// invalid is a tool's refusal of its arguments.
func invalid(format string, args ...any) error {
	return errdefs.New(errdefs.ErrInvalid, fmt.Sprintf(format, args...))
}

// sandboxInfo is how a sandbox is shown to the model.
type sandboxInfo struct {
	ID        string     `json:"id"`
	Name      string     `json:"name"`
	Image     string     `json:"image"`
	State     string     `json:"state"`
	Reason    string     `json:"reason,omitempty"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

func info(sb *sandbox.Sandbox) sandboxInfo {
	return sandboxInfo{ID: sb.ID, Name: sb.Name, Image: sb.Image, State: string(sb.State), Reason: sb.Reason, ExpiresAt: sb.ExpiresAt}
}

type createIn struct {
	Image          string            `json:"image,omitempty" jsonschema:"image name; default: the builtin host image"`
	Name           string            `json:"name,omitempty" jsonschema:"sandbox name; default: generated"`
	TimeoutSeconds int64             `json:"timeout_seconds,omitempty" jsonschema:"time to live in seconds; default 900 (smolvm's default), so a forgotten sandbox ends"`
	Env            map[string]string `json:"env,omitempty" jsonschema:"environment variables for every command"`
}

func (t *tools) create(ctx context.Context, _ *mcp.CallToolRequest, in createIn) (*mcp.CallToolResult, sandboxInfo, error) {
	if in.TimeoutSeconds < 0 {
		return nil, sandboxInfo{}, invalid("timeout_seconds: must not be negative")
	}
	o := sandbox.CreateOptions{Name: in.Name, Image: in.Image, Start: true}
	o.Config.TTL = sandbox.DefaultTTL
	if in.TimeoutSeconds > 0 {
		o.Config.TTL = time.Duration(in.TimeoutSeconds) * time.Second
	}
	for _, k := range slices.Sorted(maps.Keys(in.Env)) {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return nil, sandboxInfo{}, invalid("env: invalid name %q", k)
		}
		o.Config.Env = append(o.Config.Env, k+"="+in.Env[k])
	}
	sb, err := t.m.Create(ctx, o)
	if err != nil {
		return nil, sandboxInfo{}, err
	}
	return nil, info(sb), nil
}

type listOut struct {
	Sandboxes []sandboxInfo `json:"sandboxes"`
}

func listOf(sbs []*sandbox.Sandbox) listOut {
	out := listOut{Sandboxes: []sandboxInfo{}}
	for _, sb := range sbs {
		out.Sandboxes = append(out.Sandboxes, info(sb))
	}
	return out
}

func (t *tools) list(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, listOut, error) {
	sbs, err := t.m.List(ctx)
	if err != nil {
		return nil, listOut{}, err
	}
	return nil, listOf(sbs), nil
}

type sandboxRef struct {
	Sandbox string `json:"sandbox" jsonschema:"sandbox ID or name"`
}

type removeOut struct {
	Removed string `json:"removed"`
}

func (t *tools) remove(ctx context.Context, _ *mcp.CallToolRequest, in sandboxRef) (*mcp.CallToolResult, removeOut, error) {
	if err := t.m.Remove(ctx, in.Sandbox, true); err != nil {
		return nil, removeOut{}, err
	}
	return nil, removeOut{Removed: in.Sandbox}, nil
}

type execIn struct {
	Sandbox        string            `json:"sandbox" jsonschema:"sandbox ID or name"`
	Command        string            `json:"command" jsonschema:"shell command, run with sh -c"`
	Cwd            string            `json:"cwd,omitempty" jsonschema:"working directory"`
	Env            map[string]string `json:"env,omitempty" jsonschema:"extra environment variables"`
	Stdin          string            `json:"stdin,omitempty" jsonschema:"text given to the command on standard input"`
	TimeoutSeconds int64             `json:"timeout_seconds,omitempty" jsonschema:"kill the command after this long; default 300"`
}

type execOut struct {
	ExitCode  int    `json:"exit_code"`
	Stdout    string `json:"stdout"`
	Stderr    string `json:"stderr"`
	Truncated bool   `json:"truncated,omitempty"`
	Error     string `json:"error,omitempty"`
}

// defaultExecTimeout keeps a forgotten command from holding a tool call
// (and the model) forever.
const defaultExecTimeout = 5 * time.Minute

func (t *tools) exec(ctx context.Context, _ *mcp.CallToolRequest, in execIn) (*mcp.CallToolResult, execOut, error) {
	if in.Sandbox == "" || in.Command == "" {
		return nil, execOut{}, invalid("sandbox and command are required")
	}
	timeout := defaultExecTimeout
	if in.TimeoutSeconds > 0 {
		timeout = time.Duration(in.TimeoutSeconds) * time.Second
	}
	p := sandbox.Process{Args: []string{"sh", "-c", in.Command}, Dir: in.Cwd, TimeoutMS: timeout.Milliseconds()}
	for _, k := range slices.Sorted(maps.Keys(in.Env)) {
		p.Env = append(p.Env, k+"="+in.Env[k])
	}
	stdout, stderr := &capped{max: MaxOutput}, &capped{max: MaxOutput}
	stdio := sandbox.Stdio{Stdout: stdout, Stderr: stderr}
	if in.Stdin != "" {
		stdio.Stdin = strings.NewReader(in.Stdin)
	}
	exit, err := t.m.Exec(ctx, in.Sandbox, p, stdio)
	if err != nil {
		return nil, execOut{}, err
	}
	return nil, execOut{
		ExitCode: exit.Code, Stdout: stdout.String(), Stderr: stderr.String(),
		Truncated: stdout.cut || stderr.cut, Error: exit.Error,
	}, nil
}

// capped keeps the first max bytes written to it and notes the rest.
type capped struct {
	bytes.Buffer
	max int
	cut bool
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - c.Len(); len(p) > room {
		c.cut = true
		c.Buffer.Write(p[:max(room, 0)])
		return len(p), nil
	}
	return c.Buffer.Write(p)
}

type pathIn struct {
	Sandbox string `json:"sandbox" jsonschema:"sandbox ID or name"`
	Path    string `json:"path" jsonschema:"absolute path inside the sandbox"`
}

type readOut struct {
	Content   string `json:"content"`
	Encoding  string `json:"encoding" jsonschema:"utf-8 or base64"`
	Truncated bool   `json:"truncated,omitempty"`
}

func (t *tools) readFile(ctx context.Context, _ *mcp.CallToolRequest, in pathIn) (*mcp.CallToolResult, readOut, error) {
	if err := checkPath(in.Path); err != nil {
		return nil, readOut{}, err
	}
	rc, err := t.m.ReadFile(ctx, in.Sandbox, in.Path)
	if err != nil {
		return nil, readOut{}, err
	}
	defer rc.Close()
	buf := &capped{max: MaxOutput}
	if _, err := io.Copy(buf, rc); err != nil {
		return nil, readOut{}, fmt.Errorf("read %s: %w", in.Path, err)
	}
	out := readOut{Content: buf.String(), Encoding: "utf-8", Truncated: buf.cut}
	if !utf8.Valid(buf.Bytes()) {
		out.Content, out.Encoding = base64.StdEncoding.EncodeToString(buf.Bytes()), "base64"
	}
	return nil, out, nil
}

type writeIn struct {
	Sandbox  string `json:"sandbox" jsonschema:"sandbox ID or name"`
	Path     string `json:"path" jsonschema:"absolute path inside the sandbox"`
	Content  string `json:"content" jsonschema:"the file's content"`
	Encoding string `json:"encoding,omitempty" jsonschema:"utf-8 (default) or base64"`
}

type writeOut struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
}

func (t *tools) writeFile(ctx context.Context, _ *mcp.CallToolRequest, in writeIn) (*mcp.CallToolResult, writeOut, error) {
	if err := checkPath(in.Path); err != nil {
		return nil, writeOut{}, err
	}
	var r io.Reader = strings.NewReader(in.Content)
	switch in.Encoding {
	case "", "utf-8":
	case "base64":
		r = base64.NewDecoder(base64.StdEncoding, r)
	default:
		return nil, writeOut{}, invalid("encoding: %q is not utf-8 or base64", in.Encoding)
	}
	cr := &countingReader{r: r}
	if err := t.m.WriteFile(ctx, in.Sandbox, in.Path, cr); err != nil {
		return nil, writeOut{}, fmt.Errorf("write %s: %w", in.Path, err)
	}
	return nil, writeOut{Path: path.Clean(in.Path), Size: cr.n}, nil
}

// checkPath wants absolute paths without "..": a model's path should mean
// what it says, not depend on a working directory it cannot see.
func checkPath(p string) error {
	if !strings.HasPrefix(p, "/") {
		return invalid("path %q: must be absolute", p)
	}
	if slices.Contains(strings.Split(p, "/"), "..") {
		return invalid("path %q: '..' elements are not allowed", p)
	}
	return nil
}

type checkpointIn struct {
	Sandbox string `json:"sandbox" jsonschema:"sandbox ID or name"`
	Name    string `json:"name,omitempty" jsonschema:"a name for the snapshot"`
}

type snapshotOut struct {
	Snapshot string `json:"snapshot" jsonschema:"snapshot ID, for sandbox_restore"`
	Name     string `json:"name,omitempty"`
	Size     int64  `json:"size"`
}

func (t *tools) checkpoint(ctx context.Context, _ *mcp.CallToolRequest, in checkpointIn) (*mcp.CallToolResult, snapshotOut, error) {
	sn, err := t.m.Checkpoint(ctx, in.Sandbox, sandbox.CheckpointOptions{Name: in.Name})
	if err != nil {
		return nil, snapshotOut{}, err
	}
	return nil, snapshotOut{Snapshot: sn.ID, Name: sn.Name, Size: sn.Size}, nil
}

type restoreIn struct {
	Snapshot string `json:"snapshot" jsonschema:"snapshot ID or name"`
	Name     string `json:"name,omitempty" jsonschema:"name of the new sandbox"`
}

func (t *tools) restore(ctx context.Context, _ *mcp.CallToolRequest, in restoreIn) (*mcp.CallToolResult, sandboxInfo, error) {
	sb, err := t.m.Restore(ctx, in.Snapshot, sandbox.RestoreOptions{Name: in.Name})
	if err != nil {
		return nil, sandboxInfo{}, err
	}
	return nil, info(sb), nil
}

type snapshotRef struct {
	Snapshot string `json:"snapshot" jsonschema:"snapshot ID or name"`
}

type snapshotRemoved struct {
	Removed string `json:"removed"`
}

func (t *tools) removeSnapshot(ctx context.Context, _ *mcp.CallToolRequest, in snapshotRef) (*mcp.CallToolResult, snapshotRemoved, error) {
	if in.Snapshot == "" {
		return nil, snapshotRemoved{}, invalid("snapshot: required")
	}
	if err := t.m.RemoveSnapshot(ctx, in.Snapshot); err != nil {
		return nil, snapshotRemoved{}, fmt.Errorf("remove snapshot %s: %w", in.Snapshot, err)
	}
	return nil, snapshotRemoved{Removed: in.Snapshot}, nil
}

type forkIn struct {
	Sandbox string `json:"sandbox" jsonschema:"sandbox ID or name"`
	Count   *int   `json:"count,omitempty" jsonschema:"number of copies, 1 to 64; default 1"`
}

func (t *tools) fork(ctx context.Context, _ *mcp.CallToolRequest, in forkIn) (*mcp.CallToolResult, listOut, error) {
	n := 1
	if in.Count != nil {
		n = *in.Count
	}
	if n < 1 || n > sandbox.MaxFork {
		return nil, listOut{}, invalid("count: must be between 1 and %d", sandbox.MaxFork)
	}
	sbs, err := t.m.Fork(ctx, in.Sandbox, sandbox.ForkOptions{N: n})
	if err != nil {
		return nil, listOut{}, err
	}
	return nil, listOf(sbs), nil
}

// countingReader counts what the sandbox took of a written file.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

type screenshotIn struct {
	URL      string `json:"url" jsonschema:"an http, https or data URL"`
	FullPage bool   `json:"full_page,omitempty" jsonschema:"capture the whole page, not only the viewport"`
	Width    int    `json:"width,omitempty" jsonschema:"viewport width in CSS pixels; default 1280"`
	Height   int    `json:"height,omitempty" jsonschema:"viewport height in CSS pixels; default 800"`
	Golden   string `json:"golden,omitempty" jsonschema:"the golden browser's snapshot; default browser"`
}

func (t *tools) screenshot(ctx context.Context, _ *mcp.CallToolRequest, in screenshotIn) (*mcp.CallToolResult, any, error) {
	png, err := browser.Capture(ctx, t.m, in.Golden, browser.ScreenshotOptions{
		URL: in.URL, FullPage: in.FullPage, Width: in.Width, Height: in.Height, Dial: t.dial,
	})
	if err != nil {
		return nil, nil, err
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.ImageContent{Data: png, MIMEType: "image/png"}}}, nil, nil
}
