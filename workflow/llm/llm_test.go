package llm_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/workflow/llm"
	"smolvm.dev/smolvm/workflow/llm/llmtest"
)

var providers = []string{llm.OpenAI, llm.Anthropic}

// modes are the ways each provider is tested: streamed (the default) and whole.
var modes = []struct {
	name     string
	noStream bool
}{{"stream", false}, {"whole", true}}

func newModel(t *testing.T, provider, url string, edit func(*llm.Config)) llm.Model {
	t.Helper()
	cfg := llm.Config{Provider: provider, BaseURL: url, Model: "test-model", APIKey: "sk-test", Backoff: time.Millisecond,
		PriceInPerMTok: 3, PriceOutPerMTok: 15}
	if edit != nil {
		edit(&cfg)
	}
	m, err := llm.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

var editTool = llm.Tool{Name: "edit", Description: "replace text in a file",
	Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"},"old":{"type":"string"},"new":{"type":"string"}},"required":["path","old","new"]}`)}

// TestToolRoundTrip: the model calls a tool, the client sends the result
// back, and the model answers with text; what the server decoded is the
// conversation the client holds, and the tool call arrives whole even
// though its arguments were streamed in pieces.
func TestToolRoundTrip(t *testing.T) {
	for _, p := range providers {
		for _, mode := range modes {
			t.Run(p+"/"+mode.name, func(t *testing.T) {
				args := json.RawMessage(`{"path":"main.go","old":"a := 1","new":"a := 2"}`)
				srv := llmtest.NewServer(t,
					llmtest.Turn{Text: "Let me fix it.", ToolCalls: []llm.ToolCall{{ID: "call_1", Name: "edit", Arguments: args}}, InputTokens: 1000, OutputTokens: 50},
					llmtest.Turn{Text: "Fixed: a is 2 now.", InputTokens: 1200, OutputTokens: 20},
				)
				m := newModel(t, p, srv.URL, func(c *llm.Config) { c.NoStream = mode.noStream })
				temp := 0.2
				req := llm.Request{System: "You fix bugs.", Tools: []llm.Tool{editTool}, MaxTokens: 1000, Temperature: &temp,
					Messages: []llm.Message{{Role: llm.RoleUser, Content: "a should be 2"}}}
				var streamed strings.Builder
				resp, err := m.Complete(context.Background(), req, func(s string) { streamed.WriteString(s) })
				if err != nil {
					t.Fatal(err)
				}
				if resp.StopReason != llm.StopToolUse || len(resp.Message.ToolCalls) != 1 {
					t.Fatalf("first answer: stop %q, calls %+v", resp.StopReason, resp.Message.ToolCalls)
				}
				call := resp.Message.ToolCalls[0]
				if call.ID != "call_1" || call.Name != "edit" || !jsonEqual(call.Arguments, args) {
					t.Fatalf("tool call %+v %s", call, call.Arguments)
				}
				if resp.Message.Content != "Let me fix it." || streamed.String() != "Let me fix it." {
					t.Fatalf("text %q, streamed %q", resp.Message.Content, streamed.String())
				}
				if resp.Usage.InputTokens != 1000 || resp.Usage.OutputTokens != 50 {
					t.Fatalf("usage %+v", resp.Usage)
				}
				if want := (1000*3.0 + 50*15.0) / 1e6; !near(resp.Usage.CostUSD, want) {
					t.Fatalf("cost %v, want %v", resp.Usage.CostUSD, want)
				}

				req.Messages = append(req.Messages, resp.Message, llm.Message{Role: llm.RoleTool, ToolCallID: call.ID, Content: "ok: 1 replacement"})
				resp2, err := m.Complete(context.Background(), req, nil)
				if err != nil {
					t.Fatal(err)
				}
				if resp2.Message.Content != "Fixed: a is 2 now." || resp2.StopReason != llm.StopEndTurn || len(resp2.Message.ToolCalls) != 0 {
					t.Fatalf("second answer %+v", resp2)
				}

				got := srv.Requests()
				if len(got) != 2 {
					t.Fatalf("%d requests", len(got))
				}
				if !sameRequest(got[1], req) {
					t.Fatalf("server decoded\n%+v\nclient sent\n%+v", got[1], req)
				}
				rec := srv.Recorded()
				var body map[string]any
				if err := json.Unmarshal(rec[0].Body, &body); err != nil {
					t.Fatal(err)
				}
				if stream, _ := body["stream"].(bool); stream == mode.noStream {
					t.Fatalf("stream=%v in %s", body["stream"], rec[0].Body)
				}
				switch p {
				case llm.OpenAI:
					if h := rec[0].Header.Get("Authorization"); h != "Bearer sk-test" {
						t.Fatalf("Authorization %q", h)
					}
					if !mode.noStream && !strings.Contains(string(rec[0].Body), `"stream_options":{"include_usage":true}`) {
						t.Fatalf("no include_usage: %s", rec[0].Body)
					}
				case llm.Anthropic:
					if rec[0].Header.Get("x-api-key") != "sk-test" || rec[0].Header.Get("anthropic-version") != llm.AnthropicVersion {
						t.Fatalf("headers %v", rec[0].Header)
					}
					if rec[0].Path != "/v1/messages" {
						t.Fatalf("path %s", rec[0].Path)
					}
				}
			})
		}
	}
}

func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}

func near(a, b float64) bool { return a-b < 1e-12 && b-a < 1e-12 }

// sameRequest compares requests with JSON compared as values.
func sameRequest(a, b llm.Request) bool {
	if a.System != b.System || a.MaxTokens != b.MaxTokens || len(a.Messages) != len(b.Messages) || len(a.Tools) != len(b.Tools) {
		return false
	}
	if (a.Temperature == nil) != (b.Temperature == nil) || (a.Temperature != nil && *a.Temperature != *b.Temperature) {
		return false
	}
	for i := range a.Tools {
		if a.Tools[i].Name != b.Tools[i].Name || a.Tools[i].Description != b.Tools[i].Description || !jsonEqual(a.Tools[i].Parameters, b.Tools[i].Parameters) {
			return false
		}
	}
	for i := range a.Messages {
		x, y := a.Messages[i], b.Messages[i]
		if x.Role != y.Role || x.Content != y.Content || x.ToolCallID != y.ToolCallID || len(x.ToolCalls) != len(y.ToolCalls) {
			return false
		}
		for j := range x.ToolCalls {
			if x.ToolCalls[j].ID != y.ToolCalls[j].ID || x.ToolCalls[j].Name != y.ToolCalls[j].Name || !jsonEqual(x.ToolCalls[j].Arguments, y.ToolCalls[j].Arguments) {
				return false
			}
		}
	}
	return true
}

// TestRetry: 429 (with Retry-After) and 500 are retried until an answer
// comes; the retries are bounded; a 400 is not retried, and its error
// carries the status, class and provider's message.
func TestRetry(t *testing.T) {
	for _, p := range providers {
		t.Run(p, func(t *testing.T) {
			t.Run("429 then ok", func(t *testing.T) {
				srv := llmtest.NewServer(t,
					llmtest.Turn{Status: http.StatusTooManyRequests, RetryAfter: "1", Message: "slow down"},
					llmtest.Turn{Status: http.StatusServiceUnavailable},
					llmtest.Turn{Text: "hello", InputTokens: 5, OutputTokens: 1})
				m := newModel(t, p, srv.URL, nil)
				start := time.Now()
				resp, err := m.Complete(context.Background(), hello(), nil)
				if err != nil {
					t.Fatal(err)
				}
				if resp.Message.Content != "hello" || len(srv.Requests()) != 3 {
					t.Fatalf("%q after %d requests", resp.Message.Content, len(srv.Requests()))
				}
				if time.Since(start) < time.Second {
					t.Fatalf("Retry-After: 1 not honoured: answered in %s", time.Since(start))
				}
			})
			t.Run("500 exhausted", func(t *testing.T) {
				srv := llmtest.NewServer(t,
					llmtest.Turn{Status: 500, Message: "boom 1"}, llmtest.Turn{Status: 500, Message: "boom 2"},
					llmtest.Turn{Status: 500, Message: "boom 3"}, llmtest.Turn{Text: "too late"})
				m := newModel(t, p, srv.URL, func(c *llm.Config) { c.MaxRetries = 2 })
				_, err := m.Complete(context.Background(), hello(), nil)
				var api *llm.APIError
				if !errors.As(err, &api) || api.Status != 500 || !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "boom 3") {
					t.Fatalf("err %v", err)
				}
				if n := len(srv.Requests()); n != 3 {
					t.Fatalf("%d requests, want 3 (1 + 2 retries)", n)
				}
			})
			t.Run("400 not retried", func(t *testing.T) {
				srv := llmtest.NewServer(t, llmtest.Turn{Status: 400, Message: "max_tokens: too large"}, llmtest.Turn{Text: "never"})
				m := newModel(t, p, srv.URL, nil)
				_, err := m.Complete(context.Background(), hello(), nil)
				if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "HTTP 400") || !strings.Contains(err.Error(), "max_tokens: too large") {
					t.Fatalf("err %v", err)
				}
				if n := len(srv.Requests()); n != 1 {
					t.Fatalf("%d requests, want 1", n)
				}
			})
			t.Run("401 denied", func(t *testing.T) {
				srv := llmtest.NewServer(t, llmtest.Turn{Status: 401, Message: "invalid x-api-key"})
				_, err := newModel(t, p, srv.URL, nil).Complete(context.Background(), hello(), nil)
				if !errors.Is(err, errdefs.ErrDenied) || !strings.Contains(err.Error(), "invalid x-api-key") {
					t.Fatalf("err %v", err)
				}
			})
		})
	}
}

