package memory

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"
)

func TestParseFactFile(t *testing.T) {
	data, err := os.ReadFile("testdata/fact.md")
	if err != nil {
		t.Fatal(err)
	}
	f, err := ParseFact(data)
	if err != nil {
		t.Fatal(err)
	}
	if f.Kind != Gotcha || f.Status != Stale || f.Author != "agent:claude-1" {
		t.Errorf("kind/status/author = %s/%s/%s", f.Kind, f.Status, f.Author)
	}
	if len(f.Anchors) != 3 {
		t.Fatalf("anchors = %d, want 3", len(f.Anchors))
	}
	if a := f.Anchors[0]; a.Start != 10 || a.End != 20 || a.Drift == "" {
		t.Errorf("anchor 0 = %+v", a)
	}
	if got := f.Anchors[1].String(); got != "memory/fact.go#Fact.check" {
		t.Errorf("anchor 1 = %s", got)
	}
	if !strings.HasSuffix(f.Text, "A horizontal rule in the body is fine.") || !strings.HasPrefix(f.Text, "Exit codes") {
		t.Errorf("text = %q", f.Text)
	}
	if len(f.History) != 2 || f.History[1].By != "human:alice" {
		t.Errorf("history = %+v", f.History)
	}
	out, err := f.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	g, err := ParseFact(out)
	if err != nil {
		t.Fatalf("reparse: %v\n%s", err, out)
	}
	if again, _ := g.Marshal(); !bytes.Equal(out, again) {
		t.Errorf("round trip differs:\n%s\n---\n%s", out, again)
	}
	crlf := bytes.ReplaceAll(data, []byte("\n"), []byte("\r\n"))
	if g, err := ParseFact(crlf); err != nil || g.Text != f.Text {
		t.Errorf("CRLF file: %v, text %q", err, g.Text)
	}
}

func TestParseFactErrors(t *testing.T) {
	good := "id: 01hzx3k5q8abcdefghjk\nkind: decision\nstatus: valid\nauthor: human:bob\n"
	for name, in := range map[string]string{
		"no frontmatter": "hello",
		"unterminated":   "---\n" + good,
		"no text":        "---\n" + good + "---\n\n",
		"bad kind":       "---\n" + strings.Replace(good, "decision", "rumour", 1) + "---\nx\n",
		"bad status":     "---\n" + strings.Replace(good, "valid", "maybe", 1) + "---\nx\n",
		"bad author":     "---\n" + strings.Replace(good, "human:bob", "bob", 1) + "---\nx\n",
		"bad id":         "---\n" + strings.Replace(good, "01hzx3k5q8abcdefghjk", "../../etc/passwd", 1) + "---\nx\n",
		"escaping path":  "---\n" + good + "anchors:\n  - path: ../x\n---\nx\n",
		"bad lines":      "---\n" + good + "anchors:\n  - path: x\n    lines: 5-2\n---\nx\n",
		"bad yaml":       "---\n" + good + "anchors: [\n---\nx\n",
	} {
		if _, err := ParseFact([]byte(in)); err == nil {
			t.Errorf("%s: parsed without error", name)
		}
	}
	if _, err := ParseFact([]byte("---\n" + good + "---\nok\n")); err != nil {
		t.Errorf("minimal fact: %v", err)
	}
}

func TestParseAnchor(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Anchor
	}{
		{"a/b.go", Anchor{Path: "a/b.go"}},
		{"a/b.go:3-7", Anchor{Path: "a/b.go", Start: 3, End: 7}},
		{"a/b.go:4", Anchor{Path: "a/b.go", Start: 4, End: 4}},
		{"a/b.go#Repo.Add", Anchor{Path: "a/b.go", Symbol: "Repo.Add"}},
		{"weird:name.txt", Anchor{Path: "weird:name.txt"}},
	} {
		got, err := ParseAnchor(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseAnchor(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"", "/etc/passwd", "../x", "a//b", "a.go:7-3", "a.go:0", "a.go#", "a.go#1x", "a.go#a.b.c", "."} {
		if a, err := ParseAnchor(in); err == nil {
			t.Errorf("ParseAnchor(%q) = %+v, want error", in, a)
		}
	}
}

func TestNewIDSortsByTime(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	a, b := newID(t0), newID(t0.Add(time.Millisecond))
	if !validID(a) || !validID(b) || a >= b {
		t.Errorf("ids %s, %s: want valid and increasing", a, b)
	}
	if c := newID(t0); c == a {
		t.Errorf("two ids in the same millisecond collide: %s", c)
	}
}

// FuzzParseFact checks that the parser never panics and that whatever it
// accepts survives a marshal and parse unchanged.
func FuzzParseFact(f *testing.F) {
	seed, err := os.ReadFile("testdata/fact.md")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add([]byte("---\nid: 01hzx3k5q8abcdefghjk\nkind: decision\nstatus: valid\nauthor: human:bob\n---\nok\n"))
	f.Add([]byte("---\n---\n"))
	f.Add([]byte("---\nanchors:\n  - path: a\n    lines: 1-x\n---\nx"))
	f.Add([]byte("---\nhistory: [{at: 2025-01-01, by: 'human:a', action: add, why: \"a\\n---\\nb\"}]\n---\nx"))
	f.Fuzz(func(t *testing.T, data []byte) {
		fact, err := ParseFact(data)
		if err != nil {
			return
		}
		out, err := fact.Marshal()
		if err != nil {
			t.Fatalf("accepted fact does not marshal: %v", err)
		}
		again, err := ParseFact(out)
		if err != nil {
			t.Fatalf("marshalled fact does not parse: %v\n%s", err, out)
		}
		out2, err := again.Marshal()
		if err != nil || !bytes.Equal(out, out2) {
			t.Fatalf("round trip differs (%v):\n%s\n---\n%s", err, out, out2)
		}
	})
}
