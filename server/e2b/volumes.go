package e2b

import (
	"net/http"

	"smolvm.dev/smolvm/api/e2bapi"
	"smolvm.dev/smolvm/sandbox"
)

// E2B's volume API over smolvm's volumes: a volume's ID is its name, and
// a tenant's key sees only its tenant's (the Manager looks them up by
// tenant, so another's answers 404 as a missing one). E2B has no quota
// in the request: a volume gets smolvm's default size. The content API
// is volumecontent.go.
func (h *Handler) volumeRoutes(handle func(string, http.HandlerFunc)) {
	handle("GET /volumes", h.listVolumes)
	handle("POST /volumes", h.createVolume)
	handle("GET /volumes/{volume}", h.getVolume)
	handle("DELETE /volumes/{volume}", h.deleteVolume)
}

func (h *Handler) volumeJSON(v *sandbox.Volume) e2bapi.VolumeAndToken {
	return e2bapi.VolumeAndToken{Volume: e2bapi.Volume{VolumeID: v.Name, Name: v.Name}, Token: h.volumeToken(v)}
}

func (h *Handler) listVolumes(w http.ResponseWriter, r *http.Request) {
	vs, err := h.m.ListVolumes(r.Context())
	if err != nil {
		writeErr(w, err)
		return
	}
	out := make([]e2bapi.Volume, 0, len(vs))
	for _, v := range vs {
		out = append(out, h.volumeJSON(v).Volume)
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *Handler) createVolume(w http.ResponseWriter, r *http.Request) {
	var req e2bapi.NewVolume
	if err := decodeBody(r, &req); err != nil {
		writeAPIError(w, http.StatusBadRequest, err.Error())
		return
	}
	v, err := h.m.CreateVolume(r.Context(), sandbox.VolumeOptions{Name: req.Name})
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, h.volumeJSON(v))
}

func (h *Handler) getVolume(w http.ResponseWriter, r *http.Request) {
	v, err := h.m.GetVolume(r.Context(), r.PathValue("volume"))
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, h.volumeJSON(v))
}

// deleteVolume refuses a volume a sandbox mounts (409), as smolvm's own
// remove without force does.
func (h *Handler) deleteVolume(w http.ResponseWriter, r *http.Request) {
	if err := h.m.RemoveVolume(r.Context(), r.PathValue("volume"), false); err != nil {
		writeErr(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// volumeMounts maps a create's volumeMounts to smolvm's, read-write.
func volumeMounts(in []e2bapi.VolumeMount) []sandbox.VolumeMount {
	var out []sandbox.VolumeMount
	for _, v := range in {
		out = append(out, sandbox.VolumeMount{Name: v.Name, Path: v.Path})
	}
	return out
}

// volumeMountsJSON is a sandbox's volumeMounts as its detail gives them.
func volumeMountsJSON(sb *sandbox.Sandbox) []e2bapi.VolumeMount {
	out := []e2bapi.VolumeMount{}
	for _, v := range sb.Config.Volumes {
		out = append(out, e2bapi.VolumeMount{Name: v.Name, Path: v.Path})
	}
	return out
}
