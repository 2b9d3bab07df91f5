package httpapi

import (
	"net/http"

	"smolvm.dev/smolvm/api"
	"smolvm.dev/smolvm/internal/names"
	"smolvm.dev/smolvm/sandbox"
)

// Templates: an image plus, optionally, a started state (runtime/manager's
// templates.go). A sandbox is created from one by naming it as the image
// of POST /v1/sandboxes.
func (s *Server) registerTemplateRoutes(route func(string, http.HandlerFunc)) {
	route("GET /v1/templates", s.listTemplates)
	route("POST /v1/templates", s.buildTemplate)
	route("GET /v1/templates/{template}", s.getTemplate)
	route("DELETE /v1/templates/{template}", s.removeTemplate)
}

func (s *Server) listTemplates(w http.ResponseWriter, r *http.Request) {
	ts, err := s.o.Manager.Templates(r.Context())
	if ts == nil && err == nil {
		ts = []*sandbox.Template{}
	}
	reply(w, ts, err)
}

// buildTemplate answers once the template is built: its start command
// ready and checkpointed, which takes as long as the server's start-up.
func (s *Server) buildTemplate(w http.ResponseWriter, r *http.Request) {
	var req api.TemplateRequest
	if err := decode(r.Body, &req); err != nil {
		writeError(w, err)
		return
	}
	if err := checkNames(field{"name", names.Template, req.Name}, field{"image", names.Image, req.Image}); err != nil {
		writeError(w, err)
		return
	}
	t, err := s.o.Manager.BuildTemplate(r.Context(), req.Options())
	created(w, t, err)
}

func (s *Server) getTemplate(w http.ResponseWriter, r *http.Request) {
	t, err := s.o.Manager.Template(r.Context(), r.PathValue("template"))
	reply(w, t, err)
}

func (s *Server) removeTemplate(w http.ResponseWriter, r *http.Request) {
	if err := s.o.Manager.RemoveTemplate(r.Context(), r.PathValue("template")); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
