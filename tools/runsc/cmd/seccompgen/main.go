// Command seccompgen precompiles runsc's seccomp programs into a vendored
// copy of gVisor.
//
// gVisor's Bazel build generates these programs; its Go module ships the
// registration files empty, so a runsc built with `go build` compiles and
// optimizes the Sentry's filter at every boot and restore (about 140 ms of
// CPU here). The programs are the ones gVisor itself would embed; this only
// moves their compilation from each sandbox start to the build.
//
// Only the programs for the configuration smolvm runs runsc with are
// registered (uses): gVisor precompiles one per combination of platform,
// networking, GPU/TPU/RDMA proxies and more, several hundred in all, and
// every runsc process, CLI commands included, registers each at start.
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"gvisor.dev/gvisor/pkg/seccomp/precompiledseccomp"
	sentry "gvisor.dev/gvisor/runsc/boot/filter/config"
	gofer "gvisor.dev/gvisor/runsc/fsgofer/filter/config"
)

func main() {
	gvisorDir := flag.String("gvisor", "", "a writable copy of the gvisor.dev/gvisor module, e.g. vendor/gvisor.dev/gvisor after go mod vendor")
	flag.Parse()
	if *gvisorDir == "" {
		log.Fatal("usage: seccompgen -gvisor DIR")
	}
	targets := []struct {
		file     string
		programs func() ([]precompiledseccomp.Program, error)
		uses     map[string]string
	}{
		{"runsc/boot/filter/filter_precompiled.go", sentry.PrecompiledPrograms, sentryUses},
		{"runsc/fsgofer/filter/filter_precompiled.go", gofer.PrecompiledPrograms, goferUses},
	}
	for _, t := range targets {
		path := filepath.Join(*gvisorDir, t.file)
		all, err := t.programs()
		if err != nil {
			log.Fatalf("%s: %v", t.file, err)
		}
		progs := keep(all, t.uses)
		if len(progs) == 0 {
			log.Fatalf("%s: none of %d programs fits smolvm's configuration %v; update seccompgen for this gVisor version", t.file, len(all), t.uses)
		}
		src, err := patch(path, progs)
		if err != nil {
			log.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			log.Fatal(err)
		}
		log.Printf("%s: %d of %d programs", t.file, len(progs), len(all))
	}
}

// The options smolvm's runsc flags (runtime/backend/gvisor.runscArgs) give
// the Sentry's and the gofer's filters, as they appear in a program's key
// (its Name, config.Options.ConfigKey). Options not named here vary with
// the sandbox and are kept in every value.
var (
	sentryUses = map[string]string{
		"Platform":              `"systrap"`,
		"HostNetwork":           "false", // --network none or sandbox
		"HostNetworkRawSockets": "false",
		"HostFilesystem":        "true", // directfs, runsc's default
		"ProfileEnable":         "false",
		"NVProxy":               "false",
		"TPUProxy":              "false",
		"RDMAProxy":             "false",
		"CgoEnabled":            "false",
		"PluginNetwork":         "false",
	}
	goferUses = map[string]string{
		"UDSOpenEnabled":   "false", // --host-uds create
		"UDSCreateEnabled": "true",
		"ProfileEnabled":   "false",
		"DirectFS":         "true",
		"CgoEnabled":       "false",
	}
)

var keyField = regexp.MustCompile(`(\w+)=("[^"]*"|\S+)`)

// keep returns the programs whose key has every option uses names at the
// value it gives.
func keep(progs []precompiledseccomp.Program, uses map[string]string) []precompiledseccomp.Program {
	var out []precompiledseccomp.Program
	for _, p := range progs {
		fields := map[string]string{}
		for _, m := range keyField.FindAllStringSubmatch(p.Name, -1) {
			fields[m[1]] = m[2]
		}
		fits := true
		for k, v := range uses {
			if fields[k] != v {
				fits = false
			}
		}
		if fits {
			out = append(out, p)
		}
	}
	return out
}

// patch returns the registration file at path with progs registered.
// It edits the shipped file rather than writing a new one, so that any
// other declaration there stays as gVisor wrote it; an unexpected shape
// fails the build instead of silently registering nothing.
func patch(path string, progs []precompiledseccomp.Program) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	src := string(b)
	const (
		disabled = "const PrecompilationDisabledAtBuildTime = true"
		register = "\tprecompiledPrograms = programs\n"
	)
	if strings.Count(src, disabled) != 1 || strings.Count(src, register) != 1 {
		return "", fmt.Errorf("%s: not the shape seccompgen knows; update it for this gVisor version", path)
	}
	var regs strings.Builder
	for _, p := range progs {
		regs.WriteString(p.Registration("\t", "precompiledseccomp", "programs"))
	}
	src = strings.Replace(src, disabled, "const PrecompilationDisabledAtBuildTime = false", 1)
	src = strings.Replace(src, register, regs.String()+register, 1)
	return src, nil
}
