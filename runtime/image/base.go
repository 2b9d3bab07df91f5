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

// Bookworm is a recipe of Debian 12 (bookworm, with its updates and
// security suites) from Debian's archive: mmdebstrap's essential set
// (sh, coreutils, dpkg) plus packages, without documentation or locales,
// every file's time clamped to Debian 12.0's release day. The same
// archive state builds the same tarball, byte for byte; the archive's
// point releases and security updates are what change it.
func Bookworm(name string, packages ...string) Recipe {
	return Recipe{
		Name:    name,
		Suite:   "bookworm",
		Variant: "essential",
		Sources: []string{
			"deb http://deb.debian.org/debian bookworm main",
			"deb http://deb.debian.org/debian bookworm-updates main",
			"deb http://deb.debian.org/debian-security bookworm-security main",
		},
		Packages: packages,
		Exclude:  []string{"/usr/share/doc/*", "/usr/share/man/*", "/usr/share/info/*", "/usr/share/locale/*"},
		Epoch:    1686355200,
		Env:      []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
	}
}

// BaseRecipe is the base image: Bookworm with the tools agents expect
// (python3, node, git, curl and CA certificates for HTTPS).
func BaseRecipe() Recipe {
	r := Bookworm(BaseName, "ca-certificates", "curl", "git", "python3", "nodejs")
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
