package runner

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/internal/proc"
	"smolvm.dev/smolvm/internal/store"
	"smolvm.dev/smolvm/workflow/runner/guard"
	"smolvm.dev/smolvm/workflow/runner/testparse"
)

// ErrRunNotFound is returned for a run ID the log does not hold.
var ErrRunNotFound = errdefs.New(errdefs.ErrNotFound, "no such agent run")

// Run is one agent run as the log keeps it.
type Run struct {
	ID      string    `json:"id"`
	Created time.Time `json:"created"`
	Repo    string    `json:"repo"`
	Task    string    `json:"task"`
	Test    string    `json:"test"`
	Agent   string    `json:"agent"`
	Base    string    `json:"base"` // the base commit (scratch repository)
	// BaseSnapshot is the checkpoint of the base state (iteration 0).
	BaseSnapshot string `json:"base_snapshot,omitempty"`
	State        State  `json:"state"`
	Reason       string `json:"reason,omitempty"` // why it stopped
	Best         int    `json:"best"`             // the iteration with most tests passing
	// Verdict is the best iteration's tests re-run against the base
	// commit's pristine test files.
	Verdict *testparse.Result `json:"verdict,omitempty"`
	// Evidence is what a reviewer reads of the change (Evidence).
	Evidence *Evidence     `json:"evidence,omitempty"`
	Flaky    []string      `json:"flaky,omitempty"`
	Usage    Usage         `json:"usage"`
	Elapsed  time.Duration `json:"elapsed"`
	// Owner is the smolvm process running it: a run left running by an
	// owner that is gone reads as stopped (interrupted).
	proc.Owner
}

// interrupted marks r stopped if its owner died while it ran. Its last
// checkpoint stands: agent resume goes on from there.
func (r *Run) interrupted() *Run {
	if r.State == Running && !r.Alive() {
		r.State = Stopped
		r.Reason = fmt.Sprintf("interrupted: smolvm (pid %d) ended while the run went on; resume it from a checkpoint (smolvm agent resume)", r.PID)
	}
	return r
}

// State is where a run stands.
type State string

const (
	Running  State = "running"
	Resolved State = "resolved" // green, on pristine tests
	Stopped  State = "stopped"  // a budget ran out or it got stuck: the best iteration stands
	Failed   State = "failed"   // an error ended it
)

// Iteration is one step of the loop: the agent's change, what the guard
// and the tests said of it, and the checkpoint it left.
type Iteration struct {
	N        int       `json:"n"`
	Created  time.Time `json:"created"`
	Parent   int       `json:"parent"` // the iteration it started from
	Commit   string    `json:"commit,omitempty"`
	Snapshot string    `json:"snapshot,omitempty"`
	// Diff is the change against the base commit.
	Diff       string            `json:"diff,omitempty"`
	Result     *testparse.Result `json:"result,omitempty"` // nil when the guard rejected the change
	Violations []guard.Violation `json:"violations,omitempty"`
	// Tests is the agent's test files run on the base code, when the
	// change touches test files (TestCheck).
	Tests *TestCheck `json:"test_check,omitempty"`
	Flaky []string   `json:"flaky,omitempty"`
	Usage Usage      `json:"usage"`
	Note  string     `json:"note,omitempty"`
}

// Passed is the number of tests that passed, -1 for a rejected change.
func (it Iteration) Passed() int {
	if it.Result == nil {
		return -1
	}
	return it.Result.Passed
}

// Log keeps runs and their iterations in the state database.
type Log struct{ db *sql.DB }

var schema = []string{
	`CREATE TABLE agent_runs (id TEXT PRIMARY KEY, created INTEGER NOT NULL, data TEXT NOT NULL)`,
	`CREATE TABLE agent_iterations (run TEXT NOT NULL, n INTEGER NOT NULL, data TEXT NOT NULL, PRIMARY KEY (run, n))`,
}

// OpenLog applies the run log's schema to st.
func OpenLog(ctx context.Context, st *store.Store) (*Log, error) {
	if err := st.Migrate(ctx, "agent", schema); err != nil {
		return nil, err
	}
	return &Log{db: st.DB()}, nil
}

// NewRunID returns a fresh run ID, for callers that name a run before
// it starts (Options.ID).
func NewRunID() string {
	b := make([]byte, 4)
	rand.Read(b)
	return "run-" + hex.EncodeToString(b)
}

// Save writes run, replacing what was there.
func (l *Log) Save(ctx context.Context, run *Run) error {
	data, err := json.Marshal(run)
	if err != nil {
		return err
	}
	_, err = l.db.ExecContext(ctx, `INSERT INTO agent_runs (id, created, data) VALUES (?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET data = excluded.data`, run.ID, run.Created.UnixMilli(), string(data))
	if err != nil {
		return fmt.Errorf("save run %s: %w", run.ID, err)
	}
	return nil
}

// Add records an iteration of run.
func (l *Log) Add(ctx context.Context, run string, it Iteration) error {
	data, err := json.Marshal(it)
	if err != nil {
		return err
	}
	_, err = l.db.ExecContext(ctx, `INSERT INTO agent_iterations (run, n, data) VALUES (?, ?, ?)
		ON CONFLICT (run, n) DO UPDATE SET data = excluded.data`, run, it.N, string(data))
	if err != nil {
		return fmt.Errorf("save iteration %d of %s: %w", it.N, run, err)
	}
	return nil
}

// Get returns a run.
func (l *Log) Get(ctx context.Context, id string) (*Run, error) {
	r, err := store.Doc[Run](ctx, l.db, ErrRunNotFound, `SELECT data FROM agent_runs WHERE id = ?`, id)
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", id, err)
	}
	return r.interrupted(), nil
}

// Runs lists every run, newest first.
func (l *Log) Runs(ctx context.Context) ([]*Run, error) {
	runs, err := store.Docs[Run](ctx, l.db, `SELECT data FROM agent_runs ORDER BY created DESC`)
	for _, r := range runs {
		r.interrupted()
	}
	return runs, err
}

// Iterations returns a run's iterations in order.
func (l *Log) Iterations(ctx context.Context, run string) ([]Iteration, error) {
	its, err := store.Docs[Iteration](ctx, l.db, `SELECT data FROM agent_iterations WHERE run = ? ORDER BY n`, run)
	if err != nil {
		return nil, fmt.Errorf("iterations of %s: %w", run, err)
	}
	out := make([]Iteration, len(its))
	for i, it := range its {
		out[i] = *it
	}
	return out, nil
}
