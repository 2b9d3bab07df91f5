package e2b

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"smolvm.dev/smolvm/api/e2bapi"
	"smolvm.dev/smolvm/internal/httpguard"
	"smolvm.dev/smolvm/internal/store"
	"smolvm.dev/smolvm/sandbox"
)

// call sends one request and returns the status and decoded JSON body.
func (s *server) call(t testing.TB, method, path string, hdr map[string]string, body string) (int, map[string]any) {
	t.Helper()
	status, b := s.send(t, method, path, hdr, "application/json", []byte(body))
	var out map[string]any
	json.Unmarshal(b, &out)
	return status, out
}

// send sends one request and returns the status and the body.
func (s *server) send(t testing.TB, method, path string, hdr map[string]string, contentType string, body []byte) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, s.URL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

var apiKey = map[string]string{"X-API-KEY": testKey}

// stream makes a server-streaming Connect call with one request message,
// and returns the status and the error of its end message.
func (s *server) stream(t *testing.T, method string, hdr map[string]string, msg string) (int, *rpcError) {
	t.Helper()
	status, b := s.send(t, "POST", "/"+method, hdr, "application/connect+json", append([]byte{0, 0, 0, 0, byte(len(msg))}, msg...))
	for len(b) >= 5 {
		n := int(b[1])<<24 | int(b[2])<<16 | int(b[3])<<8 | int(b[4])
		if len(b) < 5+n {
			break
		}
		if b[0]&flagEndStream != 0 {
			var end struct{ Error *rpcError }
			json.Unmarshal(b[5:5+n], &end)
			return status, end.Error
		}
		b = b[5+n:]
	}
	return status, nil
}

// create makes a sandbox through the API and returns its ID and envd token.
func (s *server) create(t *testing.T) (id, token string) {
	t.Helper()
	status, body := s.call(t, "POST", "/v2/sandboxes", apiKey, `{"templateID":"base","timeout":300}`)
	if status != http.StatusCreated {
		t.Fatalf("create: %d %v", status, body)
	}
	return body["sandboxID"].(string), body["envdAccessToken"].(string)
}

// wantError checks an error reply: its status, and that the message names
// what it is about.
func wantError(t *testing.T, what string, status int, body map[string]any, wantStatus int, mentions string) {
	t.Helper()
	msg, _ := body["message"].(string)
	if status != wantStatus || !strings.Contains(msg, mentions) {
		t.Errorf("%s: got %d %v, want %d mentioning %q", what, status, body, wantStatus, mentions)
	}
}

