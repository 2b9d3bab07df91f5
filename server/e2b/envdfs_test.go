package e2b

import (
	"net/http"
	"strings"
	"testing"
)

// TestEnvdFilesystem drives envd's file routes (the filesystem service
// and /files) over the fake runtime's sandbox.FS: each answer in envd's
// shape, and a missing path a not_found.
func TestEnvdFilesystem(t *testing.T) {
	s := newFakeServer(t)
	id, token := s.create(t)
	envd := map[string]string{headerSandboxID: id, headerAccessToken: token}
	rpc := func(method, body string) map[string]any {
		t.Helper()
		status, out := s.call(t, "POST", "/filesystem.Filesystem/"+method, envd, body)
		if status != http.StatusOK {
			t.Fatalf("%s %s: %d %v", method, body, status, out)
		}
		return out
	}
	entry := func(out map[string]any) map[string]any {
		t.Helper()
		e, ok := out["entry"].(map[string]any)
		if !ok {
			t.Fatalf("no entry in %v", out)
		}
		return e
	}

	if e := entry(rpc("MakeDir", `{"path":"/tmp/d"}`)); e["type"] != "FILE_TYPE_DIRECTORY" || e["path"] != "/tmp/d" || e["name"] != "d" {
		t.Errorf("made dir: %v", e)
	}
	hdr := map[string]string{headerSandboxID: id, headerAccessToken: token}
	status, body := s.send(t, "POST", "/files?path=/tmp/d/f.txt", hdr, "application/octet-stream", []byte("hello"))
	if status != http.StatusOK || !strings.Contains(string(body), `"path":"/tmp/d/f.txt"`) {
		t.Fatalf("upload: %d %s", status, body)
	}
	if status, body := s.send(t, "GET", "/files?path=/tmp/d/f.txt", hdr, "", nil); status != http.StatusOK || string(body) != "hello" {
		t.Fatalf("download: %d %q", status, body)
	}
	if e := entry(rpc("Stat", `{"path":"/tmp/d/f.txt"}`)); e["type"] != "FILE_TYPE_FILE" || e["size"] != "5" || e["owner"] != "root" {
		t.Errorf("stat: %v", e)
	}
	if entries, _ := rpc("ListDir", `{"path":"/tmp/d","depth":1}`)["entries"].([]any); len(entries) != 1 {
		t.Errorf("list: %v", entries)
	}
	if e := entry(rpc("Move", `{"source":"/tmp/d/f.txt","destination":"/tmp/e.txt"}`)); e["path"] != "/tmp/e.txt" {
		t.Errorf("move: %v", e)
	}
	rpc("Remove", `{"path":"/tmp/d"}`)
	status, out := s.call(t, "POST", "/filesystem.Filesystem/Stat", envd, `{"path":"/tmp/d"}`)
	if msg, _ := out["message"].(string); status != http.StatusNotFound || out["code"] != codeNotFound || !strings.Contains(msg, "/tmp/d") {
		t.Errorf("stat of a removed dir: %d %v", status, out)
	}
	if status, body := s.send(t, "GET", "/files?path=/tmp/d/f.txt", hdr, "", nil); status != http.StatusNotFound {
		t.Errorf("download of a removed file: %d %s", status, body)
	}
}
