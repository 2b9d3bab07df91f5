package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path"
	"strings"
	"sync"

	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/workflow/llm"
	"smolvm.dev/smolvm/workflow/trust"
)

// Builtin is the agent smolvm ships: a tool loop over an llm.Model whose
// tools act on the sandbox only.
type Builtin struct {
	Model llm.Model
	// Context returns the rules and memory that apply to a path (a slash
	// path relative to the repository); each path's is given once, the
	// first time a tool touches it. Nil gives none.
	Context func(ctx context.Context, path string) string
	// MaxTurns bounds the model calls in one iteration (default 30).
	MaxTurns  int
	MaxTokens int // per answer (default 4096)
	// OnText, if set, sees the model's text as it streams.
	OnText func(string)

	mu      sync.Mutex
	history []llm.Message // the conversation so far, across iterations
	given   map[string]bool
}

// Limits of the built-in tools.
const (
	maxToolOutput  = 16 << 10
	maxReadFile    = 256 << 10
	commandTimeout = 120_000 // ms
)

const systemPrompt = `You are a software engineer fixing a repository inside a sandbox.
The repository is at /work; tool paths are relative to it. Use the tools to read the code,
make the smallest correct change, and check it by running commands. Fix the code under
test: changes that delete, skip or weaken tests, or edit test files, are rejected by smolvm
and rolled back. When you are done with this iteration, answer with a short summary and no
tool call; smolvm then runs the tests and tells you what they show.`

