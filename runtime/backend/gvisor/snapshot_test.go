package gvisor

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"smolvm.dev/smolvm/runtime/backend"
)

func TestCheckpointRestore(t *testing.T) {
	b, s := newSandbox(t)
	ctx := context.Background()
	// A process with state only in memory, and a file in the writable layer.
	if _, _, exit := run(t, b, s, "", "sh", "-c", "echo written > /root/f; (i=0; while true; do i=$((i+1)); echo $i > /tmp/counter; sleep 0.05; done) >/dev/null 2>&1 &"); exit.Code != 0 {
		t.Fatal(exit)
	}
	dir := t.TempDir()
	// Saved comes once the image is whole, before the source serves again.
	var image []string
	saved := func() {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			image = append(image, e.Name())
		}
		if b.Guest(s).Ping(ctx) == nil {
			t.Error("the source serves before Saved")
		}
	}
	if err := b.Checkpoint(ctx, s, dir, backend.CheckpointOptions{LeaveRunning: true, Saved: saved}); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(image, "checkpoint.img") {
		t.Fatalf("Saved saw the image as %q", image)
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
	out, _, _ := run(t, b, &copy, "", "sh", "-c", "cat /root/f; hostname; cat /etc/machine-id; echo $WHO; a=$(cat /tmp/counter); for i in $(seq 100); do sleep 0.1; b=$(cat /tmp/counter); [ $b -gt $a ] 2>/dev/null && echo counting && break; done")
	want := "written\ncopy\n0123456789abcdef0123456789abcdef\ncopy\ncounting\n"
	if out != want {
		t.Fatalf("restored copy: %q, want %q", out, want)
	}
	if st, _ := b.State(ctx, s); st != backend.StatusRunning {
		t.Fatalf("source state %v", st)
	}
}
