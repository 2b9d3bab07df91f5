package gateway_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	kclient "sigs.k8s.io/controller-runtime/pkg/client"

	"smolvm.dev/smolvm/client"
	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/kube/api/v1alpha1"
	"smolvm.dev/smolvm/kube/gateway"
	"smolvm.dev/smolvm/kube/kubetest"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/tests/testenv"
)

const (
	leaseNS   = "smolvm-system"
	nodeToken = "node-token-shared-by-every-node"
	keyA      = "key-of-team-a"
	keyB      = "key-of-team-b"
)

// cluster is an API server, the binder, two nodes on this machine and a
// gateway in front of them on loopback.
type cluster struct {
	k     *kubetest.Cluster
	nodes []*kubetest.Node
	URL   string
}

func start(t testing.TB) *cluster {
	t.Helper()
	k := kubetest.Start(t)
	for _, ns := range []string{"team-a", "team-b"} {
		k.Namespace(t, ns)
	}
	k.Binder(t, leaseNS)
	c := &cluster{k: k}
	for _, n := range []string{"n1", "n2"} {
		c.nodes = append(c.nodes, k.Node(t, n, nodeToken, leaseNS))
	}
	ctx, cancel := context.WithCancel(context.Background())
	mgr, err := ctrl.NewManager(k.Config, gateway.ManagerOptions(k.Scheme, leaseNS))
	if err != nil {
		t.Fatal(err)
	}
	if err := gateway.Setup(ctx, mgr.GetCache()); err != nil {
		t.Fatal(err)
	}
	g, err := gateway.New(gateway.Config{
		Kube: mgr.GetClient(), Direct: mgr.GetAPIReader(), LeaseNamespace: leaseNS, NodeToken: nodeToken,
		Keys: map[string]string{keyA: "team-a", keyB: "team-b"}, Ready: time.Minute,
		Log: slog.New(slog.NewTextHandler(kubetest.Writer{T: t}, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		t.Fatal("gateway cache did not sync")
	}
	srv := httptest.NewServer(g)
	t.Cleanup(func() {
		srv.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("gateway manager: %v", err)
		}
	})
	c.URL = srv.URL
	return c
}

// client is a native API client of the gateway with key.
func (c *cluster) client(tb testing.TB, key string) *client.Client {
	tb.Helper()
	cl, err := client.New(c.URL, key)
	if err != nil {
		tb.Fatal(err)
	}
	return cl
}

// TestGateway runs the gateway in front of two nodes: the native API's
// Go client and the unmodified e2b SDK create, exec and remove sandboxes
// through it; each key sees its own namespace only; bad requests are
// refused in each API's shape and leave no object behind.
func TestGateway(t *testing.T) {
	c := start(t)
	ctx := context.Background()
	a := c.client(t, keyA)
	b := c.client(t, keyB)

	t.Run("Native", func(t *testing.T) {
		sb, err := a.Create(ctx, sandbox.CreateOptions{Image: sandbox.DefaultImage, Start: true, Config: sandbox.Config{Labels: map[string]string{"who": "a"}}})
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		exit, err := a.Exec(ctx, sb.ID, sandbox.Process{Args: []string{"sh", "-c", "echo hello from $(hostname)"}}, sandbox.Stdio{Stdout: &out})
		if err != nil || exit.Code != 0 || !strings.HasPrefix(out.String(), "hello from") {
			t.Fatalf("exec through the gateway: %v %+v %q", err, exit, out.String())
		}
		if err := a.WriteFile(ctx, sb.ID, "/tmp/f", strings.NewReader("file body")); err != nil {
			t.Fatal(err)
		}
		rc, err := a.ReadFile(ctx, sb.ID, "/tmp/f")
		if err != nil {
			t.Fatal(err)
		}
		got := new(bytes.Buffer)
		got.ReadFrom(rc)
		rc.Close()
		if got.String() != "file body" {
			t.Fatalf("read back %q", got)
		}
		// The port route reaches a server inside, through the node's
		// tunnel; another key's answers as for no such sandbox.
		if exit, err := a.Exec(ctx, sb.ID, sandbox.Process{Args: []string{"sh", "-c", "python3 -m http.server 8000 --directory /tmp >/dev/null 2>&1 &"}}, sandbox.Stdio{}); err != nil || exit.Code != 0 {
			t.Fatalf("start a server inside: %v %+v", err, exit)
		}
		port := c.URL + "/v1/sandboxes/" + sb.ID + "/ports/8000/"
		for deadline := time.Now().Add(30 * time.Second); call(t, "GET", port, keyA, "", nil) != http.StatusOK; time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the port route through the gateway: no 200 within 30 s")
			}
		}
		if code := call(t, "GET", port, keyB, "", nil); code != http.StatusNotFound {
			t.Fatalf("team b's port route to team a's sandbox: %d", code)
		}
		list, err := a.List(ctx)
		if err != nil || len(list) != 1 || list[0].ID != sb.ID || list[0].Config.Labels["who"] != "a" {
			t.Fatalf("team a's list: %v %+v", err, list)
		}
		// Team b sees nothing of team a's.
		if list, err := b.List(ctx); err != nil || len(list) != 0 {
			t.Fatalf("team b's list: %v %+v", err, list)
		}
		if _, err := b.Get(ctx, sb.ID); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("team b's get of team a's sandbox: %v", err)
		}
		if _, err := b.Exec(ctx, sb.ID, sandbox.Process{Args: []string{"true"}}, sandbox.Stdio{}); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("team b's exec in team a's sandbox: %v", err)
		}
		// A fork is two objects of their own, with the source's files.
		copies, err := a.Fork(ctx, sb.ID, sandbox.ForkOptions{N: 2, NamePrefix: "copy"})
		if err != nil || len(copies) != 2 {
			t.Fatalf("fork through the gateway: %v %+v", err, copies)
		}
		for _, cp := range copies {
			var got bytes.Buffer
			if _, err := a.Exec(ctx, cp.ID, sandbox.Process{Args: []string{"cat", "/tmp/f"}}, sandbox.Stdio{Stdout: &got}); err != nil || got.String() != "file body" {
				t.Fatalf("copy %s has %q (%v)", cp.ID, got.String(), err)
			}
			if err := a.Remove(ctx, cp.ID, true); err != nil {
				t.Fatal(err)
			}
		}
		// A checkpoint is a SandboxSnapshot that outlives its sandbox; a
		// restore is a Sandbox of its own, labelled as asked.
		snap, err := a.Checkpoint(ctx, sb.ID, sandbox.CheckpointOptions{Name: "native-snap"})
		if err != nil || len(snap.ID) != 64 || snap.Name != "native-snap" || snap.Lineage.Sandbox != sb.ID || len(snap.Files) == 0 {
			t.Fatalf("checkpoint through the gateway: %v %+v", err, snap)
		}
		if _, err := a.Checkpoint(ctx, sb.ID, sandbox.CheckpointOptions{Name: "native-snap"}); !errors.Is(err, errdefs.ErrConflict) {
			t.Fatalf("a second snapshot of the same name: %v", err)
		}
		if snaps, err := a.Snapshots(ctx); err != nil || len(snaps) != 1 || snaps[0].ID != snap.ID {
			t.Fatalf("team a's snapshots: %v %+v", err, snaps)
		}
		if snaps, err := b.Snapshots(ctx); err != nil || len(snaps) != 0 {
			t.Fatalf("team b's snapshots: %v %+v", err, snaps)
		}
		if _, err := b.Restore(ctx, snap.ID, sandbox.RestoreOptions{}); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("team b's restore of team a's snapshot: %v", err)
		}
		cp, err := a.Restore(ctx, snap.ID, sandbox.RestoreOptions{Name: "restored", Labels: map[string]string{"who": "copy"}})
		if err != nil || cp.Config.Labels["who"] != "copy" || cp.Snapshot != snap.ID {
			t.Fatalf("restore through the gateway: %v %+v", err, cp)
		}
		if byName, err := a.Get(ctx, "restored"); err != nil || byName.ID != cp.ID {
			t.Fatalf("the restored copy by its object's name: %v %+v", err, byName)
		}
		var saved bytes.Buffer
		if _, err := a.Exec(ctx, cp.ID, sandbox.Process{Args: []string{"cat", "/tmp/f"}}, sandbox.Stdio{Stdout: &saved}); err != nil || saved.String() != "file body" {
			t.Fatalf("the restored copy has %q (%v)", saved.String(), err)
		}
		if err := a.RemoveSnapshot(ctx, "native-snap"); !errors.Is(err, errdefs.ErrConflict) {
			t.Fatalf("remove of a snapshot a sandbox was restored from: %v", err)
		}
		if err := a.Remove(ctx, cp.ID, true); err != nil {
			t.Fatal(err)
		}
		if err := a.RemoveSnapshot(ctx, snap.ID); err != nil {
			t.Fatal(err)
		}
		if err := a.RemoveSnapshot(ctx, snap.ID); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("a second remove: %v", err)
		}
		// Pause and resume go through the object.
		if p, err := a.Pause(ctx, sb.ID); err != nil || p.State != sandbox.StatePaused {
			t.Fatalf("pause: %v %+v", err, p)
		}
		if p, err := a.Resume(ctx, sb.ID); err != nil || p.State != sandbox.StateRunning {
			t.Fatalf("resume: %v %+v", err, p)
		}
		if err := a.Remove(ctx, sb.ID, true); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Get(ctx, sb.ID); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("get after remove: %v", err)
		}
		var objs v1alpha1.SandboxList
		if err := c.k.Client.List(ctx, &objs, kclient.InNamespace("team-a")); err != nil || len(objs.Items) != 0 {
			t.Fatalf("objects left in team-a: %v %d", err, len(objs.Items))
		}
	})

	t.Run("BadInput", func(t *testing.T) {
		// An image no node has: a clear error, and no object left.
		_, err := a.Create(ctx, sandbox.CreateOptions{Image: "no-such-image-anywhere", Start: true})
		if err == nil || !strings.Contains(err.Error(), "no-such-image-anywhere") {
			t.Fatalf("create of a missing image: %v", err)
		}
		if _, err := a.Create(ctx, sandbox.CreateOptions{Pool: "p", Start: true}); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("create from a missing pool: %v", err)
		}
		if _, err := a.Create(ctx, sandbox.CreateOptions{Image: sandbox.DefaultImage, Start: true, Config: sandbox.Config{Hostname: "h"}}); !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "hostname") {
			t.Fatalf("create with a hostname: %v", err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			var objs v1alpha1.SandboxList
			if err := c.k.Client.List(ctx, &objs, kclient.InNamespace("team-a")); err != nil {
				t.Fatal(err)
			}
			if len(objs.Items) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d objects left after failed creates", len(objs.Items))
			}
			time.Sleep(100 * time.Millisecond)
		}
		// Hostile references: a clear 400 or 404, never a 5xx.
		for _, ref := range []string{"..", "%2e%2e", "a%00b", "%ff", strings.Repeat("a", 300), "A_B", "k-..%2F..%2Fetc"} {
			for _, path := range []string{"/v1/sandboxes/" + ref, "/v1/sandboxes/" + ref + "/exec", "/sandboxes/" + ref, "/sandboxes/" + ref + "/connect"} {
				method := "GET"
				if strings.HasSuffix(path, "exec") || strings.HasSuffix(path, "connect") {
					method = "POST"
				}
				req, _ := http.NewRequest(method, c.URL+path, strings.NewReader("{}"))
				req.Header.Set("X-API-KEY", keyA)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusBadRequest {
					t.Errorf("%s %s: %d, want 400 or 404", method, path, resp.StatusCode)
				}
			}
		}
		for _, tc := range []struct {
			method, path, key, body string
			status                  int
		}{
			{"GET", "/v1/sandboxes", "", "", http.StatusUnauthorized},
			{"GET", "/v1/sandboxes", "wrong", "", http.StatusUnauthorized},
			{"POST", "/v1/sandboxes", keyA, "{not json", http.StatusBadRequest},
			{"GET", "/v1/sandboxes/nosuch", keyA, "", http.StatusNotFound},
			{"POST", "/v1/snapshots", keyA, "{}", http.StatusMethodNotAllowed},
			// What a cluster has no sense for: 501, saying what to do.
			{"POST", "/v1/pools", keyA, `{"name": "p", "size": 1}`, http.StatusNotImplemented},
			{"GET", "/v1/images", keyA, "", http.StatusNotImplemented},
			{"POST", "/v1/sandboxes/nosuch/start", keyA, "", http.StatusNotImplemented},
			{"POST", "/v1/snapshots/import", keyA, "", http.StatusNotImplemented},
			{"POST", "/v1/snapshots/nosuch/restore", keyA, "{}", http.StatusNotFound},
			{"POST", "/v1/snapshots/nosuch/restore", keyA, `{"ttl": "-1s"}`, http.StatusBadRequest},
			{"GET", "/v1/snapshots/nosuch", keyA, "", http.StatusNotFound},
			{"POST", "/v1/sandboxes/nosuch/checkpoint", keyA, "{}", http.StatusNotFound},
			{"POST", "/v1/sandboxes/nosuch/checkpoint", keyA, `{"stop": true}`, http.StatusBadRequest},
			{"POST", "/sandboxes/nosuch/snapshots", keyA, `{"name": "s"}`, http.StatusNotFound},
			{"GET", "/snapshots?sandboxID=a%2Fb", keyA, "", http.StatusBadRequest},
			{"GET", "/snapshots?name=..", keyA, "", http.StatusBadRequest},
			{"DELETE", "/templates/nosuch", keyA, "", http.StatusNotFound},
			{"POST", "/sandboxes", keyA, `{"templateID": ""}`, http.StatusBadRequest},
			{"POST", "/sandboxes", keyA, `{"templateID": "base", "timeout": -1}`, http.StatusBadRequest},
			{"GET", "/sandboxes/nosuch", keyA, "", http.StatusNotFound},
			{"GET", "/sandboxes", "", "", http.StatusUnauthorized},
			// Volumes and template builds are a node's: 501, not 404.
			{"GET", "/volumes", keyA, "", http.StatusNotImplemented},
			{"POST", "/volumes", keyA, `{"name": "v"}`, http.StatusNotImplemented},
			{"POST", "/v3/templates", keyA, `{"name": "t"}`, http.StatusNotImplemented},
			{"POST", "/sandboxes", keyA, `{"templateID": "base", "volumeMounts": [{"name": "v", "path": "/v"}]}`, http.StatusBadRequest},
		} {
			req, _ := http.NewRequest(tc.method, c.URL+tc.path, strings.NewReader(tc.body))
			if tc.key != "" {
				req.Header.Set("X-API-KEY", tc.key)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Errorf("%s %s: %d, want %d", tc.method, tc.path, resp.StatusCode, tc.status)
			}
		}
	})

	t.Run("E2BSDK", func(t *testing.T) {
		// The scenarios of a single smolvm serve that the gateway serves
		// (autoPause is refused; the network scenario needs
		// tests/nettest's closed namespace). pty and watchDir are the
		// long-lived envd streams that, before the proxy enabled full
		// duplex, sometimes ended "terminated" under load (docs/kube.md).
		runSDK(t, c, "test/sandbox.test.mjs", []string{"E2B_API_KEY=" + keyA},
			"create, getInfo, list, connect, kill", "commands:", "files: write", "a wrong API key",
			"an unknown sandbox", "setTimeout", "pause, then connect", "list filters", "a dead sandbox",
			"stdin a command never reads", "fork copies a running sandbox", "createSnapshot, then Sandbox.create from it",
			"pty:", "files.watchDir")
	})

	t.Run("CodeInterpreter", func(t *testing.T) {
		// @e2b/code-interpreter, unmodified: its template is the builtin
		// image, whose kernel server starts at the first request to its
		// port, routed by the gateway to the sandbox's node.
		runSDK(t, c, "test/code-interpreter.test.mjs", []string{"E2B_API_KEY=" + keyA})
	})

	t.Run("E2BIsolation", func(t *testing.T) {
		// B asking for A's sandbox or snapshot gets what it gets for a
		// missing one: the same status and body, but for the ID it sent.
		var sb struct{ SandboxID, EnvdAccessToken string }
		if code := call(t, "POST", c.URL+"/sandboxes", keyA, `{"templateID":"base"}`, &sb); code != http.StatusCreated {
			t.Fatalf("A's create: %d", code)
		}
		var snap struct{ SnapshotID string }
		if code := call(t, "POST", c.URL+"/sandboxes/"+sb.SandboxID+"/snapshots", keyA, `{}`, &snap); code != http.StatusCreated {
			t.Fatalf("A's snapshot: %d", code)
		}
		missingSandbox, missingSnapshot := "0123456789ab", strings.Repeat("0", 64)
		for _, r := range []struct{ method, path, body, a, missing string }{
			{"GET", "/sandboxes/%s", "", sb.SandboxID, missingSandbox},
			{"POST", "/sandboxes/%s/connect", "{}", sb.SandboxID, missingSandbox},
			{"POST", "/sandboxes/%s/timeout", `{"timeout": 10}`, sb.SandboxID, missingSandbox},
			{"POST", "/sandboxes/%s/pause", "", sb.SandboxID, missingSandbox},
			{"POST", "/sandboxes/%s/fork", "{}", sb.SandboxID, missingSandbox},
			{"POST", "/sandboxes/%s/snapshots", "{}", sb.SandboxID, missingSandbox},
			{"GET", "/sandboxes/%s/metrics", "", sb.SandboxID, missingSandbox},
			{"DELETE", "/sandboxes/%s", "", sb.SandboxID, missingSandbox},
			{"DELETE", "/templates/%s", "", snap.SnapshotID, missingSnapshot},
			{"GET", "/v1/sandboxes/%s", "", sb.SandboxID, missingSandbox},
			{"GET", "/v1/snapshots/%s", "", snap.SnapshotID, missingSnapshot},
		} {
			code, body := answer(t, r.method, c.URL+fmt.Sprintf(r.path, r.a), keyB, r.body)
			wantCode, want := answer(t, r.method, c.URL+fmt.Sprintf(r.path, r.missing), keyB, r.body)
			if code != wantCode || code < 400 || strings.ReplaceAll(body, r.a, "ID") != strings.ReplaceAll(want, r.missing, "ID") {
				t.Errorf("B's %s %s of A's: %d %s; of a missing one: %d %s", r.method, r.path, code, body, wantCode, want)
			}
		}
		if code := call(t, "GET", c.URL+"/sandboxes/"+sb.SandboxID, keyA, "", nil); code != http.StatusOK {
			t.Errorf("A's sandbox after B's calls: %d", code)
		}
		for _, path := range []string{"/templates/" + snap.SnapshotID, "/sandboxes/" + sb.SandboxID} {
			if code := call(t, "DELETE", c.URL+path, keyA, "", nil); code != http.StatusNoContent {
				t.Errorf("A's DELETE %s: %d", path, code)
			}
		}
	})

	t.Run("E2BTenants", func(t *testing.T) {
		// Two keys, two namespaces: B reaches none of A's sandboxes and
		// snapshots, and each call answers as for one that never existed.
		// Volumes are a node's: the gateway answers their API with 501
		// (TestVolumesRefused), so their scenario is a single serve's.
		runSDK(t, c, "tenants.mjs", []string{"SMOLVM_KEY_A=" + keyA, "SMOLVM_KEY_B=" + keyB},
			"tenant B reaches none of tenant A's sandboxes")
	})
}

