package sandbox

import (
	"errors"
	"strings"
	"testing"
)

func TestParseVolumeMount(t *testing.T) {
	for in, want := range map[string]VolumeMount{
		"cache:/c":    {Name: "cache", Path: "/c"},
		"cache:/c:ro": {Name: "cache", Path: "/c", ReadOnly: true},
		"cache:/c:rw": {Name: "cache", Path: "/c"},
		"c.1:/a/b/c":  {Name: "c.1", Path: "/a/b/c"},
	} {
		if got, err := ParseVolumeMount(in); err != nil || got != want {
			t.Errorf("%q: %+v %v", in, got, err)
		}
	}
	for _, in := range []string{"", "cache", "cache:/c:rx", "a:/b:ro:x"} {
		if _, err := ParseVolumeMount(in); !errors.Is(err, ErrInvalid) {
			t.Errorf("%q: %v, want invalid", in, err)
		}
	}
}

func TestCheckVolumeMounts(t *testing.T) {
	ok := []VolumeMount{{Name: "a", Path: "/a"}, {Name: "a", Path: "/b", ReadOnly: true}, {Name: "b", Path: "/procs"}}
	if err := CheckVolumeMounts(ok); err != nil {
		t.Errorf("%+v: %v", ok, err)
	}
	for _, p := range []string{"", "rel", "/", "/a/", "/a/../b", "/proc", "/proc/1", "/dev/shm", "/sys", "/.smolvm", "/.smolvm/run", "/a\x00b"} {
		if err := CheckVolumeMounts([]VolumeMount{{Name: "a", Path: p}}); !errors.Is(err, ErrInvalid) {
			t.Errorf("path %q: %v, want invalid", p, err)
		}
	}
	if err := CheckVolumeMounts([]VolumeMount{{Name: "a", Path: "/x"}, {Name: "b", Path: "/x"}}); err == nil || !strings.Contains(err.Error(), "two volumes at /x") {
		t.Errorf("two at one path: %v", err)
	}
	many := make([]VolumeMount, MaxVolumeMounts+1)
	for i := range many {
		many[i] = VolumeMount{Name: "a", Path: "/" + strings.Repeat("x", i+1)}
	}
	if err := CheckVolumeMounts(many); !errors.Is(err, ErrInvalid) {
		t.Errorf("%d volumes: %v", len(many), err)
	}
}
