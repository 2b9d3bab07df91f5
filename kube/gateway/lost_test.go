package gateway_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"smolvm.dev/smolvm/client"
	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/kube/api/v1alpha1"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/tests/testenv"
	"smolvm.dev/smolvm/tests/testserve"
)

// TestNodeLost kills a node (its daemon and its smolvm serve, as a host
// going away does): once its Lease lapses its sandbox is Lost, never made
// again; the other node's keeps serving through the gateway, lists show
// only it, and new sandboxes go to the node left.
func TestNodeLost(t *testing.T) {
	c := start(t)
	ctx := context.Background()
	gw := c.client(t, keyA)
	for name, node := range map[string]string{"stays": "n1", "goes": "n2"} {
		c.put(t, &v1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.SandboxSpec{SandboxBody: sleeper, NodeName: node}})
	}
	stays := c.sandboxIn(t, "stays", v1alpha1.PhaseRunning).Status.Instances[0].ID
	goes := c.sandboxIn(t, "goes", v1alpha1.PhaseRunning).Status.Instances[0].ID

	c.nodes[1].Stop()
	c.nodes[1].Serve.Kill()
	lost := c.sandboxIn(t, "goes", v1alpha1.PhaseLost)
	if lost.Spec.NodeName != "n2" || len(lost.Status.Instances) != 1 {
		t.Fatalf("lost sandbox: %+v %+v", lost.Spec, lost.Status)
	}

	var out bytes.Buffer
	if exit, err := gw.Exec(ctx, stays, sandbox.Process{Args: []string{"echo", "still here"}}, sandbox.Stdio{Stdout: &out}); err != nil || exit.Code != 0 || out.String() != "still here\n" {
		t.Fatalf("exec on n1 after n2 went: %v %+v %q", err, exit, out.String())
	}
	if _, err := gw.Get(ctx, goes); !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "n2") {
		t.Fatalf("get of the lost sandbox: %v; want unavailable, naming its node", err)
	}
	list, err := gw.List(ctx)
	if err != nil || len(list) != 1 || list[0].ID != stays {
		t.Fatalf("list after n2 went: %v %+v", err, list)
	}
	var e2b []struct {
		SandboxID string `json:"sandboxID"`
	}
	if code := call(t, "GET", c.URL+"/v2/sandboxes", keyA, "", &e2b); code != http.StatusOK || len(e2b) != 1 || e2b[0].SandboxID != stays {
		t.Fatalf("E2B list after n2 went: %d %+v", code, e2b)
	}
	sb, err := gw.Create(ctx, sandbox.CreateOptions{Image: sandbox.DefaultImage, Start: true})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := c.nodes[0].Smolvm.Get(ctx, sb.ID); got == nil {
		t.Fatalf("a new sandbox %s is not on n1, the node left", sb.ID)
	}

	// runsc outlives a killed smolvm serve: a serve restarted over n2's
	// data dir removes what it left, so the test leaves nothing running.
	again := testserve.Start(t, c.nodes[1].Dir, testenv.Guest(t))
	sc, err := client.New(again.URL, again.Token)
	if err != nil {
		t.Fatal(err)
	}
	left, _ := sc.List(ctx)
	for _, s := range left {
		if err := sc.Remove(ctx, s.ID, true); err != nil {
			t.Error(err)
		}
	}
}
