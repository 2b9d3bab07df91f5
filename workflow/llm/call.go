package llm

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"smolvm.dev/smolvm/errdefs"
)

// APIError is a provider's error answer: its HTTP status and message.
type APIError struct {
	Provider string
	Status   int    // 0: an error event inside a stream
	Type     string // the provider's error type or code, if it sent one
	Message  string // the provider's message, or the start of its body
	// ShouldRetry is the server's x-should-retry header ("true",
	// "false"), which overrides the status's own rule; "" without one.
	ShouldRetry string
}

func (e *APIError) Error() string {
	s := fmt.Sprintf("%s: HTTP %d", e.Provider, e.Status)
	if e.Type != "" {
		s += " " + e.Type
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// Is matches the error's class: 401/403 denied, 404 not found, 409
// conflict, 429 quota, 408 and 5xx unavailable, any other 4xx invalid.
func (e *APIError) Is(target error) bool {
	var class error
	switch {
	case e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden:
		class = errdefs.ErrDenied
	case e.Status == http.StatusNotFound:
		class = errdefs.ErrNotFound
	case e.Status == http.StatusConflict:
		class = errdefs.ErrConflict
	case e.Status == http.StatusTooManyRequests:
		class = errdefs.ErrQuota
	case e.Status >= 500 || e.Status == 0 || e.Status == http.StatusRequestTimeout:
		class = errdefs.ErrUnavailable
	default:
		class = errdefs.ErrInvalid
	}
	return target == class
}

// retryable tells whether another attempt may succeed: as both
// providers' own SDKs do, 408, 409 (a lock timeout), 429 and 5xx, unless
// the server said otherwise.
func (e *APIError) retryable() bool {
	switch e.ShouldRetry {
	case "true":
		return true
	case "false":
		return false
	}
	switch e.Status {
	case 0, http.StatusRequestTimeout, http.StatusConflict, http.StatusTooManyRequests:
		return true
	}
	return e.Status >= 500
}

// errUnavailable marks network failures, which are retried.
var errUnavailable = errdefs.New(errdefs.ErrUnavailable, "model server unreachable")

// caller sends requests to a provider, retrying what may succeed later.
type caller struct {
	cfg Config
	hc  *http.Client
}

// attempt is one try: it returns whether it already passed text to
// onText (a stream cut after that cannot be retried without repeating
// it) and, after an error answer, the server's Retry-After.
type attempt func(ctx context.Context) (resp Response, emitted bool, retryAfter time.Duration, err error)

// retry runs try until it succeeds, fails for good, or the retries run out.
func (c *caller) retry(ctx context.Context, try attempt) (Response, error) {
	delay := c.cfg.Backoff
	for n := 0; ; n++ {
		actx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
		resp, emitted, after, err := try(actx)
		timedOut := actx.Err() != nil
		cancel()
		if err == nil {
			resp.Usage = c.cfg.cost(resp.Usage)
			return resp, nil
		}
		if ctx.Err() != nil {
			return Response{}, fmt.Errorf("%s: %w", c.cfg.Provider, ctx.Err())
		}
		if timedOut { // this attempt's Timeout, not the caller's context
			err = fmt.Errorf("%s: no whole answer within %s: %w", c.cfg.Provider, c.cfg.Timeout, errUnavailable)
		}
		var api *APIError
		again := errors.Is(err, errUnavailable) || (errors.As(err, &api) && api.retryable())
		if !again || emitted || n >= c.cfg.MaxRetries {
			if again && n > 0 {
				return Response{}, fmt.Errorf("%w (after %d attempts)", err, n+1)
			}
			return Response{}, err
		}
		wait := rand.N(delay) + 1 // full jitter
		if after > 0 {
			if after > MaxRetryAfter {
				return Response{}, fmt.Errorf("%w (Retry-After %s is past the %s limit)", err, after, MaxRetryAfter)
			}
			wait = after
		}
		delay = min(2*delay, MaxBackoff)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return Response{}, fmt.Errorf("%s: %w (waiting to retry after: %v)", c.cfg.Provider, ctx.Err(), err)
		case <-t.C:
		}
	}
}

// post sends body to url and returns the response if its status is 200;
// otherwise it reads the error answer into an APIError.
func (c *caller) post(ctx context.Context, url string, header http.Header, body []byte) (*http.Response, time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, 0, invalid("%s: %v", c.cfg.Provider, err)
	}
	req.Header = header.Clone()
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, 0, fmt.Errorf("%s: %w", c.cfg.Provider, ctx.Err())
		}
		return nil, 0, fmt.Errorf("%s: post %s: %w: %w", c.cfg.Provider, url, errUnavailable, err)
	}
	if resp.StatusCode == http.StatusOK {
		return resp, 0, nil
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	e := &APIError{Provider: c.cfg.Provider, Status: resp.StatusCode, ShouldRetry: resp.Header.Get("X-Should-Retry")}
	var wire struct {
		Error json.RawMessage `json:"error"`
	}
	var detail struct {
		Type    string          `json:"type"`
		Code    json.RawMessage `json:"code"`
		Message string          `json:"message"`
	}
	if json.Unmarshal(raw, &wire) == nil && json.Unmarshal(wire.Error, &detail) == nil {
		e.Type, e.Message = detail.Type, detail.Message
		if e.Type == "" && len(detail.Code) > 0 && string(detail.Code) != "null" {
			e.Type = strings.Trim(string(detail.Code), `"`)
		}
	} else if json.Unmarshal(wire.Error, &e.Message) != nil || e.Message == "" {
		e.Message = strings.TrimSpace(string(raw[:min(len(raw), 512)]))
	}
	return nil, retryAfter(resp.Header), e
}

