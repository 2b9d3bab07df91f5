package e2b

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"smolvm.dev/smolvm/api/e2bapi"
	"smolvm.dev/smolvm/sandbox"
)

// E2B's sandbox snapshots are smolvm checkpoints: createSnapshot
// checkpoints a running sandbox (which keeps running), and
// Sandbox.create(snapshotId) restores one into a new sandbox, memory and
// processes included.

func newSnapshotJSON(sn *sandbox.Snapshot) e2bapi.Snapshot {
	names := sn.Names
	if names == nil {
		names = []string{}
	}
	return e2bapi.Snapshot{SnapshotID: sn.ID, Names: names}
}

// fromTemplate makes a sandbox for a template that names no image: a
// snapshot to restore, or the SDK's default template.
func (h *Handler) fromTemplate(ctx context.Context, template string, o sandbox.CreateOptions) (*sandbox.Sandbox, error) {
	if h.snaps != nil {
		sb, err := h.m.Restore(ctx, template, sandbox.RestoreOptions{Labels: o.Config.Labels})
		if err == nil {
			// The copy carries its source's lifetime; this request's wins.
			// A code interpreter down in the checkpoint starts at the
			// first request to its port (kernels.ensure).
			return h.m.SetTTL(ctx, sb.ID, o.Config.TTL)
		}
		if !errors.Is(err, sandbox.ErrSnapshotNotFound) && !errors.Is(err, sandbox.ErrInvalidSnapshotName) {
			return nil, err
		}
	}
	switch template {
	case e2bapi.DefaultTemplate:
		o.Image = sandbox.DefaultImage
		return h.m.Create(ctx, o)
	case e2bapi.CodeInterpreterTemplate:
		o.Image = sandbox.DefaultImage
		sb, err := h.m.Create(ctx, o)
		if err != nil {
			return nil, err
		}
		return h.withKernel(ctx, sb)
	}
	return nil, fmt.Errorf("%w: %q is neither an image nor a snapshot", sandbox.ErrImageNotFound, template)
}

func (h *Handler) createSnapshot(w http.ResponseWriter, r *http.Request) {
	var req e2bapi.SnapshotRequest
	if err := decodeBody(r, &req); err != nil {
		writeAPIError(w, http.StatusBadRequest, err.Error())
		return
	}
	if h.snaps == nil {
		writeAPIError(w, http.StatusNotImplemented, "snapshots: this server has no snapshot store")
		return
	}
	sb, ok := h.lookup(w, r, r.PathValue("id"))
	if !ok {
		return
	}
	sn, err := h.m.Checkpoint(r.Context(), sb.ID, sandbox.CheckpointOptions{Name: req.Name})
	if errors.Is(err, sandbox.ErrInvalidSnapshotName) || errors.Is(err, sandbox.ErrSnapshotNameInUse) {
		err = fmt.Errorf("name: %w", err)
	}
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, newSnapshotJSON(sn))
}

// listSnapshots answers GET /snapshots, filtered by the sandbox they were
// taken of (sandboxID) and by name.
func (h *Handler) listSnapshots(w http.ResponseWriter, r *http.Request) {
	out := []e2bapi.Snapshot{}
	if h.snaps == nil {
		writeJSON(w, http.StatusOK, out)
		return
	}
	sns, err := h.snaps.List(r.Context())
	if err != nil {
		writeErr(w, err)
		return
	}
	f, err := e2bapi.ParseSnapshotFilter(r.URL.Query())
	if err != nil {
		writeAPIError(w, http.StatusBadRequest, err.Error())
		return
	}
	for _, sn := range sns {
		if !f.Match(sn.Lineage.Sandbox, sn.Names) {
			continue
		}
		out = append(out, newSnapshotJSON(&sn))
	}
	writeJSON(w, http.StatusOK, out)
}

// deleteTemplate answers DELETE /templates/{id}, which the SDK's
// deleteSnapshot calls. Only snapshots are templates that can be deleted
// here; a snapshot a sandbox was restored from is kept (409).
func (h *Handler) deleteTemplate(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("template")
	if h.snaps == nil {
		writeAPIError(w, http.StatusNotFound, fmt.Sprintf("snapshot %q not found", id))
		return
	}
	err := h.snaps.Remove(r.Context(), id, func(id string) (bool, error) { return h.m.SnapshotInUse(r.Context(), id) })
	switch {
	case errors.Is(err, sandbox.ErrInvalidSnapshotName):
		// An ID that is no snapshot name names no snapshot.
		writeAPIError(w, http.StatusNotFound, err.Error())
	case err != nil:
		writeErr(w, err)
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}
