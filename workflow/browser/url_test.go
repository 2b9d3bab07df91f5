package browser

import (
	"errors"
	"testing"

	"smolvm.dev/smolvm/sandbox"
)

// TestScreenshotURLs: http, https and data: URLs are taken; anything that
// reads the sandbox's files or runs script outside a page is refused.
func TestScreenshotURLs(t *testing.T) {
	for url, ok := range map[string]bool{
		"http://example.com/":                    true,
		"https://example.com/a?b":                true,
		"data:text/html,<h1>hi</h1>":             true,
		"data:text/html;base64,PGgxPmhpPC9oMT4=": true,
		"data:":                                  false,
		"file:///etc/passwd":                     false,
		"javascript:alert(1)":                    false,
		"http:///nohost":                         false,
		"example.com":                            false,
		"chrome://settings":                      false,
	} {
		o := ScreenshotOptions{URL: url}
		err := o.check()
		if ok != (err == nil) || (err != nil && !errors.Is(err, sandbox.ErrInvalid)) {
			t.Errorf("%q: %v", url, err)
		}
	}
}