// retryAfter reads Retry-After-Ms (OpenAI's) or Retry-After: seconds or
// an HTTP date.
func retryAfter(h http.Header) time.Duration {
	if ms, err := strconv.ParseFloat(h.Get("Retry-After-Ms"), 64); err == nil && ms >= 0 {
		return time.Duration(ms * float64(time.Millisecond))
	}
	v := h.Get("Retry-After")
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil && s >= 0 {
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}

// readJSON decodes a whole (non-streamed) answer, bounded by Config.MaxResponseBytes.
func (c *caller) readJSON(resp *http.Response, v any) error {
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, c.cfg.MaxResponseBytes+1))
	if err != nil {
		return fmt.Errorf("%s: read answer: %w: %w", c.cfg.Provider, errUnavailable, err)
	}
	if int64(len(raw)) > c.cfg.MaxResponseBytes {
		return errdefs.New(errdefs.ErrQuota, fmt.Sprintf("%s: answer over %d bytes", c.cfg.Provider, c.cfg.MaxResponseBytes))
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return invalid("%s: decode answer: %v", c.cfg.Provider, err)
	}
	return nil
}

// maxEventBytes bounds one SSE line.
const maxEventBytes = 4 << 20

// events reads an SSE stream and calls fn with each event's name and
// data, until fn returns done or the stream ends (the caller tells whether
// it ended too early). The whole stream is bounded by
// Config.MaxResponseBytes.
func (c *caller) events(body io.Reader, fn func(event string, data []byte) (done bool, err error)) error {
	sc := bufio.NewScanner(&limited{r: body, n: c.cfg.MaxResponseBytes})
	sc.Buffer(make([]byte, 0, 64<<10), maxEventBytes)
	var event string
	var data []byte
	for sc.Scan() {
		line := sc.Bytes()
		switch {
		case len(line) == 0:
			if len(data) == 0 && event == "" {
				continue
			}
			done, err := fn(event, data)
			if err != nil || done {
				return err
			}
			event, data = "", data[:0]
		case line[0] == ':': // a comment: keep-alive
		default:
			field, value, _ := bytes.Cut(line, []byte(":"))
			value = bytes.TrimPrefix(value, []byte(" "))
			switch string(field) {
			case "event":
				event = string(value)
			case "data":
				if len(data) > 0 {
					data = append(data, '\n')
				}
				data = append(data, value...)
			}
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, errTooLong) {
			return errdefs.New(errdefs.ErrQuota, fmt.Sprintf("%s: stream over %d bytes", c.cfg.Provider, c.cfg.MaxResponseBytes))
		}
		if errors.Is(err, bufio.ErrTooLong) {
			return errdefs.New(errdefs.ErrQuota, fmt.Sprintf("%s: a stream line over %d bytes", c.cfg.Provider, maxEventBytes))
		}
		return fmt.Errorf("%s: read stream: %w: %w", c.cfg.Provider, errUnavailable, err)
	}
	if len(data) > 0 {
		_, err := fn(event, data)
		return err
	}
	return nil
}

var errTooLong = errors.New("over the size limit")

// limited is io.LimitReader that fails, rather than ending, at its limit.
type limited struct {
	r io.Reader
	n int64
}

func (l *limited) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, errTooLong
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}
