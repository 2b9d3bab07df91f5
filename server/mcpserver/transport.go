package mcpserver

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// MaxLine bounds one JSON-RPC message on the stdio transport, as the SDK's
// own transport does.
const MaxLine = mcp.DefaultMaxLineLength

// Transport is MCP's stdio transport (newline-delimited JSON-RPC) on r and
// w, which stay open when the session ends. A line that is no JSON-RPC
// message is answered with a JSON-RPC error, and the session goes on: the
// SDK's IOTransport ends the session at the first one, so one malformed
// line lost the agent every later tool call. Batches are refused too
// (MCP dropped them in 2025-06-18; the SDK ends the session at one).
func Transport(r io.Reader, w io.Writer) mcp.Transport {
	out := &lineWriter{w: w}
	in := &lineFilter{in: bufio.NewReader(r), out: out}
	// The filter bounds lines itself.
	return &mcp.IOTransport{Reader: io.NopCloser(in), Writer: out, MaxLineLength: -1}
}

// lineWriter serializes writes: the SDK writes each message in one Write,
// and so does the filter's error reply, from the SDK's reading goroutine.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lineWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// Close leaves w open: it is the caller's (smolvm mcp's stdout).
func (l *lineWriter) Close() error { return nil }

// lineFilter reads lines from in and hands the SDK only those that are
// JSON-RPC messages, as the SDK decodes them, trimmed; it answers the
// others on out.
type lineFilter struct {
	in      *bufio.Reader
	out     io.Writer
	pending []byte // what Read has yet to hand on
	err     error  // in's error, returned once pending is drained
}

func (f *lineFilter) Read(p []byte) (int, error) {
	for len(f.pending) == 0 {
		if f.err != nil {
			return 0, f.err
		}
		var line []byte
		var tooLong bool
		line, tooLong, f.err = f.readLine()
		if err := f.take(line, tooLong); err != nil {
			return 0, err
		}
	}
	n := copy(p, f.pending)
	f.pending = f.pending[n:]
	return n, nil
}

// readLine reads up to and including the next newline, or to the end of
// in. A line over MaxLine is read to its end but not kept.
func (f *lineFilter) readLine() (line []byte, tooLong bool, err error) {
	for {
		chunk, err := f.in.ReadSlice('\n')
		if !tooLong && len(line)+len(chunk) > MaxLine {
			line, tooLong = nil, true
		}
		if !tooLong {
			line = append(line, chunk...)
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return line, tooLong, err
		}
	}
}

// take queues line for the SDK if it holds a JSON-RPC message, and answers
// it otherwise; an empty line is skipped. Only a failed answer is an error.
func (f *lineFilter) take(line []byte, tooLong bool) error {
	line = bytes.TrimSpace(line)
	if len(line) == 0 && !tooLong {
		return nil
	}
	code, why := int64(jsonrpc.CodeInvalidRequest), ""
	switch {
	case tooLong:
		why = fmt.Sprintf("message over %d bytes", MaxLine)
	case !json.Valid(line):
		code, why = jsonrpc.CodeParseError, "parse error: not JSON"
	case line[0] == '[':
		why = "batches are not supported"
	default:
		_, err := jsonrpc.DecodeMessage(line)
		if err == nil {
			// As read, trimmed: the SDK decodes it with that very function.
			// Re-encoded, a request whose method is "" or null lost its
			// method, and the SDK ended the session at it.
			f.pending = append(line, '\n')
			return nil
		}
		why = "not a JSON-RPC 2.0 message: " + err.Error()
	}
	return f.refuse(idOf(line), code, why)
}

// refuse answers a line that is not a message with a JSON-RPC error.
func (f *lineFilter) refuse(id any, code int64, why string) error {
	data, err := json.Marshal(struct {
		Version string         `json:"jsonrpc"`
		ID      any            `json:"id"`
		Error   *jsonrpc.Error `json:"error"`
	}{"2.0", id, &jsonrpc.Error{Code: code, Message: why}})
	if err == nil {
		_, err = f.out.Write(append(data, '\n'))
	}
	return err
}

// idOf is the request ID a refused line carries, if it has a valid one,
// so that its sender's call ends; JSON-RPC's null otherwise.
func idOf(line []byte) any {
	var v struct {
		ID any `json:"id"`
	}
	if json.Unmarshal(line, &v) != nil {
		return nil
	}
	if id, err := jsonrpc.MakeID(v.ID); err != nil || !id.IsValid() {
		return nil
	}
	return v.ID
}
