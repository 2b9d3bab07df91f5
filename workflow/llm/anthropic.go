package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"smolvm.dev/smolvm/workflow/llm/internal/wire"
)

// anthropic speaks Anthropic Messages (POST BaseURL/v1/messages).
type anthropic struct{ *caller }

// anthropicRequest encodes req as a Messages body. System messages join
// the system prompt; tool results become tool_result blocks of a user
// turn; consecutive messages of one role merge into one turn, since
// Messages wants user and assistant turns to alternate.
func anthropicRequest(model string, req Request, stream bool) ([]byte, error) {
	body := wire.ARequest{Model: model, MaxTokens: req.MaxTokens, Temperature: req.Temperature, Stream: stream}
	if body.MaxTokens <= 0 {
		body.MaxTokens = DefaultMaxTokens
	}
	system := []string{}
	if req.System != "" {
		system = append(system, req.System)
	}
	type turn struct {
		role   string
		blocks []wire.ABlock
	}
	var turns []turn
	add := func(role string, blocks ...wire.ABlock) {
		if n := len(turns); n > 0 && turns[n-1].role == role {
			turns[n-1].blocks = append(turns[n-1].blocks, blocks...)
			return
		}
		turns = append(turns, turn{role, blocks})
	}
	for i, m := range req.Messages {
		switch m.Role {
		case RoleSystem:
			system = append(system, m.Content)
		case RoleUser:
			if m.Content == "" {
				return nil, invalid("message %d: an empty user message", i)
			}
			add("user", wire.ABlock{Type: "text", Text: m.Content})
		case RoleTool:
			if m.ToolCallID == "" {
				return nil, invalid("message %d: a tool result without a tool call ID", i)
			}
			content, _ := json.Marshal(m.Content)
			add("user", wire.ABlock{Type: "tool_result", ToolUseID: m.ToolCallID, Content: content})
		case RoleAssistant:
			var blocks []wire.ABlock
			if m.Content != "" {
				blocks = append(blocks, wire.ABlock{Type: "text", Text: m.Content})
			}
			for _, tc := range m.ToolCalls {
				input := arguments(string(tc.Arguments))
				if !bytes.HasPrefix(input, []byte("{")) {
					// Messages takes only an object; what the model
					// wrote that did not parse was answered already.
					input = json.RawMessage("{}")
				}
				blocks = append(blocks, wire.ABlock{Type: "tool_use", ID: tc.ID, Name: tc.Name, Input: input})
			}
			if len(blocks) > 0 { // Messages refuses an empty turn
				add("assistant", blocks...)
			}
		default:
			return nil, invalid("message %d: unknown role %q", i, m.Role)
		}
	}
	for _, t := range turns {
		content, err := json.Marshal(t.blocks)
		if err != nil {
			return nil, invalid("encode messages: %v", err)
		}
		body.Messages = append(body.Messages, wire.AMessage{Role: t.role, Content: content})
	}
	if len(system) > 0 {
		body.System, _ = json.Marshal(strings.Join(system, "\n\n"))
	}
	for _, t := range req.Tools {
		schema := t.Parameters
		if len(schema) == 0 {
			schema = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		body.Tools = append(body.Tools, wire.ATool{Name: t.Name, Description: t.Description, InputSchema: schema})
	}
	return json.Marshal(body)
}

func (m *anthropic) Complete(ctx context.Context, req Request, onText func(string)) (Response, error) {
	body, err := anthropicRequest(m.cfg.Model, req, !m.cfg.NoStream)
	if err != nil {
		return Response{}, fmt.Errorf("%s: %w", m.cfg.Provider, err)
	}
	header := http.Header{}
	header.Set("anthropic-version", AnthropicVersion)
	if m.cfg.APIKey != "" {
		header.Set("x-api-key", m.cfg.APIKey)
	}
	if !m.cfg.NoStream {
		header.Set("Accept", "text/event-stream")
	}
	url := m.cfg.BaseURL + "/v1/messages"
	if strings.HasSuffix(m.cfg.BaseURL, "/v1") {
		url = m.cfg.BaseURL + "/messages"
	}
	return m.retry(ctx, func(ctx context.Context) (Response, bool, time.Duration, error) {
		resp, after, err := m.post(ctx, url, header, body)
		if err != nil {
			return Response{}, false, after, err
		}
		if m.cfg.NoStream {
			var ans wire.AResponse
			if err := m.readJSON(resp, &ans); err != nil {
				return Response{}, false, 0, err
			}
			out := Response{Message: Message{Role: RoleAssistant}, StopReason: deref(ans.StopReason), Usage: aUsage(ans.Usage)}
			var text strings.Builder
			for _, b := range ans.Content {
				switch b.Type {
				case "text":
					text.WriteString(b.Text)
				case "tool_use":
					out.Message.ToolCalls = append(out.Message.ToolCalls, ToolCall{ID: b.ID, Name: b.Name, Arguments: arguments(string(b.Input))})
				}
			}
			out.Message.Content = text.String()
			if onText != nil && out.Message.Content != "" {
				onText(out.Message.Content)
			}
			return out, out.Message.Content != "", 0, nil
		}
		defer resp.Body.Close()
		return m.stream(resp, onText)
	})
}

// stream assembles a streamed answer from its events: message_start
// (input tokens), content_block_start/delta/stop (text and tool_use
// blocks, whose input comes as input_json_delta pieces), message_delta
// (the stop reason and output tokens) and message_stop.
func (m *anthropic) stream(resp *http.Response, onText func(string)) (Response, bool, time.Duration, error) {
	out := Response{Message: Message{Role: RoleAssistant}}
	type block struct {
		kind, id, name string
		text           strings.Builder
		input          json.RawMessage // a tool_use's input in its start event: {} before the deltas
	}
	blocks := map[int]*block{}
	var order []int
	emitted, finished := false, false
	var usage wire.AUsage
	err := m.events(resp.Body, func(event string, data []byte) (bool, error) {
		var ev wire.AEvent
		if err := json.Unmarshal(data, &ev); err != nil {
			return false, invalid("%s: decode %s event: %v", m.cfg.Provider, event, err)
		}
		switch ev.Type {
		case "message_start":
			if ev.Message != nil {
				usage = ev.Message.Usage
			}
		case "content_block_start":
			if ev.ContentBlock == nil {
				return false, invalid("%s: content_block_start without a block", m.cfg.Provider)
			}
			if _, dup := blocks[ev.Index]; dup {
				return false, invalid("%s: content block %d started twice", m.cfg.Provider, ev.Index)
			}
			b := &block{kind: ev.ContentBlock.Type, id: ev.ContentBlock.ID, name: ev.ContentBlock.Name, input: ev.ContentBlock.Input}
			b.text.WriteString(ev.ContentBlock.Text)
			blocks[ev.Index] = b
			order = append(order, ev.Index)
		case "content_block_delta":
			b := blocks[ev.Index]
			if b == nil || ev.Delta == nil {
				return false, invalid("%s: delta for content block %d, which never started", m.cfg.Provider, ev.Index)
			}
			switch ev.Delta.Type {
			case "text_delta":
				b.text.WriteString(ev.Delta.Text)
				if onText != nil && ev.Delta.Text != "" {
					onText(ev.Delta.Text)
					emitted = true
				}
			case "input_json_delta":
				b.text.WriteString(ev.Delta.PartialJSON)
			}
		case "message_delta":
			if ev.Delta != nil && ev.Delta.StopReason != "" {
				out.StopReason = ev.Delta.StopReason
			}
			if ev.Usage != nil {
				// Cumulative counts; input tokens are here too in
				// newer versions of the API.
				usage.OutputTokens = ev.Usage.OutputTokens
				if ev.Usage.InputTokens > 0 {
					usage.InputTokens = ev.Usage.InputTokens
				}
			}
		case "message_stop":
			finished = true
			return true, nil
		case "error":
			e := &APIError{Provider: m.cfg.Provider, Status: http.StatusInternalServerError}
			if ev.Error != nil {
				e.Type, e.Message = ev.Error.Type, ev.Error.Message
			}
			if e.Type == "invalid_request_error" {
				e.Status = http.StatusBadRequest
			}
			return false, e
		}
		return false, nil // ping, content_block_stop, and events newer than this client
	})
	if err == nil && !finished {
		err = fmt.Errorf("%s: stream ended before message_stop: %w", m.cfg.Provider, errUnavailable)
	}
	if err != nil {
		return Response{}, emitted, 0, err
	}
	var text strings.Builder
	for _, i := range order {
		b := blocks[i]
		switch b.kind {
		case "text":
			text.WriteString(b.text.String())
		case "tool_use":
			args := b.text.String()
			if args == "" { // no deltas: some proxies send the whole input at the start
				args = string(b.input)
			}
			out.Message.ToolCalls = append(out.Message.ToolCalls, ToolCall{ID: b.id, Name: b.name, Arguments: arguments(args)})
		}
	}
	out.Message.Content = text.String()
	out.Usage = aUsage(usage)
	return out, emitted, 0, nil
}

// aUsage counts cache writes and reads as input tokens (priced alike here).
func aUsage(u wire.AUsage) Usage {
	return Usage{InputTokens: u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens, OutputTokens: u.OutputTokens}
}
