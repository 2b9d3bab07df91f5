package runner

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strings"

	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/workflow/runner/guard"
	"smolvm.dev/smolvm/workflow/runner/testparse"
)

// TestCheck is what the agent's test files say on the base code: the
// tests were run on a copy of the base checkpoint with the test files of
// the change written over the pristine ones. It understands any language
// the test output is parsed in, where the guard only knows patterns. No
// pattern judges a test edit: with test files writable by policy,
// assert.strictEqual(add(2, 3), 5) rewritten as assert.ok(true) (or
// assert.ok(add(2, 3)), truthy for a wrong sum) passed the guard, and the
// tampered iteration became the best (TestWeakenedOnBase).
type TestCheck struct {
	Files []string `json:"files"` // the test files the change edits, adds or deletes
	// Weakened failed on the base code with the pristine test files and
	// pass (or are skipped) there with the agent's: the test changed, not
	// the code.
	Weakened []string `json:"weakened,omitempty"`
	// ProveNothing are tests the agent added that pass on the base code
	// already: they say nothing about the fix.
	ProveNothing []string          `json:"prove_nothing,omitempty"`
	Result       *testparse.Result `json:"result,omitempty"` // the run on the base
}

// changedTests lists the test files that differ between the base commit
// and commit, with their status (A, M, D).
func (r *run) changedTests(ctx context.Context, commit string) (map[string]byte, error) {
	out, err := r.scr.run(ctx, "", "diff", "--name-status", "-z", "--no-renames", r.scr.base, commit)
	if err != nil {
		return nil, err
	}
	f := strings.Split(out, "\x00")
	files := map[string]byte{}
	for i := 0; i+1 < len(f); i += 2 {
		if st, name := f[i], f[i+1]; st != "" && r.policy.IsTest(name) {
			files[name] = st[0]
		}
	}
	return files, nil
}

// testsOnBase runs the tests on a copy of the base checkpoint with
// commit's test files; nil when commit changes no test file.
func (r *run) testsOnBase(ctx context.Context, commit string) (*TestCheck, error) {
	files, err := r.changedTests(ctx, commit)
	if err != nil || len(files) == 0 {
		return nil, err
	}
	sb, err := r.restore(ctx, r.baseSnap)
	if err != nil {
		return nil, err
	}
	defer r.remove(ctx, sb)
	c := &TestCheck{}
	for name, st := range files {
		c.Files = append(c.Files, name)
		if err := r.putFile(ctx, sb, commit, name, st == 'D'); err != nil {
			return nil, err
		}
	}
	slices.Sort(c.Files)
	res, err := r.runTests(ctx, sb)
	if err != nil {
		return nil, fmt.Errorf("the agent's tests on the base: %w", err)
	}
	r.judge(c, res)
	return c, nil
}

// putFile writes name as it is at commit into sb, or removes it.
func (r *run) putFile(ctx context.Context, sb, commit, name string, gone bool) error {
	var data []byte
	if !gone {
		var err error
		if data, err = r.scr.file(ctx, commit, name); err != nil {
			return err
		}
	}
	return r.putContent(ctx, sb, name, string(data), gone)
}

// putContent writes data as name (under Dir) in sb, or removes it.
func (r *run) putContent(ctx context.Context, sb, name, data string, gone bool) error {
	if gone {
		return r.rm(ctx, sb, []string{path.Join(Dir, name)})
	}
	if err := r.svc.WriteFile(ctx, sb, path.Join(Dir, name), strings.NewReader(data)); err != nil {
		return fmt.Errorf("write %s into %s: %w", name, sb, err)
	}
	return nil
}

// rm removes paths in sb.
func (r *run) rm(ctx context.Context, sb string, paths []string) error {
	exit, err := r.svc.Exec(ctx, sb, sandbox.Process{Args: append([]string{"rm", "-f", "--"}, paths...)}, sandbox.Stdio{})
	if err != nil || exit.Code != 0 {
		return fmt.Errorf("remove %s in %s: %v %s", strings.Join(paths, " "), sb, err, exit.Error)
	}
	return nil
}

// judge compares the base run with the agent's test files (res) with the
// base run with the pristine ones. Flaky tests flip by themselves. A red
// base turned green with no single test to blame (renamed, removed, not
// parsed per test) is weakened as a whole.
func (r *run) judge(c *TestCheck, res testparse.Result) {
	c.Result = &res
	for _, name := range r.baseResult.Failing() {
		if s := res.Status(name); !r.flaky[name] && (s == testparse.Pass || s == testparse.Skip) {
			c.Weakened = append(c.Weakened, name)
		}
	}
	if len(c.Weakened) == 0 && !r.green(r.baseResult) && r.green(res) {
		c.Weakened = []string{"(the whole suite: red on the base code, green there with these test files)"}
	}
	for _, t := range res.Tests {
		if t.Status == testparse.Pass && r.baseResult.Status(t.Name) == "" {
			c.ProveNothing = append(c.ProveNothing, t.Name)
		}
	}
}

// violations are c's refusals: one per weakened test.
func (c *TestCheck) violations() []guard.Violation {
	var vs []guard.Violation
	for _, name := range c.Weakened {
		vs = append(vs, guard.Violation{Rule: guard.PassesOnBase, Path: strings.Join(c.Files, ", "),
			Reason: fmt.Sprintf("test %s fails on the unchanged code with the original test files and passes there with yours: the test was weakened, not the code fixed", name)})
	}
	return vs
}
