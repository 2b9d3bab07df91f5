package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"smolvm.dev/smolvm/agent"
)

// agentCmd is the sandbox's PID 1. It is hidden: users never run it.
func (a *app) agentCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "agent CONFIG",
		Short:  "Run as a sandbox's init and exec agent (internal)",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			code, err := runAgent(cmd, args[0])
			if err != nil {
				// The host reads this file when boot fails.
				os.WriteFile(filepath.Join(filepath.Dir(args[0]), "agent.err"), []byte(err.Error()+"\n"), 0o644)
				return err
			}
			return exitCode(code)
		},
	}
}

func runAgent(cmd *cobra.Command, path string) (int, error) {
	p, err := os.ReadFile(path)
	if err != nil {
		return 1, err
	}
	var cfg agent.Config
	if err := json.Unmarshal(p, &cfg); err != nil {
		return 1, fmt.Errorf("agent config %s: %w", path, err)
	}
	return agent.Serve(cmd.Context(), cfg)
}
