package browser

import "smolvm.dev/smolvm/sandbox"

// ImageName is the browser image's name in the image store
// (`smolvm image build browser`, then `browser start --image browser`).
const ImageName = "browser"

// ImageRecipe is the browser image: Debian bookworm with its chromium
// (at Chromium), fonts for pages' text and CA certificates for HTTPS,
// built by mmdebstrap from Debian's archive (the DevTools relay is the
// agent's, which every sandbox has). Chromium is in bookworm-security only, so the recipe has the
// security suite; a security update changes what the same recipe builds.
func ImageRecipe() sandbox.Recipe {
	return sandbox.Bookworm(ImageName, "chromium", "fonts-liberation", "ca-certificates")
}