var tools = []llm.Tool{
	{Name: "list_files", Description: "List the files under a directory (default: the whole repository).",
		Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}}}`)},
	{Name: "read_file", Description: "Read a file.",
		Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`)},
	{Name: "search", Description: "Search the files for a regular expression (grep -E); returns file:line:text.",
		Parameters: json.RawMessage(`{"type":"object","properties":{"pattern":{"type":"string"},"path":{"type":"string"}},"required":["pattern"]}`)},
	{Name: "edit_file", Description: "Replace the exact text old (which must occur exactly once) with new in a file.",
		Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"},"old":{"type":"string"},"new":{"type":"string"}},"required":["path","old","new"]}`)},
	{Name: "write_file", Description: "Create or replace a whole file.",
		Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"},"content":{"type":"string"}},"required":["path","content"]}`)},
	{Name: "run_command", Description: "Run a shell command in the repository (2 minute limit); returns its exit status and output. The project's trust policy may refuse it.",
		Parameters: json.RawMessage(`{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}`)},
	{Name: "view_diff", Description: "Show the change made so far against the starting commit.",
		Parameters: json.RawMessage(`{"type":"object","properties":{}}`)},
}

// Step runs the model until it answers without a tool call.
func (b *Builtin) Step(ctx context.Context, s Step) (Usage, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.given == nil {
		b.given = map[string]bool{}
	}
	msg := s.Feedback
	if len(b.history) == 0 {
		msg = "Task:\n" + s.Task + "\n\n" + s.Feedback
		if c := b.context(ctx, "."); c != "" {
			msg += "\n\nProject rules and memory:\n" + c
		}
	}
	b.history = append(b.history, llm.Message{Role: llm.RoleUser, Content: msg})
	var used Usage
	turns := cmp0(b.MaxTurns, 30)
	for range turns {
		resp, err := b.Model.Complete(ctx, llm.Request{
			System: systemPrompt, Messages: b.history, Tools: tools, MaxTokens: cmp0(b.MaxTokens, 4096),
		}, b.OnText)
		used.add(Usage{InputTokens: resp.Usage.InputTokens, OutputTokens: resp.Usage.OutputTokens, CostUSD: resp.Usage.CostUSD})
		if err != nil {
			return used, fmt.Errorf("model: %w", err)
		}
		b.history = append(b.history, resp.Message)
		if len(resp.Message.ToolCalls) == 0 {
			return used, nil
		}
		for _, call := range resp.Message.ToolCalls {
			out := b.call(ctx, s, call)
			b.history = append(b.history, llm.Message{Role: llm.RoleTool, ToolCallID: call.ID, Content: out})
		}
	}
	return used, nil // out of turns for this iteration: let the tests speak
}

// call runs one tool; failures are the tool's answer, for the model.
func (b *Builtin) call(ctx context.Context, s Step, call llm.ToolCall) string {
	var a struct{ Path, Pattern, Old, New, Content, Command string }
	if len(call.Arguments) > 0 {
		if err := json.Unmarshal(call.Arguments, &a); err != nil {
			return "error: arguments are not valid JSON: " + err.Error()
		}
	}
	p := a.Path
	if p == "" {
		p = "."
	}
	full, rel, err := inside(s.Dir, p)
	if err != nil {
		return "error: " + err.Error()
	}
	out, err := b.tool(ctx, s, call.Name, full, a.Pattern, a.Old, a.New, a.Content, a.Command)
	if err != nil {
		return "error: " + err.Error()
	}
	if (call.Name == "read_file" || call.Name == "edit_file" || call.Name == "write_file") && rel != "." {
		if c := b.context(ctx, rel); c != "" {
			out += "\n\n[rules and memory for " + rel + "]\n" + c
		}
	}
	return out
}

func (b *Builtin) tool(ctx context.Context, s Step, name, full, pattern, old, new, content, command string) (string, error) {
	svc, sb := s.Service, s.Sandbox
	switch name {
	case "list_files":
		return execOut(ctx, svc, sb, s.Dir, []string{"find", full, "-name", ".git", "-prune", "-o", "-name", "node_modules", "-prune", "-o", "-type", "f", "-print"})
	case "read_file":
		return readFile(ctx, svc, sb, full)
	case "search":
		if pattern == "" {
			return "", fmt.Errorf("no pattern")
		}
		return execOut(ctx, svc, sb, s.Dir, []string{"grep", "-rnIE", "--exclude-dir=.git", "--exclude-dir=node_modules", "-e", pattern, full})
	case "edit_file":
		data, err := readFile(ctx, svc, sb, full)
		if err != nil {
			return "", err
		}
		switch n := strings.Count(data, old); {
		case old == "":
			return "", fmt.Errorf("old is empty; use write_file to create a file")
		case n == 0:
			return "", fmt.Errorf("old text not found in %s (it must match exactly, whitespace included)", full)
		case n > 1:
			return "", fmt.Errorf("old text occurs %d times in %s; include more context so it occurs once", n, full)
		}
		if err := svc.WriteFile(ctx, sb, full, strings.NewReader(strings.Replace(data, old, new, 1))); err != nil {
			return "", err
		}
		return "edited " + full, nil
	case "write_file":
		if err := svc.WriteFile(ctx, sb, full, strings.NewReader(content)); err != nil {
			return "", err
		}
		return fmt.Sprintf("wrote %d bytes to %s", len(content), full), nil
	case "run_command":
		if command == "" {
			return "", fmt.Errorf("no command")
		}
		// The sandbox contains what a command does, but the policy still
		// says what an agent may run (network tools, pushes, installs).
		if err := s.Check(ctx, trust.Action{Kind: trust.Run, Target: command}); err != nil {
			return "", fmt.Errorf("refused by the trust policy: %w", err)
		}
		var out capped
		out.max = maxToolOutput
		exit, err := svc.Exec(ctx, sb, sandbox.Process{Args: []string{"sh", "-c", command}, Dir: s.Dir, Env: []string{noBytecode}, TimeoutMS: commandTimeout},
			sandbox.Stdio{Stdout: &out, Stderr: &out})
		if err != nil {
			return "", err
		}
		status := fmt.Sprintf("exit status %d", exit.Code)
		if exit.TimedOut {
			status = "timed out after 2 minutes"
		}
		return status + "\n" + out.String(), nil
	case "view_diff":
		d, err := s.Diff(ctx)
		if err != nil {
			return "", err
		}
		if d == "" {
			return "(no change yet)", nil
		}
		return head(d, maxToolOutput), nil
	}
	return "", fmt.Errorf("no tool %q", name)
}

// inside resolves a tool path against dir and refuses one outside it.
func inside(dir, p string) (full, rel string, err error) {
	full = path.Clean(path.Join(dir, p))
	if path.IsAbs(p) {
		full = path.Clean(p)
	}
	if full != dir && !strings.HasPrefix(full, dir+"/") {
		return "", "", fmt.Errorf("%s is outside the repository (%s)", p, dir)
	}
	rel = strings.TrimPrefix(strings.TrimPrefix(full, dir), "/")
	if rel == "" {
		rel = "."
	}
	return full, rel, nil
}

func readFile(ctx context.Context, svc sandbox.Service, sb, p string) (string, error) {
	rc, err := svc.ReadFile(ctx, sb, p)
	if err != nil {
		return "", err
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, maxReadFile+1))
	if err != nil {
		return "", err
	}
	if len(data) > maxReadFile {
		return "", fmt.Errorf("%s is over %d KiB", p, maxReadFile>>10)
	}
	return string(data), nil
}

func execOut(ctx context.Context, svc sandbox.Service, sb, dir string, args []string) (string, error) {
	var out capped
	out.max = maxToolOutput
	var errb bytes.Buffer
	exit, err := svc.Exec(ctx, sb, sandbox.Process{Args: args, Dir: dir, TimeoutMS: commandTimeout}, sandbox.Stdio{Stdout: &out, Stderr: &errb})
	if err != nil {
		return "", err
	}
	if exit.Code > 1 { // grep's 1 is "no match"
		return "", fmt.Errorf("%s: exit %d: %s", args[0], exit.Code, strings.TrimSpace(errb.String()))
	}
	if out.Len() == 0 {
		return "(nothing)", nil
	}
	return out.String(), nil
}

func (b *Builtin) context(ctx context.Context, rel string) string {
	if b.Context == nil || b.given[rel] {
		return ""
	}
	b.given[rel] = true
	return b.Context(ctx, rel)
}

// head keeps the first n bytes of s.
func head(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "\n… (truncated)"
}
