package client

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/sandbox"
)

func TestNewHosts(t *testing.T) {
	for _, h := range []string{"unix:///run/smolvm.sock", "http://127.0.0.1:7070", "https://box.example:7443/"} {
		if _, err := New(h, ""); err != nil {
			t.Errorf("%s: %v", h, err)
		}
	}
	for _, h := range []string{"", "unix://", "127.0.0.1:7070", "ftp://x", "http://"} {
		if _, err := New(h, ""); err == nil {
			t.Errorf("%q: accepted", h)
		}
	}
}

// TestTypedErrors: each error code the server sends matches its sentinel
// with errors.Is, and only that one, and keeps the server's message.
func TestTypedErrors(t *testing.T) {
	for code, want := range map[string]error{
		"not_found": ErrNotFound, "expired": ErrExpired, "unauthorized": ErrUnauthorized, "timeout": ErrTimeout,
		"busy": ErrBusy, "too_large": ErrTooLarge, "denied": errdefs.ErrDenied, "invalid": sandbox.ErrInvalid,
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer tok" {
				t.Errorf("request without the token")
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusTeapot)
			w.Write([]byte(`{"code":"` + code + `","error":"the message"}`))
		}))
		c, _ := New(srv.URL, "tok")
		_, err := c.Get(t.Context(), "x")
		srv.Close()
		if !errors.Is(err, want) || err.Error() != "the message" {
			t.Errorf("%s: %v does not match %v", code, err, want)
		}
		for _, other := range []error{ErrNotFound, ErrExpired, ErrUnauthorized, ErrTimeout} {
			if other != want && errors.Is(err, other) {
				t.Errorf("%s: also matches %v", code, other)
			}
		}
	}
}
