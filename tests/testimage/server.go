package testimage

import (
	"fmt"
	"time"
)

// SlowServer is a template's start command for tests: a Python HTTP
// server (the host image has python3) that sleeps delay before it listens
// on port, then answers every GET with a token drawn at its start and the
// GREETING variable. A sandbox that answers with the build's token runs
// the build's process, restored.
func SlowServer(port int, delay time.Duration) []string {
	return []string{"python3", "-c", fmt.Sprintf(`
import http.server, os, time
token = os.urandom(8).hex()
time.sleep(%g)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = (token + " " + os.environ.get("GREETING", "")).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", %d), H).serve_forever()
`, delay.Seconds(), port)}
}
