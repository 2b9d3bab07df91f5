package image

import (
	"context"
	"errors"
	"fmt"

	"smolvm.dev/smolvm/sandbox"
)

// BaseName is the base image's name in the store (`smolvm image build
// base`): once stored, sandboxes that name no image run it rather than
// the builtin host image.
const BaseName = sandbox.BaseImage

// BaseRecipe is the base image: Bookworm with the tools agents expect
// (python3, node, git, curl and CA certificates for HTTPS).
func BaseRecipe() sandbox.Recipe {
	r := sandbox.Bookworm(BaseName, "ca-certificates", "curl", "git", "python3", "nodejs")
	r.Env = append(r.Env, "HOME=/root")
	return r
}

// Default is the image a sandbox that names none runs: the base image
// once built from its recipe (an image merely tagged "base", such as one
// pulled, is not taken for it), else the builtin host image.
func (s *Store) Default(ctx context.Context) (string, error) {
	img, err := s.Get(ctx, BaseName)
	switch {
	case errors.Is(err, ErrNotFound):
		return hostName, nil
	case err != nil:
		return "", fmt.Errorf("default image: %w", err)
	case img.Config.Labels[RecipeLabel] == "":
		return hostName, nil
	}
	return BaseName, nil
}
