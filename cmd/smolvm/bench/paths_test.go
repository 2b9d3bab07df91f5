package bench

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Each path gets its own line; the library's is compared with stock, the
// others with the library's, so the ratio shows what they add.
func TestPathSeries(t *testing.T) {
	paths := []path{{name: libraryPath}, {name: "HTTP API"}, {name: "CLI"}}
	got := pathSeries("fork x1", "runsc pipeline", paths)
	want := []Series{
		{Name: "fork x1 (Go library)", Baseline: "runsc pipeline"},
		{Name: "fork x1 (HTTP API)", Baseline: "fork x1 (Go library)"},
		{Name: "fork x1 (CLI)", Baseline: "fork x1 (Go library)"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d series, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].Name != want[i].Name || got[i].Baseline != want[i].Baseline {
			t.Errorf("series %d: got %q vs %q, want %q vs %q", i, got[i].Name, got[i].Baseline, want[i].Name, want[i].Baseline)
		}
	}
}

// The CLI's start-up is split into lines that each run the binary with the
// data dir's flags, are compared with a process doing nothing, and fail
// with the command's own words.
func TestCLIStartup(t *testing.T) {
	dir := t.TempDir()
	self := filepath.Join(dir, "smolvm")
	log := filepath.Join(dir, "calls")
	script := "#!/bin/sh\necho \"$*\" >>" + log + "\n[ \"$6\" != fail ] || { echo broken >&2; exit 1; }\n"
	if err := os.WriteFile(self, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := cliStartup(context.Background(), self, "/data", "/runsc", 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("got %d series, want 3", len(got))
	}
	for i, s := range got {
		if len(s.Samples) != 2 {
			t.Errorf("%s: %d samples, want 2", s.Name, len(s.Samples))
		}
		if want := map[bool]string{true: "", false: got[0].Name}[i == 0]; s.Baseline != want {
			t.Errorf("%s: baseline %q, want %q", s.Name, s.Baseline, want)
		}
	}
	calls, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Repeat("--data-dir /data --runsc /runsc help\n--data-dir /data --runsc /runsc ls --quiet\n", 2)
	if string(calls) != want {
		t.Errorf("calls:\n%s\nwant:\n%s", calls, want)
	}
	if _, err := cliRunner(self, "/data", "/runsc")(context.Background(), "ls", "fail"); err == nil || !strings.Contains(err.Error(), "broken") {
		t.Errorf("a failing command: %v, want its stderr", err)
	}
}
