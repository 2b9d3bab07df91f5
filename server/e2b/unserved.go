package e2b

import (
	"fmt"
	"net/http"
	"strings"

	"smolvm.dev/smolvm/internal/httpguard"
)

// unservedAPIs are the parts of E2B's control plane that the SDK can call
// and smolvm does not serve, by path prefix. A call to one is a 501 that
// names what is missing, not a 404 the SDK would read as "no such
// volume" or "no such secret".
var unservedAPIs = []struct{ prefix, what string }{
	{"/secrets", "secrets"},
	{"/templates/aliases/", templatesWhat},
	{"/templates/tags", templatesWhat},
	{"/v2/templates/", templatesWhat},
	{"/v3/templates", templatesWhat},
}

const templatesWhat = "template builds, aliases and tags; a smolvm template is an image or a snapshot (smolvm image, smolvm checkpoint)"

// unservedTemplate reports whether path is below one template
// (/templates/{id}/builds…, /files…, /tags): DELETE /templates/{id} alone
// is served, and a bad name there is the 400 or 404 of that route.
func unservedTemplate(escapedPath string) bool {
	rest, ok := strings.CutPrefix(escapedPath, "/templates/")
	return ok && strings.Count(rest, "/") >= 1
}

// noRoute answers a control-plane request no route serves: E2B's error
// body, and for a part of E2B's API smolvm lacks, a 501 that says so.
func (h *Handler) noRoute(r *http.Request) httpguard.Fail {
	return func(w http.ResponseWriter, status int, msg string) {
		if status == http.StatusNotFound {
			p := r.URL.EscapedPath()
			what := ""
			for _, u := range unservedAPIs {
				if strings.HasPrefix(p, u.prefix) {
					what = u.what
				}
			}
			if what == "" && unservedTemplate(p) {
				what = templatesWhat
			}
			if what == templatesWhat && h.builds != nil {
				what = "" // served (templates.go): a path no route takes is a 404
			}
			if what != "" {
				writeAPIError(w, http.StatusNotImplemented, fmt.Sprintf("%s %s: smolvm does not serve E2B's %s", r.Method, p, what))
				return
			}
		}
		h.unrouted(w, status, msg)
	}
}
