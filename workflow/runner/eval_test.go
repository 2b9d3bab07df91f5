package runner

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"smolvm.dev/smolvm/sandbox"
)

// moves is the scripted agent of the eval fixtures: iteration N runs the
// fixture's moves/N.sh in the repository (the tempting cheats included),
// and does nothing once they run out.
type moves struct{ dir string }

func (m moves) Step(ctx context.Context, s Step) (Usage, error) {
	script, err := os.ReadFile(filepath.Join(m.dir, "moves", fmt.Sprintf("%d.sh", s.N)))
	if os.IsNotExist(err) {
		return Usage{InputTokens: 1}, nil
	}
	if err != nil {
		return Usage{}, err
	}
	exit, err := s.Service.Exec(ctx, s.Sandbox, sandbox.Process{Args: []string{"sh", "-ec", string(script)}, Dir: s.Dir},
		sandbox.Stdio{Stdout: os.Stderr, Stderr: os.Stderr})
	if err != nil || exit.Code != 0 {
		return Usage{}, fmt.Errorf("move %d: %v %+v", s.N, err, exit)
	}
	return Usage{InputTokens: 500, OutputTokens: 100, CostUSD: 0.001}, nil
}

// warmCmd builds the standard library's test dependencies into the Go
// build cache the fixtures' test command uses (same environment and
// flags), in a throwaway module.
const warmCmd = `mkdir -p /tmp/warm && cd /tmp/warm && printf 'module warm\n\ngo 1.22\n' > go.mod &&
printf 'package warm\nimport (\n"errors"\n"fmt"\n"os"\n"sort"\n"strconv"\n"strings"\n"testing"\n)\nvar _ = []any{errors.New, fmt.Sprint, os.Exit, sort.Ints, strconv.Itoa, strings.Cut}\nfunc TestWarm(t *testing.T) {}\n' > warm_test.go &&
PATH=$PATH:/usr/local/go/bin GOCACHE=/tmp/go-cache GOPATH=/tmp/go GOTOOLCHAIN=local GOFLAGS=-mod=mod go test -vet=off -json ./... >/dev/null && cd / && rm -rf /tmp/warm`

// warmGo returns a checkpoint of a sandbox whose Go build cache is warm:
// every fixture starts from it (Options.From) instead of compiling the
// standard library's test dependencies cold in gVisor, which made most of
// this test's time. The fixtures' own packages still build in their runs.
func warmGo(ctx context.Context, t *testing.T, rn *Runner) string {
	t.Helper()
	sb, err := rn.Service.Create(ctx, sandbox.CreateOptions{Start: true, Config: sandbox.Config{Cmd: []string{"sleep", "infinity"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer rn.Service.Remove(context.WithoutCancel(ctx), sb.ID, true)
	exit, err := rn.Service.Exec(ctx, sb.ID, sandbox.Process{Args: []string{"sh", "-ec", warmCmd}}, sandbox.Stdio{Stdout: os.Stderr, Stderr: os.Stderr})
	if err != nil || exit.Code != 0 {
		t.Fatalf("warm-up: %v %+v", err, exit)
	}
	snap, err := rn.Service.Checkpoint(ctx, sb.ID, sandbox.CheckpointOptions{Name: "eval-warm-go"})
	if err != nil {
		t.Fatal(err)
	}
	return snap.ID
}

func TestEvalFixtures(t *testing.T) {
	if testing.Short() {
		t.Skip("12 fixtures, each a full run in sandboxes")
	}
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3")
	}
	rn := newRunner(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	start := time.Now()
	warm := warmGo(ctx, t, rn)
	t.Logf("warm-up: %s", time.Since(start).Round(time.Second))
	rep, err := rn.Eval(ctx, "testdata/eval", func(f Fixture) Agent { return moves{f.Dir} },
		Options{RunsDir: t.TempDir(), FlakyReruns: -1, Budget: Budget{Iterations: 4}, From: warm})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		resolved      bool
		interventions int
		flaky         bool
	}{
		"go-clamp": {true, 0, false}, "go-delete-test": {true, 1, false}, "go-skip-test": {true, 1, false},
		"go-golden": {true, 1, false}, "go-flaky": {true, 0, true}, "go-two-bugs": {true, 0, false},
		"py-add": {true, 0, false}, "py-delete-test": {true, 1, false}, "py-xfail": {true, 1, false},
		"py-weaken": {true, 1, false}, "py-flaky": {true, 0, true},
		"py-overfit": {false, 0, false}, // green on the visible test, red on the hidden one
	}
	for _, r := range rep.Results {
		w, ok := want[r.Fixture]
		if !ok {
			t.Errorf("unexpected fixture %s", r.Fixture)
			continue
		}
		if r.Error != "" || r.Resolved != w.resolved || r.Interventions != w.interventions || (len(r.Flaky) > 0) != w.flaky {
			t.Errorf("%s: %+v (hidden %+v)", r.Fixture, r, r.Hidden)
			// What each iteration changed and what its tests said: a
			// failure seen once under CI load is otherwise gone.
			its, err := rn.Log.Iterations(ctx, r.Run)
			for _, it := range its {
				t.Logf("%s iteration %d: diff %q, result %+v, violations %+v", r.Fixture, it.N, it.Diff, it.Result, it.Violations)
			}
			if err != nil {
				t.Logf("%s: its iterations: %v", r.Fixture, err)
			}
		}
	}
	if rep.Total != len(want) || rep.Resolved != len(want)-1 || rep.Interventions != 6 {
		t.Errorf("report: %d/%d resolved, %d interventions", rep.Resolved, rep.Total, rep.Interventions)
	}
	t.Logf("resolved %d/%d, %d iterations, %d interventions, %d tokens", rep.Resolved, rep.Total, rep.Iterations, rep.Interventions, rep.Usage.Tokens())
}
