package httpapi

import (
	"net/http"

	"smolvm.dev/smolvm/api"
	"smolvm.dev/smolvm/internal/names"
	"smolvm.dev/smolvm/sandbox"
)

// Volumes are the caller's tenant's: another tenant's answers 404 as a
// missing one (the Manager looks them up by tenant).
func (s *Server) registerVolumeRoutes(route func(string, http.HandlerFunc)) {
	route("GET /v1/volumes", s.listVolumes)
	route("POST /v1/volumes", s.createVolume)
	route("GET /v1/volumes/{volume}", s.getVolume)
	route("DELETE /v1/volumes/{volume}", s.removeVolume)
}

func (s *Server) listVolumes(w http.ResponseWriter, r *http.Request) {
	vs, err := s.o.Manager.ListVolumes(r.Context())
	reply(w, vs, err)
}

func (s *Server) createVolume(w http.ResponseWriter, r *http.Request) {
	var req api.VolumeRequest
	if err := decode(r.Body, &req); err != nil {
		writeError(w, err)
		return
	}
	if err := checkNames(field{"name", names.Volume, req.Name}); err != nil {
		writeError(w, err)
		return
	}
	v, err := s.o.Manager.CreateVolume(r.Context(), sandbox.VolumeOptions{Name: req.Name, Size: int64(req.Size)})
	created(w, v, err)
}

func (s *Server) getVolume(w http.ResponseWriter, r *http.Request) {
	v, err := s.o.Manager.GetVolume(r.Context(), r.PathValue("volume"))
	reply(w, v, err)
}

func (s *Server) removeVolume(w http.ResponseWriter, r *http.Request) {
	force, err := boolParam(r, "force")
	if err == nil {
		err = s.o.Manager.RemoveVolume(r.Context(), r.PathValue("volume"), force)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
