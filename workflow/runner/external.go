package runner

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/workflow/llm"
)

// PromptFile is where an external agent finds the prompt inside the
// sandbox (outside the repository, so it is never part of the diff).
const PromptFile = "/tmp/smolvm-agent/prompt.md"

// DefaultAgentTimeout bounds one iteration of an external agent.
const DefaultAgentTimeout = 30 * time.Minute

// External runs an agent CLI (Claude Code, Codex, aider, a script) inside
// the sandbox for each iteration: the prompt (task, then what the last
// iteration showed) goes to its stdin and to PromptFile, whose path is in
// $SMOLVM_AGENT_PROMPT. smolvm still checks, tests and checkpoints what
// it leaves behind. Its token use is unknown to smolvm.
type External struct {
	Command string // a shell command line, run with sh -c in the repository
	Env     []string
	Timeout time.Duration
	// Output, if set, gets the agent's stdout and stderr.
	Output io.Writer
}

// Step runs the command once.
func (e *External) Step(ctx context.Context, s Step) (Usage, error) {
	prompt := s.Task
	if s.Feedback != "" {
		prompt += "\n\n" + s.Feedback
	}
	if err := s.Service.WriteFile(ctx, s.Sandbox, PromptFile, strings.NewReader(prompt)); err != nil {
		return Usage{}, fmt.Errorf("write the prompt: %w", err)
	}
	out := e.Output
	if out == nil {
		out = io.Discard
	}
	exit, err := s.Service.Exec(ctx, s.Sandbox, sandbox.Process{
		Args: []string{"sh", "-c", e.Command}, Dir: s.Dir, Stdin: true,
		Env:       append([]string{noBytecode, "SMOLVM_AGENT_PROMPT=" + PromptFile, fmt.Sprintf("SMOLVM_AGENT_ITERATION=%d", s.N)}, e.Env...),
		TimeoutMS: cmp0(e.Timeout, DefaultAgentTimeout).Milliseconds(),
	}, sandbox.Stdio{Stdin: strings.NewReader(prompt), Stdout: out, Stderr: out})
	if err != nil {
		return Usage{}, fmt.Errorf("agent %q: %w", e.Command, err)
	}
	switch {
	case exit.Error != "":
		return Usage{}, fmt.Errorf("agent %q: %s", e.Command, exit.Error)
	case exit.TimedOut:
		return Usage{}, fmt.Errorf("agent %q: timed out", e.Command)
	case exit.Code != 0:
		return Usage{}, fmt.Errorf("agent %q: exit status %d", e.Command, exit.Code)
	}
	return Usage{}, nil
}

// NewAgent returns the agent spec names, and its name for the log:
// "builtin" is the built-in agent over the model getenv configures
// (SMOLVM_MODEL_*, llm.ConfigFromEnv), told the rules and memory of the
// repository at repo; anything else is an agent CLI command line run in
// the sandbox (External), whose output goes to out.
func NewAgent(ctx context.Context, spec, repo string, getenv func(string) string, out io.Writer) (Agent, string, error) {
	if spec != "builtin" {
		if strings.TrimSpace(spec) == "" {
			return nil, "", errdefs.New(errdefs.ErrInvalid, `no agent: give "builtin" or an agent command line`)
		}
		return &External{Command: spec, Output: out}, spec, nil
	}
	cfg, err := llm.ConfigFromEnv(getenv)
	if err != nil {
		return nil, "", fmt.Errorf("agent builtin: %w", err)
	}
	m, err := llm.New(cfg, nil)
	if err != nil {
		return nil, "", fmt.Errorf("agent builtin: %w", err)
	}
	b := &Builtin{Model: m}
	if b.Context, err = RepoContext(ctx, repo); err != nil {
		return nil, "", err
	}
	return b, "builtin:" + cfg.Provider + "/" + cfg.Model, nil
}
