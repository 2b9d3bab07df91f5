package httpguard

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Listener wraps a listener of an HTTP server so that the answers
// net/http writes itself, to requests it cannot parse, take an API's
// shape: a malformed request line or header (400), headers over the
// limit (431), a transfer encoding it does not know (501), an HTTP
// version it does not serve (505). net/http writes those as plain text
// straight to the connection, before any handler; Listener's connections
// recognise exactly those writes and send the same status with Body's
// JSON instead. A handler's answer never matches: net/http writes it
// with a Date and a length.
//
// Over TLS (Inner a tls listener), a connection does its handshake when
// net/http first asks for its state (it no longer sees a *tls.Conn), within
// TLSHandshakeTimeout; a plain HTTP request to it gets a 400 in the
// API's shape too, and failures go to Log.
type Listener struct {
	net.Listener
	// Body renders an error of status with message msg, as JSON.
	Body func(status int, msg string) []byte
	Log  *log.Logger // nil: none
}

// TLSHandshakeTimeout bounds a TLS handshake, as net/http's own (which
// is its ReadHeaderTimeout).
const TLSHandshakeTimeout = 10 * time.Second

// Accept returns the next connection, wrapped.
func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if tc, ok := c.(*tls.Conn); ok {
		return &tlsConn{conn: conn{Conn: tc, l: l}, tc: tc}, nil
	}
	return &plainConn{conn{Conn: c, l: l}}, nil
}

// errorHeaders are the headers of net/http's own plain-text answers
// (server.go, conn.serve).
const errorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

// goAnswer returns the status and message of p if p is one whole answer
// net/http writes itself: "HTTP/1.1 " + X + errorHeaders + X, X being
// "400 Bad Request", "431 Request Header Fields Too Large" or a status
// error ("400 Bad Request: invalid header name", "505 HTTP Version Not
// Supported: unsupported protocol version"); or the 501 for a transfer
// encoding it does not know.
func goAnswer(p []byte) (int, string, bool) {
	rest, ok := bytes.CutPrefix(p, []byte("HTTP/1.1 "))
	if !ok || len(p) > 512 {
		return 0, "", false
	}
	head, body, ok := bytes.Cut(rest, []byte(errorHeaders))
	if !ok || len(head) < 5 || head[3] != ' ' {
		return 0, "", false
	}
	status, err := strconv.Atoi(string(head[:3]))
	if err != nil {
		return 0, "", false
	}
	switch {
	case bytes.Equal(head, body) && http.StatusText(status) != "":
		return status, string(body[4:]), true
	case status == http.StatusNotImplemented && string(head[4:]) == http.StatusText(status) && string(body) == "Unsupported transfer encoding":
		return status, string(body), true
	}
	return 0, "", false
}

// answer is a whole answer of status with l.Body's JSON.
func (l *Listener) answer(status int, msg string) []byte {
	b := l.Body(status, msg)
	return fmt.Appendf(nil, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s",
		status, http.StatusText(status), len(b), b)
}

// conn rewrites net/http's own answers.
type conn struct {
	net.Conn
	l *Listener
}

func (c *conn) Write(p []byte) (int, error) {
	status, msg, ok := goAnswer(p)
	if !ok {
		return c.Conn.Write(p)
	}
	if _, err := c.Conn.Write(c.l.answer(status, "malformed HTTP request: "+msg)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// CloseWrite lets net/http send a 431 before it closes (closeWriteAndWait).
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// plainConn keeps a TCP or Unix connection's ReadFrom, which net/http
// uses to send files (sendfile, splice).
type plainConn struct{ conn }

func (c *plainConn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{c.Conn}, r)
}

// tlsConn gives net/http a TLS connection's state, after the handshake
// it would otherwise have made itself.
type tlsConn struct {
	conn
	tc     *tls.Conn
	once   sync.Once
	failed bool
}

func (c *tlsConn) ConnectionState() tls.ConnectionState {
	c.once.Do(c.handshake)
	return c.tc.ConnectionState()
}

func (c *tlsConn) handshake() {
	ctx, cancel := context.WithTimeout(context.Background(), TLSHandshakeTimeout)
	defer cancel()
	err := c.tc.HandshakeContext(ctx)
	if err == nil {
		return
	}
	c.failed = true
	var re tls.RecordHeaderError
	if errors.As(err, &re) && re.Conn != nil && looksLikeHTTP(re.RecordHeader) {
		re.Conn.Write(c.l.answer(http.StatusBadRequest, "client sent an HTTP request to an HTTPS server"))
		err = errors.New("client sent an HTTP request to an HTTPS server")
	}
	if c.l.Log != nil {
		c.l.Log.Printf("http: TLS handshake error from %s: %v", c.RemoteAddr(), err)
	}
}

// Read ends at once after a failed handshake, which was answered.
func (c *tlsConn) Read(p []byte) (int, error) {
	if c.once.Do(c.handshake); c.failed {
		return 0, io.EOF
	}
	return c.conn.Read(p)
}

// looksLikeHTTP reports whether a TLS record header is the start of an
// HTTP request (as net/http's tlsRecordHeaderLooksLikeHTTP).
func looksLikeHTTP(hdr [5]byte) bool {
	switch string(hdr[:]) {
	case "GET /", "HEAD ", "POST ", "PUT /", "OPTIO":
		return true
	}
	return false
}
