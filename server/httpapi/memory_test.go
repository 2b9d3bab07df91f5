package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"smolvm.dev/smolvm/api"
	"smolvm.dev/smolvm/tests/testenv"
	"smolvm.dev/smolvm/workflow/memory"
)

// TestMemoryRoutes acts on a real repository's project memory through
// the API: list, accept a proposal, verify after a code change (stale,
// with the drift), correct, retire; wrong input is a 400, 404 or 409
// that leaves the facts as they were.
func TestMemoryRoutes(t *testing.T) {
	ctx := context.Background()
	repo := testenv.GitRepo(t, map[string]string{"calc.js": "exports.add = (a, b) => a + b;\n"})
	m, err := memory.Open(ctx, repo)
	if err != nil {
		t.Fatal(err)
	}
	add := func(text string, proposed bool) *memory.Fact {
		f, err := m.Add(ctx, memory.AddOptions{Text: text, Kind: memory.Convention, Author: "agent:scripted",
			Anchors: []memory.Anchor{{Path: "calc.js"}}, Proposed: proposed})
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	valid, proposed := add("add adds", false), add("add is pure", true)
	s := New(Options{Token: "t0ken"})
	act := func(body string, code int) memory.Fact {
		t.Helper()
		w, e := call(t, s, "POST", "/v1/memory", body, auth)
		var f memory.Fact
		if w.Code != code || (code == http.StatusOK && json.Unmarshal(w.Body.Bytes(), &f) != nil) {
			t.Fatalf("POST /v1/memory %s: %d %+v %s, want %d", body, w.Code, e, w.Body, code)
		}
		return f
	}
	req := func(fact, action, extra string) string {
		return `{"repo":"` + repo + `","fact":"` + fact + `","action":"` + action + `"` + extra + `}`
	}

	w, _ := call(t, s, "GET", "/v1/memory?repo="+repo, "", auth)
	var facts []memory.Fact
	if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &facts) != nil || len(facts) != 2 {
		t.Fatalf("list: %d %s", w.Code, w.Body)
	}
	if f := act(req(proposed.ID, "accept", `,"why":"checked","by":"ann"`), http.StatusOK); f.Status != memory.Valid || f.History[len(f.History)-1].By != "human:ann" {
		t.Errorf("accepted: %+v", f)
	}

	if err := os.WriteFile(filepath.Join(repo, "calc.js"), []byte("exports.add = (a, b) => a - b;\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	w, _ = call(t, s, "POST", "/v1/memory/verify", `{"repo":"`+repo+`"}`, auth)
	var changes []api.MemoryChange
	if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &changes) != nil || len(changes) != 2 || changes[0].Change != "stale" || len(changes[0].Drift) != 1 || !strings.HasPrefix(changes[0].Drift[0], "calc.js: ") {
		t.Fatalf("verify after the change: %d %s", w.Code, w.Body)
	}
	// A corrected text leaves the anchors' drift standing; a confirm
	// says the fact holds of the code as it is.
	if f := act(req(valid.ID, "correct", `,"text":"add subtracts"`), http.StatusOK); f.Text != "add subtracts" || f.Status != memory.Stale {
		t.Errorf("corrected: %+v", f)
	}
	if f := act(req(valid.ID, "confirm", ""), http.StatusOK); f.Status != memory.Valid {
		t.Errorf("confirmed: %+v", f)
	}
	if f := act(req(valid.ID, "retire", `,"why":"gone"`), http.StatusOK); f.Status != memory.Forgotten {
		t.Errorf("retired: %+v", f)
	}

	act(req(valid.ID, "retire", `,"why":"again"`), http.StatusConflict)
	act(req(proposed.ID, "retire", ""), http.StatusBadRequest) // no reason
	act(req(proposed.ID, "accept", ""), http.StatusConflict)   // stale, not proposed
	act(req("ffffffff", "confirm", ""), http.StatusNotFound)
	act(req(proposed.ID, "burn", ""), http.StatusBadRequest)
	act(req(proposed.ID, "correct", ""), http.StatusBadRequest)
	act(`{"repo":"relative","fact":"x","action":"confirm"}`, http.StatusBadRequest)
	act(`{"repo":"`+t.TempDir()+`","fact":"x","action":"confirm"}`, http.StatusBadRequest)
	if f, err := m.Get(ctx, proposed.ID); err != nil || f.Status != memory.Stale {
		t.Errorf("after the refusals: %+v, %v; want it stale as verify left it", f, err)
	}
}
