package testserve

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// Answer is what a client trickling its body got back.
type Answer struct {
	Status int
	Header http.Header
	Body   []byte
	Close  bool          // Connection: close
	After  time.Duration // from the request's start to the answer's head
}

// Trickle sends a request to addr (HOST:PORT) on a connection of its
// own, its head at once and then its body (of length n, or chunked for
// -1) one byte per every, reading the answer meanwhile, as curl does. It
// returns the answer, or an error if none came within limit or before
// stop closed (nil: never).
func Trickle(addr, method, path string, hdr http.Header, n int, every, limit time.Duration, stop <-chan struct{}) (Answer, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return Answer{}, err
	}
	defer c.Close()
	finished := make(chan struct{})
	defer close(finished)
	go func() {
		select {
		case <-stop:
			c.Close()
		case <-finished:
		}
	}()
	start := time.Now()
	c.SetDeadline(start.Add(limit))
	head := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: smolvm\r\nContent-Type: application/json\r\n", method, path)
	for k, vs := range hdr {
		for _, v := range vs {
			head += k + ": " + v + "\r\n"
		}
	}
	if n >= 0 {
		head += fmt.Sprintf("Content-Length: %d\r\n\r\n", n)
	} else {
		head += "Transfer-Encoding: chunked\r\n\r\n"
	}
	if _, err := io.WriteString(c, head); err != nil {
		return Answer{}, err
	}
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for i := 0; n < 0 || i < n; i++ {
			b := "x"
			if n < 0 {
				b = "1\r\nx\r\n"
			}
			if _, err := io.WriteString(c, b); err != nil {
				return
			}
			select {
			case <-finished:
				return
			case <-t.C:
			}
		}
	}()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return Answer{}, fmt.Errorf("no answer after %v: %w", time.Since(start), err)
	}
	defer resp.Body.Close()
	a := Answer{Status: resp.StatusCode, Header: resp.Header, Close: resp.Close, After: time.Since(start)}
	a.Body, _ = io.ReadAll(resp.Body)
	return a, nil
}
