// Package wire holds the providers' JSON shapes, shared by the clients in
// package llm and the scripted server in llmtest.
package wire

import "encoding/json"

// Chat Completions (OpenAI and compatible servers).
type (
	OARequest struct {
		Model               string          `json:"model"`
		Messages            []OAMessage     `json:"messages"`
		Tools               []OATool        `json:"tools,omitempty"`
		MaxTokens           int             `json:"max_tokens,omitempty"`
		MaxCompletionTokens int             `json:"max_completion_tokens,omitempty"`
		Temperature         *float64        `json:"temperature,omitempty"`
		Stream              bool            `json:"stream,omitempty"`
		StreamOptions       *OAStreamOption `json:"stream_options,omitempty"`
	}
	OAStreamOption struct {
		IncludeUsage bool `json:"include_usage"`
	}
	OAMessage struct {
		Role       string       `json:"role,omitempty"`
		Content    *string      `json:"content"` // null on an assistant message with only tool calls
		ToolCalls  []OAToolCall `json:"tool_calls,omitempty"`
		ToolCallID string       `json:"tool_call_id,omitempty"`
	}
	OATool struct {
		Type     string     `json:"type"`
		Function OAFunction `json:"function"`
	}
	OAFunction struct {
		Name        string          `json:"name"`
		Description string          `json:"description,omitempty"`
		Parameters  json.RawMessage `json:"parameters,omitempty"`
	}
	OAToolCall struct {
		Index    *int       `json:"index,omitempty"` // stream deltas only
		ID       string     `json:"id,omitempty"`
		Type     string     `json:"type,omitempty"`
		Function OACallFunc `json:"function"`
	}
	OACallFunc struct {
		Name      string `json:"name,omitempty"`
		Arguments Args   `json:"arguments"` // JSON text, in pieces when streamed
	}
	OAUsage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	}
	// OAResponse is a whole answer (Message) or a stream chunk (Delta).
	OAResponse struct {
		ID      string     `json:"id,omitempty"`
		Object  string     `json:"object,omitempty"`
		Model   string     `json:"model,omitempty"`
		Choices []OAChoice `json:"choices"`
		Usage   *OAUsage   `json:"usage,omitempty"`
		Error   *Error     `json:"error,omitempty"` // some servers report a failure mid-stream
	}
	OAChoice struct {
		Index        int        `json:"index"`
		Message      *OAMessage `json:"message,omitempty"`
		Delta        *OAMessage `json:"delta,omitempty"`
		FinishReason *string    `json:"finish_reason"`
	}
)

// Error is the error object both providers send: {"error": {...}}.
type Error struct {
	Type    string          `json:"type,omitempty"`
	Code    json.RawMessage `json:"code,omitempty"`
	Message string          `json:"message"`
}

// ErrorBody is an error answer's body (Anthropic adds "type":"error").
type ErrorBody struct {
	Type  string `json:"type,omitempty"`
	Error Error  `json:"error"`
}

// Args is a tool call's arguments: JSON text inside a string, as the API
// defines it. Some servers (Ollama's older versions) send the object
// itself; that is kept as its text.
type Args string

func (a *Args) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		err := json.Unmarshal(b, &s)
		*a = Args(s)
		return err
	}
	if string(b) == "null" {
		*a = ""
		return nil
	}
	*a = Args(b)
	return nil
}
