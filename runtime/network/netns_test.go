package network

import (
	"os"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("network tests need root in CI")
		}
		t.Skip("needs root")
	}
	dir := t.TempDir()
	if err := Check(dir); err != nil {
		t.Fatal(err)
	}
	if mi, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(mi), dir) {
		t.Error("Check left its namespace mounted")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("Check left %v", ents)
	}
}