func hello() llm.Request {
	return llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}}}
}

// TestStreamText: a streamed answer reaches onText in several deltas, in
// order, and the response holds the whole text; several tool calls in one
// answer are assembled by their index.
func TestStreamText(t *testing.T) {
	for _, p := range providers {
		t.Run(p, func(t *testing.T) {
			text := "The failing test expects 2; the function returned 1 because of an off-by-one."
			calls := []llm.ToolCall{
				{ID: "a", Name: "read", Arguments: json.RawMessage(`{"path":"x.go"}`)},
				{ID: "b", Name: "run", Arguments: json.RawMessage(`{"cmd":"go test ./...","timeout":60}`)},
			}
			srv := llmtest.NewServer(t, llmtest.Turn{Text: text, ToolCalls: calls, InputTokens: 10, OutputTokens: 30})
			var deltas []string
			resp, err := newModel(t, p, srv.URL, nil).Complete(context.Background(), hello(), func(s string) { deltas = append(deltas, s) })
			if err != nil {
				t.Fatal(err)
			}
			if len(deltas) < 2 || strings.Join(deltas, "") != text || resp.Message.Content != text {
				t.Fatalf("deltas %q, content %q", deltas, resp.Message.Content)
			}
			if len(resp.Message.ToolCalls) != 2 {
				t.Fatalf("calls %+v", resp.Message.ToolCalls)
			}
			for i, c := range resp.Message.ToolCalls {
				if c.ID != calls[i].ID || c.Name != calls[i].Name || !jsonEqual(c.Arguments, calls[i].Arguments) {
					t.Fatalf("call %d: %+v %s", i, c, c.Arguments)
				}
			}
			if resp.Usage.InputTokens != 10 || resp.Usage.OutputTokens != 30 {
				t.Fatalf("usage %+v", resp.Usage)
			}
		})
	}
}

