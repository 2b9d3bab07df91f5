package guest

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"smolvm.dev/smolvm/sandbox"
)

// Identity is what makes a sandbox itself. The host hands a new one to
// every copy restored from a checkpoint, and the original one back to the
// source after a checkpoint that left it running.
type Identity struct {
	// Env replaces the sandbox's base environment (it carries the
	// sandbox's ID and name).
	Env       []string   `json:"env"`
	Dir       string     `json:"dir,omitempty"`  // default working directory
	User      string     `json:"user,omitempty"` // default user
	MachineID string     `json:"machine_id,omitempty"`
	Deadline  *time.Time `json:"deadline,omitempty"`
	// Hostname is the sandbox's own. A copy restored into a restore
	// target, or a pooled sandbox handed out, was created with another
	// one, and gVisor keeps a hostname once set: the agent, which alone
	// may set it (ReserveAdmin), sets it at every handover.
	Hostname string `json:"hostname,omitempty"`
	// Restored is set for a copy, which runs the image's on-restore hooks.
	Restored bool `json:"restored,omitempty"`
}

// HooksDir holds executables run, in name order, in every restored or
// forked copy before it takes commands, so a workload can reseed secrets.
const HooksDir = "/etc/smolvm/on-restore.d"

// resumePoll is how often a quiesced agent looks for its identity. The
// wait lasts only the checkpoint, or until the restored copy gets its
// identity, so polling is cheap.
const resumePoll = 2 * time.Millisecond

// DefaultQuiesceTimeout is how long a quiesced agent waits for its
// identity. The sandbox's tasks stand still while gVisor saves it, so
// the wait covers only the host's steps around the save: starting runsc
// and writing the identity back.
const DefaultQuiesceTimeout = 10 * time.Second

func (s *Server) isQuiesced() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.quiesced
}

// quiesce closes the listener and every host connection but keep; the
// commands behind those connections keep running. It then answers on keep,
// closes it, and waits, in the background, for the resume file.
func (s *Server) quiesce(keep net.Conn, answer func()) {
	s.mu.Lock()
	s.quiesced = true
	if s.ln != nil {
		s.ln.Close()
		s.ln = nil
	}
	for c := range s.conns {
		if c != keep {
			c.Close()
		}
	}
	timeout := s.cfg.QuiesceTimeout
	s.mu.Unlock()
	os.Remove(s.cfg.Socket)
	// An identity left by a quiesce that timed out must not end this one
	// before the checkpoint.
	os.Remove(s.cfg.ResumeFile)
	answer()
	keep.Close()
	if timeout <= 0 {
		timeout = DefaultQuiesceTimeout
	}
	go s.awaitResume(time.Now().Add(timeout))
}

// awaitResume waits for the identity that ends a quiesce, or until
// giveUp, when the agent serves again as itself.
func (s *Server) awaitResume(giveUp time.Time) {
	for {
		p, err := os.ReadFile(s.cfg.ResumeFile)
		var id Identity
		if err == nil && json.Unmarshal(p, &id) == nil {
			os.Remove(s.cfg.ResumeFile)
			if err := s.adopt(id); err != nil {
				// The copy serves anyway, under the wrong name: record why.
				s.recordErr(err)
			}
			break
		}
		if time.Now().After(giveUp) {
			break
		}
		time.Sleep(resumePoll)
	}
	s.serveAgain()
}

// serveAgain listens again after a quiesce.
func (s *Server) serveAgain() {
	if err := s.listen(); err != nil {
		// Without a socket the host cannot reach us: record why.
		s.recordErr(err)
	}
}

// recordErr leaves err where the host looks when the agent fails.
func (s *Server) recordErr(err error) {
	os.WriteFile(filepath.Join(filepath.Dir(s.cfg.ResumeFile), "agent.err"), []byte(err.Error()+"\n"), 0o644)
}

// adopt takes on id, running the restore hooks of a copy. It fails only
// if the hostname cannot be set; the rest of id is taken anyway.
func (s *Server) adopt(id Identity) error {
	s.mu.Lock()
	if id.Env != nil {
		s.cfg.Env = id.Env
	}
	if id.Dir != "" {
		s.cfg.Dir = id.Dir
	}
	if id.User != "" {
		s.cfg.User = id.User
	}
	s.mu.Unlock()
	if id.MachineID != "" {
		writeMachineID(id.MachineID)
	}
	s.setDeadline(id.Deadline)
	err := setHostname(id.Hostname)
	if id.Restored {
		s.runHooks()
	}
	return err
}

// setHostname makes name the sandbox's hostname, unless it is "" or the
// hostname already.
func setHostname(name string) error {
	if name == "" {
		return nil
	}
	if cur, err := os.Hostname(); err == nil && cur == name {
		return nil
	}
	if err := unix.Sethostname([]byte(name)); err != nil {
		return fmt.Errorf("set hostname %s: %w", name, err)
	}
	return nil
}

// ReserveAdmin keeps CAP_SYS_ADMIN to the agent: it drops it from the
// bounding set of every thread, so no command the agent starts can have
// it, while the agent keeps it in its own sets to set the hostname of a
// copy (setHostname). Only the agent's main calls it, as PID 1 of a
// sandbox: it changes the whole process.
func ReserveAdmin() error {
	if _, _, errno := syscall.AllThreadsSyscall(syscall.SYS_PRCTL, unix.PR_CAPBSET_DROP, unix.CAP_SYS_ADMIN, 0); errno != 0 {
		if errno == syscall.ENOTSUP {
			// Go refuses AllThreadsSyscall in a binary linked with cgo.
			return fmt.Errorf("drop CAP_SYS_ADMIN from the bounding set: %w (smolvm-guest was built with cgo: build it with CGO_ENABLED=0)", errno)
		}
		return fmt.Errorf("drop CAP_SYS_ADMIN from the bounding set: %w", errno)
	}
	return nil
}

// setDeadline replaces the deadline the main loop waits for. The channel
// holds one value: a newer deadline replaces one not yet taken.
func (s *Server) setDeadline(d *time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.deadline:
	default:
	}
	s.deadline <- d
}

// runHooks runs the on-restore hooks, each for at most 30 seconds. A
// failing hook does not stop the copy from serving.
func (s *Server) runHooks() {
	entries, err := os.ReadDir(HooksDir)
	if err != nil {
		return
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		if !e.IsDir() {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	for _, n := range names {
		cmd, err := s.command(sandbox.Process{Args: []string{filepath.Join(HooksDir, n)}})
		if err != nil {
			continue
		}
		cmd.SysProcAttr.Setpgid = true
		pid, done, err := s.reaper.start(cmd)
		if err != nil {
			continue
		}
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			unix.Kill(-pid, unix.SIGKILL)
		}
	}
}

// writeMachineID makes id the sandbox's /etc/machine-id, which tools read
// as a stable per-machine identity.
func writeMachineID(id string) {
	os.MkdirAll("/etc", 0o755)
	tmp := "/etc/machine-id.smolvm"
	if os.WriteFile(tmp, []byte(id+"\n"), 0o444) == nil {
		os.Rename(tmp, "/etc/machine-id")
	}
}
