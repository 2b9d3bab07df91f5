package llm

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"smolvm.dev/smolvm/workflow/llm/internal/wire"
)

// openAI speaks Chat Completions (POST BaseURL/chat/completions).
type openAI struct{ *caller }

// openAIRequest encodes req as a Chat Completions body.
func openAIRequest(model string, req Request, stream bool) ([]byte, error) {
	body := wire.OARequest{Model: model, Temperature: req.Temperature, MaxTokens: req.MaxTokens}
	if stream {
		body.Stream = true
		body.StreamOptions = &wire.OAStreamOption{IncludeUsage: true}
	}
	if req.System != "" {
		body.Messages = append(body.Messages, wire.OAMessage{Role: string(RoleSystem), Content: &req.System})
	}
	for i, m := range req.Messages {
		switch m.Role {
		case RoleSystem, RoleUser, RoleAssistant, RoleTool:
		default:
			return nil, invalid("message %d: unknown role %q", i, m.Role)
		}
		if m.Role == RoleTool && m.ToolCallID == "" {
			return nil, invalid("message %d: a tool result without a tool call ID", i)
		}
		om := wire.OAMessage{Role: string(m.Role), ToolCallID: m.ToolCallID}
		if m.Content != "" || len(m.ToolCalls) == 0 {
			om.Content = &m.Content
		}
		for _, tc := range m.ToolCalls {
			call := wire.OAToolCall{ID: tc.ID, Type: "function"}
			call.Function.Name = tc.Name
			call.Function.Arguments = wire.Args(arguments(string(tc.Arguments)))
			om.ToolCalls = append(om.ToolCalls, call)
		}
		body.Messages = append(body.Messages, om)
	}
	for _, t := range req.Tools {
		params := t.Parameters
		if len(params) == 0 {
			params = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		body.Tools = append(body.Tools, wire.OATool{Type: "function", Function: wire.OAFunction{Name: t.Name, Description: t.Description, Parameters: params}})
	}
	return json.Marshal(body)
}

func (m *openAI) Complete(ctx context.Context, req Request, onText func(string)) (Response, error) {
	body, err := openAIRequest(m.cfg.Model, req, !m.cfg.NoStream)
	if err != nil {
		return Response{}, fmt.Errorf("%s: %w", m.cfg.Provider, err)
	}
	if req.MaxTokens > 0 && isOpenAIHost(m.cfg.BaseURL) {
		// OpenAI's reasoning models refuse max_tokens; every OpenAI
		// model takes max_completion_tokens, which other servers may not.
		var wire wire.OARequest
		_ = json.Unmarshal(body, &wire)
		wire.MaxTokens, wire.MaxCompletionTokens = 0, req.MaxTokens
		body, _ = json.Marshal(wire)
	}
	header := http.Header{}
	if m.cfg.APIKey != "" {
		header.Set("Authorization", "Bearer "+m.cfg.APIKey)
	}
	if !m.cfg.NoStream {
		header.Set("Accept", "text/event-stream")
	}
	url := m.cfg.BaseURL + "/chat/completions"
	return m.retry(ctx, func(ctx context.Context) (Response, bool, time.Duration, error) {
		resp, after, err := m.post(ctx, url, header, body)
		if err != nil {
			return Response{}, false, after, err
		}
		if m.cfg.NoStream {
			var ans wire.OAResponse
			if err := m.readJSON(resp, &ans); err != nil {
				return Response{}, false, 0, err
			}
			if len(ans.Choices) == 0 {
				return Response{}, false, 0, invalid("%s: an answer without choices", m.cfg.Provider)
			}
			ch := ans.Choices[0]
			if ch.Message == nil {
				return Response{}, false, 0, invalid("%s: a choice without a message", m.cfg.Provider)
			}
			out := Response{StopReason: oaStop(deref(ch.FinishReason)), Message: Message{Role: RoleAssistant}}
			if ch.Message.Content != nil {
				out.Message.Content = *ch.Message.Content
			}
			for _, tc := range ch.Message.ToolCalls {
				out.Message.ToolCalls = append(out.Message.ToolCalls, ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: arguments(string(tc.Function.Arguments))})
			}
			if ans.Usage != nil {
				out.Usage = Usage{InputTokens: ans.Usage.PromptTokens, OutputTokens: ans.Usage.CompletionTokens}
			}
			if onText != nil && out.Message.Content != "" {
				onText(out.Message.Content)
			}
			return out, out.Message.Content != "", 0, nil
		}
		defer resp.Body.Close()
		return m.stream(resp, onText)
	})
}

