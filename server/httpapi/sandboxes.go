package httpapi

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"smolvm.dev/smolvm/api"
	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/internal/httpguard"
	"smolvm.dev/smolvm/internal/names"
	"smolvm.dev/smolvm/runtime/image"
	"smolvm.dev/smolvm/runtime/tenant"
	"smolvm.dev/smolvm/sandbox"
)

// registerRoutes registers every route; openapi.json must list each one
// (TestOpenAPIMatchesRoutes checks both ways).
func (s *Server) registerRoutes() {
	// A route takes one JSON object, but GET, HEAD and DELETE take no body,
	// nor does a POST registered with bare.
	bodyOf := func(pattern string) body {
		if httpguard.Bodiless(pattern) {
			return body{none: true}
		}
		return body{limit: maxBody}
	}
	public := func(pattern string, h http.HandlerFunc) { s.handle(pattern, false, false, bodyOf(pattern), h) }
	unlimited := func(pattern string, h http.HandlerFunc) { s.handle(pattern, true, false, bodyOf(pattern), h) }
	route := func(pattern string, h http.HandlerFunc) { s.handle(pattern, true, true, bodyOf(pattern), h) }
	bare := func(pattern string, h http.HandlerFunc) { s.handle(pattern, true, true, body{none: true}, h) }
	// Uploads stream to a spool file, up to their own, larger limit.
	upload := func(pattern string, h http.HandlerFunc) {
		s.handle(pattern, true, true, body{limit: s.o.MaxUpload, stream: true}, h)
	}

	public("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	public("GET /openapi.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(openapiJSON)
	})
	// Scrapes and event streams are cheap and long-lived: they must not
	// take the slots that sandbox work needs.
	unlimited("GET /metrics", s.serveMetrics)
	unlimited("GET /v1/events", s.events)

	route("GET /v1/sandboxes", s.list)
	route("POST /v1/sandboxes", s.create)
	route("GET /v1/sandboxes/{id}", s.get)
	route("DELETE /v1/sandboxes/{id}", s.remove)
	bare("POST /v1/sandboxes/{id}/start", s.start)
	route("POST /v1/sandboxes/{id}/stop", s.stop)
	route("POST /v1/sandboxes/{id}/timeout", s.setTimeout)
	route("POST /v1/sandboxes/{id}/exec", s.exec)
	route("GET /v1/sandboxes/{id}/exec/ws", s.execWS)
	upload("PUT /v1/sandboxes/{id}/files", s.upload)
	route("GET /v1/sandboxes/{id}/files", s.download)
	route("GET /v1/sandboxes/{id}/logs", s.logs)
	route("GET /v1/sandboxes/{id}/stats", s.stats)
	route("GET /v1/images", s.images)
	route("POST /v1/images", s.pull)
	s.registerSnapshotRoutes(route, bare, func(pattern string, h http.HandlerFunc) {
		s.handle(pattern, true, true, body{limit: maxSnapshotImport, stream: true}, h)
	})
	s.registerPoolRoutes(route, bare)
	s.registerTemplateRoutes(route)
	s.registerVolumeRoutes(route)
	s.registerTenantRoutes(route, bare)
	s.registerNetworkRoutes(route)
	s.registerBrowserRoutes(route)
	s.registerAgentRoutes(route, bare)
	s.registerMemoryRoutes(route)
	s.registerPortRoutes()
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	sbs, err := s.o.Manager.List(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, sbs)
}

// createOptions turns a request into the Manager's options, applying the
// server's defaults.
func (s *Server) createOptions(req *api.CreateRequest) (sandbox.CreateOptions, error) {
	if err := checkEnv("env", req.Env); err != nil {
		return sandbox.CreateOptions{}, err
	}
	if err := checkNames(field{"name", names.Sandbox, req.Name}, field{"image", names.Image, req.Image}, field{"pool", names.Pool, req.Pool}); err != nil {
		return sandbox.CreateOptions{}, err
	}
	ttl := s.o.DefaultTTL
	if req.Timeout != nil {
		ttl = time.Duration(*req.Timeout)
	}
	start := req.Start == nil || *req.Start
	return sandbox.CreateOptions{Name: req.Name, Image: req.Image, Backend: req.Backend, Start: start, Pool: req.Pool, Config: sandbox.Config{
		Cmd: req.Cmd, Env: req.Env, WorkDir: req.WorkDir, User: req.User, Hostname: req.Hostname,
		TTL: ttl, IdleTimeout: time.Duration(req.IdleTimeout), OnExpiry: req.OnExpiry, TrustRepo: req.TrustRepo, Network: req.Network, Labels: req.Labels, Volumes: req.Volumes,
		Limits: sandbox.Limits{CPUs: req.CPUs, Memory: int64(req.Memory), Pids: req.Pids, Disk: int64(req.Disk)},
	}}, nil
}

