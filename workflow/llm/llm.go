// Package llm talks to model providers: OpenAI-compatible Chat Completions and Anthropic Messages.
package llm

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"smolvm.dev/smolvm/errdefs"
)

// Role is who wrote a message.
type Role string

const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool" // a tool's result, answering ToolCallID
)

// Message is one turn of a conversation.
type Message struct {
	Role       Role
	Content    string
	ToolCalls  []ToolCall // assistant messages
	ToolCallID string     // tool results (Role "tool")
}

// Tool is a function the model may call; Parameters is its JSON Schema.
type Tool struct {
	Name, Description string
	Parameters        json.RawMessage
}

// ToolCall is the model's call of a Tool. Arguments is always valid JSON:
// the arguments object the model wrote, or, if it wrote something that
// does not parse, that text as a JSON string (so decoding it into the
// tool's argument struct fails with an error the agent can feed back).
type ToolCall struct {
	ID, Name  string
	Arguments json.RawMessage
}

// Request is one completion request.
type Request struct {
	System      string
	Messages    []Message
	Tools       []Tool
	MaxTokens   int // 0: DefaultMaxTokens
	Temperature *float64
}

// Usage counts a call's tokens and what they cost (from Config's prices).
type Usage struct {
	InputTokens, OutputTokens int
	CostUSD                   float64
}

// Add returns the sum of two usages.
func (u Usage) Add(o Usage) Usage {
	return Usage{InputTokens: u.InputTokens + o.InputTokens, OutputTokens: u.OutputTokens + o.OutputTokens, CostUSD: u.CostUSD + o.CostUSD}
}

// The stop reasons, the same for both providers (OpenAI's "stop", "length"
// and "tool_calls" are translated); any other reason is passed on as the
// provider sent it.
const (
	StopEndTurn   = "end_turn"
	StopMaxTokens = "max_tokens"
	StopToolUse   = "tool_use"
)

// Response is the model's answer.
type Response struct {
	Message    Message // Role "assistant"
	Usage      Usage
	StopReason string
}

// Model is one provider. Complete streams (SSE) and calls onText with each
// text delta (onText may be nil).
type Model interface {
	Complete(ctx context.Context, req Request, onText func(string)) (Response, error)
}

// The providers.
const (
	OpenAI    = "openai"    // any Chat Completions server: OpenAI, vLLM, llama.cpp, Ollama, LM Studio, OpenRouter
	Anthropic = "anthropic" // Anthropic Messages
)

// Defaults and limits.
const (
	DefaultMaxRetries       = 5
	DefaultTimeout          = 10 * time.Minute       // one attempt, the whole stream included
	DefaultBackoff          = 500 * time.Millisecond // the first retry's delay; doubled each time
	MaxBackoff              = 30 * time.Second       // the longest delay between attempts
	MaxRetryAfter           = 2 * time.Minute        // a longer Retry-After ends the retries
	DefaultMaxTokens        = 4096                   // Anthropic requires a limit
	DefaultMaxResponseBytes = 32 << 20               // a body or a whole stream
	AnthropicVersion        = "2023-06-01"

	defaultOpenAIURL    = "https://api.openai.com/v1"
	defaultAnthropicURL = "https://api.anthropic.com"
)

// Config selects and configures a provider.
type Config struct {
	Provider string // OpenAI or Anthropic
	// BaseURL is the API root: "https://api.openai.com/v1" (the client
	// posts to BaseURL/chat/completions), "https://api.anthropic.com"
	// (BaseURL/v1/messages; a BaseURL ending in /v1 gets /messages).
	// Empty: the provider's own.
	BaseURL, Model, APIKey string
	// MaxRetries bounds the retries after a 429, a 5xx or a network
	// error: 0 is DefaultMaxRetries, negative is none.
	MaxRetries int
	// Backoff is the first retry's delay (0: DefaultBackoff); each retry
	// doubles it up to MaxBackoff, with full jitter. A Retry-After header
	// is honoured instead.
	Backoff                         time.Duration
	PriceInPerMTok, PriceOutPerMTok float64       // USD per million tokens; cost = tokens*price/1e6
	Timeout                         time.Duration // one attempt; 0 is DefaultTimeout
	// MaxResponseBytes bounds an answer, or a whole stream (0:
	// DefaultMaxResponseBytes).
	MaxResponseBytes int64
	// NoStream asks for whole answers instead of SSE, for servers that
	// cannot stream; onText then gets the text once.
	NoStream bool
}

