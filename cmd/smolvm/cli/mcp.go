package cli

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"

	"smolvm.dev/smolvm/runtime/manager"
	"smolvm.dev/smolvm/server/mcpserver"
	"smolvm.dev/smolvm/workflow/browser"
)

func (a *app) mcpCmd() *cobra.Command {
	return a.withSession(&cobra.Command{
		Use:   "mcp",
		Short: "Serve sandboxes to an AI agent as MCP tools over stdio",
		Long: "Speaks the Model Context Protocol on stdin/stdout, for Claude Code, Codex, Cursor and other\n" +
			"MCP clients: tools create sandboxes, run commands, read and write files, checkpoint,\n" +
			"restore and fork. Register it as a stdio server whose command is `smolvm mcp`.\n" +
			"With --host (SMOLVM_HOST) it works through that smolvm serve with SMOLVM_TOKEN, which may\n" +
			"be a tenant's key: the agent then reaches only that tenant's sandboxes.",
		Args: cobra.NoArgs,
	}, func(s *session, _ []string) error {
		ops, err := s.sandboxes()
		if err != nil {
			return err
		}
		var dial browser.Dialer
		if m, ok := ops.(*manager.Manager); ok {
			dial = m.DialPublished
		}
		svc, ok := ops.(mcpserver.Service)
		if !ok {
			return fmt.Errorf("mcp: %T cannot remove snapshots", ops) // both of session's services can
		}
		return mcpserver.New(svc, buildVersion(), dial).Run(s.ctx, mcpserver.Transport(a.stdin, a.stdout))
	})
}

// buildVersion is the module version smolvm was built at ("(devel)" from
// a work tree).
func buildVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		return bi.Main.Version
	}
	return "(devel)"
}
