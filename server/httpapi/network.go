package httpapi

import (
	"net/http"

	"smolvm.dev/smolvm/sandbox"
)

// NetworkUpdateRequest is the body of PUT /v1/sandboxes/{id}/network: the
// whole new policy. Published ports stay as they are.
type NetworkUpdateRequest struct {
	Mode  sandbox.NetworkMode `json:"mode"`
	Hosts []string            `json:"allow_hosts,omitempty"`
	CIDRs []string            `json:"allow_cidrs,omitempty"`
}

func (s *Server) registerNetworkRoutes(route func(string, http.HandlerFunc)) {
	route("GET /v1/sandboxes/{id}/network", s.networkState)
	route("PUT /v1/sandboxes/{id}/network", s.updateNetwork)
	route("GET /v1/sandboxes/{id}/network/events", s.networkEvents)
}

func (s *Server) networkState(w http.ResponseWriter, r *http.Request) {
	st, err := s.o.Manager.NetStatus(r.Context(), r.PathValue("id"))
	reply(w, st, err)
}

func (s *Server) networkEvents(w http.ResponseWriter, r *http.Request) {
	evs, err := s.o.Manager.NetEvents(r.Context(), r.PathValue("id"))
	if evs == nil && err == nil {
		evs = []sandbox.NetworkEvent{}
	}
	reply(w, evs, err)
}

func (s *Server) updateNetwork(w http.ResponseWriter, r *http.Request) {
	var req NetworkUpdateRequest
	if err := decode(r.Body, &req); err != nil {
		writeError(w, err)
		return
	}
	sb, err := s.o.Manager.NetUpdate(r.Context(), r.PathValue("id"), sandbox.Network{Mode: req.Mode, Hosts: req.Hosts, CIDRs: req.CIDRs})
	reply(w, sb, err)
}
