package vm

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"smolvm.dev/smolvm/runtime/backend"
	"smolvm.dev/smolvm/runtime/guest"
	"smolvm.dev/smolvm/tests/testenv"
)

// TestRelay: the relay runs as its sandbox's uid, with no other group,
// not dumpable, and still serves its run dir, which it reaches only through the
// directory it was handed (the sandbox's dir is root's 0700): a file the
// guest mirrors lands there, the relay's; the identity the host leaves
// there goes to the guest and is removed; and a connection to agent.sock
// reaches the guest. No QEMU: the test holds the guest's end of the port.
func TestRelay(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the relay's uid is set by root")
	}
	b := &Backend{cfg: Config{Cache: t.TempDir()}}
	s := &backend.Spec{ID: "relay", Dir: filepath.Join(t.TempDir(), "s"), GuestBinary: testenv.Guest(t), MachineID: "m"}
	l := layout{s.Dir}
	if err := os.MkdirAll(l.run(), 0o700); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	defer b.Delete(ctx, s)
	if err := b.startRelay(s); err != nil {
		t.Fatal(err)
	}
	uid, _ := sandboxUID(b.cfg.Cache, s.Dir)
	pid, ok := b.relay(s)
	if !ok {
		t.Fatalf("the relay did not start: %s", b.bootError(s))
	}
	runsAs(t, "the relay", pid, uid)

	// QEMU's end, then the guest's mirror sending its main log.
	port, err := net.Dial("unix", l.serial())
	if err != nil {
		t.Fatal(err)
	}
	defer port.Close()
	name, data := "main.log", []byte("hello from the guest\n")
	payload := append(append([]byte{'w', byte(len(name))}, name...), data...)
	frame := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32([]byte{'f'}, 0), uint32(len(payload)))
	if _, err := port.Write(append(frame, payload...)); err != nil {
		t.Fatal(err)
	}
	m := guest.NewMux(port)
	got := t.TempDir()
	m.ReceiveFiles(got, []string{"resume.json"})
	streams := m.Listen()
	go m.Run()
	if err := b.writeIdentity(s, true); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the mirrored log and the identity", func() bool {
		p, _ := os.ReadFile(filepath.Join(l.run(), name))
		_, sent := os.Stat(filepath.Join(got, "resume.json"))
		_, left := os.Stat(filepath.Join(l.run(), "resume.json"))
		return bytes.Equal(p, data) && sent == nil && left != nil
	})
	if fi, err := os.Stat(filepath.Join(l.run(), name)); err != nil || fi.Sys().(*syscall.Stat_t).Uid != uint32(uid) || fi.Mode().Perm() != 0o600 {
		t.Errorf("the mirrored log: %v, %v; want the relay's uid's, 0600", fi, err)
	}
	// Not dumpable, so /proc/PID/mem is root's: its QEMU, of the same uid,
	// cannot trace it.
	if fi, err := os.Stat(fmt.Sprintf("/proc/%d/mem", pid)); err != nil || fi.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Errorf("the relay's /proc/PID/mem: %v, %v; want root's (not dumpable)", fi, err)
	}

	c, err := net.Dial("unix", l.agent())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	st, err := streams.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	p := make([]byte, 4)
	if _, err := io.ReadFull(st, p); err != nil || string(p) != "ping" {
		t.Fatalf("the guest read %q, %v", p, err)
	}
}

// waitFor polls ok for up to 30 s.
func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !ok(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s after 30 s", what)
		}
	}
}
