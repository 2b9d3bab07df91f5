package runner

import (
	"context"
	"fmt"
	"strings"

	"smolvm.dev/smolvm/workflow/memory"
	"smolvm.dev/smolvm/workflow/rules"
)

// MaxMemory bounds the facts recalled for one path.
const MaxMemory = 5

// RepoContext returns what the built-in agent is told about a path of the
// repository at root: the rules that apply to an edit of it (what
// `smolvm rules render` prints) and the valid facts `smolvm memory
// recall` returns for it. Both read the user's repository, never write.
func RepoContext(ctx context.Context, root string) (func(ctx context.Context, path string) string, error) {
	rs, err := rules.Load(ctx, root)
	if err != nil {
		return nil, fmt.Errorf("rules of %s: %w", root, err)
	}
	mem, err := memory.Open(ctx, root)
	if err != nil {
		return nil, fmt.Errorf("memory of %s: %w", root, err)
	}
	return func(ctx context.Context, p string) string {
		var b strings.Builder
		file := p
		if p == "." {
			file = "README.md" // the rules for the repository as a whole
		}
		var r strings.Builder
		if err := rs.Resolve(file, rules.DefaultBudget).Render(&r, "plain"); err == nil && strings.TrimSpace(r.String()) != "" {
			b.WriteString(r.String())
		}
		if p == "." {
			return b.String()
		}
		ms, err := mem.Recall(ctx, mem.Root(), p)
		if err == nil && len(ms) > 0 {
			b.WriteString("\nMemory:\n")
			for i, m := range ms {
				if i == MaxMemory {
					break
				}
				fmt.Fprintf(&b, "- [%s] %s\n", m.Fact.Kind, strings.TrimSpace(m.Fact.Text))
			}
		}
		return b.String()
	}, nil
}
