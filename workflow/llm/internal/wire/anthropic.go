package wire

import "encoding/json"

// Anthropic Messages.
type (
	ARequest struct {
		Model       string          `json:"model"`
		MaxTokens   int             `json:"max_tokens"`
		System      json.RawMessage `json:"system,omitempty"` // a string, or text blocks
		Messages    []AMessage      `json:"messages"`
		Tools       []ATool         `json:"tools,omitempty"`
		Temperature *float64        `json:"temperature,omitempty"`
		Stream      bool            `json:"stream,omitempty"`
	}
	AMessage struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"` // a string, or []ABlock
	}
	// ABlock is a content block: text, tool_use or tool_result.
	ABlock struct {
		Type      string          `json:"type"`
		Text      string          `json:"text,omitempty"`
		ID        string          `json:"id,omitempty"`          // tool_use
		Name      string          `json:"name,omitempty"`        // tool_use
		Input     json.RawMessage `json:"input,omitempty"`       // tool_use: an object
		ToolUseID string          `json:"tool_use_id,omitempty"` // tool_result
		Content   json.RawMessage `json:"content,omitempty"`     // tool_result: a string, or text blocks
	}
	ATool struct {
		Name        string          `json:"name"`
		Description string          `json:"description,omitempty"`
		InputSchema json.RawMessage `json:"input_schema"`
	}
	AUsage struct {
		InputTokens              int `json:"input_tokens"`
		OutputTokens             int `json:"output_tokens"`
		CacheCreationInputTokens int `json:"cache_creation_input_tokens,omitempty"`
		CacheReadInputTokens     int `json:"cache_read_input_tokens,omitempty"`
	}
	AResponse struct {
		ID         string   `json:"id"`
		Type       string   `json:"type"` // "message"
		Role       string   `json:"role"`
		Model      string   `json:"model"`
		Content    []ABlock `json:"content"`
		StopReason *string  `json:"stop_reason"`
		Usage      AUsage   `json:"usage"`
	}
	// AEvent is one server-sent event's data; Type repeats the event name.
	AEvent struct {
		Type         string     `json:"type"`
		Message      *AResponse `json:"message,omitempty"`       // message_start
		Index        int        `json:"index"`                   // content_block_*
		ContentBlock *ABlock    `json:"content_block,omitempty"` // content_block_start
		Delta        *ADelta    `json:"delta,omitempty"`         // content_block_delta, message_delta
		Usage        *AUsage    `json:"usage,omitempty"`         // message_delta
		Error        *Error     `json:"error,omitempty"`         // error
	}
	ADelta struct {
		Type        string `json:"type,omitempty"` // text_delta, input_json_delta
		Text        string `json:"text,omitempty"`
		PartialJSON string `json:"partial_json,omitempty"`
		StopReason  string `json:"stop_reason,omitempty"`
	}
)
