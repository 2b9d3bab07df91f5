// Package llmtest is a scripted model server that speaks both providers'
// wire protocols (Chat Completions and Anthropic Messages, whole or
// streamed as SSE) over real HTTP, for tests of code that calls models.
package llmtest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"smolvm.dev/smolvm/workflow/llm"
	"smolvm.dev/smolvm/workflow/llm/internal/wire"
)

// Turn is one scripted answer.
type Turn struct {
	Text      string
	ToolCalls []llm.ToolCall // IDs are made up when empty
	// Status, if not zero, answers this HTTP status (429, 500, 400, ...)
	// with an error body in the provider's shape instead of a completion.
	Status                    int
	Message                   string            // the error's message (default: the status text)
	RetryAfter                string            // a Retry-After header with Status
	Header                    map[string]string // more headers on the answer
	InputTokens, OutputTokens int
	StopReason                string        // default: end_turn, or tool_use with tool calls (OpenAI's names when OpenAI asks)
	Delay                     time.Duration // wait before answering (or until the client gives up)
	// Cut ends a streamed answer halfway, without its end, by closing
	// the connection after the first text delta.
	Cut bool
}

// Recorded is one HTTP request as it arrived.
type Recorded struct {
	Method, Path string
	Header       http.Header
	Body         []byte
	Provider     string // llm.OpenAI or llm.Anthropic, by path
}

// Server is a running scripted model server.
type Server struct {
	// URL is the base URL for both providers: clients post to
	// URL/chat/completions (OpenAI) and URL/messages (Anthropic).
	URL string

	srv     *httptest.Server
	mu      sync.Mutex
	turns   []Turn
	respond func(llm.Request) Turn
	reqs    []llm.Request
	raw     []Recorded
}

// NewServer starts a server that answers with turns, in order (a Status
// turn is consumed too, so [429, ok] tests a retry). It closes on
// t.Cleanup.
func NewServer(t testing.TB, turns ...Turn) *Server {
	s := &Server{turns: turns}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.srv.URL + "/v1"
	t.Cleanup(s.srv.Close)
	return s
}

// Respond sets fn to answer once the scripted turns are used up; it sees
// the request as decoded.
func (s *Server) Respond(fn func(req llm.Request) Turn) {
	s.mu.Lock()
	s.respond = fn
	s.mu.Unlock()
}

// Requests returns what clients sent, decoded, in order.
func (s *Server) Requests() []llm.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]llm.Request(nil), s.reqs...)
}

// Recorded returns the HTTP requests as they arrived, in order.
func (s *Server) Recorded() []Recorded {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Recorded(nil), s.raw...)
}

// maxBody bounds a request body.
const maxBody = 16 << 20

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	provider := ""
	switch {
	case strings.HasSuffix(r.URL.Path, "/chat/completions"):
		provider = llm.OpenAI
	case strings.HasSuffix(r.URL.Path, "/messages"):
		provider = llm.Anthropic
	}
	if r.Method != http.MethodPost || provider == "" {
		http.Error(w, "llmtest: want POST .../chat/completions or .../messages", http.StatusNotFound)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	if err != nil {
		return
	}
	var req llm.Request
	var stream bool
	if provider == llm.OpenAI {
		req, stream, err = decodeOpenAI(body)
	} else {
		req, stream, err = decodeAnthropic(body)
	}
	s.mu.Lock()
	s.raw = append(s.raw, Recorded{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body, Provider: provider})
	if err != nil {
		s.mu.Unlock()
		writeError(w, provider, Turn{Status: http.StatusBadRequest, Message: "llmtest: " + err.Error()})
		return
	}
	s.reqs = append(s.reqs, req)
	var turn Turn
	var ok bool
	if len(s.turns) > 0 {
		turn, s.turns, ok = s.turns[0], s.turns[1:], true
	}
	respond := s.respond
	s.mu.Unlock()
	if !ok {
		if respond == nil {
			writeError(w, provider, Turn{Status: http.StatusBadRequest, Message: "llmtest: no scripted turn left"})
			return
		}
		turn = respond(req)
	}
	if turn.Delay > 0 {
		select {
		case <-time.After(turn.Delay):
		case <-r.Context().Done():
			return
		}
	}
	for k, v := range turn.Header {
		w.Header().Set(k, v)
	}
	if turn.Status != 0 {
		writeError(w, provider, turn)
		return
	}
	turn.ToolCalls = append([]llm.ToolCall(nil), turn.ToolCalls...) // the script's own stays as written
	for i := range turn.ToolCalls {
		if turn.ToolCalls[i].ID == "" {
			prefix := "call_"
			if provider == llm.Anthropic {
				prefix = "toolu_"
			}
			turn.ToolCalls[i].ID = fmt.Sprintf("%s%d_%d", prefix, len(s.Requests()), i)
		}
		if len(turn.ToolCalls[i].Arguments) == 0 {
			turn.ToolCalls[i].Arguments = json.RawMessage("{}")
		}
	}
	if provider == llm.OpenAI {
		writeOpenAI(w, turn, stream)
	} else {
		writeAnthropic(w, turn, stream)
	}
}

func writeError(w http.ResponseWriter, provider string, turn Turn) {
	msg := turn.Message
	if msg == "" {
		msg = http.StatusText(turn.Status)
	}
	typ := "api_error"
	switch {
	case turn.Status == http.StatusTooManyRequests:
		typ = "rate_limit_error"
	case turn.Status == http.StatusUnauthorized:
		typ = "authentication_error"
	case turn.Status < 500:
		typ = "invalid_request_error"
	}
	body := wire.ErrorBody{Error: wire.Error{Type: typ, Message: msg}}
	if provider == llm.Anthropic {
		body.Type = "error"
	}
	if turn.RetryAfter != "" {
		w.Header().Set("Retry-After", turn.RetryAfter)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(turn.Status)
	_ = json.NewEncoder(w).Encode(body)
}

// pieces splits s into up to n parts, so that streams carry several deltas.
func pieces(s string, n int) []string {
	if s == "" {
		return nil
	}
	size := max((len(s)+n-1)/n, 1)
	var out []string
	for len(s) > size {
		out = append(out, s[:size])
		s = s[size:]
	}
	return append(out, s)
}

// sse writes server-sent events, flushing each.
type sse struct {
	w http.ResponseWriter
}

func startSSE(w http.ResponseWriter) sse {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	return sse{w}
}

func (s sse) send(event string, v any) {
	data := []byte("[DONE]")
	if v != nil {
		data, _ = json.Marshal(v)
	}
	if event != "" {
		fmt.Fprintf(s.w, "event: %s\n", event)
	}
	fmt.Fprintf(s.w, "data: %s\n\n", data)
	s.w.(http.Flusher).Flush()
}

// cut closes the connection mid-stream.
func (s sse) cut() {
	if hj, ok := s.w.(http.Hijacker); ok {
		if c, _, err := hj.Hijack(); err == nil {
			c.Close()
		}
	}
}

// Close stops the server before the test ends (to test an unreachable one).
func (s *Server) Close() { s.srv.Close() }
