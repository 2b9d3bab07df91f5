package httpapi

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"smolvm.dev/smolvm/api"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/workflow/browser"
)

// Browsers are workflow/browser over the Manager: their CDP endpoints are
// ports published on this server's host.
func (s *Server) registerBrowserRoutes(route func(string, http.HandlerFunc)) {
	route("POST /v1/browsers/golden", s.startBrowser)
	route("POST /v1/browsers", s.newBrowser)
	route("DELETE /v1/browsers/{id}", s.releaseBrowser)
	route("POST /v1/browsers/screenshot", s.screenshot)
}

func (s *Server) startBrowser(w http.ResponseWriter, r *http.Request) {
	var req api.BrowserStartRequest
	if err := decodeOptional(r, &req); err != nil {
		writeError(w, err)
		return
	}
	snap, err := browser.Start(r.Context(), s.o.Manager, browser.StartOptions{
		Golden: req.Golden, Image: req.Image, Timeout: time.Duration(req.Timeout),
		Network: sandbox.Network{Mode: req.Mode, Hosts: req.Hosts, CIDRs: req.CIDRs},
		Dial:    s.o.Manager.DialPublished,
	})
	reply(w, snap, err)
}

func (s *Server) newBrowser(w http.ResponseWriter, r *http.Request) {
	var req api.BrowserRequest
	if err := decodeOptional(r, &req); err != nil {
		writeError(w, err)
		return
	}
	o := browser.NewOptions{Golden: req.Golden, Name: req.Name, TTL: time.Duration(req.TTL), Dial: s.o.Manager.DialPublished}
	if n := req.Network; n != nil {
		o.Network = &sandbox.Network{Mode: n.Mode, Hosts: n.Hosts, CIDRs: n.CIDRs}
	}
	b, err := browser.New(r.Context(), s.o.Manager, o)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, b)
}

func (s *Server) releaseBrowser(w http.ResponseWriter, r *http.Request) {
	if err := browser.Release(r.Context(), s.o.Manager, r.PathValue("id")); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) screenshot(w http.ResponseWriter, r *http.Request) {
	var req api.ScreenshotRequest
	if err := decode(r.Body, &req); err != nil {
		writeError(w, err)
		return
	}
	png, id, err := browser.Take(r.Context(), s.o.Manager, req.Golden, browser.ScreenshotOptions{
		URL: req.URL, FullPage: req.FullPage, Width: req.Width, Height: req.Height,
		Timeout: time.Duration(req.Timeout), Dial: s.o.Manager.DialPublished,
	})
	if id != "" {
		// After the answer: with its length given and flushed, the
		// client has the whole picture before the browser goes.
		defer browser.Release(context.WithoutCancel(r.Context()), s.o.Manager, id)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "image/png")
	w.Header().Set("Content-Length", strconv.Itoa(len(png)))
	w.Write(png)
	http.NewResponseController(w).Flush()
}
