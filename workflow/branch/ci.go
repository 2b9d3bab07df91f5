package branch

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/internal/lazyre"
	"smolvm.dev/smolvm/workflow/rules"
	"smolvm.dev/smolvm/workflow/runner"
)

// CI is how a run judges a state: a shell command run in the sandbox's
// copy of the repository, whose output the runner's parsers read.
type CI struct {
	Command string `json:"command"`
	Source  string `json:"source"` // "--test", "detected", "github:FILE#JOB"
	// Unsupported are the steps of a GitHub job that were not run
	// (uses: actions, expressions), each with why.
	Unsupported []string `json:"unsupported,omitempty"`
}

// DetectCI returns the repository's own check: test if given, else the
// test command of its rule files (rc, from rules.Repo.Commands), else what
// the runner detects (go test, pytest, npm test), else make test.
func DetectCI(repo, test string, rc rules.Commands) (CI, error) {
	if test != "" {
		return CI{Command: test, Source: "--test"}, nil
	}
	if rc.Test != "" {
		return CI{Command: rc.Test, Source: rc.TestFrom}, nil
	}
	if t := runner.DetectTest(repo); t != "" {
		return CI{Command: t, Source: "detected"}, nil
	}
	if mk, err := os.ReadFile(filepath.Join(repo, "Makefile")); err == nil && regexp.MustCompile(`(?m)^test\s*:`).Match(mk) {
		return CI{Command: "make test", Source: "detected"}, nil
	}
	return CI{}, errdefs.New(errdefs.ErrInvalid, fmt.Sprintf("no test command given (--test or --ci github --job NAME) and none detected in %s", repo))
}

// MaxWorkflowBytes bounds a workflow file.
const MaxWorkflowBytes = 1 << 20

type workflow struct {
	Env  map[string]string `yaml:"env"`
	Jobs map[string]struct {
		Name     string            `yaml:"name"`
		Env      map[string]string `yaml:"env"`
		Defaults struct {
			Run struct {
				Shell   string `yaml:"shell"`
				WorkDir string `yaml:"working-directory"`
			} `yaml:"run"`
		} `yaml:"defaults"`
		Steps []struct {
			Name    string            `yaml:"name"`
			Run     string            `yaml:"run"`
			Uses    string            `yaml:"uses"`
			Shell   string            `yaml:"shell"`
			WorkDir string            `yaml:"working-directory"`
			Env     map[string]string `yaml:"env"`
			If      string            `yaml:"if"`
		} `yaml:"steps"`
	} `yaml:"jobs"`
}

// GitHubCI turns the run: steps of job (its key or its name) in the
// repository's .github/workflows into one script that runs them in
// order and stops at the first that fails. Steps it cannot run (uses:
// actions, ${{ }} expressions) are listed in Unsupported, never dropped
// silently.
func GitHubCI(repo, job string) (CI, error) {
	files, _ := filepath.Glob(filepath.Join(repo, ".github", "workflows", "*.y*ml"))
	sort.Strings(files)
	var jobs []string
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			return CI{}, err
		}
		if fi.Size() > MaxWorkflowBytes {
			return CI{}, errdefs.New(errdefs.ErrInvalid, fmt.Sprintf("%s is over %d bytes", f, MaxWorkflowBytes))
		}
		data, err := os.ReadFile(f)
		if err != nil {
			return CI{}, err
		}
		var w workflow
		if err := yaml.Unmarshal(data, &w); err != nil {
			return CI{}, errdefs.New(errdefs.ErrInvalid, fmt.Sprintf("%s: %v", f, err))
		}
		keys := make([]string, 0, len(w.Jobs))
		for k := range w.Jobs {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, key := range keys {
			j := w.Jobs[key]
			jobs = append(jobs, key)
			if key != job && j.Name != job {
				continue
			}
			rel, _ := filepath.Rel(repo, f)
			ci := CI{Source: "github:" + rel + "#" + key}
			var b strings.Builder
			b.WriteString("set -u\n")
			env := func(m map[string]string, where string) {
				names := make([]string, 0, len(m))
				for k := range m {
					names = append(names, k)
				}
				slices.Sort(names)
				for _, k := range names {
					if strings.Contains(m[k], "${{") || !envName().MatchString(k) {
						ci.Unsupported = append(ci.Unsupported, fmt.Sprintf("%s env %s: expressions are not supported", where, k))
						continue
					}
					fmt.Fprintf(&b, "export %s=%s\n", k, quote(m[k]))
				}
			}
			env(w.Env, "workflow")
			env(j.Env, "job "+key)
			for i, s := range j.Steps {
				name := s.Name
				if name == "" {
					name = fmt.Sprintf("step %d", i+1)
				}
				switch {
				case s.Uses != "":
					ci.Unsupported = append(ci.Unsupported, fmt.Sprintf("%s: uses %s (actions do not run in the sandbox)", name, s.Uses))
					continue
				case s.Run == "":
					continue
				case strings.Contains(s.Run, "${{") || strings.Contains(s.If, "${{") || s.If != "":
					ci.Unsupported = append(ci.Unsupported, fmt.Sprintf("%s: expressions and if: are not supported", name))
					continue
				}
				shell := cmp(s.Shell, j.Defaults.Run.Shell)
				var sh string
				switch shell {
				case "", "bash":
					sh = "bash --noprofile --norc -eo pipefail -c"
				case "sh":
					sh = "sh -e -c"
				default:
					ci.Unsupported = append(ci.Unsupported, fmt.Sprintf("%s: shell %s is not supported", name, shell))
					continue
				}
				dir := cmp(s.WorkDir, j.Defaults.Run.WorkDir)
				fmt.Fprintf(&b, "echo %s >&2\n", quote("::step "+name))
				b.WriteString("(")
				if dir != "" {
					fmt.Fprintf(&b, "cd %s && ", quote(dir))
				}
				names := make([]string, 0, len(s.Env))
				for k := range s.Env {
					names = append(names, k)
				}
				slices.Sort(names)
				for _, k := range names {
					if strings.Contains(s.Env[k], "${{") || !envName().MatchString(k) {
						ci.Unsupported = append(ci.Unsupported, fmt.Sprintf("%s env %s: expressions are not supported", name, k))
						continue
					}
					fmt.Fprintf(&b, "%s=%s ", k, quote(s.Env[k]))
				}
				fmt.Fprintf(&b, "%s %s) || exit $?\n", sh, quote(s.Run))
			}
			ci.Command = b.String()
			return ci, nil
		}
	}
	return CI{}, errdefs.New(errdefs.ErrNotFound, fmt.Sprintf("no job %q in %s/.github/workflows (jobs: %s)", job, repo, strings.Join(jobs, ", ")))
}

var envName = lazyre.New(`^[A-Za-z_][A-Za-z0-9_]*$`)

func cmp(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// quote makes s one single-quoted shell word.
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
