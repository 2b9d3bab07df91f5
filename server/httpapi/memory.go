package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"

	"smolvm.dev/smolvm/api"
	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/runtime/tenant"
	"smolvm.dev/smolvm/workflow/memory"
)

// registerMemoryRoutes serves a repository's project memory
// (workflow/memory), for the web console. They are the admin's: the
// repository is a path on the server's host, as an agent run's.
func (s *Server) registerMemoryRoutes(route func(string, http.HandlerFunc)) {
	only := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if _, scoped := tenant.Of(r.Context()); scoped {
				writeError(w, tenant.ErrAdminOnly)
				return
			}
			h(w, r)
		}
	}
	route("GET /v1/memory", only(s.listFacts))
	route("POST /v1/memory", only(s.actOnFact))
	route("POST /v1/memory/verify", only(s.verifyFacts))
}

// openMemory opens the memory of repo, which must be an absolute path in
// a git work tree.
func openMemory(ctx context.Context, repo string) (*memory.Repo, error) {
	if repo == "" || !filepath.IsAbs(repo) {
		return nil, invalid("repo", "want an absolute path on the server's host")
	}
	m, err := memory.Open(ctx, repo)
	if err != nil {
		return nil, invalid("repo", err.Error())
	}
	return m, nil
}

func (s *Server) listFacts(w http.ResponseWriter, r *http.Request) {
	m, err := openMemory(r.Context(), r.URL.Query().Get("repo"))
	if err != nil {
		writeError(w, err)
		return
	}
	facts, err := m.List(r.Context())
	if facts == nil {
		facts = []*memory.Fact{}
	}
	reply(w, facts, err)
}

func (s *Server) actOnFact(w http.ResponseWriter, r *http.Request) {
	var req api.MemoryRequest
	if err := decode(r.Body, &req); err != nil {
		writeError(w, err)
		return
	}
	m, err := openMemory(r.Context(), req.Repo)
	if err != nil {
		writeError(w, err)
		return
	}
	if req.Fact == "" {
		writeError(w, invalid("fact", "no fact"))
		return
	}
	by := "human:admin"
	if req.By != "" {
		by = "human:" + req.By
	}
	ctx := r.Context()
	var f *memory.Fact
	switch req.Action {
	case "accept", "reject":
		f, err = m.Review(ctx, req.Fact, req.Action == "accept", by, req.Why)
	case "confirm":
		f, err = m.Confirm(ctx, req.Fact, by, req.Why)
	case "correct":
		if req.Text == "" {
			writeError(w, invalid("text", "correct needs the new text"))
			return
		}
		f, err = m.Edit(ctx, req.Fact, memory.EditOptions{Text: req.Text, By: by, Why: req.Why})
	case "retire":
		if req.Why == "" {
			writeError(w, invalid("why", "retire needs a reason"))
			return
		}
		f, err = m.Forget(ctx, req.Fact, by, req.Why)
	default:
		writeError(w, invalid("action", `want accept, reject, confirm, correct or retire`))
		return
	}
	// What the memory refuses without a class (a fact in the wrong state
	// for the action, a bad name) is the request's conflict with it.
	if err != nil && errdefs.Class(err) == nil {
		err = fmt.Errorf("%w: %w", errdefs.ErrConflict, err)
	}
	reply(w, f, err)
}

func (s *Server) verifyFacts(w http.ResponseWriter, r *http.Request) {
	var req api.MemoryVerifyRequest
	if err := decode(r.Body, &req); err != nil {
		writeError(w, err)
		return
	}
	m, err := openMemory(r.Context(), req.Repo)
	if err != nil {
		writeError(w, err)
		return
	}
	res, err := m.Verify(r.Context(), "human:admin")
	changes := []api.MemoryChange{}
	for _, c := range res {
		if c.Change == "" {
			continue
		}
		mc := api.MemoryChange{Fact: c.Fact.ID, Change: c.Change}
		for _, a := range c.Drifted {
			mc.Drift = append(mc.Drift, a.String()+": "+a.Drift)
		}
		changes = append(changes, mc)
	}
	reply(w, changes, err)
}
