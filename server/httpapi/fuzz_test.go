package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"unicode/utf8"

	"smolvm.dev/smolvm/api"

	"smolvm.dev/smolvm/internal/httpguard"
	"smolvm.dev/smolvm/internal/names"
)

// FuzzDecode feeds arbitrary bodies to every request decoder and the
// checks behind them: each must either accept the body or answer a 400
// JSON error, and never panic. The seeds run in every `go test`.
func FuzzDecode(f *testing.F) {
	for _, seed := range []string{
		`{"name":"box","image":"host","cmd":["sh","-c","true"],"env":["A=1"],"cpus":1,"memory":"512m","disk":1073741824,"timeout":"15m","idle_timeout":60,"start":false}`,
		`{"args":["sh","-c","echo hi"],"env":["K=V"],"workdir":"/tmp","timeout":"5s","stdin":"data"}`,
		`{"timeout":0}`, `{"timeout":"1h"}`, `{"n":3,"name_prefix":"f"}`, `{"name":"snap","stop":true}`,
		`{"memory":1e300}`, `{"timeout":1e300}`, `{"memory":-1}`, `{"memory":1.5}`,
		`{"env":["=x"]}`, `{"args":[""]}`, `{"resize":{"rows":1,"cols":2}}`,
		``, `{`, `[]`, `null`, `"x"`, `{"a":1}`, `{} x`, "\xff", `{"name":"\u0000"}`, `{"name":"a","Name":"b"}`,
	} {
		f.Add([]byte(seed))
	}
	s := New(Options{})
	f.Fuzz(func(t *testing.T, body []byte) {
		check := func(what string, err error) {
			if err == nil {
				return
			}
			var ae *api.Error
			if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || ae.Code != api.CodeInvalid || ae.Message == "" {
				t.Fatalf("%s: %q: %v is not a 400 invalid", what, body, err)
			}
		}
		var cr api.CreateRequest
		if err := decode(bytes.NewReader(body), &cr); err != nil {
			check("create", err)
		} else {
			_, err := s.createOptions(&cr)
			check("create options", err)
		}
		var er api.ExecRequest
		if err := decode(bytes.NewReader(body), &er); err != nil {
			check("exec", err)
		} else {
			_, err := process(&er)
			check("exec process", err)
		}
		for _, v := range []any{&api.TimeoutRequest{}, &api.StopRequest{}, &api.ForkRequest{}, &api.CheckpointRequest{}, &api.RestoreRequest{}, &api.WSControl{}} {
			check("decode", decode(bytes.NewReader(body), v))
		}
	})
}

// FuzzRouteParams puts arbitrary values in every path parameter of every
// route, raw and escaped, and sends the request through the server's own
// checks (token, path, parameters, body) to a stand-in for the handler. A
// value that reaches the handler must be a valid name of its kind, and
// safe as a file name under a root; any other ends in a JSON 400 (or 404,
// 405 where the value changed the route), never a 5xx or a panic.
func FuzzRouteParams(f *testing.F) {
	for _, seed := range []string{"box", "..", "../x", "..%2F..%2Fx", "%2e%2e", "%00", "%ff", "", "a%2Fb",
		strings.Repeat("a", 300), "sha256:00ab", "pool-../../etc", "%", "a b", "\xff", "é"} {
		f.Add(seed)
	}
	s := New(Options{Token: "t"})
	root := f.TempDir()
	mux := http.NewServeMux()
	var patterns []string
	for _, p := range s.Routes() {
		if strings.Contains(p, " ") { // mounts have none of their own
			patterns = append(patterns, p)
		}
	}
	for _, p := range patterns {
		mux.Handle(p, s.guard(p, false, body{limit: maxBody}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			for _, wc := range httpguard.Wildcards(p) {
				v := r.PathValue(wc)
				k, _ := httpguard.KindOf(wc)
				if err := names.Check(k, v); err != nil {
					panic(fmt.Sprintf("%s: {%s} = %q reached the handler: %v", p, wc, v, err))
				}
				if got, err := names.Join(root, "locks", "pool-"+v+".lock"); err != nil || filepath.Dir(got) != filepath.Join(root, "locks") {
					panic(fmt.Sprintf("%s: {%s} = %q joins to %s, %v", p, wc, v, got, err))
				}
			}
			w.WriteHeader(http.StatusNoContent)
		})))
	}
	s.mux = mux
	f.Fuzz(func(t *testing.T, v string) {
		for _, p := range patterns {
			if !strings.Contains(p, "{") {
				continue
			}
			method, tmpl, _ := strings.Cut(p, " ")
			for _, val := range []string{v, url.PathEscape(v)} {
				path := tmpl
				for _, wc := range httpguard.Wildcards(p) {
					path = strings.ReplaceAll(path, "{"+wc+"}", val)
				}
				r, err := http.NewRequest(method, "http://smolvm"+path, nil)
				if err != nil {
					continue // not a URL a client could send
				}
				r.Header.Set("Authorization", "Bearer t")
				w := httptest.NewRecorder()
				s.ServeHTTP(w, r)
				switch w.Code {
				case http.StatusNoContent:
				case http.StatusBadRequest, http.StatusNotFound, http.StatusMethodNotAllowed:
					var e api.Error
					if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Message == "" || !utf8.ValidString(e.Message) {
						t.Fatalf("%s %q: %d with body %q", method, path, w.Code, w.Body)
					}
				default:
					t.Fatalf("%s %q: %d %s", method, path, w.Code, w.Body)
				}
			}
		}
	})
}
