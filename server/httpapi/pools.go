package httpapi

import (
	"errors"
	"net/http"

	"smolvm.dev/smolvm/api"
	"smolvm.dev/smolvm/internal/names"
	"smolvm.dev/smolvm/sandbox"
)

func (s *Server) registerPoolRoutes(route, bare func(string, http.HandlerFunc)) {
	route("GET /v1/pools", s.listPools)
	route("POST /v1/pools", s.createPool)
	route("DELETE /v1/pools/{pool}", s.removePool)
	bare("POST /v1/pools/{pool}/fill", s.fillPool)
}

func (s *Server) listPools(w http.ResponseWriter, r *http.Request) {
	pools, err := s.o.Manager.Pools(r.Context())
	if pools == nil && err == nil {
		pools = []*sandbox.Pool{}
	}
	reply(w, pools, err)
}

func (s *Server) createPool(w http.ResponseWriter, r *http.Request) {
	var req api.PoolRequest
	if err := decode(r.Body, &req); err != nil {
		writeError(w, err)
		return
	}
	if err := checkNames(field{"name", names.Pool, req.Name}, field{"image", names.Image, req.Image}, field{"from", names.Snapshot, req.From}); err != nil {
		writeError(w, err)
		return
	}
	p, err := s.o.Manager.CreatePool(r.Context(), sandbox.PoolOptions{Name: req.Name, Image: req.Image, Size: req.Size, Targets: req.Targets, Backend: req.Backend,
		From: req.From, Hot: req.Hot, MemoryBudget: int64(req.MemoryBudget),
		Limits: sandbox.Limits{CPUs: req.CPUs, Memory: int64(req.Memory), Pids: req.Pids, Disk: int64(req.Disk)}})
	if err == nil && req.Fill {
		p, err = s.fill(r, p.Name)
	}
	created(w, p, err)
}

func (s *Server) fillPool(w http.ResponseWriter, r *http.Request) {
	p, err := s.fill(r, r.PathValue("pool"))
	reply(w, p, err)
}

// fill fills a pool and returns it; a full memory budget is not a
// failure, the pool just holds fewer.
func (s *Server) fill(r *http.Request, name string) (*sandbox.Pool, error) {
	if _, err := s.o.Manager.FillPool(r.Context(), name); err != nil && !errors.Is(err, sandbox.ErrPoolBudget) {
		return nil, err
	}
	return s.o.Manager.Pool(r.Context(), name)
}

func (s *Server) removePool(w http.ResponseWriter, r *http.Request) {
	if err := s.o.Manager.RemovePool(r.Context(), r.PathValue("pool")); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