// TestCutStream: a stream cut after text reached onText is not retried
// (the text would repeat); without onText it is, and the retry answers.
func TestCutStream(t *testing.T) {
	for _, p := range providers {
		t.Run(p, func(t *testing.T) {
			srv := llmtest.NewServer(t, llmtest.Turn{Text: "half of an answer", Cut: true}, llmtest.Turn{Text: "whole"})
			m := newModel(t, p, srv.URL, nil)
			var got strings.Builder
			_, err := m.Complete(context.Background(), hello(), func(s string) { got.WriteString(s) })
			if !errors.Is(err, errdefs.ErrUnavailable) || got.Len() == 0 || len(srv.Requests()) != 1 {
				t.Fatalf("err %v, text %q, %d requests", err, got.String(), len(srv.Requests()))
			}

			srv = llmtest.NewServer(t, llmtest.Turn{Text: "half of an answer", Cut: true}, llmtest.Turn{Text: "whole"})
			resp, err := newModel(t, p, srv.URL, nil).Complete(context.Background(), hello(), nil)
			if err != nil || resp.Message.Content != "whole" || len(srv.Requests()) != 2 {
				t.Fatalf("err %v, %q, %d requests", err, resp.Message.Content, len(srv.Requests()))
			}
		})
	}
}

// TestCancel: cancelling the context ends a call at once, whether it waits
// for the server or for its next retry.
func TestCancel(t *testing.T) {
	for _, p := range providers {
		t.Run(p, func(t *testing.T) {
			for _, turn := range []llmtest.Turn{
				{Text: "slow", Delay: time.Minute},
				{Status: 429, RetryAfter: "60"},
			} {
				srv := llmtest.NewServer(t, turn)
				ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				start := time.Now()
				_, err := newModel(t, p, srv.URL, nil).Complete(ctx, hello(), nil)
				cancel()
				if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
					t.Fatalf("turn %+v: err %v after %s", turn, err, time.Since(start))
				}
			}
		})
	}
}

