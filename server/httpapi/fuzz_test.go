package httpapi

import (
	"bytes"
	"errors"
	"net/http"
	"testing"

	"smolvm.dev/smolvm/api"
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
		``, `{`, `[]`, `null`, `"x"`, `{"a":1}`, `{} x`, "\xff", `{"name":"\u0000"}`,
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
