package httpapi

import (
	"net/http"

	"smolvm.dev/smolvm/api"
	"smolvm.dev/smolvm/workflow/branch"
)

// listBranchRuns lists the fan-outs, newest first, as their status reads
// now: a run whose smolvm died says so (Coordinator.Runs).
func (s *Server) listBranchRuns(w http.ResponseWriter, r *http.Request) {
	runs, branches, err := s.o.Branches.Runs(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	out := make([]api.BranchRun, 0, len(runs))
	for i, run := range runs {
		out = append(out, wireBranchRun(run, branches[i]))
	}
	writeJSON(w, http.StatusOK, out)
}

// getBranchRun answers a fan-out with its branches and its merge queue.
func (s *Server) getBranchRun(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	run, bs, err := s.o.Branches.Get(r.Context(), id)
	if err != nil {
		writeError(w, err)
		return
	}
	steps, err := s.o.Branches.Store.Steps(r.Context(), id)
	if err != nil {
		writeError(w, err)
		return
	}
	out := api.BranchRunLog{Run: wireBranchRun(run, bs), Branches: make([]api.Branch, 0, len(bs)), Steps: make([]api.BranchStep, 0, len(steps))}
	for _, b := range bs {
		wb := api.Branch{K: b.K, Name: b.Name, Task: b.Task, Agent: b.Agent, State: string(b.State), Reason: b.Reason,
			AgentRun: b.AgentRun, Commit: b.Commit, Tests: wireTests(b.Result), Flaky: b.Flaky, DiffLines: b.DiffLines,
			Interventions: b.Interventions, Iterations: b.Iterations, Usage: wireUsage(b.Usage), Elapsed: b.Elapsed.Seconds()}
		if b.Last != nil {
			p := wireProgress(*b.Last)
			wb.Last = &p
		}
		out.Branches = append(out.Branches, wb)
	}
	for _, st := range steps {
		out.Steps = append(out.Steps, api.BranchStep{N: st.N, Created: st.Created, Branch: st.Branch, Kind: st.Kind,
			Target: st.Target, Commit: st.Commit, Files: st.Files, Tests: wireTests(st.Result), Note: st.Note})
	}
	writeJSON(w, http.StatusOK, out)
}

func wireBranchRun(r *branch.Run, bs []*branch.Branch) api.BranchRun {
	out := api.BranchRun{ID: r.ID, Created: r.Created, Repo: r.Repo, Mode: string(r.Mode), Task: r.Task, Setup: r.Setup,
		CI:   api.BranchCI{Command: r.CI.Command, Source: r.CI.Source, Unsupported: r.CI.Unsupported},
		Base: r.Base, Snapshot: r.Snapshot, SetupElapsed: r.SetupElapsed.Seconds(), State: string(r.State), Reason: r.Reason,
		Elapsed: r.Elapsed.Seconds(), Integration: r.Integration, Summary: r.Summary, Branches: len(bs)}
	for _, b := range bs {
		if b.Green() {
			out.Green++
		}
	}
	return out
}
