package httpapi

import (
	"fmt"
	"net/http"
	"time"

	"smolvm.dev/smolvm/api"
	"smolvm.dev/smolvm/internal/names"
	"smolvm.dev/smolvm/sandbox"
)

// maxSnapshotImport bounds a snapshot sent to POST /v1/snapshots/import:
// its memory image is most of it.
const maxSnapshotImport = 256 << 30

// registerSnapshotRoutes registers the snapshot routes; bare is how a
// POST without a body is registered, transfer how a route whose body is a
// whole snapshot is (streamed).
func (s *Server) registerSnapshotRoutes(route, bare, transfer func(string, http.HandlerFunc)) {
	route("POST /v1/sandboxes/{id}/checkpoint", s.checkpoint)
	route("POST /v1/sandboxes/{id}/fork", s.fork)
	bare("POST /v1/sandboxes/{id}/pause", s.pause)
	bare("POST /v1/sandboxes/{id}/resume", s.resume)
	route("GET /v1/snapshots", s.listSnapshots)
	route("GET /v1/snapshots/{snapshot}", s.getSnapshot)
	route("DELETE /v1/snapshots/{snapshot}", s.removeSnapshot)
	route("POST /v1/snapshots/{snapshot}/restore", s.restore)
	route("GET /v1/snapshots/{snapshot}/export", s.exportSnapshot)
	transfer("POST /v1/snapshots/import", s.importSnapshot)
}

// exportSnapshot streams a sealed snapshot. Every check is made before
// the first byte; a failure after it cuts the stream short, which the
// importer refuses as corrupt.
func (s *Server) exportSnapshot(w http.ResponseWriter, r *http.Request) {
	snap, err := s.o.Snapshots.Get(r.Context(), r.PathValue("snapshot"))
	if err == nil && (!snap.Durable || snap.Digest == "") {
		err = fmt.Errorf("export %s: %w: retry once it is durable", snap.ID, sandbox.ErrSnapshotNotSealed)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/x-tar")
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", snap.ID+".tar"))
	if err := s.o.Snapshots.Export(r.Context(), snap, w); err != nil {
		panic(http.ErrAbortHandler) // the client sees a reset, not a clean end
	}
}

// importSnapshot stores a snapshot from an export, named by the query's
// name: 201 when copied, 200 when it was here already.
func (s *Server) importSnapshot(w http.ResponseWriter, r *http.Request) {
	snap, copied, err := s.o.Snapshots.Import(r.Context(), r.Body, r.URL.Query().Get("name"))
	switch {
	case err != nil:
		writeError(w, err)
	case copied:
		writeJSON(w, http.StatusCreated, snap)
	default:
		writeJSON(w, http.StatusOK, snap)
	}
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
	sb, err := s.o.Manager.Restore(r.Context(), r.PathValue("snapshot"), sandbox.RestoreOptions{Name: req.Name, TTL: time.Duration(req.TTL), Labels: req.Labels})
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
