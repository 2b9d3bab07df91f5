package sandbox

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
)

// Recipe is a Debian root filesystem made by mmdebstrap from apt sources:
// the same recipe over the same archive state gives the same files, with
// every timestamp clamped to Epoch (SOURCE_DATE_EPOCH).
type Recipe struct {
	// Name is the reference the image is stored under.
	Name string `json:"name"`
	// Suite is the Debian release, e.g. "bookworm".
	Suite string `json:"suite"`
	// Variant is mmdebstrap's package set before Packages ("essential",
	// "apt", "minbase", …).
	Variant string `json:"variant"`
	// Sources are apt source lines ("deb URL SUITE COMPONENTS").
	Sources []string `json:"sources"`
	// Packages are installed on top of the variant, with their dependencies.
	Packages []string `json:"packages"`
	// Exclude are dpkg path-exclude globs (documentation, locales): files
	// no sandbox reads.
	Exclude []string `json:"exclude,omitempty"`
	// Epoch is SOURCE_DATE_EPOCH, the time every file is clamped to.
	Epoch int64 `json:"epoch"`
	// Env is the image's environment.
	Env []string `json:"env,omitempty"`
}

// Digest names the recipe's content: any change to it builds anew.
func (r Recipe) Digest() string {
	b, _ := json.Marshal(r) // a struct of strings and numbers always marshals
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

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
