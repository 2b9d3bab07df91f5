package main

import (
	"testing"

	"gvisor.dev/gvisor/pkg/seccomp/precompiledseccomp"
	"gvisor.dev/gvisor/pkg/sentry/platform"
	sentry "gvisor.dev/gvisor/runsc/boot/filter/config"
	"gvisor.dev/gvisor/runsc/config"
	"gvisor.dev/gvisor/runsc/flag"
	gofer "gvisor.dev/gvisor/runsc/fsgofer/filter/config"
)

// smolvmFlags are the flags runtime/backend/gvisor.runscArgs gives runsc
// that bear on the filters (paths left out); the network is none, or
// sandbox when the sandbox has one.
func smolvmConfig(t *testing.T, network string) *config.Config {
	fs := flag.NewFlagSet("runsc", flag.ContinueOnError)
	config.RegisterFlags(fs)
	if err := fs.Parse([]string{"--platform", "systrap", "--network", network, "--host-uds", "create", "--overlay2", "root:memory", "--in-sandbox-cgroup", "v2"}); err != nil {
		t.Fatal(err)
	}
	conf, err := config.NewFromFlags(fs)
	if err != nil {
		t.Fatal(err)
	}
	return conf
}

// sentryKey is the key runsc's loader (runsc/boot/loader.go) looks up for
// conf, on platform p.
func sentryKey(t *testing.T, conf *config.Config, p string) string {
	ctor, err := platform.Lookup(p)
	if err != nil {
		t.Fatal(err)
	}
	hostnet := conf.Network == config.NetworkHost
	return sentry.Options{
		Platform:              ctor.PrecompiledSeccompInfo()[0],
		HostNetwork:           hostnet,
		HostNetworkRawSockets: hostnet && conf.EnableRaw,
		HostFilesystem:        conf.DirectFS,
		ProfileEnable:         conf.ProfileEnable,
		CgoEnabled:            false, // runsc is static (install.sh)
		PluginNetwork:         conf.Network == config.NetworkPlugin,
	}.ConfigKey()
}

// goferKey is the key runsc's gofer (runsc/cmd/gofer.go) looks up.
func goferKey(conf *config.Config, lisafs bool) string {
	return gofer.Options{
		UDSOpenEnabled:   conf.GetHostUDS().AllowOpen(),
		UDSCreateEnabled: conf.GetHostUDS().AllowCreate(),
		DirectFS:         conf.DirectFS,
		LisafsNeeded:     lisafs,
		CgoEnabled:       false,
	}.ConfigKey()
}

func kept(progs []precompiledseccomp.Program, uses map[string]string) map[string]bool {
	out := map[string]bool{}
	for _, p := range keep(progs, uses) {
		out[p.Name] = true
	}
	return out
}

// TestKeepsSmolvmKeys checks that the programs smolvm's runsc looks up are
// kept and others dropped.
func TestKeepsSmolvmKeys(t *testing.T) {
	none, sandbox := smolvmConfig(t, "none"), smolvmConfig(t, "sandbox")
	host := smolvmConfig(t, "host")
	mine := []string{sentryKey(t, none, "systrap"), sentryKey(t, sandbox, "systrap")}
	others := []string{sentryKey(t, none, "ptrace"), sentryKey(t, host, "systrap")}
	var progs []precompiledseccomp.Program
	for _, k := range append(append([]string{}, mine...), others...) {
		progs = append(progs, precompiledseccomp.Program{Name: k})
	}
	got := kept(progs, sentryUses)
	for _, k := range mine {
		if !got[k] {
			t.Errorf("smolvm's Sentry key dropped: %s", k)
		}
	}
	for _, k := range others {
		if got[k] {
			t.Errorf("a key smolvm never uses kept: %s", k)
		}
	}

	mine = []string{goferKey(none, true), goferKey(none, false)}
	open := smolvmConfig(t, "none")
	open.HostUDS = config.HostUDSAll
	others = []string{goferKey(open, true)}
	progs = nil
	for _, k := range append(append([]string{}, mine...), others...) {
		progs = append(progs, precompiledseccomp.Program{Name: k})
	}
	got = kept(progs, goferUses)
	for _, k := range mine {
		if !got[k] {
			t.Errorf("smolvm's gofer key dropped: %s", k)
		}
	}
	for _, k := range others {
		if got[k] {
			t.Errorf("a gofer key smolvm never uses kept: %s", k)
		}
	}
}
