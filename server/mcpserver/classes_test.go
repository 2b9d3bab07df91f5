package mcpserver

import (
	"context"
	"errors"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/tests/testerrs"
)

// toolError runs classify over a tool call that failed with err, as the
// SDK reports a tool handler's error, and returns the result.
func toolError(t *testing.T, err error) *mcp.CallToolResult {
	t.Helper()
	failed := func(context.Context, string, mcp.Request) (mcp.Result, error) {
		var res mcp.CallToolResult
		res.SetError(err)
		return &res, nil
	}
	res, rerr := classify(failed)(context.Background(), "tools/call", nil)
	tr, ok := res.(*mcp.CallToolResult)
	if rerr != nil || !ok || !tr.IsError || len(tr.Content) != 1 {
		t.Fatalf("%v: %+v %v", err, res, rerr)
	}
	return tr
}

// TestToolErrorClasses walks every error class through MCP: a tool error
// names its class in _meta and before its message.
func TestToolErrorClasses(t *testing.T) {
	testerrs.Each(t, func(t *testing.T, class, err error) {
		name := errdefs.Name(class)
		tr := toolError(t, err)
		if text := tr.Content[0].(*mcp.TextContent).Text; tr.Meta[MetaClass] != name || text != name+": "+err.Error() {
			t.Errorf("meta %v, text %q", tr.Meta, text)
		}
	})
	tr := toolError(t, errors.New("disk on fire"))
	if text := tr.Content[0].(*mcp.TextContent).Text; tr.Meta != nil || text != "disk on fire" {
		t.Errorf("an error of no class: meta %v, text %q", tr.Meta, text)
	}
}