func TestBadInput(t *testing.T) {
	s := newFakeServer(t)
	id, token := s.create(t)
	envd := map[string]string{headerSandboxID: id, headerAccessToken: token}

	t.Run("api key", func(t *testing.T) {
		for _, hdr := range []map[string]string{nil, {"X-API-KEY": "wrong"}, {"X-API-KEY": testKey + "x"}} {
			status, body := s.call(t, "GET", "/v2/sandboxes", hdr, "")
			wantError(t, "list", status, body, http.StatusUnauthorized, "API key")
			if body["code"] != float64(401) {
				t.Errorf("error body %v lacks E2B's numeric code", body)
			}
		}
	})

	t.Run("bodies where none belongs", func(t *testing.T) {
		api, envdRoutes := s.h.Routes()
		n := 0
		for _, pattern := range append(api, envdRoutes...) {
			if !httpguard.Bodiless(pattern) {
				continue
			}
			n++
			method, path, _ := strings.Cut(pattern, " ")
			path = strings.NewReplacer("{id}", id, "{template}", "nosuch", "{volume}", "nosuch").Replace(path)
			hdr := map[string]string{"X-API-KEY": testKey}
			if slices.Contains(envdRoutes, pattern) {
				hdr = envd
			}
			status, body := s.call(t, method, path, hdr, "{}")
			wantError(t, pattern, status, body, http.StatusBadRequest, pattern+" takes no request body")
		}
		if n < 5 {
			t.Errorf("only %d routes take no body", n)
		}
	})

	t.Run("auth before routing", func(t *testing.T) {
		for _, c := range []struct{ method, path string }{{"GET", "/nope"}, {"PATCH", "/sandboxes"}, {"GET", "/sandboxes/../x"}, {"POST", "/sandboxes/%2e%2e"}} {
			status, body := s.call(t, c.method, c.path, nil, "")
			wantError(t, c.method+" "+c.path+" without a key", status, body, http.StatusUnauthorized, "API key")
		}
		status, body := s.call(t, "PATCH", "/sandboxes", apiKey, "")
		wantError(t, "wrong method", status, body, http.StatusMethodNotAllowed, "method not allowed")
		if body["code"] != float64(405) {
			t.Errorf("405 body %v lacks E2B's numeric code", body)
		}
		status, body = s.call(t, "GET", "/nope", apiKey, "")
		wantError(t, "unknown path", status, body, http.StatusNotFound, "no such route")
		status, body = s.call(t, "GET", "/sandboxes/..%2F..%2Fx", apiKey, "")
		wantError(t, "traversal in {id}", status, body, http.StatusBadRequest, "sandbox name")
		status, body = s.call(t, "POST", "/v2/sandboxes", apiKey, `{"templateID":"`+strings.Repeat("x", maxRequest)+`"}`)
		wantError(t, "body over the limit", status, body, http.StatusRequestEntityTooLarge, "limit")
	})

	t.Run("malformed create", func(t *testing.T) {
		for _, c := range []struct{ body, field string }{
			{`{"templateID": 5}`, "templateID"},
			{`{"templateID": "base", "timeout": "soon"}`, "timeout"},
			{`{"templateID": "base", "metadata": ["x"]}`, "metadata"},
			{`{"timeout": 10}`, "templateID"},
			{`{"templateID": "base", "timeout": -1}`, "timeout"},
			{`{"templateID": "no-such-image"}`, "templateID"},
			{`{"templateID": "base", "envVars": {"A=B": "c"}}`, "envVars"},
			{`{"templateID":`, "malformed"},
			{`{"templateID": "base", "allow_internet_access": "yes"}`, "allow_internet_access"},
			{`{"templateID": "base", "autoPause": true, "autoResume": {"enabled": true}}`, "autoResume"},
			{`{"templateID": "base", "autoPause": true, "autoPauseMemory": false}`, "autoPauseMemory"},
			{`{"templateID": "base", "network": {"denyOut": ["0.0.0.0/0"]}}`, "network.denyOut"},
			{`{"templateID": "base", "network": {"allowOut": ["a.com"]}, "allow_internet_access": true}`, "network.allowOut"},
		} {
			status, body := s.call(t, "POST", "/v2/sandboxes", apiKey, c.body)
			wantError(t, c.body, status, body, http.StatusBadRequest, c.field)
		}
	})

	t.Run("malformed lifecycle", func(t *testing.T) {
		status, body := s.call(t, "POST", "/sandboxes/"+id+"/timeout", apiKey, `{"timeout": "x"}`)
		wantError(t, "timeout", status, body, http.StatusBadRequest, "timeout")
		status, body = s.call(t, "POST", "/sandboxes/"+id+"/timeout", apiKey, `{}`)
		wantError(t, "timeout", status, body, http.StatusBadRequest, "timeout")
		status, body = s.call(t, "POST", "/sandboxes/"+id+"/fork", apiKey, `{"count": 0}`)
		wantError(t, "fork", status, body, http.StatusBadRequest, "count")
		status, body = s.call(t, "PUT", "/sandboxes/"+id+"/network", apiKey, `{"allowOut": "pypi.org"}`)
		wantError(t, "network", status, body, http.StatusBadRequest, "allowOut")
		status, body = s.call(t, "PUT", "/sandboxes/"+id+"/network", apiKey, `{"allowOut": ["pypi.org"]}`)
		wantError(t, "network of a sandbox made without", status, body, http.StatusConflict, "net none")
		status, body = s.call(t, "GET", "/v2/sandboxes?state=dead", apiKey, "")
		wantError(t, "list", status, body, http.StatusBadRequest, "state")
		status, body = s.call(t, "POST", "/sandboxes/"+id+"/snapshots", apiKey, `{"name": "has space"}`)
		wantError(t, "snapshot", status, body, http.StatusBadRequest, "name")
		status, body = s.call(t, "DELETE", "/templates/sha256:0000", apiKey, "")
		wantError(t, "delete snapshot", status, body, http.StatusNotFound, "not found")
	})

	t.Run("unknown sandbox", func(t *testing.T) {
		status, body := s.call(t, "GET", "/sandboxes/000000000000", apiKey, "")
		wantError(t, "get", status, body, http.StatusNotFound, "never existed")
		status, body = s.call(t, "POST", "/v2/sandboxes/000000000000/connect", apiKey, `{}`)
		wantError(t, "connect", status, body, http.StatusNotFound, "never existed")

		gone, goneToken := s.create(t)
		if status, body := s.call(t, "DELETE", "/sandboxes/"+gone, apiKey, ""); status != http.StatusNoContent {
			t.Fatalf("kill: %d %v", status, body)
		}
		status, body = s.call(t, "GET", "/sandboxes/"+gone, apiKey, "")
		wantError(t, "get removed", status, body, http.StatusNotFound, "removed at")

		// envd speaks Connect: the code is a string the SDK maps. Without
		// the sandbox's access token the answer is 401, whatever the
		// sandbox (TestSandboxAccess). With it, E2B's proxy answers
		// for a sandbox it cannot find: unreachable.
		for _, hdr := range []map[string]string{{headerSandboxID: "000000000000", headerAccessToken: "x"}, {headerSandboxID: "000000000000"}, {headerSandboxID: gone, headerAccessToken: "x"}} {
			status, body = s.call(t, "POST", "/filesystem.Filesystem/Stat", hdr, `{"path":"/"}`)
			if status != http.StatusUnauthorized || body["code"] != codeUnauthenticated {
				t.Errorf("envd with %v: %d %v", hdr, status, body)
			}
		}
		status, body = s.call(t, "POST", "/filesystem.Filesystem/Stat", map[string]string{headerSandboxID: gone, headerAccessToken: goneToken}, `{"path":"/"}`)
		if status != http.StatusServiceUnavailable || body["code"] != codeUnavailable || !strings.Contains(body["message"].(string), "removed at") {
			t.Errorf("envd of a removed sandbox: %d %v", status, body)
		}
		status, body = s.call(t, "GET", "/health", map[string]string{headerSandboxID: gone, headerAccessToken: goneToken}, "")
		wantError(t, "health of a removed sandbox", status, body, http.StatusBadGateway, "removed at")
	})

	t.Run("envd token", func(t *testing.T) {
		for _, tok := range []string{"", "wrong", token + "0"} {
			hdr := map[string]string{headerSandboxID: id, headerAccessToken: tok}
			status, body := s.call(t, "POST", "/filesystem.Filesystem/Stat", hdr, `{"path":"/"}`)
			if status != http.StatusUnauthorized || body["code"] != codeUnauthenticated {
				t.Errorf("token %q: %d %v", tok, status, body)
			}
		}
		// The API key opens envd as it opens ports (it opens the sandbox
		// through the API anyway): a cluster gateway forwards envd with
		// its nodes' key. A wrong key refuses even a right token.
		status, _ := s.call(t, "GET", "/files?path=/etc/hostname", map[string]string{headerSandboxID: id, "X-API-KEY": testKey}, "")
		if status != http.StatusOK {
			t.Errorf("API key at envd: %d", status)
		}
		for _, hdr := range []map[string]string{{"X-API-KEY": "wrong"}, {"X-API-KEY": "wrong", headerAccessToken: token}} {
			hdr[headerSandboxID] = id
			if status, _ := s.call(t, "GET", "/files?path=/etc/hostname", hdr, ""); status != http.StatusUnauthorized {
				t.Errorf("%v at envd: %d", hdr, status)
			}
		}
	})

	t.Run("path escapes", func(t *testing.T) {
		for _, c := range []struct{ method, body, field string }{
			{"Stat", `{"path":"../../etc/passwd"}`, "path"},
			{"ListDir", `{"path":"/tmp/../.."}`, "path"},
			{"Remove", `{"path":"/work/.."}`, "path"},
			{"Move", `{"source":"/tmp/a","destination":"/tmp/../../x"}`, "destination"},
			{"MakeDir", `{"path":""}`, "path"},
		} {
			status, body := s.call(t, "POST", "/filesystem.Filesystem/"+c.method, envd, c.body)
			if status != http.StatusBadRequest || body["code"] != codeInvalidArgument || !strings.Contains(body["message"].(string), c.field) {
				t.Errorf("%s %s: %d %v", c.method, c.body, status, body)
			}
		}
		status, body := s.call(t, "GET", "/files?path=../../etc/passwd", envd, "")
		wantError(t, "read", status, body, http.StatusBadRequest, "path")
	})

	t.Run("malformed envd", func(t *testing.T) {
		status, body := s.call(t, "POST", "/filesystem.Filesystem/Stat", envd, `{"path": 3}`)
		if status != http.StatusBadRequest || !strings.Contains(body["message"].(string), `"path"`) {
			t.Errorf("stat with a numeric path: %d %v", status, body)
		}
		status, body = s.call(t, "POST", "/process.Process/SendSignal", envd, `{"process":{"pid":1},"signal":"SIGNAL_SIGHUP"}`)
		if status != http.StatusBadRequest {
			t.Errorf("unknown signal: %d %v", status, body)
		}
		status, body = s.call(t, "POST", "/process.Process/SendInput", envd, `{"process":{"pid":4242},"input":{"stdin":"eA=="}}`)
		if status != http.StatusNotFound || body["code"] != codeNotFound {
			t.Errorf("input to an unknown pid: %d %v", status, body)
		}
		// What connect-go answers for a procedure it does not serve.
		status, body = s.call(t, "POST", "/process.Process/StreamInput", envd, `{}`)
		if status != http.StatusNotFound || body["code"] != codeUnimplemented {
			t.Errorf("an unserved method: %d %v", status, body)
		}
		status, body = s.call(t, "GET", "/process.Process/List", envd, "")
		if status != http.StatusMethodNotAllowed || body["code"] != codeUnimplemented {
			t.Errorf("a wrong HTTP method: %d %v", status, body)
		}
	})

	t.Run("streams end with their errors", func(t *testing.T) {
		// A Connect client reads no body from a stream answered with
		// anything but 200: errors travel in the end message.
		for _, c := range []struct{ method, body, code, mentions string }{
			{"filesystem.Filesystem/WatchDir", `{"path":"/no/such/dir","recursive":true}`, codeNotFound, "no such file"},
			{"filesystem.Filesystem/WatchDir", `{"path":"/etc/passwd"}`, codeInvalidArgument, "not a directory"},
			{"filesystem.Filesystem/WatchDir", `{"path":"/tmp/../.."}`, codeInvalidArgument, "path"},
			{"process.Process/Connect", `{"process":{"pid":4242}}`, codeNotFound, "4242"},
			{"process.Process/Start", `{"process":{}}`, codeInvalidArgument, "process.cmd"},
			{"process.Process/StreamInput", `{}`, codeUnimplemented, "does not serve"},
		} {
			status, end := s.stream(t, c.method, envd, c.body)
			if status != http.StatusOK || end == nil || end.Code != c.code || !strings.Contains(end.Message, c.mentions) {
				t.Errorf("%s %s: %d, end %+v; want 200 ending with %s mentioning %q", c.method, c.body, status, end, c.code, c.mentions)
			}
		}
	})

	t.Run("polled watchers", func(t *testing.T) {
		// E2B's Python SDK watches with these unary calls.
		status, body := s.call(t, "POST", "/filesystem.Filesystem/CreateWatcher", envd, `{"path":"/tmp","recursive":true}`)
		id, _ := body["watcherId"].(string)
		if status != http.StatusOK || id == "" {
			t.Fatalf("create watcher: %d %v", status, body)
		}
		if status, body := s.call(t, "POST", "/filesystem.Filesystem/MakeDir", envd, `{"path":"/tmp/polled/sub"}`); status != http.StatusOK {
			t.Fatalf("make dir: %d %v", status, body)
		}
		watcher := `{"watcherId":"` + id + `"}`
		var got []any
		for deadline := time.Now().Add(5 * time.Second); len(got) < 2 && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			status, body = s.call(t, "POST", "/filesystem.Filesystem/GetWatcherEvents", envd, watcher)
			if status != http.StatusOK {
				t.Fatalf("get events: %d %v", status, body)
			}
			evs, _ := body["events"].([]any)
			got = append(got, evs...)
		}
		want := []any{
			map[string]any{"name": "polled", "type": "EVENT_TYPE_CREATE"},
			map[string]any{"name": "polled/sub", "type": "EVENT_TYPE_CREATE"},
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("events %v, want %v", got, want)
		}
		if status, body := s.call(t, "POST", "/filesystem.Filesystem/RemoveWatcher", envd, watcher); status != http.StatusOK {
			t.Fatalf("remove watcher: %d %v", status, body)
		}
		status, body = s.call(t, "POST", "/filesystem.Filesystem/GetWatcherEvents", envd, watcher)
		if status != http.StatusNotFound || body["code"] != codeNotFound {
			t.Errorf("events of a removed watcher: %d %v", status, body)
		}
		status, body = s.call(t, "POST", "/filesystem.Filesystem/CreateWatcher", envd, `{"path":"/no/such/dir"}`)
		if status != http.StatusNotFound || body["code"] != codeNotFound {
			t.Errorf("a watcher of a missing directory: %d %v", status, body)
		}
	})

	t.Run("unserved E2B APIs", func(t *testing.T) {
		for _, p := range []string{"/secrets", "/templates/aliases/x", "/v3/templates", "/templates/base/builds/b1/status"} {
			status, body := s.call(t, "GET", p, apiKey, "")
			wantError(t, p, status, body, http.StatusNotImplemented, "smolvm does not serve E2B's")
		}
		// The volume content API takes a volume's token: an API key, none
		// or a wrong one is a 401 that tells nothing of the volume.
		for _, hdr := range []map[string]string{apiKey, nil, {"Authorization": "Bearer nope"}} {
			status, body := s.call(t, "GET", "/volumecontent/v/file?path=/f", hdr, "")
			wantError(t, "/volumecontent/v/file", status, body, http.StatusUnauthorized, "missing or invalid volume token")
		}
		// A served route's bad name is that route's answer, not a 501.
		status, body := s.call(t, "DELETE", "/templates/%2F", apiKey, "")
		if status >= 500 {
			t.Errorf("DELETE /templates/%%2F: %d %v", status, body)
		}
	})

	t.Run("oversized upload", func(t *testing.T) {
		req, _ := http.NewRequest("POST", s.URL+"/files?path=/tmp/big/file", bytes.NewReader(make([]byte, 1<<20+1)))
		req.Header.Set("Content-Type", "application/octet-stream")
		req.Header.Set(headerSandboxID, id)
		req.Header.Set(headerAccessToken, token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Fatalf("upload over the limit: %d", resp.StatusCode)
		}
		// Nothing half-written: neither the file nor a temporary.
		status, body := s.call(t, "POST", "/filesystem.Filesystem/ListDir", envd, `{"path":"/tmp/big"}`)
		if status != http.StatusOK || len(body["entries"].([]any)) != 0 {
			t.Errorf("after a refused upload /tmp/big holds %d %v", status, body)
		}
	})
}

