package llmtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"smolvm.dev/smolvm/workflow/llm"
	"smolvm.dev/smolvm/workflow/llm/internal/wire"
)

// decodeOpenAI reads a Chat Completions request; a leading system message
// is the Request's System.
func decodeOpenAI(body []byte) (llm.Request, bool, error) {
	var in wire.OARequest
	if err := json.Unmarshal(body, &in); err != nil {
		return llm.Request{}, false, fmt.Errorf("decode request: %w", err)
	}
	if in.Model == "" {
		return llm.Request{}, false, errors.New("no model")
	}
	req := llm.Request{MaxTokens: max(in.MaxTokens, in.MaxCompletionTokens), Temperature: in.Temperature}
	for i, m := range in.Messages {
		content := ""
		if m.Content != nil {
			content = *m.Content
		}
		if i == 0 && m.Role == "system" {
			req.System = content
			continue
		}
		msg := llm.Message{Role: llm.Role(m.Role), Content: content, ToolCallID: m.ToolCallID}
		for _, tc := range m.ToolCalls {
			if !json.Valid([]byte(tc.Function.Arguments)) {
				return llm.Request{}, false, fmt.Errorf("message %d: tool call %s: arguments are not JSON: %q", i, tc.ID, tc.Function.Arguments)
			}
			msg.ToolCalls = append(msg.ToolCalls, llm.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: json.RawMessage(tc.Function.Arguments)})
		}
		req.Messages = append(req.Messages, msg)
	}
	for _, t := range in.Tools {
		req.Tools = append(req.Tools, llm.Tool{Name: t.Function.Name, Description: t.Function.Description, Parameters: t.Function.Parameters})
	}
	return req, in.Stream, nil
}

// decodeAnthropic reads a Messages request: each text block of a user turn
// is a user message, each tool_result block a tool message, and an
// assistant turn one assistant message.
func decodeAnthropic(body []byte) (llm.Request, bool, error) {
	var in wire.ARequest
	if err := json.Unmarshal(body, &in); err != nil {
		return llm.Request{}, false, fmt.Errorf("decode request: %w", err)
	}
	if in.Model == "" || in.MaxTokens <= 0 {
		return llm.Request{}, false, errors.New("model and max_tokens are required")
	}
	req := llm.Request{MaxTokens: in.MaxTokens, Temperature: in.Temperature}
	var err error
	if len(in.System) > 0 {
		if req.System, err = text(in.System); err != nil {
			return llm.Request{}, false, fmt.Errorf("system: %w", err)
		}
	}
	for i, m := range in.Messages {
		var blocks []wire.ABlock
		if s, err := text(m.Content); err == nil && !strings.HasPrefix(strings.TrimSpace(string(m.Content)), "[") {
			blocks = []wire.ABlock{{Type: "text", Text: s}}
		} else if err := json.Unmarshal(m.Content, &blocks); err != nil {
			return llm.Request{}, false, fmt.Errorf("message %d: %w", i, err)
		}
		switch m.Role {
		case "user":
			for _, b := range blocks {
				switch b.Type {
				case "text":
					req.Messages = append(req.Messages, llm.Message{Role: llm.RoleUser, Content: b.Text})
				case "tool_result":
					s, err := text(b.Content)
					if err != nil {
						return llm.Request{}, false, fmt.Errorf("message %d: tool_result: %w", i, err)
					}
					req.Messages = append(req.Messages, llm.Message{Role: llm.RoleTool, Content: s, ToolCallID: b.ToolUseID})
				default:
					return llm.Request{}, false, fmt.Errorf("message %d: unexpected %q block in a user turn", i, b.Type)
				}
			}
		case "assistant":
			msg := llm.Message{Role: llm.RoleAssistant}
			for _, b := range blocks {
				switch b.Type {
				case "text":
					msg.Content += b.Text
				case "tool_use":
					if !strings.HasPrefix(strings.TrimSpace(string(b.Input)), "{") {
						return llm.Request{}, false, fmt.Errorf("message %d: tool_use %s: input is not an object", i, b.ID)
					}
					msg.ToolCalls = append(msg.ToolCalls, llm.ToolCall{ID: b.ID, Name: b.Name, Arguments: b.Input})
				default:
					return llm.Request{}, false, fmt.Errorf("message %d: unexpected %q block in an assistant turn", i, b.Type)
				}
			}
			req.Messages = append(req.Messages, msg)
		default:
			return llm.Request{}, false, fmt.Errorf("message %d: role %q (Messages has user and assistant only)", i, m.Role)
		}
		if i > 0 && in.Messages[i-1].Role == m.Role {
			return llm.Request{}, false, fmt.Errorf("message %d: two %s turns in a row", i, m.Role)
		}
	}
	for _, t := range in.Tools {
		if len(t.InputSchema) == 0 {
			return llm.Request{}, false, fmt.Errorf("tool %s: no input_schema", t.Name)
		}
		req.Tools = append(req.Tools, llm.Tool{Name: t.Name, Description: t.Description, Parameters: t.InputSchema})
	}
	return req, in.Stream, nil
}

// text reads a string, or the text of an array of text blocks.
func text(raw json.RawMessage) (string, error) {
	if len(raw) == 0 {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var blocks []wire.ABlock
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return "", fmt.Errorf("want a string or text blocks: %w", err)
	}
	var b strings.Builder
	for _, bl := range blocks {
		if bl.Type != "text" {
			return "", fmt.Errorf("want text blocks, got %q", bl.Type)
		}
		b.WriteString(bl.Text)
	}
	return b.String(), nil
}

