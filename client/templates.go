package client

import (
	"context"
	"net/http"
	"net/url"

	"smolvm.dev/smolvm/api"
	"smolvm.dev/smolvm/sandbox"
)

// BuildTemplate builds (or rebuilds) a template: a sandbox of req.Image
// runs req.Start until req.Ready passes and is checkpointed. It returns
// once the template is built. Create a sandbox from it by naming it as
// the image.
func (c *Client) BuildTemplate(ctx context.Context, req api.TemplateRequest) (*sandbox.Template, error) {
	return callFor[sandbox.Template](ctx, c, http.MethodPost, "/v1/templates", req)
}

// Templates lists the caller's templates and the public ones.
func (c *Client) Templates(ctx context.Context) ([]*sandbox.Template, error) {
	var ts []*sandbox.Template
	return ts, c.call(ctx, http.MethodGet, "/v1/templates", nil, &ts)
}

// Template returns one template: the caller's own, else a public one.
func (c *Client) Template(ctx context.Context, name string) (*sandbox.Template, error) {
	return callFor[sandbox.Template](ctx, c, http.MethodGet, "/v1/templates/"+url.PathEscape(name), nil)
}

// RemoveTemplate removes one of the caller's templates.
func (c *Client) RemoveTemplate(ctx context.Context, name string) error {
	return c.call(ctx, http.MethodDelete, "/v1/templates/"+url.PathEscape(name), nil, nil)
}
