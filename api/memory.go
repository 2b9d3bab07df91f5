package api

// MemoryRequest is the body of POST /v1/memory: an action on one fact of
// the project memory of Repo (a repository on the server's host), as
// `smolvm memory` takes them. Action is accept or reject (a proposal),
// confirm (a stale fact still holds), correct (Text replaces the fact's
// text) or retire (forget it); Why says why, By who (a name; the history
// records human:By, default human:admin).
type MemoryRequest struct {
	Repo   string `json:"repo"`
	Fact   string `json:"fact"`
	Action string `json:"action"`
	Text   string `json:"text,omitempty"`
	Why    string `json:"why,omitempty"`
	By     string `json:"by,omitempty"`
}

// MemoryVerifyRequest is the body of POST /v1/memory/verify.
type MemoryVerifyRequest struct {
	Repo string `json:"repo"`
}

// MemoryChange is a fact whose state a verify changed: Change is "stale"
// (Drift says why each drifted anchor no longer matches) or "valid"
// (its anchors match again).
type MemoryChange struct {
	Fact   string   `json:"fact"`
	Change string   `json:"change"`
	Drift  []string `json:"drift,omitempty"`
}