// TestRetryLimits: a Retry-After past MaxRetryAfter ends the retries at
// once; an unreachable server is retried MaxRetries times, then fails as
// unavailable.
func TestRetryLimits(t *testing.T) {
	srv := llmtest.NewServer(t, llmtest.Turn{Status: 429, RetryAfter: "3600"}, llmtest.Turn{Text: "never"})
	_, err := newModel(t, llm.OpenAI, srv.URL, nil).Complete(context.Background(), hello(), nil)
	if !errors.Is(err, errdefs.ErrQuota) || !strings.Contains(err.Error(), "Retry-After") || len(srv.Requests()) != 1 {
		t.Fatalf("err %v, %d requests", err, len(srv.Requests()))
	}

	dead := llmtest.NewServer(t)
	url := dead.URL
	dead.Close()
	_, err = newModel(t, llm.Anthropic, url, func(c *llm.Config) { c.MaxRetries = 2 }).Complete(context.Background(), hello(), nil)
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "after 3 attempts") {
		t.Fatalf("err %v", err)
	}
}

// TestBadToolArguments: arguments that are not JSON arrive as a JSON
// string, so the response stays valid JSON and the caller sees the text.
func TestBadToolArguments(t *testing.T) {
	for _, mode := range modes {
		srv := llmtest.NewServer(t, llmtest.Turn{ToolCalls: []llm.ToolCall{{ID: "x", Name: "edit", Arguments: json.RawMessage(`{"path": "a.go", "old`)}}})
		resp, err := newModel(t, llm.OpenAI, srv.URL, func(c *llm.Config) { c.NoStream = mode.noStream }).Complete(context.Background(), hello(), nil)
		if err != nil {
			t.Fatal(err)
		}
		var s string
		if err := json.Unmarshal(resp.Message.ToolCalls[0].Arguments, &s); err != nil || s != `{"path": "a.go", "old` {
			t.Fatalf("%s: arguments %s (%v)", mode.name, resp.Message.ToolCalls[0].Arguments, err)
		}
	}
}

