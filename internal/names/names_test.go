package names

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCheck(t *testing.T) {
	long := strings.Repeat("a", 300)
	for _, c := range []struct {
		kind Kind
		ok   []string
		bad  []string
	}{
		{Sandbox, []string{"box", "a", "A_b.c-d", "0f3a9c2e1b7d", "v1..2", strings.Repeat("a", 63)},
			[]string{"", ".", "..", "../x", "..%2Fx", "a/b", "-x", ".x", "_x", "a b", "a\x00", "\xff", "é", strings.Repeat("a", 64), long}},
		{Pool, []string{"host", "warm-1"}, []string{"../../../some/dir/name", long, "a:b"}},
		{Snapshot, []string{"snap", "sha256:00ab", "0123456789abcdef", strings.Repeat("s", 128)},
			[]string{"sha256:", "sha256:XY", "sha256:" + strings.Repeat("0", 65), strings.Repeat("s", 129), "a/b", "..", "has space"}},
		{Image, []string{"host", "alpine", "alpine:3.19", "docker.io/library/alpine:latest", "localhost:5000/x/y@sha256:" + strings.Repeat("0", 64), "sha256:abc"},
			[]string{"", "/abs", "a//b", "a/../b", "../x", "a/./b", "a/", "a b", "a\x00", "\xffa", strings.Repeat("a/", 300)}},
		{Tenant, []string{"acme"}, []string{"a/b", ""}},
		{Context, []string{"ctx-1", strings.Repeat("c", 128)}, []string{strings.Repeat("c", 129), ".."}},
		{Port, []string{"1", "80", "49983", "65535"}, []string{"", "0", "00", "080", "65536", "99999", "-1", "1e3", "80 ", "123456"}},
		{Path, []string{"/", "/tmp/a b", "rel/x", "/a/./b", "/é", "/a..b"}, []string{"", "/a/..", "../x", "/a\x00", "/\xff", "/" + strings.Repeat("a", MaxPath)}},
	} {
		for _, s := range c.ok {
			if err := Check(c.kind, s); err != nil {
				t.Errorf("%s %q: %v", c.kind, s, err)
			}
		}
		for _, s := range c.bad {
			err := Check(c.kind, s)
			var ne *Error
			if !errors.Is(err, ErrInvalid) || !errors.As(err, &ne) || ne.Kind != c.kind {
				t.Errorf("%s %q: %v, want an invalid %s", c.kind, s, err, c.kind)
				continue
			}
			checkMessage(t, c.kind, err)
		}
	}
}

// checkMessage holds an error's message to what the API repeats: it names
// the kind, is valid UTF-8 with no control bytes, and is short.
func checkMessage(t *testing.T, k Kind, err error) {
	t.Helper()
	msg := err.Error()
	if !strings.HasPrefix(msg, k.String()+" ") || !utf8.ValidString(msg) || strings.ContainsAny(msg, "\x00\n\r") || len(msg) > 300 {
		t.Errorf("message %q", msg)
	}
}

func TestMessages(t *testing.T) {
	for _, c := range []struct {
		kind      Kind
		in, wants string
	}{
		{Pool, "../../x", `pool name "../../x": must not contain '/'`},
		{Sandbox, "..", `sandbox name "..": must not contain a ".." element`},
		{Sandbox, strings.Repeat("a", 300), `sandbox name "` + strings.Repeat("a", quoteMax) + `"… (300 bytes): longer than 63 bytes`},
		{Snapshot, "a\x00", `snapshot name "a\x00": must not contain a NUL byte`},
		{Sandbox, "\xff", `sandbox name "\xff": must be valid UTF-8`},
		{Sandbox, "a b", `sandbox name "a b": use 1-63 letters, digits, '_', '.' or '-', starting with a letter or digit`},
	} {
		if got := Check(c.kind, c.in).Error(); got != c.wants {
			t.Errorf("%s %q:\n got %s\nwant %s", c.kind, c.in, got, c.wants)
		}
	}
}

func TestJoin(t *testing.T) {
	root := t.TempDir()
	for _, c := range []struct {
		elems []string
		want  string // relative to root; "" for a refusal
	}{
		{[]string{"locks", "pool-x.lock"}, "locks/pool-x.lock"},
		{[]string{"a/b", "c"}, "a/b/c"},
		{[]string{"a/../b"}, "b"},
		{nil, "."},
		{[]string{"locks", "pool-../../../../some/dir/name.lock"}, ""},
		{[]string{".."}, ""},
		{[]string{"../" + filepath.Base(root) + "x"}, ""},
		{[]string{"/etc/passwd"}, "etc/passwd"}, // joined, not replaced
		{[]string{"a\x00b"}, ""},
	} {
		got, err := Join(root, c.elems...)
		switch {
		case c.want == "" && err == nil:
			t.Errorf("Join(%q) = %s, want a refusal", c.elems, got)
		case c.want == "" && (!errors.Is(err, ErrInvalid) || strings.Contains(err.Error(), root)):
			t.Errorf("Join(%q): %v: want ErrInvalid without the root in it", c.elems, err)
		case c.want != "" && (err != nil || got != filepath.Join(root, c.want)):
			t.Errorf("Join(%q) = %s, %v; want %s", c.elems, got, err, filepath.Join(root, c.want))
		}
	}
}

// FuzzCheck: Check never panics, and whatever it accepts is safe to use as
// one path element (or, for images, as relative components) under a root.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{"box", "..", "../x", "a/b", "\x00", "\xff", "sha256:ab", "docker.io/library/alpine:3", "a//b", "49983", strings.Repeat("a", 300)} {
		f.Add(s)
	}
	root := f.TempDir()
	f.Fuzz(func(t *testing.T, s string) {
		for k := Sandbox; k <= Path; k++ {
			err := Check(k, s)
			if err != nil {
				if !errors.Is(err, ErrInvalid) {
					t.Fatalf("%s %q: %v does not match ErrInvalid", k, s, err)
				}
				checkMessage(t, k, err)
				continue
			}
			if len(s) > k.Max() || !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
				t.Fatalf("%s %q accepted", k, s)
			}
			p, err := Join(root, "locks", s+".lock")
			if err != nil || !strings.HasPrefix(p, root+"/locks/") {
				t.Fatalf("%s %q accepted but joins to %s, %v", k, s, p, err)
			}
			if k != Image && k != Path && (strings.Contains(s, "/") || filepath.Base(p) != s+".lock") {
				t.Fatalf("%s %q is more than one path element", k, s)
			}
		}
	})
}

// FuzzJoin: whatever the elements, Join's result is under root or refused.
func FuzzJoin(f *testing.F) {
	for _, s := range []string{"x", "..", "../..", "a/../../b", "/abs", "\x00", "pool-../../etc"} {
		f.Add(s, "y")
	}
	root := f.TempDir()
	f.Fuzz(func(t *testing.T, a, b string) {
		p, err := Join(root, "locks", a, b)
		if err != nil {
			if !errors.Is(err, ErrInvalid) || strings.Contains(err.Error(), root) {
				t.Fatalf("Join(%q, %q): %v", a, b, err)
			}
			return
		}
		if p != root && !strings.HasPrefix(p, root+"/") {
			t.Fatalf("Join(%q, %q) = %s: outside %s", a, b, p, root)
		}
	})
}
