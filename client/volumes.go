package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"smolvm.dev/smolvm/api"
	"smolvm.dev/smolvm/sandbox"
)

var _ sandbox.VolumeService = (*Client)(nil)

func volumePath(name string) string { return "/v1/volumes/" + url.PathEscape(name) }

// CreateVolume makes a volume of o.Size bytes (0: the server's default).
func (c *Client) CreateVolume(ctx context.Context, o sandbox.VolumeOptions) (*sandbox.Volume, error) {
	return callFor[sandbox.Volume](ctx, c, http.MethodPost, "/v1/volumes", api.VolumeRequest{Name: o.Name, Size: api.Bytes(o.Size)})
}

// GetVolume returns a volume and the sandboxes that mount it.
func (c *Client) GetVolume(ctx context.Context, name string) (*sandbox.Volume, error) {
	return callFor[sandbox.Volume](ctx, c, http.MethodGet, volumePath(name), nil)
}

// ListVolumes returns the caller's volumes (an admin's: everyone's).
func (c *Client) ListVolumes(ctx context.Context) ([]*sandbox.Volume, error) {
	var vs []*sandbox.Volume
	return vs, c.call(ctx, http.MethodGet, "/v1/volumes", nil, &vs)
}

// RemoveVolume deletes a volume; one that sandboxes mount needs force.
func (c *Client) RemoveVolume(ctx context.Context, name string, force bool) error {
	resp, err := c.do(ctx, request{method: http.MethodDelete, path: volumePath(name), query: url.Values{"force": {strconv.FormatBool(force)}}})
	if err != nil {
		return err
	}
	return resp.Body.Close()
}