// TestStreamTooLarge: a stream or an answer past MaxResponseBytes is cut
// off with a quota error instead of filling memory.
func TestStreamTooLarge(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		chunk := []byte(`data: {"choices":[{"index":0,"delta":{"content":"` + strings.Repeat("x", 64<<10) + `"}}]}` + "\n\n")
		for n := 0; n <= (1<<20)/len(chunk)+1; n++ {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	defer srv.Close()
	for _, mode := range modes {
		_, err := newModel(t, llm.OpenAI, srv.URL, func(c *llm.Config) { c.MaxResponseBytes = 1 << 20; c.NoStream = mode.noStream }).Complete(context.Background(), hello(), nil)
		if !errors.Is(err, errdefs.ErrQuota) || !strings.Contains(err.Error(), "1048576") {
			t.Fatalf("%s: err %v", mode.name, err)
		}
	}
}

// TestConfig: New refuses bad configs as invalid; ConfigFromEnv reads the
// variables, falls back to the provider's own key variable, and refuses
// prices that are not numbers.
func TestConfig(t *testing.T) {
	for _, cfg := range []llm.Config{
		{Model: "m"},
		{Provider: "gemini", Model: "m"},
		{Provider: llm.OpenAI},
		{Provider: llm.OpenAI, Model: "m", BaseURL: "ftp://x"},
		{Provider: llm.Anthropic, Model: "m", BaseURL: "localhost:8080"},
		{Provider: llm.Anthropic, Model: "m", PriceInPerMTok: -1},
	} {
		if _, err := llm.New(cfg, nil); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("New(%+v): %v", cfg, err)
		}
	}
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	cfg, err := llm.ConfigFromEnv(env(map[string]string{
		"SMOLVM_MODEL_PROVIDER": "anthropic", "SMOLVM_MODEL": "claude-x", "ANTHROPIC_API_KEY": "ak", "OPENAI_API_KEY": "ok",
		"SMOLVM_MODEL_PRICE_IN": "3", "SMOLVM_MODEL_PRICE_OUT": "15.5", "SMOLVM_MODEL_MAX_RETRIES": "0"}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Provider != llm.Anthropic || cfg.Model != "claude-x" || cfg.APIKey != "ak" || cfg.PriceInPerMTok != 3 || cfg.PriceOutPerMTok != 15.5 || cfg.MaxRetries >= 0 {
		t.Fatalf("%+v", cfg)
	}
	cfg, err = llm.ConfigFromEnv(env(map[string]string{"SMOLVM_MODEL": "qwen", "SMOLVM_MODEL_BASE_URL": "http://127.0.0.1:8000/v1",
		"SMOLVM_MODEL_API_KEY": "mine", "OPENAI_API_KEY": "theirs"}))
	if err != nil || cfg.Provider != llm.OpenAI || cfg.APIKey != "mine" || cfg.BaseURL != "http://127.0.0.1:8000/v1" {
		t.Fatalf("%+v %v", cfg, err)
	}
	for _, bad := range []map[string]string{
		{"SMOLVM_MODEL": "m", "SMOLVM_MODEL_PRICE_IN": "cheap"},
		{"SMOLVM_MODEL": "m", "SMOLVM_MODEL_MAX_RETRIES": "many"},
		{},
	} {
		if _, err := llm.ConfigFromEnv(env(bad)); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("%v: %v", bad, err)
		}
	}
}

// TestRetryRules: the server's x-should-retry overrides the status's rule
// both ways; 408 and 409 are retried as the providers' SDKs do;
// Retry-After-Ms is honoured; an attempt past Timeout is retried.
func TestRetryRules(t *testing.T) {
	for _, c := range []struct {
		name     string
		turn     llmtest.Turn
		timeout  time.Duration
		requests int
		minWait  time.Duration
	}{
		{name: "500 should-retry false", turn: llmtest.Turn{Status: 500, Header: map[string]string{"X-Should-Retry": "false"}}, requests: 1},
		{name: "400 should-retry true", turn: llmtest.Turn{Status: 400, Header: map[string]string{"X-Should-Retry": "true"}}, requests: 2},
		{name: "408", turn: llmtest.Turn{Status: 408}, requests: 2},
		{name: "409", turn: llmtest.Turn{Status: 409}, requests: 2},
		{name: "retry-after-ms", turn: llmtest.Turn{Status: 429, Header: map[string]string{"Retry-After-Ms": "300"}}, requests: 2, minWait: 300 * time.Millisecond},
		{name: "attempt timeout", turn: llmtest.Turn{Text: "slow", Delay: time.Minute}, timeout: 2 * time.Second, requests: 2}, // 2 s: room for the second answer under load
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := llmtest.NewServer(t, c.turn, llmtest.Turn{Text: "ok"})
			start := time.Now()
			resp, err := newModel(t, llm.OpenAI, srv.URL, func(cfg *llm.Config) { cfg.Timeout = c.timeout }).Complete(context.Background(), hello(), nil)
			if n := len(srv.Requests()); n != c.requests {
				t.Fatalf("%d requests, want %d (err %v)", n, c.requests, err)
			}
			if (c.requests == 2) != (err == nil && resp.Message.Content == "ok") {
				t.Fatalf("answer %q, err %v", resp.Message.Content, err)
			}
			if time.Since(start) < c.minWait {
				t.Fatalf("retried after %s", time.Since(start))
			}
		})
	}
}