// stream assembles a streamed answer: text deltas in order, tool calls
// by their index (the first delta of each carries its ID and name, the
// rest pieces of its arguments), and the usage chunk that
// stream_options.include_usage adds after the last choice.
func (m *openAI) stream(resp *http.Response, onText func(string)) (Response, bool, time.Duration, error) {
	out := Response{Message: Message{Role: RoleAssistant}}
	var text strings.Builder
	type call struct {
		id, name string
		args     strings.Builder
	}
	var calls []*call
	emitted, finished := false, false
	err := m.events(resp.Body, func(_ string, data []byte) (bool, error) {
		if string(data) == "[DONE]" {
			finished = true
			return true, nil
		}
		var chunk wire.OAResponse
		if err := json.Unmarshal(data, &chunk); err != nil {
			return false, invalid("%s: decode stream chunk: %v", m.cfg.Provider, err)
		}
		if chunk.Error != nil {
			return false, &APIError{Provider: m.cfg.Provider, Type: chunk.Error.Type, Message: chunk.Error.Message}
		}
		if chunk.Usage != nil {
			out.Usage = Usage{InputTokens: chunk.Usage.PromptTokens, OutputTokens: chunk.Usage.CompletionTokens}
		}
		for _, ch := range chunk.Choices {
			if ch.Index != 0 {
				continue // only one choice is asked for
			}
			if ch.Delta == nil {
				ch.Delta = &wire.OAMessage{}
			}
			if ch.Delta.Content != nil && *ch.Delta.Content != "" {
				text.WriteString(*ch.Delta.Content)
				if onText != nil {
					onText(*ch.Delta.Content)
					emitted = true
				}
			}
			for _, d := range ch.Delta.ToolCalls {
				i := max(len(calls)-1, 0) // servers that send no index stream one call at a time
				if d.Index != nil {
					i = *d.Index
				} else if d.ID != "" {
					i = len(calls)
				}
				if i < 0 || i > len(calls) {
					return false, invalid("%s: stream: tool call index %d out of order", m.cfg.Provider, i)
				}
				if i == len(calls) {
					calls = append(calls, &call{})
				}
				c := calls[i]
				if d.ID != "" {
					c.id = d.ID
				}
				if d.Function.Name != "" {
					c.name += d.Function.Name
				}
				c.args.WriteString(string(d.Function.Arguments))
			}
			if r := deref(ch.FinishReason); r != "" {
				out.StopReason = oaStop(r)
			}
		}
		return false, nil
	})
	if err == nil && !finished {
		if out.StopReason == "" {
			err = fmt.Errorf("%s: stream ended before its end: %w", m.cfg.Provider, errUnavailable)
		}
		// A finish reason without [DONE]: some servers end so.
	}
	if err != nil {
		return Response{}, emitted, 0, err
	}
	out.Message.Content = text.String()
	for _, c := range calls {
		out.Message.ToolCalls = append(out.Message.ToolCalls, ToolCall{ID: c.id, Name: c.name, Arguments: arguments(c.args.String())})
	}
	return out, emitted, 0, nil
}

// oaStop translates OpenAI's finish reasons to the common stop reasons.
func oaStop(r string) string {
	switch r {
	case "stop":
		return StopEndTurn
	case "length":
		return StopMaxTokens
	case "tool_calls", "function_call":
		return StopToolUse
	}
	return r
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func isOpenAIHost(base string) bool {
	u, err := url.Parse(base)
	return err == nil && u.Hostname() == "api.openai.com"
}
