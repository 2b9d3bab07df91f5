package e2b

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"smolvm.dev/smolvm/api/e2bapi"
	"smolvm.dev/smolvm/sandbox"
)

// runCell runs code in sandbox id's default code interpreter context
// through the handler's port route, as @e2b/code-interpreter does, and
// returns the main result's text and the error's name ("" for none). It
// fails t if the kernel does not answer.
func (s *server) runCell(t testing.TB, id, code string) (text, errName string) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"code": code})
	status, out := s.send(t, "POST", "/execute", map[string]string{headerSandboxID: id, headerSandboxPort: strconv.Itoa(kernelPort), "X-API-KEY": testKey}, "application/json", body)
	if status != http.StatusOK {
		t.Fatalf("sandbox %s: runCode(%q): %d %s", id, code, status, out)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var msg struct{ Type, Text, Name string }
		if err := json.Unmarshal(sc.Bytes(), &msg); err != nil {
			t.Fatalf("sandbox %s: runCode(%q): message %q: %v", id, code, sc.Bytes(), err)
		}
		switch msg.Type {
		case "result":
			text = msg.Text
		case "error":
			errName = msg.Name
		}
	}
	return text, errName
}

// forkOne forks sandbox id once through the E2B API and returns the copy.
func (s *server) forkOne(t testing.TB, id string) string {
	t.Helper()
	status, raw := s.send(t, "POST", "/sandboxes/"+id+"/fork", apiKey, "application/json", []byte(`{"count":1}`))
	var forks []struct {
		Sandbox struct {
			SandboxID string `json:"sandboxID"`
		} `json:"sandbox"`
	}
	if err := json.Unmarshal(raw, &forks); status != http.StatusCreated || err != nil || len(forks) != 1 || forks[0].Sandbox.SandboxID == "" {
		t.Fatalf("fork %s: %d %s (%v)", id, status, raw, err)
	}
	return forks[0].Sandbox.SandboxID
}

// TestCodeInterpreterTemplate checks that every sandbox of the code
// interpreter's template runs the kernel, however it is made: a cold
// create, one from a warm pool of the template's name, a restore of a
// checkpoint (the interpreter's state with it), a fork, and a restore of a
// checkpoint taken while the kernel was down (started again, fresh).
func TestCodeInterpreterTemplate(t *testing.T) {
	s := newServer(t)
	ctx := context.Background()
	m := s.env.Manager
	create := func(what, template string) string {
		t.Helper()
		status, body := s.call(t, "POST", "/v2/sandboxes", apiKey, `{"templateID":"`+template+`","timeout":300}`)
		if status != http.StatusCreated {
			t.Fatalf("%s: create %s: %d %v", what, template, status, body)
		}
		return body["sandboxID"].(string)
	}
	snapshot := func(id, name string) {
		t.Helper()
		if status, body := s.call(t, "POST", "/sandboxes/"+id+"/snapshots", apiKey, `{"name":"`+name+`"}`); status != http.StatusCreated {
			t.Fatalf("snapshot %s of %s: %d %v", name, id, status, body)
		}
	}

	cold := create("cold", e2bapi.CodeInterpreterTemplate)
	if text, e := s.runCell(t, cold, "state = 'set before the checkpoint'\nstate"); text != "set before the checkpoint" || e != "" {
		t.Fatalf("cold create: %q %q", text, e)
	}

	snapshot(cold, "ci-live")
	restored := create("restore", "ci-live")
	if text, e := s.runCell(t, restored, "state"); text != "set before the checkpoint" || e != "" {
		t.Fatalf("restored from a checkpoint: %q %q; want the interpreter's state", text, e)
	}

	forked := s.forkOne(t, cold)
	if text, e := s.runCell(t, forked, "state"); text != "set before the checkpoint" || e != "" {
		t.Fatalf("fork: %q %q", text, e)
	}

	// The kernel killed, then a checkpoint: its restore starts it again.
	if exit, err := m.Exec(ctx, cold, sandbox.Process{Args: []string{"pkill", "-f", kernelPath}}, sandbox.Stdio{}); err != nil || exit.Code != 0 {
		t.Fatalf("pkill the kernel: %+v %v", exit, err)
	}
	snapshot(cold, "ci-down")
	again := create("restore of a kernel that was down", "ci-down")
	if text, e := s.runCell(t, again, "state"); text != "" || e != "NameError" {
		t.Fatalf("restored with the kernel down: %q %q; want a fresh kernel (NameError)", text, e)
	}

	if _, err := m.CreatePool(ctx, sandbox.PoolOptions{Name: e2bapi.CodeInterpreterTemplate, Size: 1}); err != nil {
		t.Fatal(err)
	}
	if n, err := m.FillPool(ctx, e2bapi.CodeInterpreterTemplate); err != nil || n != 1 {
		t.Fatalf("fill: %d %v", n, err)
	}
	pooled := create("pool", e2bapi.CodeInterpreterTemplate)
	if p, err := m.Pool(ctx, e2bapi.CodeInterpreterTemplate); err != nil || p.Ready != 0 {
		t.Fatalf("pool after the create: %+v %v (want its one sandbox taken)", p, err)
	}
	if text, e := s.runCell(t, pooled, "1 + 1"); text != "2" || e != "" {
		t.Fatalf("from a warm pool: %q %q", text, e)
	}
}

