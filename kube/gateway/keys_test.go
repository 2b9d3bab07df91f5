package gateway_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"smolvm.dev/smolvm/kube/gateway"
)

func TestReadKeys(t *testing.T) {
	for _, tc := range []struct {
		file, err string
		want      map[string]string
	}{
		{"# teams\nteam-a aaaaaaaaaaaaaaaa\n\nteam-b bbbbbbbbbbbbbbbb\n", "", map[string]string{"aaaaaaaaaaaaaaaa": "team-a", "bbbbbbbbbbbbbbbb": "team-b"}},
		{"team-a\n", ":1: want NAMESPACE KEY", nil},
		{"Team_A aaaaaaaaaaaaaaaa\n", `namespace "Team_A"`, nil},
		{"team-a short\n", "shorter than 16", nil},
		{"team-a aaaaaaaaaaaaaaaa\nteam-b aaaaaaaaaaaaaaaa\n", ":2: key given twice", nil},
		{"# nothing\n", "holds no key", nil},
	} {
		path := filepath.Join(t.TempDir(), "keys")
		os.WriteFile(path, []byte(tc.file), 0o600)
		got, err := gateway.ReadKeys(path)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: %v, want an error with %q", tc.file, err, tc.err)
			}
			continue
		}
		if err != nil || len(got) != len(tc.want) {
			t.Fatalf("%q: %v %v", tc.file, got, err)
		}
		for k, ns := range tc.want {
			if got[k] != ns {
				t.Errorf("%q: key %s -> %q, want %q", tc.file, k, got[k], ns)
			}
		}
	}
	if _, err := gateway.ReadKeys(filepath.Join(t.TempDir(), "none")); err == nil {
		t.Error("a missing file is no error")
	}
}