// TestDecodersRefuseDuplicateKeys: a key given twice, at any depth or in
// another case for a field, is refused by both decoders with its name
// (encoding/json would take the last).
func TestDecodersRefuseDuplicateKeys(t *testing.T) {
	for _, c := range []struct{ body, key string }{
		{`{"templateID":"a","templateID":"b"}`, "templateID"},
		{`{"templateID":"a","TemplateID":"b"}`, "TemplateID"},
		{`{"templateID":"a","metadata":{"k":"1","k":"2"}}`, "metadata.k"},
	} {
		r := httptest.NewRequest("POST", "/", strings.NewReader(c.body))
		if err := decodeBody(r, &e2bapi.CreateRequest{}); err == nil || !strings.Contains(err.Error(), `"`+c.key+`" given twice`) {
			t.Errorf("API %s: %v, want %q refused", c.body, err, c.key)
		}
	}
	for _, c := range []struct{ body, key string }{
		{`{"process":{"cmd":"a","cmd":"b"}}`, "process.cmd"},
		{`{"process":{"cmd":"a","envs":{"A":"1","A":"2"}}}`, "process.envs.A"},
		{`{"stdin":true,"Stdin":false}`, "Stdin"},
	} {
		rerr := decodeMessage([]byte(c.body), &startRequest{})
		if rerr == nil || rerr.Code != codeInvalidArgument || !strings.Contains(rerr.Message, `"`+c.key+`" given twice`) {
			t.Errorf("envd %s: %v, want %q refused", c.body, rerr, c.key)
		}
	}
	if rerr := decodeMessage([]byte(`{"process":{"cmd":"a","envs":{"A":"1","a":"2"}}}`), &startRequest{}); rerr != nil {
		t.Errorf("keys of a map that differ in case: %v", rerr)
	}
}

