package gvisor

import (
	"context"
	"path/filepath"
	"testing"

	"smolvm.dev/smolvm/backend"
)

func TestCheckpointRestore(t *testing.T) {
	b, s := newSandbox(t)
	ctx := context.Background()
	// A process with state only in memory, and a file in the writable layer.
	if _, _, exit := run(t, b, s, "", "sh", "-c", "echo written > /root/f; (i=0; while true; do i=$((i+1)); echo $i > /tmp/counter; sleep 0.05; done) >/dev/null 2>&1 &"); exit.Code != 0 {
		t.Fatal(exit)
	}
	dir := t.TempDir()
	if err := b.Checkpoint(ctx, s, dir, true); err != nil {
		t.Fatal(err)
	}
	// The source still serves.
	if out, _, _ := run(t, b, s, "", "cat", "/root/f"); out != "written\n" {
		t.Fatalf("source after checkpoint: %q", out)
	}
	copy := *s
	copy.ID = s.ID + "-copy"
	copy.Hostname = "copy"
	copy.Dir = filepath.Join(t.TempDir(), copy.ID)
	copy.MachineID = "0123456789abcdef0123456789abcdef"
	copy.Env = append(append([]string(nil), s.Env...), "WHO=copy")
	t.Cleanup(func() { b.Delete(context.Background(), &copy) })
	if err := b.Restore(ctx, &copy, dir); err != nil {
		t.Fatal(err)
	}
	out, _, _ := run(t, b, &copy, "", "sh", "-c", "cat /root/f; hostname; cat /etc/machine-id; echo $WHO; a=$(cat /tmp/counter); sleep 0.3; b=$(cat /tmp/counter); [ $b -gt $a ] && echo counting")
	want := "written\ncopy\n0123456789abcdef0123456789abcdef\ncopy\ncounting\n"
	if out != want {
		t.Fatalf("restored copy: %q, want %q", out, want)
	}
	if st, _ := b.State(ctx, s); st != backend.StatusRunning {
		t.Fatalf("source state %v", st)
	}
}
