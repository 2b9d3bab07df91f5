package testimage

import (
	"debug/elf"
	"os"
	"testing"
)

// Busybox is the host's static busybox, which scratch images run; a test
// without one is skipped (outside CI).
func Busybox(t testing.TB) []byte {
	t.Helper()
	const path = "/usr/bin/busybox"
	f, err := elf.Open(path)
	if err == nil {
		static := f.Section(".interp") == nil
		f.Close()
		if static {
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("no static busybox at " + path + " (scripts/test.sh installs busybox-static)")
	}
	t.Skip("no static busybox at " + path + " (apt-get install busybox-static)")
	return nil
}
