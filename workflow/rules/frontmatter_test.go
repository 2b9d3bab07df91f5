package rules

import (
	"strings"
	"testing"
)

func TestParseFrontmatter(t *testing.T) {
	tests := []struct {
		name     string
		src      string
		fields   map[string]string // key -> value, or list items joined by |
		quoted   []string
		bodyLine int
		body     string
		code     string // expected issue, if any
	}{
		{name: "none", src: "# Title\ntext\n", bodyLine: 1, body: "# Title\ntext\n"},
		{
			name:     "yaml",
			src:      "---\ndescription: Go style\nglobs:\n  - \"**/*.go\"\n  - cmd/**\nalwaysApply: false\n---\nBody\n",
			fields:   map[string]string{"description": "Go style", "globs": "**/*.go|cmd/**", "alwaysApply": "false"},
			bodyLine: 8, body: "Body\n",
		},
		{
			name:     "quoted bool",
			src:      "---\nalwaysApply: \"true\"\n---\nx",
			fields:   map[string]string{"alwaysApply": "true"},
			quoted:   []string{"alwaysApply"},
			bodyLine: 4, body: "x",
		},
		{
			name:     "cursor unquoted glob",
			src:      "---\nglobs: *.ts, *.tsx\nalwaysApply: 'false'\n---\nx",
			fields:   map[string]string{"globs": "*.ts, *.tsx", "alwaysApply": "false"},
			quoted:   []string{"alwaysApply"},
			bodyLine: 5, body: "x", code: "frontmatter-not-yaml",
		},
		{name: "unclosed", src: "---\nglobs: x\nbody", bodyLine: 1, body: "---\nglobs: x\nbody", code: "frontmatter-malformed"},
		{name: "not a mapping", src: "---\n- a\n- b\n---\nx", bodyLine: 5, body: "x", code: "frontmatter-malformed"},
		{name: "garbage", src: "---\n{{{\n---\nx", bodyLine: 4, body: "x", code: "frontmatter-malformed"},
		{name: "empty", src: "---\n---\nx", bodyLine: 3, body: "x"},
		{name: "bom", src: "\ufeff---\na: b\n---\nx", fields: map[string]string{"a": "b"}, bodyLine: 4, body: "x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fm, body, issues := parseFrontmatter(tt.src)
			if fm.bodyLine != tt.bodyLine || body != tt.body {
				t.Errorf("body at %d %q, want %d %q", fm.bodyLine, body, tt.bodyLine, tt.body)
			}
			var codes []string
			for _, is := range issues {
				codes = append(codes, is.code)
			}
			if got := strings.Join(codes, ","); got != tt.code {
				t.Errorf("issues %q, want %q (%v)", got, tt.code, issues)
			}
			got := map[string]string{}
			for _, f := range fm.fields {
				v := f.value
				if f.isList {
					v = strings.Join(f.list, "|")
				}
				got[f.key] = v
			}
			if len(got) != len(tt.fields) {
				t.Errorf("fields %v, want %v", got, tt.fields)
			}
			for k, v := range tt.fields {
				if got[k] != v {
					t.Errorf("field %s = %q, want %q", k, got[k], v)
				}
			}
			for _, k := range tt.quoted {
				if f, _ := fm.get(k); !f.quoted {
					t.Errorf("field %s not marked quoted", k)
				}
			}
		})
	}
}

func TestSplitGlobs(t *testing.T) {
	f := field{value: "*.{ts,tsx}, docs/**,,"}
	if got := strings.Join(f.globs(), "|"); got != "*.{ts,tsx}|docs/**" {
		t.Errorf("globs = %q", got)
	}
}

func FuzzFrontmatter(f *testing.F) {
	for _, s := range []string{
		"",
		"---\n---\n",
		"---\ndescription: x\nglobs: *.ts\nalwaysApply: \"true\"\n---\nbody",
		"---\npaths:\n  - \"src/**\"\n---\n",
		"---\ntrigger: glob\nglobs: [a, b]\n---\n\nbody\n",
		"---\na: &x [1]\nb: *x\n---\n",
		"---\n: :\n- -\n---",
		"\ufeff---\r\nkey: value\r\n---\r\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		fm, body, issues := parseFrontmatter(src)
		if !strings.HasSuffix(src, body) {
			t.Fatalf("body %q is not the end of the input", body)
		}
		if n := strings.Count(src, "\n") + 2; fm.bodyLine < 1 || fm.bodyLine > n {
			t.Fatalf("body line %d out of range 1..%d", fm.bodyLine, n)
		}
		for _, fd := range fm.fields {
			if fd.line < 2 || fd.line > fm.bodyLine-2 {
				t.Fatalf("field %q at line %d, outside the block ending at %d", fd.key, fd.line, fm.bodyLine-1)
			}
			fd.globs()
		}
		for _, is := range issues {
			if is.code == "" || is.msg == "" || (is.sev != Error && is.sev != Warning) {
				t.Fatalf("bad issue %+v", is)
			}
		}
	})
}
