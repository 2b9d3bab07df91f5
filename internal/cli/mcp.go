package cli

import (
	"io"
	"runtime/debug"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"smolvm.dev/smolvm/server/mcpserver"
)

func (a *app) mcpCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "mcp",
		Short: "Serve sandboxes to an AI agent as MCP tools over stdio",
		Long: "Speaks the Model Context Protocol on stdin/stdout, for Claude Code, Codex, Cursor and other\n" +
			"MCP clients: tools create sandboxes, run commands, read and write files, checkpoint,\n" +
			"restore and fork. Register it as a stdio server whose command is `smolvm mcp`.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			e, err := a.open(ctx)
			if err != nil {
				return err
			}
			defer e.Close()
			t := &mcp.IOTransport{Reader: io.NopCloser(a.stdin), Writer: nopWriteCloser{a.stdout}}
			return mcpserver.New(e.mgr, buildVersion(), e.mgr.DialPublished).Run(ctx, t)
		},
	}
}

// nopWriteCloser leaves the app's stdout open when the MCP session ends.
type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// buildVersion is the module version smolvm was built at ("(devel)" from
// a work tree).
func buildVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		return bi.Main.Version
	}
	return "(devel)"
}
