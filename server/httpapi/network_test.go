package httpapi_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"smolvm.dev/smolvm/runtime/manager"
	"smolvm.dev/smolvm/runtime/network"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/tests/nettest"
	"smolvm.dev/smolvm/tests/testenv"
)

// TestServerNetwork drives network policy through the HTTP API, in a
// closed test world: create with a policy, read the state, update it live,
// read the deny log, and bad input.
func TestServerNetwork(t *testing.T) {
	testenv.Runsc(t)
	w := nettest.New(t)
	helper := testenv.Smolvm(t)
	f := newFixture(t, nil, func(c *manager.Config) { c.Network = w.Host(helper) })

	f.create("web", `,"network":{"mode":"egress","allow_hosts":["allowed.test"],"ports":[{"port":8000}]}`)
	curl := func(url string) string {
		out, _, exit := f.sh("web", "curl -sS -m 3 "+url+" 2>/dev/null || echo failed")
		if exit.Code != 0 {
			t.Fatalf("exec: %+v", exit)
		}
		return strings.TrimSpace(out)
	}
	if got := curl("http://allowed.test/"); got != "internet" {
		t.Errorf("allowed name: %q", got)
	}
	if got := curl("http://other.test/"); got != "failed" {
		t.Errorf("disallowed name: %q", got)
	}

	code, body, _ := f.do(http.MethodGet, "/v1/sandboxes/web/network", "")
	var st sandbox.NetworkState
	if code != http.StatusOK || json.Unmarshal(body, &st) != nil || st.Network.Mode != sandbox.NetEgress ||
		len(st.Ports) != 1 || st.Ports[0].HostPort == 0 || st.Counters == nil || st.Counters.RxBytes == 0 {
		t.Fatalf("GET network: %d %s", code, body)
	}

	if code, body, _ := f.do(http.MethodPut, "/v1/sandboxes/web/network", `{"mode":"egress","allow_hosts":["other.test"]}`); code != http.StatusOK {
		t.Fatalf("PUT network: %d %s", code, body)
	}
	if got := curl("http://other.test/"); got != "other" {
		t.Errorf("after update, newly allowed name: %q", got)
	}
	if got := curl("http://allowed.test/"); got != "failed" {
		t.Errorf("after update, no longer allowed name: %q", got)
	}

	var evs []sandbox.NetworkEvent
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && len(evs) == 0; time.Sleep(100 * time.Millisecond) {
		code, body, _ := f.do(http.MethodGet, "/v1/sandboxes/web/network/events", "")
		if code != http.StatusOK || json.Unmarshal(body, &evs) != nil {
			t.Fatalf("GET events: %d %s", code, body)
		}
	}
	if len(evs) == 0 || evs[0].Name != "other.test." || evs[0].Reason != network.ReasonDNS {
		t.Errorf("deny log: %+v", evs)
	}

	f.create("quiet", "")
	for _, c := range []struct {
		method, path, body string
		status             int
		want               string
	}{
		{http.MethodPost, "/v1/sandboxes", `{"network":{"mode":"egress","allow_cidrs":["10.0.0.0/99"]}}`, http.StatusBadRequest, "not a CIDR"},
		{http.MethodPost, "/v1/sandboxes", `{"network":{"mode":"egress","allow_hosts":["a.*.com"]}}`, http.StatusBadRequest, "wildcard"},
		{http.MethodPost, "/v1/sandboxes", `{"network":{"mode":"egress","ports":[{"port":0}]}}`, http.StatusBadRequest, "out of range"},
		{http.MethodPost, "/v1/sandboxes", `{"network":{"mode":"egress","bogus":1}}`, http.StatusBadRequest, "bogus"},
		{http.MethodPut, "/v1/sandboxes/web/network", `{"mode":"sideways"}`, http.StatusBadRequest, "want none, egress or full"},
		{http.MethodPut, "/v1/sandboxes/web/network", `{"mode":"egress","ports":[]}`, http.StatusBadRequest, "ports"},
		{http.MethodPut, "/v1/sandboxes/quiet/network", `{"mode":"full"}`, http.StatusConflict, "--net none"},
		{http.MethodGet, "/v1/sandboxes/quiet/network/events", "", http.StatusConflict, "--net none"},
		{http.MethodGet, "/v1/sandboxes/ghost/network", "", http.StatusNotFound, "ghost"},
	} {
		code, body, _ := f.do(c.method, c.path, c.body)
		if code != c.status || !strings.Contains(apiError(t, body).Message, c.want) {
			t.Errorf("%s %s %s: %d %s; want %d mentioning %q", c.method, c.path, c.body, code, body, c.status, c.want)
		}
	}
}
