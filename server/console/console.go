// Package console serves smolvm serve's web console under /ui/: embedded pages whose small client talks to the native API, signed in with an API key and kept by a server-side session (an HttpOnly cookie, a CSRF token on every action).
package console

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"smolvm.dev/smolvm/api"
	"smolvm.dev/smolvm/internal/httpguard"
	"smolvm.dev/smolvm/internal/store"
)

// Prefix is where smolvm serve mounts the console.
const Prefix = "/ui/"

// DefaultTTL is how long a session lasts from its sign-in.
const DefaultTTL = 12 * time.Hour

// Policy is every page's Content-Security-Policy: scripts, styles and
// connections to this origin only, no inline script or style element, no
// framing. The terminal (xterm.js) styles through the CSSOM and
// constructed style sheets, which style-src 'self' allows.
const Policy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; font-src 'self'; connect-src 'self'; " +
	"base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

//go:embed web
var web embed.FS

// Options configure a Console.
type Options struct {
	// Store keeps the sessions. ResolveKey names the tenant whose key
	// secret is, and the key's ID, at sign-in (tenant.Store.ResolveKey);
	// nil admits the admin token only.
	Store      *store.Store
	ResolveKey func(ctx context.Context, secret string) (tenant, id string, ok bool)
	// Token is the admin's (httpapi.Options.Token); "" is auth off, where
	// any sign-in is the admin's.
	Token string
	// TTL is a session's lifetime (default DefaultTTL).
	TTL time.Duration
}

// Console serves the pages and the sessions.
type Console struct {
	o      Options
	assets map[string]*asset
}

// New applies the sessions' schema and returns the console.
func New(ctx context.Context, o Options) (*Console, error) {
	if o.TTL <= 0 {
		o.TTL = DefaultTTL
	}
	if err := o.Store.Migrate(ctx, "console", schema); err != nil {
		return nil, err
	}
	assets, err := loadAssets()
	if err != nil {
		return nil, err
	}
	return &Console{o: o, assets: assets}, nil
}

// ServeHTTP serves what lies under Prefix: the session (GET to read it
// with its CSRF token, POST to sign in, DELETE to sign out) and the
// embedded assets, every page of the single-page client being index.html.
// It is a public mount (httpapi.Mount): the sign-in page needs no
// credential, and it checks paths itself.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", Policy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	// Empty segments are allowed ("/ui/" itself); a name is only ever
	// looked up among the embedded files, never joined into a path.
	if err := httpguard.ForwardedPath(r); err != nil {
		fail(w, http.StatusBadRequest, api.CodeInvalid, err.Error())
		return
	}
	name := strings.TrimPrefix(r.URL.Path, Prefix)
	if name == "session" {
		c.serveSession(w, r)
		return
	}
	if !safe(r) {
		w.Header().Set("Allow", "GET, HEAD")
		fail(w, http.StatusMethodNotAllowed, api.CodeMethod, "method not allowed")
		return
	}
	c.serveAsset(w, r, name)
}

// serveAsset serves an embedded file; any other name (a view's path) is
// the client's page, which routes itself.
func (c *Console) serveAsset(w http.ResponseWriter, r *http.Request, name string) {
	a, ok := c.assets[name]
	if !ok {
		a = c.assets["index.html"]
	}
	h := w.Header()
	h.Set("Content-Type", a.typ)
	// The assets are in the binary: a new smolvm brings new ones, so the
	// browser revalidates at each load (a 304 when unchanged).
	h.Set("Cache-Control", "no-cache")
	h.Add("Vary", "Accept-Encoding")
	b, etag := a.raw, `"`+a.etag+`"`
	if a.gz != nil && acceptsGzip(r) {
		h.Set("Content-Encoding", "gzip")
		b, etag = a.gz, `"`+a.etag+`-gz"`
	}
	h.Set("ETag", etag)
	if r.Header.Get("If-None-Match") == etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		w.Write(b)
	}
}

func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		if enc, q, _ := strings.Cut(strings.TrimSpace(part), ";"); enc == "gzip" && strings.TrimSpace(q) != "q=0" {
			return true
		}
	}
	return false
}

