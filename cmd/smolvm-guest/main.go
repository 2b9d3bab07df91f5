// Command smolvm-guest is the init process and exec supervisor inside every
// sandbox. It is kept apart from the smolvm CLI so that it stays small:
// it starts on every sandbox boot, where each page of binary costs a fault.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"smolvm.dev/smolvm/runtime/backend/vm/ramfd"
	"smolvm.dev/smolvm/runtime/guest"
)

func main() {
	if len(os.Args) == 3 && os.Args[1] == "relay" {
		// On the host, beside a microVM: see guest.RelayFiles. The run
		// dir is open at fd 5; its path (the argument) names the relay.
		if err := guest.RelayFiles(os.NewFile(3, "serial"), os.NewFile(4, "agent"), os.NewFile(5, os.Args[2])); err != nil {
			fmt.Fprintln(os.Stderr, "smolvm-guest relay:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 2 && os.Args[1] == "qemu" {
		// On the host: a pre-launched QEMU, whose RAM file smolvm hands
		// it at the restore (see ramfd).
		fmt.Fprintln(os.Stderr, "smolvm-guest qemu:", ramfd.Exec(os.Args[2:]))
		os.Exit(1)
	}
	if len(os.Args) == 4 && os.Args[1] == "forward" {
		// Inside a sandbox, beside its main command: see guest.Forward.
		if err := guest.ForwardMain(os.Args[2], os.Args[3]); err != nil {
			fmt.Fprintln(os.Stderr, "smolvm-guest forward:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: smolvm-guest CONFIG | smolvm-guest relay RUNDIR | smolvm-guest qemu QEMU ARGS... | smolvm-guest forward LISTEN TARGET")
		os.Exit(2)
	}
	code, err := run(os.Args[1])
	if err != nil {
		// The host reads this file when boot fails.
		os.WriteFile(filepath.Join(filepath.Dir(os.Args[1]), "agent.err"), []byte(err.Error()+"\n"), 0o644)
		fmt.Fprintln(os.Stderr, "smolvm-guest:", err)
	}
	os.Exit(code)
}

func run(path string) (int, error) {
	p, err := os.ReadFile(path)
	if err != nil {
		return 1, err
	}
	var cfg guest.Config
	if err := json.Unmarshal(p, &cfg); err != nil {
		return 1, fmt.Errorf("agent config %s: %w", path, err)
	}
	if err := guest.ReserveAdmin(); err != nil {
		return 1, err
	}
	return guest.Serve(context.Background(), cfg)
}