// New returns the Model cfg describes, using hc (nil: a client of its
// own). A bad config is an errdefs.ErrInvalid error.
func New(cfg Config, hc *http.Client) (Model, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if hc == nil {
		hc = &http.Client{}
	}
	c := &caller{cfg: cfg, hc: hc}
	switch cfg.Provider {
	case OpenAI:
		return &openAI{c}, nil
	default:
		return &anthropic{c}, nil
	}
}

func invalid(format string, args ...any) error {
	return errdefs.New(errdefs.ErrInvalid, fmt.Sprintf(format, args...))
}

// check validates cfg and fills in the defaults.
func (cfg *Config) check() error {
	switch cfg.Provider {
	case OpenAI:
		if cfg.BaseURL == "" {
			cfg.BaseURL = defaultOpenAIURL
		}
	case Anthropic:
		if cfg.BaseURL == "" {
			cfg.BaseURL = defaultAnthropicURL
		}
	case "":
		return invalid("model config: no provider (want %q or %q)", OpenAI, Anthropic)
	default:
		return invalid("model config: unknown provider %q (want %q or %q)", cfg.Provider, OpenAI, Anthropic)
	}
	u, err := url.Parse(cfg.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return invalid("model config: base URL %q: want http(s)://host[/path]", cfg.BaseURL)
	}
	cfg.BaseURL = strings.TrimRight(cfg.BaseURL, "/")
	if strings.TrimSpace(cfg.Model) == "" {
		return invalid("model config: no model name")
	}
	if cfg.PriceInPerMTok < 0 || cfg.PriceOutPerMTok < 0 {
		return invalid("model config: negative price")
	}
	if cfg.Timeout < 0 || cfg.Backoff < 0 {
		return invalid("model config: negative timeout or backoff")
	}
	switch {
	case cfg.MaxRetries == 0:
		cfg.MaxRetries = DefaultMaxRetries
	case cfg.MaxRetries < 0:
		cfg.MaxRetries = 0
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Backoff == 0 {
		cfg.Backoff = DefaultBackoff
	}
	if cfg.MaxResponseBytes <= 0 {
		cfg.MaxResponseBytes = DefaultMaxResponseBytes
	}
	return nil
}

// cost prices a usage.
func (cfg *Config) cost(u Usage) Usage {
	u.CostUSD = float64(u.InputTokens)*cfg.PriceInPerMTok/1e6 + float64(u.OutputTokens)*cfg.PriceOutPerMTok/1e6
	return u
}

// ConfigFromEnv reads SMOLVM_MODEL_PROVIDER (default openai),
// SMOLVM_MODEL_BASE_URL, SMOLVM_MODEL, SMOLVM_MODEL_API_KEY (falling back
// to OPENAI_API_KEY or ANTHROPIC_API_KEY, by provider),
// SMOLVM_MODEL_PRICE_IN and SMOLVM_MODEL_PRICE_OUT (USD per million
// tokens) and SMOLVM_MODEL_MAX_RETRIES. It checks the result as New does.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	cfg := Config{
		Provider: getenv("SMOLVM_MODEL_PROVIDER"),
		BaseURL:  getenv("SMOLVM_MODEL_BASE_URL"),
		Model:    getenv("SMOLVM_MODEL"),
		APIKey:   getenv("SMOLVM_MODEL_API_KEY"),
	}
	if cfg.Provider == "" {
		cfg.Provider = OpenAI
	}
	if cfg.APIKey == "" {
		switch cfg.Provider {
		case OpenAI:
			cfg.APIKey = getenv("OPENAI_API_KEY")
		case Anthropic:
			cfg.APIKey = getenv("ANTHROPIC_API_KEY")
		}
	}
	for _, p := range []struct {
		name string
		to   *float64
	}{{"SMOLVM_MODEL_PRICE_IN", &cfg.PriceInPerMTok}, {"SMOLVM_MODEL_PRICE_OUT", &cfg.PriceOutPerMTok}} {
		if v := getenv(p.name); v != "" {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return Config{}, invalid("%s=%q: not a number", p.name, v)
			}
			*p.to = f
		}
	}
	if v := getenv("SMOLVM_MODEL_MAX_RETRIES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return Config{}, invalid("SMOLVM_MODEL_MAX_RETRIES=%q: not an integer", v)
		}
		if n == 0 {
			n = -1 // zero retries asked for: none
		}
		cfg.MaxRetries = n
	}
	checked := cfg
	if err := checked.check(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// arguments makes a tool call's argument text valid JSON (see ToolCall).
func arguments(s string) json.RawMessage {
	s = strings.TrimSpace(s)
	if s == "" {
		return json.RawMessage("{}")
	}
	if json.Valid([]byte(s)) {
		return json.RawMessage(s)
	}
	b, _ := json.Marshal(s)
	return b
}