// asset is an embedded file, compressed once at start when that pays;
// etag is its content's, which each encoding's ETag is made of.
type asset struct {
	raw, gz   []byte
	typ, etag string
}

// loadAssets reads every embedded file.
func loadAssets() (map[string]*asset, error) {
	root, err := fs.Sub(web, "web")
	if err != nil {
		return nil, err
	}
	assets := map[string]*asset{}
	err = fs.WalkDir(root, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		raw, err := fs.ReadFile(root, name)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(raw)
		a := &asset{raw: raw, typ: mime.TypeByExtension(path.Ext(name)), etag: hex.EncodeToString(sum[:8])}
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		zw.Write(raw)
		zw.Close()
		if buf.Len() < len(raw) {
			a.gz = buf.Bytes()
		}
		assets[name] = a
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("console assets: %w", err)
	}
	if assets["index.html"] == nil {
		return nil, errors.New("console assets: no index.html")
	}
	return assets, nil
}

func (c *Console) serveSession(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	ctx := r.Context()
	switch r.Method {
	case http.MethodGet:
		s, _, err := c.session(r)
		if err != nil {
			fail(w, http.StatusInternalServerError, api.CodeInternal, err.Error())
			return
		}
		if s == nil {
			// Not an error: the page asks this at every load.
			s = &Session{}
		}
		httpguard.WriteJSON(w, http.StatusOK, s)
	case http.MethodPost:
		// JSON only: a cross-site form cannot send it without a CORS
		// preflight, which this server never grants (no login CSRF).
		if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
			fail(w, http.StatusUnsupportedMediaType, api.CodeInvalid, "sign in with a JSON body {\"key\": \"…\"}")
			return
		}
		var req struct {
			Key string `json:"key"`
		}
		if err := json.NewDecoder(io.LimitReader(r.Body, 4096)).Decode(&req); err != nil || req.Key == "" {
			fail(w, http.StatusBadRequest, api.CodeInvalid, `want a JSON body {"key": "…"}`)
			return
		}
		secret, s, err := c.signIn(ctx, strings.TrimSpace(req.Key))
		if errors.Is(err, ErrKey) {
			fail(w, http.StatusUnauthorized, api.CodeUnauthorized, err.Error())
			return
		}
		if err != nil {
			fail(w, http.StatusInternalServerError, api.CodeInternal, err.Error())
			return
		}
		http.SetCookie(w, cookie(r, secret, c.o.TTL))
		httpguard.WriteJSON(w, http.StatusOK, s)
	case http.MethodDelete:
		s, secret, err := c.session(r)
		if err == nil && s != nil {
			if err = checkCSRF(r, s); err == nil {
				err = c.signOut(ctx, secret)
			}
		}
		if errors.Is(err, ErrCSRF) {
			fail(w, http.StatusForbidden, api.CodeDenied, err.Error())
			return
		}
		if err != nil {
			fail(w, http.StatusInternalServerError, api.CodeInternal, err.Error())
			return
		}
		http.SetCookie(w, cookie(r, "", -1))
		w.WriteHeader(http.StatusNoContent)
	default:
		w.Header().Set("Allow", "GET, POST, DELETE")
		fail(w, http.StatusMethodNotAllowed, api.CodeMethod, "method not allowed")
	}
}

// cookie is the session cookie: for every path (the client calls /v1),
// out of scripts' reach, never sent by another site's page, and only
// over TLS when the server speaks it. A negative ttl deletes it.
func cookie(r *http.Request, secret string, ttl time.Duration) *http.Cookie {
	ck := &http.Cookie{Name: CookieName, Value: secret, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil}
	if ttl < 0 {
		ck.MaxAge = -1
	} else {
		ck.MaxAge = int(ttl / time.Second)
	}
	return ck
}

func fail(w http.ResponseWriter, status int, code, msg string) {
	httpguard.WriteJSON(w, status, &api.Error{Status: status, Code: code, Message: msg})
}
