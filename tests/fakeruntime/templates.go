package fakeruntime

import (
	"context"
	"fmt"

	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/sandbox"
)

// The fake keeps no templates: building one needs a real start command
// checkpointed (runtime/manager's templates.go), which its tests use.

var errNoTemplates = errdefs.New(errdefs.ErrUnsupported, "the fake runtime builds no templates")

func (r *Runtime) BuildTemplate(context.Context, sandbox.TemplateOptions) (*sandbox.Template, error) {
	return nil, errNoTemplates
}

func (r *Runtime) TagTemplate(context.Context, string, string) (*sandbox.Template, error) {
	return nil, errNoTemplates
}

func (r *Runtime) Template(_ context.Context, name string) (*sandbox.Template, error) {
	return nil, fmt.Errorf("template %s: %w", name, sandbox.ErrTemplateNotFound)
}

func (r *Runtime) Templates(context.Context) ([]*sandbox.Template, error) { return nil, nil }

func (r *Runtime) RemoveTemplate(ctx context.Context, name string) error {
	_, err := r.Template(ctx, name)
	return fmt.Errorf("remove %w", err)
}
