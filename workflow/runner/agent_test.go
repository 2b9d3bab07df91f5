package runner

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"smolvm.dev/smolvm/workflow/llm"
	"smolvm.dev/smolvm/workflow/llm/llmtest"
)

func call(name string, args map[string]string) llm.ToolCall {
	b, _ := json.Marshal(args)
	return llm.ToolCall{Name: name, Arguments: b}
}

// The scripted model reads the failure it is given, tries to skip the
// failing test (rejected), reads the rejection, then fixes the code; its
// tool results come back in the next request.
func TestBuiltinAgent(t *testing.T) {
	for _, provider := range []string{llm.OpenAI, llm.Anthropic} {
		t.Run(provider, func(t *testing.T) {
			rn := newRunner(t)
			repo := gitRepo(t, jsRepo)
			os.WriteFile(filepath.Join(repo, "AGENTS.md"), []byte("Keep calc.js free of dependencies.\n"), 0o644)
			srv := llmtest.NewServer(t)
			srv.Respond(func(req llm.Request) llmtest.Turn {
				last := req.Messages[len(req.Messages)-1]
				turn := llmtest.Turn{InputTokens: 1000, OutputTokens: 50}
				switch {
				case last.Role == llm.RoleUser && strings.Contains(last.Content, "rejected"):
					turn.ToolCalls = []llm.ToolCall{call("read_file", map[string]string{"path": "calc.js"})}
				case last.Role == llm.RoleUser:
					turn.ToolCalls = []llm.ToolCall{call("edit_file", map[string]string{"path": "calc.test.js",
						"old": "test('add',", "new": "test.skip('add',"})}
				case strings.Contains(last.Content, "exports.add = (a, b) => a - b"):
					turn.ToolCalls = []llm.ToolCall{
						call("edit_file", map[string]string{"path": "calc.js", "old": "a - b", "new": "a + b"}),
						call("edit_file", map[string]string{"path": "calc.js", "old": "mul = (a, b) => a + b", "new": "mul = (a, b) => a * b"}),
						call("edit_file", map[string]string{"path": "calc.js", "old": "(a, b) =>", "new": "(x, y) =>"}),
						call("run_command", map[string]string{"command": "node --test 2>&1 | grep -c '^ok'"}),
					}
				default:
					turn.Text = "Fixed add and mul."
				}
				return turn
			})
			m, err := llm.New(llm.Config{Provider: provider, BaseURL: srv.URL, Model: "scripted", APIKey: "k", PriceInPerMTok: 1}, nil)
			if err != nil {
				t.Fatal(err)
			}
			ctxFn, err := RepoContext(t.Context(), repo)
			if err != nil {
				t.Fatal(err)
			}
			run := fix(t, rn, repo, &Builtin{Model: m, Context: ctxFn}, nil)
			if run.State != Resolved || run.Best != 2 || run.Usage.InputTokens == 0 || run.Usage.CostUSD == 0 {
				t.Fatalf("run = %+v", run)
			}
			reqs := srv.Requests()
			all, _ := json.Marshal(reqs)
			for _, want := range []string{"Keep calc.js free of dependencies", "--- FAIL: add", "adds a .skip", "edited /work/calc.js"} {
				if !strings.Contains(string(all), want) {
					t.Errorf("no request carried %q", want)
				}
			}
			// The third edit's old text occurs twice: refused, and the
			// model was told so.
			if !strings.Contains(string(all), "occurs 2 times") {
				t.Error("an ambiguous edit was not refused")
			}
		})
	}
}

func TestExternalAgent(t *testing.T) {
	rn := newRunner(t)
	repo := gitRepo(t, jsRepo)
	// The stand-in for an agent CLI: it reads the prompt on stdin, and
	// fixes one function per iteration.
	script := `set -e
prompt=$(cat)
case "$prompt" in *"make the tests pass"*) ;; *) echo "no task on stdin" >&2; exit 3;; esac
test -s "$SMOLVM_AGENT_PROMPT"
if grep -q 'a - b' calc.js; then sed -i 's/a - b/a + b/' calc.js; else sed -i 's/mul = (a, b) => a + b/mul = (a, b) => a * b/' calc.js; fi
`
	os.WriteFile(filepath.Join(repo, "agent.sh"), []byte(script), 0o755)
	run := fix(t, rn, repo, &External{Command: "sh agent.sh"}, nil)
	if run.State != Resolved || run.Best != 2 {
		t.Fatalf("run = %+v", run)
	}
}
