package image

import (
	"fmt"

	"github.com/google/go-containerregistry/pkg/name"
)

// dockerHub is how references to Docker Hub are written in the store.
const dockerHub = "docker.io"

// Normalize returns the canonical form of an image reference:
// "alpine" is "docker.io/library/alpine:latest".
func Normalize(ref string) (string, error) {
	r, err := parseRef(ref)
	if err != nil {
		return "", err
	}
	return canonical(r), nil
}

func parseRef(ref string, opts ...name.Option) (name.Reference, error) {
	if ref == hostName {
		return nil, fmt.Errorf("%w: %q is the builtin image", ErrInvalidRef, ref)
	}
	r, err := name.ParseReference(ref, opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %v", ErrInvalidRef, ref, err)
	}
	return r, nil
}

func canonical(r name.Reference) string {
	reg := r.Context().RegistryStr()
	if reg == name.DefaultRegistry {
		reg = dockerHub
	}
	s := reg + "/" + r.Context().RepositoryStr()
	switch r := r.(type) {
	case name.Digest:
		return s + "@" + r.DigestStr()
	case name.Tag:
		return s + ":" + r.TagStr()
	}
	return s + ":" + r.Identifier()
}
