package httpapi

import (
	"net/http"

	"smolvm.dev/smolvm/api"
	"smolvm.dev/smolvm/sandbox"
)

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
	var req api.NetworkUpdateRequest
	if err := decode(r.Body, &req); err != nil {
		writeError(w, err)
		return
	}
	sb, err := s.o.Manager.NetUpdate(r.Context(), r.PathValue("id"), sandbox.Network{Mode: req.Mode, Hosts: req.Hosts, CIDRs: req.CIDRs})
	reply(w, sb, err)
}