// stopReason is turn's stop reason in the provider's words.
func stopReason(turn Turn, provider string) string {
	r := turn.StopReason
	if r == "" {
		r = llm.StopEndTurn
		if len(turn.ToolCalls) > 0 {
			r = llm.StopToolUse
		}
	}
	if provider == llm.OpenAI {
		switch r {
		case llm.StopEndTurn:
			return "stop"
		case llm.StopMaxTokens:
			return "length"
		case llm.StopToolUse:
			return "tool_calls"
		}
	}
	return r
}

func writeOpenAI(w http.ResponseWriter, turn Turn, stream bool) {
	finish := stopReason(turn, llm.OpenAI)
	usage := &wire.OAUsage{PromptTokens: turn.InputTokens, CompletionTokens: turn.OutputTokens, TotalTokens: turn.InputTokens + turn.OutputTokens}
	var calls []wire.OAToolCall
	for _, tc := range turn.ToolCalls {
		calls = append(calls, wire.OAToolCall{ID: tc.ID, Type: "function", Function: wire.OACallFunc{Name: tc.Name, Arguments: wire.Args(tc.Arguments)}})
	}
	if !stream {
		msg := &wire.OAMessage{Role: "assistant", ToolCalls: calls}
		if turn.Text != "" || len(calls) == 0 {
			msg.Content = &turn.Text
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(wire.OAResponse{ID: "chatcmpl-llmtest", Object: "chat.completion", Model: "llmtest",
			Choices: []wire.OAChoice{{Message: msg, FinishReason: &finish}}, Usage: usage})
		return
	}
	out := startSSE(w)
	chunk := func(delta wire.OAMessage, finish *string) {
		out.send("", wire.OAResponse{ID: "chatcmpl-llmtest", Object: "chat.completion.chunk", Model: "llmtest",
			Choices: []wire.OAChoice{{Delta: &delta, FinishReason: finish}}})
	}
	empty := ""
	chunk(wire.OAMessage{Role: "assistant", Content: &empty}, nil)
	for _, p := range pieces(turn.Text, 3) {
		chunk(wire.OAMessage{Content: &p}, nil)
		if turn.Cut {
			out.cut()
			return
		}
	}
	for i, c := range calls {
		i := i
		first := wire.OAToolCall{Index: &i, ID: c.ID, Type: "function", Function: wire.OACallFunc{Name: c.Function.Name}}
		chunk(wire.OAMessage{ToolCalls: []wire.OAToolCall{first}}, nil)
		for _, p := range pieces(string(c.Function.Arguments), 3) {
			chunk(wire.OAMessage{ToolCalls: []wire.OAToolCall{{Index: &i, Function: wire.OACallFunc{Arguments: wire.Args(p)}}}}, nil)
		}
	}
	chunk(wire.OAMessage{}, &finish)
	out.send("", wire.OAResponse{ID: "chatcmpl-llmtest", Object: "chat.completion.chunk", Model: "llmtest", Choices: []wire.OAChoice{}, Usage: usage})
	out.send("", nil)
}

func writeAnthropic(w http.ResponseWriter, turn Turn, stream bool) {
	stop := stopReason(turn, llm.Anthropic)
	var blocks []wire.ABlock
	if turn.Text != "" {
		blocks = append(blocks, wire.ABlock{Type: "text", Text: turn.Text})
	}
	for _, tc := range turn.ToolCalls {
		blocks = append(blocks, wire.ABlock{Type: "tool_use", ID: tc.ID, Name: tc.Name, Input: tc.Arguments})
	}
	msg := wire.AResponse{ID: "msg_llmtest", Type: "message", Role: "assistant", Model: "llmtest", Content: blocks,
		StopReason: &stop, Usage: wire.AUsage{InputTokens: turn.InputTokens, OutputTokens: turn.OutputTokens}}
	if !stream {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(msg)
		return
	}
	out := startSSE(w)
	start := msg
	start.Content, start.StopReason, start.Usage.OutputTokens = []wire.ABlock{}, nil, min(turn.OutputTokens, 1)
	out.send("message_start", wire.AEvent{Type: "message_start", Message: &start})
	out.send("ping", wire.AEvent{Type: "ping"})
	for i, b := range blocks {
		switch b.Type {
		case "text":
			out.send("content_block_start", wire.AEvent{Type: "content_block_start", Index: i, ContentBlock: &wire.ABlock{Type: "text"}})
			for _, p := range pieces(b.Text, 3) {
				out.send("content_block_delta", wire.AEvent{Type: "content_block_delta", Index: i, Delta: &wire.ADelta{Type: "text_delta", Text: p}})
				if turn.Cut {
					out.cut()
					return
				}
			}
		case "tool_use":
			out.send("content_block_start", wire.AEvent{Type: "content_block_start", Index: i,
				ContentBlock: &wire.ABlock{Type: "tool_use", ID: b.ID, Name: b.Name, Input: json.RawMessage("{}")}})
			for _, p := range pieces(string(b.Input), 3) {
				out.send("content_block_delta", wire.AEvent{Type: "content_block_delta", Index: i, Delta: &wire.ADelta{Type: "input_json_delta", PartialJSON: p}})
			}
		}
		out.send("content_block_stop", wire.AEvent{Type: "content_block_stop", Index: i})
	}
	out.send("message_delta", wire.AEvent{Type: "message_delta", Delta: &wire.ADelta{StopReason: stop}, Usage: &wire.AUsage{OutputTokens: turn.OutputTokens}})
	out.send("message_stop", wire.AEvent{Type: "message_stop"})
}
