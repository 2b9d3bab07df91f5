// Package testserve runs a real `smolvm serve` process, for tests that
// need the server as users run it: over HTTP on loopback, killed with
// SIGKILL as by a crash, restarted over the same data dir.
package testserve

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"smolvm.dev/smolvm/tests/testenv"
)

// Server is one smolvm serve process.
type Server struct {
	// URL is where it listens (http://127.0.0.1:PORT), Token its API token.
	URL, Token string
	cmd        *exec.Cmd
	done       chan struct{}
	mu         sync.Mutex
	log        strings.Builder
}

// Start starts `smolvm serve --listen 127.0.0.1:0` over dir, with guest
// as the sandboxes' guest binary and args added, and returns once it
// serves (its start-up recovery done). It is stopped at the end of the test if still
// running.
func Start(t testing.TB, dir, guest string, args ...string) *Server {
	t.Helper()
	bin := testenv.Smolvm(t)
	global := []string{"--data-dir", dir, "--runsc", testenv.Runsc(t)}
	tok, err := exec.Command(bin, append(global, "serve", "token")...).Output()
	if err != nil {
		t.Fatalf("smolvm serve token: %v", err)
	}
	cmd := exec.Command(bin, append(append(global, "serve", "--listen", "127.0.0.1:0"), args...)...)
	cmd.Env = append(os.Environ(), "SMOLVM_GUEST_BINARY="+guest, "SMOLVM_HOST=")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &Server{Token: strings.TrimSpace(string(tok)), cmd: cmd, done: make(chan struct{})}
	t.Cleanup(func() {
		s.Stop()
		if t.Failed() {
			t.Logf("smolvm serve's log, its errors, warnings and last lines:\n%s", s.notable(40))
		}
	})
	// The log says where it listens: "... msg=serving at=http://127.0.0.1:PORT ...".
	sc := bufio.NewScanner(stderr)
	for s.URL == "" && sc.Scan() {
		s.record(sc.Text())
		for _, f := range strings.Fields(sc.Text()) {
			if at, ok := strings.CutPrefix(f, "at="); ok {
				s.URL = at
			}
		}
	}
	if s.URL == "" {
		cmd.Process.Kill()
		cmd.Wait()
		close(s.done)
		t.Fatalf("smolvm serve did not say where it listens: %v\n%s", sc.Err(), s.Log())
	}
	go func() {
		for sc.Scan() {
			s.record(sc.Text())
		}
		io.Copy(io.Discard, stderr)
		cmd.Wait()
		close(s.done)
	}()
	return s
}

func (s *Server) record(line string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log.WriteString(line + "\n")
}

// Log returns what the server has logged so far.
func (s *Server) Log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log.String()
}

// notable returns the log's lines that tell of trouble (panics, errors,
// warnings), then its last tail lines.
func (s *Server) notable(tail int) string {
	lines := strings.Split(strings.TrimSpace(s.Log()), "\n")
	var b strings.Builder
	for _, l := range lines[:max(len(lines)-tail, 0)] {
		if strings.Contains(l, "panic") || strings.Contains(l, "level=ERROR") || strings.Contains(l, "level=WARN") {
			b.WriteString(l + "\n")
		}
	}
	b.WriteString("...\n")
	for _, l := range lines[max(len(lines)-tail, 0):] {
		b.WriteString(l + "\n")
	}
	return b.String()
}

// Kill ends the server with SIGKILL, as a crash would, and waits for it.
func (s *Server) Kill() { s.end(syscall.SIGKILL) }

// Stop ends the server with SIGTERM, as a user would, and waits for it.
func (s *Server) Stop() { s.end(syscall.SIGTERM) }

func (s *Server) end(sig syscall.Signal) {
	s.cmd.Process.Signal(sig)
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		s.cmd.Process.Kill()
		<-s.done
	}
}
