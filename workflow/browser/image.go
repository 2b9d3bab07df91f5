package browser

import "smolvm.dev/smolvm/runtime/image"

// ImageName is the browser image's name in the image store
// (`smolvm image build browser`, then `browser start --image browser`).
const ImageName = "browser"

// ImageRecipe is the browser image: Debian bookworm with its chromium
// (at Chromium), fonts for pages' text and CA certificates for HTTPS,
// built by mmdebstrap from Debian's archive (the DevTools relay is the
// agent's, which every sandbox has). Chromium is in bookworm-security only, so the recipe has the
// security suite; a security update changes what the same recipe builds.
func ImageRecipe() image.Recipe {
	return image.Recipe{
		Name:    ImageName,
		Suite:   "bookworm",
		Variant: "essential",
		Sources: []string{
			"deb http://deb.debian.org/debian bookworm main",
			"deb http://deb.debian.org/debian bookworm-updates main",
			"deb http://deb.debian.org/debian-security bookworm-security main",
		},
		Packages: []string{"chromium", "fonts-liberation", "ca-certificates"},
		Exclude:  []string{"/usr/share/doc/*", "/usr/share/man/*", "/usr/share/info/*", "/usr/share/locale/*"},
		// Debian 12.0's release day: any fixed time makes the tarball
		// reproducible.
		Epoch: 1686355200,
		Env:   []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
	}
}
