package proc

import (
	"os/exec"
	"testing"
)

func TestOwner(t *testing.T) {
	self := Self()
	if self.Start == 0 || !self.Alive() {
		t.Fatalf("Self() = %+v, alive %t", self, self.Alive())
	}
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	o := Owner{PID: cmd.Process.Pid, Start: startTime(cmd.Process.Pid)}
	if !o.Alive() {
		t.Fatalf("a running child %+v is not alive", o)
	}
	if reused := (Owner{PID: o.PID, Start: o.Start + 1}); reused.Alive() {
		t.Error("a pid with another start time passes for its owner")
	}
	cmd.Process.Kill()
	cmd.Wait()
	if o.Alive() {
		t.Error("a reaped child is alive")
	}
	if (Owner{}).Alive() {
		t.Error("the zero Owner is alive")
	}
}