// FuzzDecoders feeds arbitrary bodies to every request decoder: they must
// fail with an error, never panic.
func FuzzDecoders(f *testing.F) {
	for _, s := range []string{`{"templateID":"base","timeout":5,"metadata":{"a":"b"}}`, `{"process":{"cmd":"/bin/bash","args":["-c","x"],"envs":{"A":"1"}},"stdin":true}`,
		`{"process":{"pid":1},"signal":"SIGNAL_SIGKILL"}`, `{"path":"/a/../b","depth":3}`, `{"count":2}`, `[`, `null`, `{"templateID":"a","TemplateID":"b"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, v := range []any{&e2bapi.CreateRequest{}, &e2bapi.ForkRequest{}, &timeoutRequest{}} {
			r := httptest.NewRequest("POST", "/", bytes.NewReader(b))
			decodeBody(r, v)
		}
		for _, v := range []any{&startRequest{}, &sendInputRequest{}, &sendSignalRequest{}, &listDirRequest{}, &moveRequest{}, &updateRequest{}} {
			decodeMessage(b, v)
		}
		env := append([]byte{0, 0, 0, 0, byte(len(b))}, b...)
		readEnveloped(httptest.NewRequest("POST", "/", bytes.NewReader(env)), &startRequest{})
		checkPath("path", string(b))
	})
}

// TestStateSurvives checks that E2B's own state (metadata, envd tokens,
// the template create named) outlives the handler, as it must a server restart, and follows the
// sandboxes when they go by other paths than the E2B API.
func TestStateSurvives(t *testing.T) {
	s := newFakeServer(t)
	status, body := s.call(t, "POST", "/v2/sandboxes", apiKey, `{"templateID":"base","metadata":{"owner":"ci"}}`)
	if status != http.StatusCreated {
		t.Fatalf("create: %d %v", status, body)
	}
	id, token := body["sandboxID"].(string), body["envdAccessToken"].(string)

	// A second handler over the same store, its state opened again: what
	// a restarted server is.
	o := s.o
	o.State = state(t, s.o.Manager.(interface{ Store() *store.Store }).Store())
	again := serve(t, o)
	status, body = again.call(t, "GET", "/sandboxes/"+id, apiKey, "")
	// "base" is the builtin image, "host": the template is what create named.
	if md, _ := body["metadata"].(map[string]any); status != http.StatusOK || md["owner"] != "ci" || body["templateID"] != "base" {
		t.Fatalf("after a restart: %d %v", status, body)
	}
	status, body = again.call(t, "POST", "/filesystem.Filesystem/Stat", map[string]string{headerSandboxID: id, headerAccessToken: token}, `{"path":"/"}`)
	if status != http.StatusOK {
		t.Fatalf("the envd token after a restart: %d %v", status, body)
	}

	// Removed behind E2B's back (smolvm rm): the next list forgets it.
	if err := s.o.Manager.Remove(context.Background(), id, true); err != nil {
		t.Fatal(err)
	}
	if status, body := s.call(t, "GET", "/v2/sandboxes", apiKey, ""); status != http.StatusOK {
		t.Fatalf("list: %d %v", status, body)
	}
	if infos, err := s.o.State.AllInfo(context.Background()); err != nil || infos[id].Metadata != nil {
		t.Fatalf("E2B state of a removed sandbox: %+v, %v", infos[id], err)
	}
}

// TestTemplateFromPool checks that a template naming a warm pool takes a
// started sandbox from it.
func TestTemplateFromPool(t *testing.T) {
	s := newServer(t)
	ctx := context.Background()
	m := s.env.Manager
	if _, err := m.CreatePool(ctx, sandbox.PoolOptions{Name: "warm", Size: 1}); err != nil {
		t.Fatal(err)
	}
	if n, err := m.FillPool(ctx, "warm"); err != nil || n != 1 {
		t.Fatalf("fill: %d %v", n, err)
	}
	status, body := s.call(t, "POST", "/v2/sandboxes", apiKey, `{"templateID":"warm","metadata":{"k":"v"},"envVars":{"FROM":"pool"}}`)
	if status != http.StatusCreated || body["templateID"] != "warm" {
		t.Fatalf("create from the pool: %d %v", status, body)
	}
	p, err := m.Pool(ctx, "warm")
	if err != nil || p.Ready != 0 {
		t.Fatalf("pool after the create: %+v %v (want its one sandbox taken)", p, err)
	}
	id := body["sandboxID"].(string)
	var out bytes.Buffer
	if _, err := m.Exec(ctx, id, sandbox.Process{Args: []string{"sh", "-c", "echo $FROM"}}, sandbox.Stdio{Stdout: &out}); err != nil || out.String() != "pool\n" {
		t.Fatalf("envVars in the pooled sandbox: %q %v", out.String(), err)
	}
}
