package manager

import (
	"context"
	"fmt"
	"testing"
	"time"

	"smolvm.dev/smolvm/runtime/tenant"
	"smolvm.dev/smolvm/sandbox"
)

// TestUsageEgress sends real uploads with curl from sandboxes to a server
// of the test world, and finds the bytes in usage by sandbox, by tenant
// and by label, read from the network's own counters; the bytes a sandbox
// sends after the last pass are accounted when it is removed.
func TestUsageEgress(t *testing.T) {
	m, _ := newNetManager(t)
	ctx := context.Background()
	if _, err := m.Tenants().Add(ctx, "team", sandbox.Quota{}); err != nil {
		t.Fatal(err)
	}
	tctx := tenant.With(ctx, "team")
	since := time.Now().Add(-time.Hour)
	netCfg := func(labels map[string]string) sandbox.Config {
		return sandbox.Config{Labels: labels, Network: &sandbox.Network{Mode: sandbox.NetEgress, Hosts: []string{"allowed.test"}}}
	}
	red, err := m.Create(tctx, sandbox.CreateOptions{Start: true, Config: netCfg(map[string]string{"team": "red", "ci": "yes"})})
	if err != nil {
		t.Fatal(err)
	}
	blue, err := m.Create(tctx, sandbox.CreateOptions{Start: true, Config: netCfg(map[string]string{"team": "blue"})})
	if err != nil {
		t.Fatal(err)
	}
	quiet, err := m.Create(ctx, sandbox.CreateOptions{Start: true, Config: sandbox.Config{Labels: map[string]string{"team": "red"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Account(ctx); err != nil {
		t.Fatal(err)
	}
	upload := func(sb *sandbox.Sandbox, n int) {
		t.Helper()
		script := fmt.Sprintf("head -c %d /dev/urandom > /tmp/blob && curl -sS -m 30 --data-binary @/tmp/blob http://allowed.test/", n)
		if out, errOut, exit := m.sh(t, sb, script); exit.Code != 0 || out != "internet" {
			t.Fatalf("upload from %s: %q %q %+v", sb.Name, out, errOut, exit)
		}
	}
	upload(red, 2<<20)
	upload(blue, 1<<20)
	if err := m.Account(ctx); err != nil {
		t.Fatal(err)
	}
	// Headers, handshakes and ACKs add a little; the upload is the bulk.
	near := func(what string, got int64, want int) {
		t.Helper()
		if got < int64(want) || got > int64(want)+int64(want)/10 {
			t.Errorf("%s: %d bytes sent, want %d and a little", what, got, want)
		}
	}
	bySandbox := func() map[string]sandbox.Usage {
		t.Helper()
		us, err := m.Usage(ctx, since, "", sandbox.UsageBySandbox)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]sandbox.Usage{}
		for _, u := range us {
			out[u.Sandbox] = u
		}
		return out
	}
	sbs := bySandbox()
	near("red", sbs[red.ID].EgressBytes, 2<<20)
	near("blue", sbs[blue.ID].EgressBytes, 1<<20)
	if sbs[quiet.ID].EgressBytes != 0 {
		t.Errorf("a sandbox without a network sent %d bytes", sbs[quiet.ID].EgressBytes)
	}
	// The tenant's key sees its total, the sum of its sandboxes.
	us, err := m.Usage(tctx, since, "", sandbox.UsageByTenant)
	if err != nil || len(us) != 1 || us[0].Tenant != "team" || us[0].EgressBytes != sbs[red.ID].EgressBytes+sbs[blue.ID].EgressBytes {
		t.Errorf("team's usage: %+v %v; by sandbox %+v", us, err, sbs)
	}
	// By label: a row per tenant and key=value, each sandbox in each of
	// its labels' rows.
	us, err = m.Usage(ctx, since, "", sandbox.UsageByLabel)
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]sandbox.Usage{}
	for _, u := range us {
		labels[u.Tenant+"/"+u.Label] = u
	}
	if len(labels) != 4 || labels["team/team=red"].EgressBytes != sbs[red.ID].EgressBytes || labels["team/ci=yes"].EgressBytes != sbs[red.ID].EgressBytes ||
		labels["team/team=blue"].EgressBytes != sbs[blue.ID].EgressBytes || labels["/team=red"].SandboxSeconds != sbs[quiet.ID].SandboxSeconds {
		t.Errorf("by label: %+v; by sandbox: %+v", labels, sbs)
	}
	if _, err := m.Usage(ctx, since, "", "colour"); err == nil {
		t.Error("usage by an unknown breakdown: no error")
	}

	// Sent after the last pass, then removed: the remove accounts it.
	before := sbs[red.ID].EgressBytes
	upload(red, 1<<20)
	if err := m.Remove(tctx, red.ID, true); err != nil {
		t.Fatal(err)
	}
	near("red after a remove", bySandbox()[red.ID].EgressBytes-before, 1<<20)
}

// TestLabelsChecked refuses labels past their bounds with a clear error.
func TestLabelsChecked(t *testing.T) {
	many := map[string]string{}
	for i := range sandbox.MaxLabels + 1 {
		many[fmt.Sprint("k", i)] = "v"
	}
	for _, l := range []map[string]string{many, {"": "v"}, {"a=b": "v"}, {"k": "\x00"}, {"k": "\xff"}, {"k": string(make([]byte, sandbox.MaxLabelValueLen+1))},
		{sandbox.LabelWarm: "json/version"}, {sandbox.LabelWarm: "0/x"}, {sandbox.LabelWarm: "70000/"}, {sandbox.LabelWarm: "9222/a b"}} {
		if err := checkLabels(l); err == nil {
			t.Errorf("labels %q: accepted", l)
		}
	}
	if err := checkLabels(map[string]string{"team": "red", "ci/job": "build 12 ✓", sandbox.LabelWarm: "9222/json/version"}); err != nil {
		t.Error(err)
	}
	if port, path, err := sandbox.ParseWarm("8080"); port != 8080 || path != "/" || err != nil {
		t.Errorf("ParseWarm(8080): %d %q %v", port, path, err)
	}
}