// TestArgumentsAsObject: a server that sends a tool call's arguments as
// an object rather than a string of JSON (older Ollama) is understood.
func TestArgumentsAsObject(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","content":null,
			"tool_calls":[{"id":"c1","type":"function","function":{"name":"read","arguments":{"path":"go.mod"}}}]}}],
			"usage":{"prompt_tokens":7,"completion_tokens":3}}`))
	}))
	defer srv.Close()
	resp, err := newModel(t, llm.OpenAI, srv.URL, func(c *llm.Config) { c.NoStream = true }).Complete(context.Background(), hello(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Message.ToolCalls) != 1 || !jsonEqual(resp.Message.ToolCalls[0].Arguments, json.RawMessage(`{"path":"go.mod"}`)) || resp.StopReason != llm.StopToolUse || resp.Usage.InputTokens != 7 {
		t.Fatalf("%+v", resp)
	}
}

// TestConversationShapes: two tool calls answered by two tool results and
// a user note go out as the protocol wants them (for Messages: one user
// turn, which llmtest's decoder insists on) and decode back to the same
// conversation; Respond answers once the script is used up, from what the
// client sent.
func TestConversationShapes(t *testing.T) {
	for _, p := range providers {
		t.Run(p, func(t *testing.T) {
			srv := llmtest.NewServer(t)
			srv.Respond(func(req llm.Request) llmtest.Turn {
				last := req.Messages[len(req.Messages)-1]
				return llmtest.Turn{Text: "saw " + string(last.Role) + ": " + last.Content}
			})
			req := llm.Request{System: "Be brief.", Tools: []llm.Tool{editTool, {Name: "run"}}, Messages: []llm.Message{
				{Role: llm.RoleUser, Content: "fix it"},
				{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{
					{ID: "t1", Name: "edit", Arguments: json.RawMessage(`{"path":"a","old":"x","new":"y"}`)},
					{ID: "t2", Name: "run", Arguments: json.RawMessage(`{"cmd":"go test"}`)}}},
				{Role: llm.RoleTool, ToolCallID: "t1", Content: "edited"},
				{Role: llm.RoleTool, ToolCallID: "t2", Content: "FAIL: TestX"},
				{Role: llm.RoleUser, Content: "the test still fails"},
			}}
			resp, err := newModel(t, p, srv.URL, nil).Complete(context.Background(), req, nil)
			if err != nil {
				t.Fatal(err)
			}
			if resp.Message.Content != "saw user: the test still fails" {
				t.Fatalf("answer %q", resp.Message.Content)
			}
			got := srv.Requests()[0]
			req.Tools[1].Parameters = json.RawMessage(`{"type":"object","properties":{}}`) // a tool without a schema gets an empty one
			if p == llm.Anthropic {
				req.MaxTokens = llm.DefaultMaxTokens // required there
			}
			if !sameRequest(got, req) {
				t.Fatalf("server decoded\n%+v\nclient sent\n%+v", got, req)
			}
			if p == llm.Anthropic {
				var body struct{ Messages []struct{ Role string } }
				_ = json.Unmarshal(srv.Recorded()[0].Body, &body)
				if len(body.Messages) != 3 {
					t.Fatalf("%d turns, want 3 (user, assistant, user with both results and the note)", len(body.Messages))
				}
			}
		})
	}
}

// TestBadRequest: a message the client cannot encode fails as invalid
// before anything is sent.
func TestBadRequest(t *testing.T) {
	for _, p := range providers {
		for _, m := range []llm.Message{{Role: "robot", Content: "x"}, {Role: llm.RoleTool, Content: "result of nothing"}} {
			srv := llmtest.NewServer(t)
			_, err := newModel(t, p, srv.URL, nil).Complete(context.Background(), llm.Request{Messages: []llm.Message{m}}, nil)
			if !errors.Is(err, errdefs.ErrInvalid) || len(srv.Recorded()) != 0 {
				t.Errorf("%s %+v: %v, %d sent", p, m, err, len(srv.Recorded()))
			}
		}
	}
}

// TestStreamVariants: streams as some servers really send them: tool-call
// deltas without an index, no [DONE] after the finish reason, usage inside
// the last choice's chunk; an Anthropic tool_use whose input comes whole in
// its start event; and a mid-stream error event, which fails the call
// with the provider's message.
func TestStreamVariants(t *testing.T) {
	for _, c := range []struct {
		name, provider, body string
		args                 string
		errText              string
	}{
		{name: "openai no index", provider: llm.OpenAI, args: `{"path":"a.go"}`, body: `data: {"choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"function":{"name":"read","arguments":"{\"pa"}}]}}]}

