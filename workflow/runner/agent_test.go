package runner

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"smolvm.dev/smolvm/workflow/llm"
	"smolvm.dev/smolvm/workflow/llm/llmtest"
	"smolvm.dev/smolvm/workflow/trust"
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
			run := fix(t, rn, repo, &Builtin{Model: m, Context: ctxFn}, func(o *Options) { o.Policy = runPolicy(t, repo) })
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

// runPolicy lets the agent run node and grep, denies touch, and asks
// (like the default policy) for everything else.
func runPolicy(t *testing.T, repo string) *trust.Policy {
	t.Helper()
	p, err := trust.Parse(repo, trust.FileName, []byte("[run]\nallow = [\"node\", \"grep\"]\ndeny = [\"touch\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// run_command goes through the trust policy: a denied command is refused
// (and does not run), the model is told why, and both verdicts are in
// the audit log under the run.
func TestBuiltinRunCommandGated(t *testing.T) {
	rn := newRunner(t)
	repo := gitRepo(t, jsRepo)
	srv := llmtest.NewServer(t)
	srv.Respond(func(req llm.Request) llmtest.Turn {
		last := req.Messages[len(req.Messages)-1]
		turn := llmtest.Turn{InputTokens: 10, OutputTokens: 5}
		switch {
		case last.Role == llm.RoleUser:
			turn.ToolCalls = []llm.ToolCall{call("run_command", map[string]string{"command": "touch denied-marker"})}
		case strings.Contains(last.Content, "refused by the trust policy"):
			turn.ToolCalls = []llm.ToolCall{call("run_command", map[string]string{"command": "node -e 'console.log(40+2)'"})}
		default:
			turn.Text = "done"
		}
		return turn
	})
	m, err := llm.New(llm.Config{Provider: llm.OpenAI, BaseURL: srv.URL, Model: "scripted", APIKey: "k"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	run := fix(t, rn, repo, &Builtin{Model: m}, func(o *Options) {
		o.Policy, o.Budget.Iterations, o.FlakyReruns = runPolicy(t, repo), 1, -1
	})
	all, _ := json.Marshal(srv.Requests())
	for _, want := range []string{"refused by the trust policy: run touch denied-marker: policy denies it", "exit status 0\\n42"} {
		if !strings.Contains(string(all), want) {
			t.Errorf("no request carried %q:\n%s", want, all)
		}
	}
	its, err := rn.Log.Iterations(t.Context(), run.ID)
	if err != nil || len(its) != 2 {
		t.Fatalf("iterations %+v: %v", its, err)
	}
	if strings.Contains(its[1].Diff, "denied-marker") {
		t.Errorf("the denied command ran:\n%s", its[1].Diff)
	}
	recs, err := rn.Ledger.Audit(t.Context(), time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]trust.Outcome{}
	for _, r := range recs {
		if r.Requester == "agent-"+run.ID {
			got[r.Action.String()] = r.Outcome
		}
	}
	if got["run touch denied-marker"] != trust.Deny || got["run node -e 'console.log(40+2)'"] != trust.Allow || len(got) != 2 {
		t.Fatalf("audit = %v", got)
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
