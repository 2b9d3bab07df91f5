package httpapi

import (
	"net/http"
	"time"

	"smolvm.dev/smolvm/api"
	"smolvm.dev/smolvm/internal/names"
	"smolvm.dev/smolvm/internal/units"
	"smolvm.dev/smolvm/runtime/tenant"
	"smolvm.dev/smolvm/sandbox"
)

// registerTenantRoutes registers the admin's routes over tenants and
// their keys; a tenant's key gets 403 from each.
func (s *Server) registerTenantRoutes(route, bare func(string, http.HandlerFunc)) {
	// Usage is every tenant's for the admin, one's own for a tenant.
	route("GET /v1/usage", s.usage)
	only := func(h func(sandbox.Tenants, http.ResponseWriter, *http.Request)) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if _, scoped := tenant.Of(r.Context()); scoped {
				writeError(w, tenant.ErrAdminOnly)
				return
			}
			h(s.tenants(), w, r)
		}
	}
	admin := func(pattern string, h func(sandbox.Tenants, http.ResponseWriter, *http.Request)) {
		route(pattern, only(h))
	}
	admin("GET /v1/tenants", func(ts sandbox.Tenants, w http.ResponseWriter, r *http.Request) {
		list, err := ts.List(r.Context())
		reply(w, list, err)
	})
	admin("POST /v1/tenants", func(ts sandbox.Tenants, w http.ResponseWriter, r *http.Request) {
		var req api.TenantRequest
		if err := decode(r.Body, &req); err != nil {
			writeError(w, err)
			return
		}
		if err := checkNames(field{"name", names.Tenant, req.Name}); err != nil {
			writeError(w, err)
			return
		}
		t, err := ts.Add(r.Context(), req.Name, req.Quota)
		created(w, t, err)
	})
	admin("GET /v1/tenants/{tenant}", func(ts sandbox.Tenants, w http.ResponseWriter, r *http.Request) {
		t, err := ts.Get(r.Context(), r.PathValue("tenant"))
		reply(w, t, err)
	})
	admin("DELETE /v1/tenants/{tenant}", func(ts sandbox.Tenants, w http.ResponseWriter, r *http.Request) {
		if err := ts.Remove(r.Context(), r.PathValue("tenant")); err != nil {
			writeError(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	admin("PUT /v1/tenants/{tenant}/quota", func(ts sandbox.Tenants, w http.ResponseWriter, r *http.Request) {
		var q sandbox.Quota
		if err := decode(r.Body, &q); err != nil {
			writeError(w, err)
			return
		}
		t, err := ts.SetQuota(r.Context(), r.PathValue("tenant"), q)
		reply(w, t, err)
	})
	bare("POST /v1/tenants/{tenant}/keys", only(func(ts sandbox.Tenants, w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("tenant")
		k, secret, err := ts.AddKey(r.Context(), name)
		if err != nil {
			writeError(w, err)
			return
		}
		created(w, api.NewKey{TenantKey: k, Tenant: name, Key: secret}, nil)
	}))
	admin("DELETE /v1/tenants/{tenant}/keys/{key}", func(ts sandbox.Tenants, w http.ResponseWriter, r *http.Request) {
		if err := ts.RemoveKey(r.Context(), r.PathValue("tenant"), r.PathValue("key")); err != nil {
			writeError(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

// usage answers GET /v1/usage?since=DURATION|RFC3339&tenant=T&by=sandbox|label.
func (s *Server) usage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	since, err := units.ParseSince(q.Get("since"), time.Now())
	if err != nil {
		writeError(w, invalid("since", err.Error()))
		return
	}
	if t := q.Get("tenant"); t != "" {
		if err := checkNames(field{"tenant", names.Tenant, t}); err != nil {
			writeError(w, err)
			return
		}
	}
	by := q.Get("by")
	if by != "" && by != sandbox.UsageByTenant && by != sandbox.UsageBySandbox && by != sandbox.UsageByLabel {
		writeError(w, invalid("by", `by: want "tenant", "sandbox" or "label"`))
		return
	}
	u, err := s.o.Manager.Usage(r.Context(), since, q.Get("tenant"), by)
	reply(w, u, err)
}