data: {"choices":[{"index":0,"delta":{"tool_calls":[{"function":{"arguments":"th\":\"a.go\"}"}}]}}]}

data: {"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":4,"completion_tokens":2}}

`},
		{name: "anthropic whole input", provider: llm.Anthropic, args: `{"path":"a.go"}`, body: `event: message_start
data: {"type":"message_start","message":{"usage":{"input_tokens":4,"output_tokens":1}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t","name":"read","input":{"path":"a.go"}}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":2}}

event: message_stop
data: {"type":"message_stop"}

`},
		{name: "anthropic error event", provider: llm.Anthropic, errText: "invalid_request_error: prompt is too long", body: `event: message_start
data: {"type":"message_start","message":{"usage":{"input_tokens":4,"output_tokens":1}}}

event: error
data: {"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long"}}

`},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				_, _ = w.Write([]byte(c.body))
			}))
			defer srv.Close()
			resp, err := newModel(t, c.provider, srv.URL, nil).Complete(context.Background(), hello(), nil)
			if c.errText != "" {
				if err == nil || !strings.Contains(err.Error(), c.errText) || !errors.Is(err, errdefs.ErrInvalid) {
					t.Fatalf("err %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.Message.ToolCalls) != 1 || !jsonEqual(resp.Message.ToolCalls[0].Arguments, json.RawMessage(c.args)) ||
				resp.StopReason != llm.StopToolUse || resp.Usage.InputTokens != 4 || resp.Usage.OutputTokens != 2 {
				t.Fatalf("%+v", resp)
			}
		})
	}
}