// answer sends a request with an API key and returns its status and body.
func answer(tb testing.TB, method, url, key, body string) (int, string) {
	tb.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("X-API-KEY", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// runSDK runs the e2b SDK scenarios of sdk/e2b-compat's file whose names
// start with one of names (all without names) against the gateway, with
// env added.
func runSDK(t *testing.T, c *cluster, file string, env []string, names ...string) {
	t.Helper()
	nodeBin, err := exec.LookPath("node")
	dir := filepath.Join(testenv.Root(), "sdk", "e2b-compat")
	if _, serr := os.Stat(filepath.Join(dir, "node_modules", "e2b", "package.json")); err != nil || serr != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("node and sdk/e2b-compat's node_modules are required in CI: %v %v", err, serr)
		}
		t.Skip("node or the e2b package not installed")
	}
	args := []string{"--test", "--test-reporter=spec"}
	for _, name := range names {
		args = append(args, "--test-name-pattern=^"+regexp.QuoteMeta(name))
	}
	cmd := exec.Command(nodeBin, append(args, file)...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "E2B_API_URL="+c.URL, "E2B_SANDBOX_URL="+c.URL), env...)
	out, err := cmd.CombinedOutput()
	t.Logf("e2b SDK through the gateway (%s):\n%s", file, out)
	if err != nil {
		t.Fatalf("the e2b SDK scenarios of %s failed through the gateway: %v", file, err)
	}
	if !regexp.MustCompile(`(?m)^ℹ pass [1-9]`).Match(out) {
		t.Fatal("no scenario ran")
	}
}
