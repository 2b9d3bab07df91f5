package gateway

import (
	"net/http/httptest"
	"testing"
)

// TestTenantKeysAgree checks which namespace a request's API keys name:
// keys that differ (a valid one beside a wrong one, two tenants') name
// none, whichever header would be read first.
func TestTenantKeysAgree(t *testing.T) {
	a, b := "aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb"
	g := &Gateway{cfg: Config{Keys: map[string]string{a: "team-a", b: "team-b"}}}
	for _, c := range []struct {
		hdr  [][2]string
		want string // "" for none
	}{
		{[][2]string{{"X-API-KEY", a}}, "team-a"},
		{[][2]string{{"Authorization", "Bearer " + b}}, "team-b"},
		{[][2]string{{"X-API-KEY", a}, {"Authorization", "Bearer " + a}}, "team-a"},
		{[][2]string{{"X-API-KEY", a}, {"Authorization", "Basic dXNlcjo="}}, "team-a"},
		{[][2]string{{"X-API-KEY", a}, {"Authorization", "Bearer " + b}}, ""},
		{[][2]string{{"X-API-KEY", a}, {"Authorization", "Bearer wrong"}}, ""},
		{[][2]string{{"X-API-KEY", "wrong"}, {"Authorization", "Bearer " + a}}, ""},
		{[][2]string{{"X-API-KEY", a}, {"X-API-KEY", b}}, ""},
		{nil, ""},
	} {
		r := httptest.NewRequest("GET", "/v1/sandboxes", nil)
		for _, h := range c.hdr {
			r.Header.Add(h[0], h[1])
		}
		if ns, ok := g.tenant(r); ns != c.want || ok != (c.want != "") {
			t.Errorf("%v: %q %v, want %q", c.hdr, ns, ok, c.want)
		}
	}
}