// TestCodeInterpreterAnyTemplate checks that a sandbox of a template other
// than the code interpreter's gets the kernel at its first request to the
// kernel's port: started once however many requests find it down, again
// after it was killed, and refused with E2B's error shape where the image
// has no python3.
func TestCodeInterpreterAnyTemplate(t *testing.T) {
	s := newServer(t)
	ctx := context.Background()
	m := s.env.Manager
	create := func(body string) string {
		t.Helper()
		status, out := s.call(t, "POST", "/v2/sandboxes", apiKey, body)
		if status != http.StatusCreated {
			t.Fatalf("create %s: %d %v", body, status, out)
		}
		return out["sandboxID"].(string)
	}
	servers := func(id string) string {
		t.Helper()
		var out bytes.Buffer
		// The server's command line, not its workers' (kernel.py --worker).
		exit, err := m.Exec(ctx, id, sandbox.Process{Args: []string{"pgrep", "-fc", kernelPath + " " + strconv.Itoa(kernelPort)}}, sandbox.Stdio{Stdout: &out})
		if err != nil {
			t.Fatalf("pgrep: %+v %v", exit, err)
		}
		return strings.TrimSpace(out.String())
	}

	id := create(`{"templateID":"` + e2bapi.DefaultTemplate + `","timeout":300}`)
	if n := servers(id); n != "0" {
		t.Fatalf("%s kernels before the first request; want none", n)
	}
	hdr := map[string]string{headerSandboxID: id, headerSandboxPort: strconv.Itoa(kernelPort), "X-API-KEY": testKey}
	// Four first requests at once start one kernel.
	var wg sync.WaitGroup
	first := time.Now()
	answers := make([]string, 4)
	for i := range answers {
		wg.Go(func() {
			req, _ := http.NewRequest("POST", s.URL+"/execute", strings.NewReader(fmt.Sprintf(`{"code":"%d + 1"}`, i)))
			for k, v := range hdr {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				answers[i] = err.Error()
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			answers[i] = resp.Status + " " + string(b)
		})
	}
	wg.Wait()
	t.Logf("four first runCodes, the kernel started by them: %s", time.Since(first))
	for i, a := range answers {
		if want := fmt.Sprintf(`"text": "%d"`, i+1); !strings.HasPrefix(a, "200 ") || !strings.Contains(a, want) {
			t.Fatalf("cell %d + 1 in a %s sandbox: %s; want 200 and %s", i, e2bapi.DefaultTemplate, a, want)
		}
	}
	if n := servers(id); n != "1" {
		t.Fatalf("%s kernels after four first requests; want 1", n)
	}
	if text, e := s.runCell(t, id, "x = 41\nx + 1"); text != "42" || e != "" {
		t.Fatalf("state: %q %q", text, e)
	}

	// Killed: the request that finds it gone fails, the next starts it.
	if exit, err := m.Exec(ctx, id, sandbox.Process{Args: []string{"pkill", "-f", kernelPath}}, sandbox.Stdio{}); err != nil || exit.Code != 0 {
		t.Fatalf("pkill the kernel: %+v %v", exit, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		status, out := s.send(t, "POST", "/execute", hdr, "application/json", []byte(`{"code":"x"}`))
		if status == http.StatusOK {
			if !strings.Contains(string(out), `"NameError"`) {
				t.Fatalf("the kernel started again: %s; want a fresh interpreter (NameError)", out)
			}
			break
		}
		if status != http.StatusBadGateway || time.Now().After(deadline) {
			t.Fatalf("after the kernel was killed: %d %s", status, out)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// No python3 on the sandbox's PATH: E2B's error shape, at once.
	bare := create(`{"templateID":"` + e2bapi.DefaultTemplate + `","timeout":300,"envVars":{"PATH":"/nonexistent"}}`)
	start := time.Now()
	hdr[headerSandboxID] = bare
	status, out := s.send(t, "POST", "/execute", hdr, "application/json", []byte(`{"code":"1"}`))
	var e struct {
		Code    int
		Message string
	}
	if err := json.Unmarshal(out, &e); err != nil || status != http.StatusNotImplemented || e.Code != status || !strings.Contains(e.Message, "no python3") {
		t.Fatalf("runCode without python3: %d %s (%v)", status, out, err)
	}
	if d := time.Since(start); d > kernelStartTimeout/2 {
		t.Errorf("runCode without python3 took %s", d)
	}
}
