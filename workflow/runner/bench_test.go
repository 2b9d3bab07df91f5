package runner

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"smolvm.dev/smolvm/internal/series"
	"smolvm.dev/smolvm/tests/testenv"
	"smolvm.dev/smolvm/workflow/runner/guard"
	"smolvm.dev/smolvm/workflow/trust"
)

func report(b *testing.B, prefix string, samples []time.Duration) {
	s := series.Series{Samples: samples}
	b.ReportMetric(float64(s.Quantile(0.5).Microseconds())/1000, prefix+"p50-ms")
	b.ReportMetric(float64(s.Quantile(0.99).Microseconds())/1000, prefix+"p99-ms")
}

// benchRun is a run over a repository of files (jsRepo if nil) with its
// first sandbox, as Fix sets up.
func benchRun(b *testing.B, files map[string]string) (*run, string) {
	rn := newRunner(b)
	if files == nil {
		files = jsRepo
	}
	repo := testenv.GitRepo(b, files)
	ctx := context.Background()
	o := Options{Repo: repo, Test: jsTest, Agent: &script{}, Policy: trust.Default(repo)}
	if err := o.defaults(); err != nil {
		b.Fatal(err)
	}
	r := &run{svc: rn.Service, log: rn.Log, o: o, id: NewRunID(), flaky: map[string]bool{}, rec: &Run{}}
	if err := r.open(ctx, ""); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(r.scr.close)
	sb, err := r.newBox(ctx, "")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { r.remove(ctx, sb) })
	if r.baseResult, err = r.runTests(ctx, sb); err != nil {
		b.Fatal(err)
	}
	if r.baseSnap, err = r.snapshot(ctx, sb, 0); err != nil {
		b.Fatal(err)
	}
	return r, sb
}

// BenchmarkAgentIteration is what smolvm adds to one loop iteration: the
// agent's change copied out and committed, the guard, the tests in the
// sandbox and the checkpoint, against the same test command on the host
// in the same run.
func BenchmarkAgentIteration(b *testing.B) {
	r, sb := benchRun(b, nil)
	ctx := context.Background()
	var host, iter, ckpt []time.Duration
	parent := r.scr.base
	for i := range b.N {
		t0 := time.Now()
		cmd := exec.Command("sh", "-c", jsTest)
		cmd.Dir = r.scr.tree
		cmd.Run() // the tests fail: that is the point of the loop
		host = append(host, time.Since(t0))

		change := fmt.Sprintf("exports.add = (a, b) => a + b + %d;\nexports.mul = (a, b) => a * b;\n", i)
		if err := r.svc.WriteFile(ctx, sb, Dir+"/calc.js", strings.NewReader(change)); err != nil {
			b.Fatal(err)
		}
		t0 = time.Now()
		commit, err := r.candidate(ctx, sb, parent, i+1)
		if err != nil {
			b.Fatal(err)
		}
		diff, err := r.scr.diff(ctx, r.scr.base, commit)
		if err != nil {
			b.Fatal(err)
		}
		if vs := guard.Check(diff, guard.Options{Policy: r.policy}); len(vs) > 0 {
			b.Fatal(vs)
		}
		if _, err := r.runTests(ctx, sb); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := r.snapshot(ctx, sb, i+1); err != nil {
			b.Fatal(err)
		}
		ckpt = append(ckpt, time.Since(t1))
		iter = append(iter, time.Since(t0))
		parent = commit
	}
	report(b, "host-test-", host)
	report(b, "sandbox-iter-", iter)
	report(b, "checkpoint-", ckpt)
	over := series.Series{Samples: iter}.Quantile(0.5) - series.Series{Samples: host}.Quantile(0.5)
	b.ReportMetric(float64(over.Microseconds())/1000, "overhead-p50-ms")
}

// BenchmarkAgentFlakyReruns runs the tests on 3 copies of the base
// checkpoint in parallel (what the runner does) and one after another.
func BenchmarkAgentFlakyReruns(b *testing.B) {
	const n = 3
	r, _ := benchRun(b, nil)
	ctx := context.Background()
	var par, seq []time.Duration
	for range b.N {
		t0 := time.Now()
		if _, err := r.rerunBase(ctx, n, r.o.Test); err != nil {
			b.Fatal(err)
		}
		par = append(par, time.Since(t0))
		t0 = time.Now()
		for range n {
			sb, err := r.restore(ctx, r.baseSnap)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := r.runTests(ctx, sb); err != nil {
				b.Fatal(err)
			}
			r.remove(ctx, sb)
		}
		seq = append(seq, time.Since(t0))
	}
	report(b, "parallel-", par)
	report(b, "sequential-", seq)
}

// tenBugs is a repository with ten wrong functions, one per file, and a
// test for each; tenFixes fixes all ten: a change of ten hunks.
func tenBugs() (files, fixes map[string]string) {
	files, fixes = map[string]string{}, map[string]string{}
	var tests strings.Builder
	tests.WriteString("const test = require('node:test');\nconst assert = require('node:assert');\n")
	for i := range 10 {
		name := fmt.Sprintf("f%d.js", i)
		files[name] = fmt.Sprintf("// f%d adds %d to a.\nexports.f = (a) => a - %d;\n", i, i+1, i+1)
		fixes[name] = fmt.Sprintf("// f%d adds %d to a.\nexports.f = (a) => a + %d;\n", i, i+1, i+1)
		fmt.Fprintf(&tests, "test('f%d', () => { assert.strictEqual(require('./%s').f(1), %d); });\n", i, name, i+2)
	}
	files["all.test.js"] = tests.String()
	return files, fixes
}

// BenchmarkAgentEvidence is what the review evidence adds to a resolved
// run of a ten-hunk change: each hunk reverted alone in a fork of the
// verdict's sandbox and the tests run there, at most 4 forks at once
// (the default), all 10 at once, and one after another.
func BenchmarkAgentEvidence(b *testing.B) {
	files, fixes := tenBugs()
	r, sb := benchRun(b, files)
	ctx := context.Background()
	for name, data := range fixes {
		if err := r.svc.WriteFile(ctx, sb, Dir+"/"+name, strings.NewReader(data)); err != nil {
			b.Fatal(err)
		}
	}
	commit, err := r.candidate(ctx, sb, r.scr.base, 1)
	if err != nil {
		b.Fatal(err)
	}
	diff, err := r.scr.diff(ctx, r.scr.base, commit)
	if err != nil {
		b.Fatal(err)
	}
	changed := guard.ParseDiff(diff)
	if res, err := r.runTests(ctx, sb); err != nil || !res.Green() || len(changed) != 10 {
		b.Fatalf("the fixed tree: %s, %v; %d files changed", res.Summary(), err, len(changed))
	}
	series := map[string][]time.Duration{}
	for range b.N {
		for _, c := range []struct {
			name     string
			parallel int
		}{{"parallel4-", DefaultPinParallel}, {"parallel10-", 10}, {"sequential-", 1}} {
			t0 := time.Now()
			pins, err := r.pin(ctx, sb, commit, changed, c.parallel)
			if err != nil {
				b.Fatal(err)
			}
			series[c.name] = append(series[c.name], time.Since(t0))
			for _, p := range pins {
				if !p.Pinned {
					b.Fatalf("%s %s not pinned", p.File, p.Header)
				}
			}
		}
	}
	for name, samples := range series {
		report(b, name, samples)
	}
}
