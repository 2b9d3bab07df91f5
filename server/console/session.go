package console

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"time"

	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/internal/store"
	"smolvm.dev/smolvm/runtime/tenant"
)

// CookieName is the session cookie; CSRFHeader carries the session's
// CSRF token on every action (CSRFParam on a WebSocket's URL, where a
// browser can set no header).
const (
	CookieName = "smolvm_session"
	CSRFHeader = "X-CSRF-Token"
	CSRFParam  = "csrf"
)

// Errors callers match with errors.Is.
var (
	// ErrCSRF refuses an action that carries a session but not its CSRF
	// token: a page of another origin may make a browser send the cookie,
	// never the token.
	ErrCSRF = errdefs.New(errdefs.ErrDenied, "console session: missing or wrong "+CSRFHeader)
	// ErrKey is a sign-in with a key that names no one.
	ErrKey = errdefs.New(errdefs.ErrDenied, "not a valid API key (the admin token or a tenant's key)")
)

// Sessions live in the state database, so that a restart of smolvm serve
// signs no one out. A row keeps only hashes: of the cookie's secret, and
// of the admin token it was made with. A tenant's session references the
// key it signed in with, so revoking the key (or removing the tenant)
// deletes it.
var schema = []string{
	`CREATE TABLE console_sessions (
		hash TEXT PRIMARY KEY,
		tenant TEXT NOT NULL,
		key_id TEXT REFERENCES tenant_keys(id) ON DELETE CASCADE,
		admin_hash TEXT NOT NULL,
		created_at INTEGER NOT NULL,
		expires_at INTEGER NOT NULL
	)`,
	`CREATE INDEX console_sessions_expiry ON console_sessions(expires_at)`,
}

// Session is a signed-in browser: who it acts as, until when, and the
// token its actions must carry.
type Session struct {
	SignedIn bool `json:"signed_in"`
	// Tenant is the tenant it acts as, "" for the admin.
	Tenant    string    `json:"tenant,omitempty"`
	Admin     bool      `json:"admin"`
	ExpiresAt time.Time `json:"expires_at"`
	CSRF      string    `json:"csrf"`
}

func sum(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// csrfToken is derived from the cookie's secret, which only the browser
// holding the cookie and this server know, so no column keeps it.
func csrfToken(secret string) string { return sum("smolvm console csrf\x00" + secret) }

// signIn makes a session for key and returns the cookie's secret.
func (c *Console) signIn(ctx context.Context, key string) (string, *Session, error) {
	var name, keyID string
	switch {
	case c.o.Token == "" || subtle.ConstantTimeCompare([]byte(key), []byte(c.o.Token)) == 1:
	case c.o.ResolveKey == nil:
		return "", nil, ErrKey
	default:
		var ok bool
		if name, keyID, ok = c.o.ResolveKey(ctx, key); !ok {
			return "", nil, ErrKey
		}
	}
	var raw [32]byte
	rand.Read(raw[:])
	secret := hex.EncodeToString(raw[:])
	now := store.Now()
	exp := now.Add(c.o.TTL)
	var kid any
	if keyID != "" {
		kid = keyID
	}
	err := c.o.Store.Tx(ctx, func(tx *sql.Tx) error {
		// Expired rows go when someone signs in: their count stays
		// bounded by the sign-ins of one TTL.
		if _, err := tx.ExecContext(ctx, `DELETE FROM console_sessions WHERE expires_at <= ?`, now.UnixMilli()); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO console_sessions(hash, tenant, key_id, admin_hash, created_at, expires_at) VALUES(?, ?, ?, ?, ?, ?)`,
			sum(secret), name, kid, sum(c.o.Token), now.UnixMilli(), exp.UnixMilli())
		return err
	})
	if err != nil {
		return "", nil, fmt.Errorf("console sign-in: %w", err)
	}
	return secret, &Session{SignedIn: true, Tenant: name, Admin: name == "", ExpiresAt: exp, CSRF: csrfToken(secret)}, nil
}

// lookup returns the live session whose cookie secret is, or nil. One
// made with another admin token (the token file was replaced) is dead.
func (c *Console) lookup(ctx context.Context, secret string) (*Session, error) {
	var name, adminHash string
	var exp int64
	err := c.o.Store.DB().QueryRowContext(ctx, `SELECT tenant, admin_hash, expires_at FROM console_sessions WHERE hash = ? AND expires_at > ?`,
		sum(secret), store.Now().UnixMilli()).Scan(&name, &adminHash, &exp)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("console session: %w", err)
	}
	if name == "" && adminHash != sum(c.o.Token) {
		return nil, nil
	}
	return &Session{SignedIn: true, Tenant: name, Admin: name == "", ExpiresAt: time.UnixMilli(exp).UTC(), CSRF: csrfToken(secret)}, nil
}

// signOut ends the session whose cookie secret is.
func (c *Console) signOut(ctx context.Context, secret string) error {
	if _, err := c.o.Store.DB().ExecContext(ctx, `DELETE FROM console_sessions WHERE hash = ?`, sum(secret)); err != nil {
		return fmt.Errorf("console sign-out: %w", err)
	}
	return nil
}

// session returns r's session and its cookie's secret; nil when r has
// no live one.
func (c *Console) session(r *http.Request) (*Session, string, error) {
	ck, err := r.Cookie(CookieName)
	if err != nil || ck.Value == "" {
		return nil, "", nil
	}
	s, err := c.lookup(r.Context(), ck.Value)
	return s, ck.Value, err
}

// safe reports whether r's method changes nothing (its route may still
// be an action: a WebSocket's upgrade is a GET).
func safe(r *http.Request) bool {
	return r.Method == http.MethodGet || r.Method == http.MethodHead
}

// checkCSRF refuses an action without s's token: in CSRFHeader, or for
// a WebSocket's upgrade in the CSRFParam query parameter.
func checkCSRF(r *http.Request, s *Session) error {
	got := r.Header.Get(CSRFHeader)
	if r.Header.Get("Upgrade") != "" {
		got = r.URL.Query().Get(CSRFParam)
	} else if safe(r) {
		return nil
	}
	if got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(s.CSRF)) != 1 {
		return ErrCSRF
	}
	return nil
}

// Admit is httpapi.Options.Session: it admits a request that carries no
// API key by its session cookie, acting as the session's tenant (the
// admin's sees everything). ok is false when r has no live session; an
// action without the session's CSRF token is an error (ErrCSRF).
func (c *Console) Admit(r *http.Request) (*http.Request, bool, error) {
	s, _, err := c.session(r)
	if err != nil || s == nil {
		return r, false, err
	}
	if err := checkCSRF(r, s); err != nil {
		return r, false, err
	}
	return r.WithContext(tenant.With(r.Context(), s.Tenant)), true, nil
}