func checkEnv(field string, env []string) error {
	for _, kv := range env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return invalid(field, "field "+strconv.Quote(field)+": "+strconv.Quote(kv)+": want KEY=VALUE")
		}
	}
	return nil
}

func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	var req api.CreateRequest
	if err := decode(r.Body, &req); err != nil {
		writeError(w, err)
		return
	}
	opts, err := s.createOptions(&req)
	if err != nil {
		writeError(w, err)
		return
	}
	sb, err := s.o.Manager.Create(r.Context(), opts)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, sb)
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	sb, err := s.o.Manager.Get(r.Context(), r.PathValue("id"))
	reply(w, sb, err)
}

func (s *Server) start(w http.ResponseWriter, r *http.Request) {
	sb, err := s.o.Manager.Start(r.Context(), r.PathValue("id"))
	reply(w, sb, err)
}

func (s *Server) stop(w http.ResponseWriter, r *http.Request) {
	var req api.StopRequest
	if err := decodeOptional(r, &req); err != nil {
		writeError(w, err)
		return
	}
	grace := 10 * time.Second
	if req.Timeout != nil {
		grace = time.Duration(*req.Timeout)
	}
	sb, err := s.o.Manager.Stop(r.Context(), r.PathValue("id"), grace)
	reply(w, sb, err)
}

func (s *Server) setTimeout(w http.ResponseWriter, r *http.Request) {
	var req api.TimeoutRequest
	if err := decode(r.Body, &req); err != nil {
		writeError(w, err)
		return
	}
	if req.Timeout == nil {
		writeError(w, invalid("timeout", `field "timeout": required (0 removes the time to live)`))
		return
	}
	sb, err := s.o.Manager.SetTTL(r.Context(), r.PathValue("id"), time.Duration(*req.Timeout))
	reply(w, sb, err)
}

func (s *Server) remove(w http.ResponseWriter, r *http.Request) {
	force, err := boolParam(r, "force")
	if err != nil {
		writeError(w, err)
		return
	}
	if err := s.o.Manager.Remove(r.Context(), r.PathValue("id"), force); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) stats(w http.ResponseWriter, r *http.Request) {
	st, err := s.o.Manager.Stats(r.Context(), r.PathValue("id"))
	reply(w, st, err)
}

func (s *Server) images(w http.ResponseWriter, r *http.Request) {
	imgs, err := s.o.Images.List(r.Context())
	reply(w, imgs, err)
}

// pull answers 200 with the image the server has by that name (or ID),
// else pulls it and answers 201. It is the admin's: images are the
// host's, shared by every tenant.
func (s *Server) pull(w http.ResponseWriter, r *http.Request) {
	if _, scoped := tenant.Of(r.Context()); scoped {
		writeError(w, tenant.ErrAdminOnly)
		return
	}
	var req api.PullRequest
	if err := decode(r.Body, &req); err != nil {
		writeError(w, err)
		return
	}
	if req.Ref == "" {
		writeError(w, invalid("ref", "is required"))
		return
	}
	if req.ID != "" && !image.IsID(req.ID) {
		writeError(w, invalid("id", "is not an image ID (12 to 64 hex digits)"))
		return
	}
	if have := cmp.Or(req.ID, req.Ref); !req.Always {
		img, err := s.o.Images.Get(r.Context(), have)
		if err == nil {
			reply(w, img, nil)
			return
		}
		if !errors.Is(err, sandbox.ErrImageNotFound) {
			writeError(w, err)
			return
		}
	}
	img, err := s.o.Images.Pull(r.Context(), req.Ref, sandbox.PullOptions{Insecure: req.Insecure, Platform: req.Platform})
	if err == nil && req.ID != "" && !image.HasID(img, req.ID) {
		err = errdefs.New(errdefs.ErrConflict, fmt.Sprintf("pull %s: it is image %s now, not %s (the tag has moved; pull the image by its digest)", req.Ref, img.ID, req.ID))
	}
	created(w, img, err)
}

func reply(w http.ResponseWriter, v any, err error) {
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// decodeOptional decodes a body that may be absent.
func decodeOptional(r *http.Request, v any) error {
	if r.ContentLength == 0 {
		return nil
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return invalid("", "request body: "+err.Error())
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		return nil
	}
	return decode(strings.NewReader(string(body)), v)
}

func boolParam(r *http.Request, name string) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, invalid(name, "query parameter "+strconv.Quote(name)+": want true or false")
	}
	return b, nil
}
