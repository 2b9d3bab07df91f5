// Command seccompgen precompiles runsc's seccomp programs into a vendored
// copy of gVisor.
//
// gVisor's Bazel build generates these programs; its Go module ships the
// registration files empty, so a runsc built with `go build` compiles and
// optimizes the Sentry's filter at every boot and restore (about 140 ms of
// CPU here). The programs are the ones gVisor itself would embed; this only
// moves their compilation from each sandbox start to the build.
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
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
	}{
		{"runsc/boot/filter/filter_precompiled.go", sentry.PrecompiledPrograms},
		{"runsc/fsgofer/filter/filter_precompiled.go", gofer.PrecompiledPrograms},
	}
	for _, t := range targets {
		path := filepath.Join(*gvisorDir, t.file)
		progs, err := t.programs()
		if err != nil {
			log.Fatalf("%s: %v", t.file, err)
		}
		src, err := patch(path, progs)
		if err != nil {
			log.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			log.Fatal(err)
		}
		log.Printf("%s: %d programs", t.file, len(progs))
	}
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
