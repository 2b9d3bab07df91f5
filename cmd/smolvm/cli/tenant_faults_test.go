package cli

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"smolvm.dev/smolvm/api"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/tests/testmgr"
	"smolvm.dev/smolvm/tests/testserve"
)

// TestTenantQuotaFaults: a real smolvm serve killed -9 while a tenant's
// creates are in flight against its quota, then one of the tenant's
// sandboxes' runsc processes killed from outside. After the restart the
// quota counts exactly the sandboxes that exist (no reservation of a
// create cut short survives); the killed sandbox shows stopped with a
// reason, frees its share of the quota and accrues no more usage, while
// the others run and accrue on.
func TestTenantQuotaFaults(t *testing.T) {
	env := testmgr.New(t) // registered first: it cleans up after the servers stop
	c := newCLI(t, env.Dir)
	const limit = 3
	c.must("tenant", "add", "q", "--sandboxes", strconv.Itoa(limit))
	var k api.NewKey
	if err := json.Unmarshal([]byte(c.must("tenant", "key", "add", "q", "--json")), &k); err != nil {
		t.Fatal(err)
	}
	srv := testserve.Start(t, env.Dir, env.GuestBinary)
	var wg sync.WaitGroup
	status := make([]int, limit+2)
	for i := range status {
		wg.Go(func() {
			status[i], _ = keyStatus(srv, k.Key, "POST", "/v1/sandboxes", fmt.Sprintf(`{"name":"q%d","timeout":"1h"}`, i))
		})
	}
	time.Sleep(800 * time.Millisecond)
	srv.Kill()
	wg.Wait()

	srv = testserve.Start(t, env.Dir, env.GuestBinary) // recovers, then serves
	live := tenantSandboxes(t, srv, k.Key)
	for _, sb := range live {
		if sb.State != sandbox.StateRunning {
			t.Errorf("after the restart %s is %s (%s)", sb.Name, sb.State, sb.Reason)
		}
	}
	// Exactly the room the live sandboxes leave: then the limit, named.
	for i := len(live); i < limit; i++ {
		if code, body := keyCall(t, srv, k.Key, "POST", "/v1/sandboxes", fmt.Sprintf(`{"name":"f%d","timeout":"1h"}`, i)); code != http.StatusCreated {
			t.Fatalf("create %d of %d after the crash (%d survived; statuses %v): %d %s", i+1, limit, len(live), status, code, body)
		}
	}
	code, body := keyCall(t, srv, k.Key, "POST", "/v1/sandboxes", `{"name":"over"}`)
	if want := fmt.Sprintf("%d concurrent sandboxes (%d held, 1 more asked)", limit, limit); code != http.StatusConflict || !strings.Contains(body, want) {
		t.Fatalf("create past the quota after the crash: %d %s; want %q", code, body, want)
	}
	t.Logf("%d of %d creates survived the crash (statuses %v)", len(live), len(status), status)

	// Kill one sandbox's runsc processes from outside.
	live = tenantSandboxes(t, srv, k.Key)
	victim, others := live[0], live[1:]
	var pids []int
	for _, s := range runscStrays(env.Dir, map[string]bool{}) {
		pid, id, _ := strings.Cut(s, ":")
		if id == victim.ID {
			n, _ := strconv.Atoi(pid)
			pids = append(pids, n)
		}
	}
	if len(pids) == 0 {
		t.Fatalf("no runsc process of %s", victim.ID)
	}
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	var got sandbox.Sandbox
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		code, body := keyCall(t, srv, k.Key, "GET", "/v1/sandboxes/"+victim.ID, "")
		if code != http.StatusOK || json.Unmarshal([]byte(body), &got) != nil {
			t.Fatalf("get the killed sandbox: %d %s", code, body)
		}
		if got.State == sandbox.StateStopped || time.Now().After(deadline) {
			break
		}
	}
	if got.State != sandbox.StateStopped || got.Reason == "" {
		t.Fatalf("runsc killed: %s is %s, reason %q", got.Name, got.State, got.Reason)
	}
	for _, sb := range others {
		if code, body := keyCall(t, srv, k.Key, "POST", "/v1/sandboxes/"+sb.ID+"/exec", `{"args":["true"]}`); code != http.StatusOK || !strings.Contains(body, `"code":0`) {
			t.Errorf("%s after its neighbour's runsc was killed: %d %s", sb.Name, code, body)
		}
	}
	// Usage: the killed one stands still, the others accrue (serve
	// accounts every 5 s).
	usage := func() map[string]sandbox.Usage {
		t.Helper()
		code, body := keyCall(t, srv, k.Key, "GET", "/v1/usage?by=sandbox", "")
		var us []sandbox.Usage
		if code != http.StatusOK || json.Unmarshal([]byte(body), &us) != nil {
			t.Fatalf("usage: %d %s", code, body)
		}
		out := map[string]sandbox.Usage{}
		for _, u := range us {
			out[u.Sandbox] = u
		}
		return out
	}
	time.Sleep(6 * time.Second)
	before := usage()
	time.Sleep(11 * time.Second)
	after := usage()
	if a, b := after[victim.ID].SandboxSeconds, before[victim.ID].SandboxSeconds; a != b {
		t.Errorf("the killed sandbox accrued %.1f s more", a-b)
	}
	for _, sb := range others {
		if a, b := after[sb.ID].SandboxSeconds, before[sb.ID].SandboxSeconds; a < b+4 {
			t.Errorf("%s accrued %.1f s in 11 s", sb.Name, a-b)
		}
	}
	// The stopped sandbox holds no share of the quota.
	if code, body := keyCall(t, srv, k.Key, "POST", "/v1/sandboxes", `{"name":"after-kill","timeout":"1h"}`); code != http.StatusCreated {
		t.Fatalf("create in the room the killed sandbox left: %d %s", code, body)
	}
	if code, body := keyCall(t, srv, k.Key, "POST", "/v1/sandboxes", `{"name":"over2"}`); code != http.StatusConflict || !strings.Contains(body, `"class":"quota"`) {
		t.Fatalf("past the quota: %d %s", code, body)
	}
	for _, id := range listIDs(t, srv) {
		apiCall(srv, http.MethodDelete, "/v1/sandboxes/"+id+"?force=true", "")
	}
	srv.Stop()
	if strays := runscStrays(env.Dir, nil); len(strays) > 0 {
		t.Errorf("runsc processes left: %v", strays)
	}
}

// keyStatus is keyCall for goroutines: no t, 0 when there was no answer.
func keyStatus(srv *testserve.Server, key, method, path, body string) (int, string) {
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		return 0, err.Error()
	}
	req.Header.Set("X-API-KEY", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	resp.Body.Close()
	return resp.StatusCode, ""
}

// tenantSandboxes lists the sandboxes key sees.
func tenantSandboxes(t *testing.T, srv *testserve.Server, key string) []sandbox.Sandbox {
	t.Helper()
	code, body := keyCall(t, srv, key, "GET", "/v1/sandboxes", "")
	var sbs []sandbox.Sandbox
	if code != http.StatusOK || json.Unmarshal([]byte(body), &sbs) != nil {
		t.Fatalf("list: %d %s", code, body)
	}
	return sbs
}
