package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/tests/testmgr"
	"smolvm.dev/smolvm/tests/testserve"
)

// TestServeRecoversCrashedCreates kills a real `smolvm serve` with SIGKILL
// while it serves eight creates at once, restarts it, and checks that it
// recovered before serving: no record left creating, nothing half-made on
// the host (no sandbox or network directory, process, mount or cgroup of
// the data dir that no running sandbox owns: leakWatch), every create
// answered 2xx running, and every other create either rolled back (its
// name free again) or completed (running); and once every sandbox is
// removed, nothing of them left. Each round kills at a later moment.
func TestServeRecoversCrashedCreates(t *testing.T) {
	env := testmgr.New(t) // registered first: it cleans up after the servers stop
	leaks := watchLeaks(t, env.Dir)
	const n = 8
	var completed, rolledBack int
	for round, delay := range []time.Duration{150, 600, 1200, 2500} {
		delay *= time.Millisecond
		srv := testserve.Start(t, env.Dir, env.GuestBinary)
		status := make([]int, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				status[i], _ = apiCall(srv, http.MethodPost, "/v1/sandboxes", fmt.Sprintf(`{"name":"r%d-%d"}`, round, i))
			})
		}
		time.Sleep(delay)
		srv.Kill()
		wg.Wait()

		srv = testserve.Start(t, env.Dir, env.GuestBinary) // recovers, then serves
		code, body := apiCall(srv, http.MethodGet, "/v1/sandboxes", "")
		var sbs []sandbox.Sandbox
		if code != http.StatusOK || json.Unmarshal(body, &sbs) != nil {
			t.Fatalf("round %d: list: %d %s", round, code, body)
		}
		running := map[string]bool{}
		byName := map[string]sandbox.Sandbox{}
		for _, sb := range sbs {
			if sb.State != sandbox.StateRunning {
				t.Errorf("round %d (killed at %v): %s is %s (%s) after the restart", round, delay, sb.Name, sb.State, sb.Reason)
			}
			running[sb.ID] = sb.State == sandbox.StateRunning
			byName[sb.Name] = sb
		}
		if strays := runscStrays(env.Dir, running); len(strays) > 0 {
			t.Errorf("round %d (killed at %v): runsc processes of no running sandbox: %v\n%s", round, delay, strays, srv.Log())
		}
		leaks.check(t, running)
		for i, st := range status {
			name := fmt.Sprintf("r%d-%d", round, i)
			_, listed := byName[name]
			switch {
			case st/100 == 2 && !listed:
				t.Errorf("round %d: %s was created (%d) but is gone after the restart", round, name, st)
			case listed:
				if code, body := apiCall(srv, http.MethodPost, "/v1/sandboxes/"+name+"/exec", `{"args":["true"]}`); code != http.StatusOK || !bytes.Contains(body, []byte(`"code":0`)) {
					t.Errorf("round %d: %s listed running but exec: %d %s", round, name, code, body)
				}
				if st/100 != 2 {
					completed++
				}
			default:
				// Rolled back: the name is free again.
				if code, body := apiCall(srv, http.MethodPost, "/v1/sandboxes", `{"name":"`+name+`"}`); code != http.StatusCreated {
					t.Errorf("round %d: the name of rolled-back %s is not free: %d %s", round, name, code, body)
				}
				rolledBack++
			}
		}
		// Clean for the next round: nothing of the data dir may run after.
		for _, id := range listIDs(t, srv) {
			if code, body := apiCall(srv, http.MethodDelete, "/v1/sandboxes/"+id+"?force=true", ""); code != http.StatusNoContent {
				t.Fatalf("rm %s: %d %s", id, code, body)
			}
		}
		leaks.check(t, nil)
		srv.Stop()
	}
	t.Logf("%d creates cut short by the crashes were rolled back, %d completed", rolledBack, completed)
	if rolledBack == 0 {
		t.Error("no create was cut short: the kills came too late to test anything")
	}
}

// apiCall sends one request with srv's token and returns the status (0
// if there was no answer) and body.
func apiCall(srv *testserve.Server, method, path, body string) (int, []byte) {
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		return 0, []byte(err.Error())
	}
	req.Header.Set("Authorization", "Bearer "+srv.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func listIDs(t *testing.T, srv *testserve.Server) []string {
	t.Helper()
	code, body := apiCall(srv, http.MethodGet, "/v1/sandboxes", "")
	var sbs []sandbox.Sandbox
	if code != http.StatusOK || json.Unmarshal(body, &sbs) != nil {
		t.Fatalf("list: %d %s", code, body)
	}
	var ids []string
	for _, sb := range sbs {
		ids = append(ids, sb.ID)
	}
	return ids
}

// runscStrays lists the runsc processes working on a sandbox of dataDir
// (found by the --root in their command lines) whose sandbox is not in
// running.
func runscStrays(dataDir string, running map[string]bool) []string {
	marker := filepath.Join(dataDir, "sandboxes") + "/"
	var strays []string
	for pid, args := range cmdlines(marker) {
		cmdline := strings.Join(args, " ")
		_, rest, _ := strings.Cut(cmdline, marker)
		if id, _, _ := strings.Cut(rest, "/"); strings.Contains(cmdline, "runsc") && !running[id] {
			strays = append(strays, pid+":"+id)
		}
	}
	return strays
}
