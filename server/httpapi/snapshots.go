package httpapi

import (
	"time"

	"net/http"

	"smolvm.dev/smolvm/api"
	"smolvm.dev/smolvm/internal/names"
	"smolvm.dev/smolvm/sandbox"
)

func (s *Server) registerSnapshotRoutes(route func(string, http.HandlerFunc)) {
	route("POST /v1/sandboxes/{id}/checkpoint", s.checkpoint)
	route("POST /v1/sandboxes/{id}/fork", s.fork)
	route("POST /v1/sandboxes/{id}/pause", s.pause)
	route("POST /v1/sandboxes/{id}/resume", s.resume)
	route("GET /v1/snapshots", s.listSnapshots)
	route("GET /v1/snapshots/{snapshot}", s.getSnapshot)
	route("DELETE /v1/snapshots/{snapshot}", s.removeSnapshot)
	route("POST /v1/snapshots/{snapshot}/restore", s.restore)
}

func (s *Server) checkpoint(w http.ResponseWriter, r *http.Request) {
	var req api.CheckpointRequest
	err := decodeOptional(r, &req)
	if err == nil {
		err = checkNames(field{"name", names.Snapshot, req.Name})
	}
	if err != nil {
		writeError(w, err)
		return
	}
	snap, err := s.o.Manager.Checkpoint(r.Context(), r.PathValue("id"), sandbox.CheckpointOptions{Name: req.Name, Stop: req.Stop})
	created(w, snap, err)
}

func (s *Server) fork(w http.ResponseWriter, r *http.Request) {
	var req api.ForkRequest
	err := decodeOptional(r, &req)
	if err == nil {
		err = checkNames(field{"name_prefix", names.Sandbox, req.NamePrefix})
	}
	if err != nil {
		writeError(w, err)
		return
	}
	o := sandbox.ForkOptions{N: 1, NamePrefix: req.NamePrefix}
	if req.N != nil {
		o.N = *req.N
	}
	sbs, err := s.o.Manager.Fork(r.Context(), r.PathValue("id"), o)
	created(w, sbs, err)
}

func (s *Server) pause(w http.ResponseWriter, r *http.Request) {
	sb, err := s.o.Manager.Pause(r.Context(), r.PathValue("id"))
	reply(w, sb, err)
}

func (s *Server) resume(w http.ResponseWriter, r *http.Request) {
	sb, err := s.o.Manager.Resume(r.Context(), r.PathValue("id"))
	reply(w, sb, err)
}

func (s *Server) restore(w http.ResponseWriter, r *http.Request) {
	var req api.RestoreRequest
	err := decodeOptional(r, &req)
	if err == nil {
		err = checkNames(field{"name", names.Sandbox, req.Name})
	}
	if err != nil {
		writeError(w, err)
		return
	}
	sb, err := s.o.Manager.Restore(r.Context(), r.PathValue("snapshot"), sandbox.RestoreOptions{Name: req.Name, TTL: time.Duration(req.TTL)})
	created(w, sb, err)
}

func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request) {
	snaps, err := s.o.Snapshots.List(r.Context())
	if snaps == nil && err == nil {
		snaps = []sandbox.Snapshot{}
	}
	reply(w, snaps, err)
}

func (s *Server) getSnapshot(w http.ResponseWriter, r *http.Request) {
	snap, err := s.o.Snapshots.Get(r.Context(), r.PathValue("snapshot"))
	reply(w, snap, err)
}

func (s *Server) removeSnapshot(w http.ResponseWriter, r *http.Request) {
	err := s.o.Snapshots.Remove(r.Context(), r.PathValue("snapshot"), func(id string) (bool, error) {
		return s.o.Manager.SnapshotInUse(r.Context(), id)
	})
	if err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func created(w http.ResponseWriter, v any, err error) {
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, v)
}
