package cli

import (
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"smolvm.dev/smolvm/api"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/tests/testmgr"
	"smolvm.dev/smolvm/tests/testserve"
)

// hostileWorld is what the hostile run's requests name and send.
type hostileWorld struct {
	token, keyA, keyB string
	// Running: the admin's, a's and b's.
	box, boxA, boxB hostileBox
	// a's removed sandbox, and a member of a's warm pool.
	gone, member hostileBox
	pool         string // a's
	// An ID and a 4-digit prefix that no sandbox has or had.
	absentID, absentPrefix string
}

// hostileBox is a sandbox of the run: owner is "admin", "a" or "b"; envd
// and traffic are its tokens (none for the pool's member).
type hostileBox struct{ id, name, owner, envd, traffic string }

// newHostileWorld makes tenants a and b through the admin API, and the
// sandboxes the run names.
func newHostileWorld(t *testing.T, srv *testserve.Server, env *testmgr.Env) *hostileWorld {
	t.Helper()
	w := &hostileWorld{token: srv.Token, pool: "a-pool"}
	w.keyA, w.keyB = addTenant(t, srv, "ta"), addTenant(t, srv, "tb")
	w.box = hostileSandbox(t, srv, w.token, "admin", "box")
	w.boxA = hostileSandbox(t, srv, w.keyA, "a", "a-box")
	w.boxB = hostileSandbox(t, srv, w.keyB, "b", "b-box")
	w.gone = hostileSandbox(t, srv, w.keyA, "a", "a-gone")
	if code, body := keyCall(t, srv, w.keyA, http.MethodDelete, "/v1/sandboxes/"+w.gone.id+"?force=true", ""); code != http.StatusNoContent {
		t.Fatalf("rm %s: %d %s", w.gone.name, code, body)
	}
	if code, body := keyCall(t, srv, w.keyA, http.MethodPost, "/v1/pools", `{"name":"`+w.pool+`","size":1,"fill":true}`); code != http.StatusCreated {
		t.Fatalf("pool: %d %s", code, body)
	}
	// Pool members are listed nowhere: the data dir knows them.
	w.member.owner = "a"
	if err := env.Store.DB().QueryRow(`SELECT id, name FROM sandboxes WHERE pool = ?`, w.pool).Scan(&w.member.id, &w.member.name); err != nil {
		t.Fatalf("the pool's member: %v", err)
	}
	w.absentID, w.absentPrefix = absentRef(t, env, 12), absentRef(t, env, 4)
	return w
}

// addTenant makes tenant name on srv with the admin token, and returns a
// key of it.
func addTenant(t *testing.T, srv *testserve.Server, name string) string {
	t.Helper()
	if code, body := keyCall(t, srv, srv.Token, http.MethodPost, "/v1/tenants", `{"name":"`+name+`"}`); code != http.StatusCreated {
		t.Fatalf("tenant %s: %d %s", name, code, body)
	}
	code, body := keyCall(t, srv, srv.Token, http.MethodPost, "/v1/tenants/"+name+"/keys", "")
	var k api.NewKey
	if code != http.StatusCreated || json.Unmarshal([]byte(body), &k) != nil || k.Key == "" {
		t.Fatalf("key of %s: %d %s", name, code, body)
	}
	return k.Key
}

// hostileSandbox creates sandbox name with key, and connects to it through
// E2B's API for its tokens.
func hostileSandbox(t *testing.T, srv *testserve.Server, key, owner, name string) hostileBox {
	t.Helper()
	code, body := keyCall(t, srv, key, http.MethodPost, "/v1/sandboxes", `{"name":"`+name+`"}`)
	var sb sandbox.Sandbox
	if code != http.StatusCreated || json.Unmarshal([]byte(body), &sb) != nil {
		t.Fatalf("create %s: %d %s", name, code, body)
	}
	code, body = keyCall(t, srv, key, http.MethodPost, "/e2b/sandboxes/"+sb.ID+"/connect", `{}`)
	var conn struct{ EnvdAccessToken, TrafficAccessToken string }
	if code/100 != 2 || json.Unmarshal([]byte(body), &conn) != nil || conn.EnvdAccessToken == "" {
		t.Fatalf("connect %s: %d %s", name, code, body)
	}
	return hostileBox{sb.ID, name, owner, conn.EnvdAccessToken, conn.TrafficAccessToken}
}

// absentRef returns n hex digits that begin no sandbox ID, live or
// removed.
func absentRef(t *testing.T, env *testmgr.Env, n int) string {
	t.Helper()
	for _, c := range "0123456789abcdef" {
		ref := strings.Repeat(string(c), n)
		var found int
		err := env.Store.DB().QueryRow(`SELECT count(*) FROM (SELECT id FROM sandboxes UNION SELECT id FROM sandbox_tombstones) WHERE id LIKE ?`, ref+"%").Scan(&found)
		if err != nil {
			t.Fatal(err)
		}
		if found == 0 {
			return ref
		}
	}
	t.Fatal("every digit begins an ID")
	return ""
}

// hostileRoutes returns the routes of srv's OpenAPI document, as "METHOD
// /path/{param}", sorted (a map's order would unseed the run), and E2B's.
func hostileRoutes(t *testing.T, srv *testserve.Server) []string {
	t.Helper()
	code, body := apiCall(srv, http.MethodGet, "/openapi.json", "")
	var doc struct {
		Paths map[string]map[string]json.RawMessage
	}
	if code != http.StatusOK || json.Unmarshal(body, &doc) != nil {
		t.Fatalf("GET /openapi.json: %d %.300s", code, body)
	}
	var routes []string
	for path, ops := range doc.Paths {
		for m := range ops {
			if m = strings.ToUpper(m); slices.Contains(hostileMethods[:6], m) {
				routes = append(routes, m+" "+path)
			}
		}
	}
	if len(routes) < 40 {
		t.Fatalf("only %d routes in /openapi.json", len(routes))
	}
	slices.Sort(routes)
	return append(routes, hostileE2B...)
}

// hostileGen makes the run's requests from a seeded source, so that runs
// (before and after a fix) send the same ones.
type hostileGen struct {
	rng    *rand.Rand
	w      *hostileWorld
	routes []string
	hit    map[string]int // requests per route of routes
}

var (
	// E2B's control plane, which has no OpenAPI document of its own here.
	hostileE2B = []string{
		"GET /e2b/sandboxes", "GET /e2b/v2/sandboxes", "POST /e2b/sandboxes", "POST /e2b/v2/sandboxes", "GET /e2b/snapshots",
		"GET /e2b/sandboxes/{id}", "DELETE /e2b/sandboxes/{id}", "POST /e2b/sandboxes/{id}/timeout", "POST /e2b/sandboxes/{id}/connect",
		"POST /e2b/v2/sandboxes/{id}/connect", "POST /e2b/sandboxes/{id}/resume", "POST /e2b/sandboxes/{id}/pause",
		"PUT /e2b/sandboxes/{id}/network", "POST /e2b/sandboxes/{id}/fork", "GET /e2b/sandboxes/{id}/metrics",
		"POST /e2b/sandboxes/{id}/snapshots", "DELETE /e2b/templates/{template}",
		"POST /e2b/v3/templates", "GET /e2b/templates/{template}/files/{hash}", "PUT /e2b/templates/{template}/files/{hash}",
		"POST /e2b/v2/templates/{template}/builds/{build}", "GET /e2b/templates/{template}/builds/{build}/status",
		"GET /e2b/templates/{template}/{alias}", "POST /e2b/templates/tags", "DELETE /e2b/templates/tags",
	}
	hostileEnvd = []string{"/e2b/filesystem.Filesystem/Stat", "/e2b/filesystem.Filesystem/ListDir", "/e2b/filesystem.Filesystem/MakeDir",
		"/e2b/filesystem.Filesystem/Remove", "/e2b/filesystem.Filesystem/Move", "/e2b/process.Process/List", "/e2b/process.Process/SendSignal",
		"/e2b/process.Process/SendInput", "/e2b/process.Process/Update", "/e2b/process.Process/CloseStdin", "/e2b/files", "/e2b/health"}
	hostileSegments = []string{"..", "%2e%2e", "..%2F..%2F..%2F..%2Fsome%2Fdir%2Fname", "..%2Fx", strings.Repeat("a", 300), "",
		"%00", "%ff", "a%2Fb", "nosuch", "sha256:00", "%2F", "..%252F", "a%20b", "-x", "box%00"}
	// Bad names a Host header may carry (PORT-NAME.hostileDomain).
	hostileHostNames = []string{"..", "a.b", "nosuch", strings.Repeat("a", 70), "-x", "x_y", "", "0", "box.", "UPPER"}
	// Values of the parameters that no request targets; none names
	// anything real, so that no route hurts the run's objects.
	hostileParams = map[string][]string{
		"port":     {"8000", "49983", "0", "99999", "x", "80%2F", "-1"},
		"snapshot": {"nosuch", "sha256:00", "..", "%2e%2e", "a%2Fb", strings.Repeat("s", 300), "%ff"},
		"key":      {"0123456789ab", "nosuch", "..", "%00", strings.Repeat("k", 300)},
		"template": {"nosuch", "..", "a%2Fb", "%ff", strings.Repeat("t", 300)},
		"hash":     {"00", "nosuch", "..", "%2e%2e", strings.Repeat("f", 65), "%ff"},
		"build":    {"0123456789abcdef", "nosuch", "..", "a%2Fb"},
		"alias":    {"nosuch", "a:b", "tags", "..", "%2F", strings.Repeat("a", 200)},
	}
	hostileMethods = []string{"GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "TRACE", "PROPFIND"}
	hostileBodies  = []string{"", "{", "[]", "null", `"x"`, "{} {}", `{"name":5}`, `{"args":"ls"}`, `{"args":[1]}`, `{"timeout":"soon"}`,
		`{"memory":"lots"}`, `{"n":"two"}`, `{"nmae":"x"}`, `{"name":"\u0000"}`, "{\"name\":\"\xff\"}", "\xff\xfe", `{"templateID":5}`,
		`{"templateID":"../../x"}`, `{"path":"../../etc/passwd"}`, `{"path":3}`, `{"args":["true"],"env":["NOEQ"]}`, `{"timeout":-1}`,
		`{"count":0}`, `{"allowOut":"x"}`, `{"name":"` + strings.Repeat("n", 300) + `"}`, `{"name":"../x"}`, `{"name_prefix":"../x"}`,
		`{"image":"a//b"}`, `{"pool":"../p"}`, `{"name":"x","size":0}`, `{"process":{"pid":"x"}}`, `{"signal":"SIGNAL_NOPE"}`}
	// Bodies no route takes: those for routes that make something (a
	// browser's golden, an agent run, a pull, a tenant), where an empty
	// body may be a valid request.
	hostileInvalid = []string{"{", "[]", "null", `"x"`, "{} {}", "\xff\xfe", `{"nmae":"x"}`, `{"name":5}`}
)

func (g *hostileGen) pick(s []string) string { return s[g.rng.IntN(len(s))] }

func (g *hostileGen) next() hostileReq {
	switch k := g.rng.IntN(100); {
	case k < 34:
		return g.route()
	case k < 44:
		return g.execFiles()
	case k < 51:
		return g.wrongMethod()
	case k < 56:
		return g.unknown()
	case k < 61:
		return g.create()
	case k < 75:
		return g.envd()
	case k < 87:
		return g.port()
	case k < 90:
		return g.text()
	default:
		return g.large()
	}
}

// hostileCred is what credentials a request carries: who is "admin",
// "a", "b" (valid keys), "none", "junk" or "disagree" (several that do
// not agree).
type hostileCred struct {
	who, what string
	header    http.Header
}

// opens reports whether c opens an object of owner's.
func (c hostileCred) opens(owner string) bool { return c.who == "admin" || c.who == owner }

// apiCred draws credentials for the API (native or E2B's control plane).
func (g *hostileGen) apiCred() hostileCred {
	who := g.pick([]string{"admin", "admin", "admin", "admin", "admin", "a", "a", "a", "a", "b", "b", "b", "b",
		"none", "none", "junk", "junk", "disagree", "disagree", "disagree"})
	c := hostileCred{who: who, header: http.Header{}}
	switch who {
	case "none":
		c.what = "no key"
	case "junk":
		c.what = "a junk " + g.key(c.header, "junk", "wrong")
	case "disagree":
		c.what = g.disagree(c.header)
	default:
		c.what = g.key(c.header, who, g.keyOf(who))
	}
	return c
}

func (g *hostileGen) keyOf(who string) string {
	return map[string]string{"admin": g.w.token, "a": g.w.keyA, "b": g.w.keyB}[who]
}

// key adds who's key to h, as a bearer token or X-API-KEY, and says which.
func (g *hostileGen) key(h http.Header, who, key string) string {
	if g.rng.IntN(2) == 0 {
		h.Add("Authorization", "Bearer "+key)
		return who + "'s bearer"
	}
	h.Add("X-API-KEY", key)
	return who + "'s X-API-KEY"
}

// disagree adds a valid key to h, and another beside it: junk, or
// another principal's.
func (g *hostileGen) disagree(h http.Header) string {
	first := g.pick([]string{"admin", "a", "b"})
	h.Add("Authorization", "Bearer "+g.keyOf(first))
	switch g.rng.IntN(4) {
	case 0:
		h.Add("X-API-KEY", "wrong")
		return first + "'s bearer and a junk X-API-KEY"
	case 1:
		other := g.pick(slices.DeleteFunc([]string{"admin", "a", "b"}, func(s string) bool { return s == first }))
		h.Add("X-API-KEY", g.keyOf(other))
		return first + "'s bearer and " + other + "'s X-API-KEY"
	case 2:
		h.Add("Authorization", "Bearer wrong")
		return first + "'s bearer and a junk bearer"
	default:
		h.Del("Authorization")
		h.Add("X-API-KEY", g.keyOf(first))
		h.Add("X-API-KEY", "wrong")
		return first + "'s X-API-KEY and a junk one"
	}
}

// tokenCred draws the credentials of envd or a port of box (nil: none
// of the run's): its own tokens, another's, junk, none; and API keys too
// (withKeys). opens says whether they open ref: a sandbox's traffic token
// opens only its ports (port).
func (g *hostileGen) tokenCred(box *hostileBox, ref string, port, withKeys bool) (c hostileCred, opens bool) {
	c = hostileCred{header: http.Header{}}
	own := box != nil && ref == box.id
	choices := []string{"other", "junk", "none", "twice"}
	if box != nil && box.envd != "" {
		choices = append(choices, "envd", "envd", "traffic")
	}
	if withKeys {
		choices = append(choices, "key", "key", "disagree")
	}
	switch g.pick(choices) {
	case "envd":
		c.header.Set("X-Access-Token", box.envd)
		c.what, c.who = box.name+"'s envd token", "token"
		return c, own
	case "traffic":
		// Ports take it; envd does not.
		c.header.Set("E2b-Traffic-Access-Token", box.traffic)
		c.what, c.who = box.name+"'s traffic token", "token"
		return c, own && port
	case "other":
		o := g.pickBox(&g.w.box, &g.w.boxA, &g.w.boxB)
		c.header.Set("X-Access-Token", o.envd)
		c.what, c.who = o.name+"'s envd token", "token"
		return c, own && o.id == box.id
	case "junk":
		c.header.Set("X-Access-Token", strings.Repeat("0", 32))
		c.what, c.who = "a junk token", "junk"
	case "none":
		c.what, c.who = "no token", "none"
	case "twice":
		c.header.Add("X-Access-Token", g.w.box.envd)
		c.header.Add("X-Access-Token", "wrong")
		c.what, c.who = "box's envd token and a junk one", "junk"
	case "key":
		c = g.apiCred()
		return c, box != nil && c.opens(box.owner)
	default:
		o := g.pickBox(&g.w.box, &g.w.boxA, &g.w.boxB)
		c.header.Set("E2b-Traffic-Access-Token", o.traffic)
		c.header.Set("X-API-KEY", "wrong")
		c.what, c.who = o.name+"'s traffic token and a junk X-API-KEY", "disagree"
	}
	return c, false
}

func (g *hostileGen) pickBox(boxes ...*hostileBox) *hostileBox { return boxes[g.rng.IntN(len(boxes))] }

// hostileRef is a value of a request's target parameter: ref names the
// run's object box (nil: nothing real), whose owner is owner; missing
// names nothing, in ref's shape.
type hostileRef struct {
	ref, missing, owner string
	box                 *hostileBox
}

// boxRef names box by ID, 4-digit prefix or name.
func (g *hostileGen) boxRef(box *hostileBox) hostileRef {
	r := hostileRef{owner: box.owner, box: box}
	switch g.rng.IntN(4) {
	case 0:
		r.ref, r.missing = box.id[:4], g.w.absentPrefix
	case 1:
		r.ref, r.missing = box.name, strings.Repeat("z", len(box.name))
	default:
		r.ref, r.missing = box.id, g.w.absentID
	}
	return r
}

// target draws what a request with c on route names. Routes that could
// hurt a sandbox get only refs of a's removed sandbox and pool member,
// and a's pool, and only with credentials that do not open them;
// otherwise a missing ref.
func (g *hostileGen) target(route string, c hostileCred) hostileRef {
	safe := hostileSafe(route)
	bad := hostileRef{ref: g.pick(hostileSegments)}
	switch {
	case g.rng.IntN(3) == 0:
		return bad
	case strings.Contains(route, "{id}"):
		boxes := []*hostileBox{&g.w.gone, &g.w.member}
		if safe {
			boxes = append(boxes, &g.w.box, &g.w.boxA, &g.w.boxB)
		}
		r := g.boxRef(g.pickBox(boxes...))
		if !safe && c.opens(r.owner) {
			return hostileRef{ref: r.missing}
		}
		return r
	case strings.Contains(route, "{pool}"):
		if c.opens("a") {
			return hostileRef{ref: "nosuch"}
		}
		return hostileRef{ref: g.w.pool, missing: strings.Repeat("z", len(g.w.pool)), owner: "a"}
	case strings.HasPrefix(route, "GET /v1/tenants/{tenant}"):
		return hostileRef{ref: g.pick([]string{"ta", "tb", "nosuch"})}
	}
	return bad
}

// hostileSafe reports whether route cannot hurt a sandbox it names, so
// that the run's running ones may get it: reads, execs and uploads (with
// the run's bodies), and ports (nothing listens on them).
func hostileSafe(route string) bool {
	method, path, _ := strings.Cut(route, " ")
	return method == http.MethodGet || strings.Contains(path, "/ports/{port}/") ||
		route == "POST /v1/sandboxes/{id}/exec" || route == "PUT /v1/sandboxes/{id}/files"
}

// hostileMakes reports whether route makes something from a body that
// may be empty: it gets only hostileInvalid bodies.
func hostileMakes(route string) bool {
	method, path, _ := strings.Cut(route, " ")
	return method != http.MethodGet && method != http.MethodDelete && !strings.Contains(path, "{")
}

// hostilePublic reports whether path is served to anyone, whatever the
// credentials.
func hostilePublic(path string) bool { return path == "/healthz" || path == "/openapi.json" }

// expand fills route's parameters: target's with ref, the others from
// params.
func expand(path, ref string, params map[string]string) string {
	for _, p := range []string{"{id}", "{pool}", "{tenant}"} {
		if strings.Contains(path, p) {
			path = strings.Replace(path, p, ref, 1)
			break
		}
	}
	for k, v := range params {
		path = strings.ReplaceAll(path, "{"+k+"}", v)
	}
	return path
}

// params draws values of every parameter but the target.
func (g *hostileGen) params() map[string]string {
	p := map[string]string{"tenant": g.pick(hostileSegments)}
	for _, k := range []string{"key", "port", "snapshot", "template", "hash", "build", "alias"} {
		p[k] = g.pick(hostileParams[k])
	}
	return p
}

// finish makes the request for target with build, and its twin if c does
// not open what it names; disagreeing credentials must get a 401.
func finish(build func(ref string) hostileReq, target hostileRef, c hostileCred, opens bool) hostileReq {
	r := build(target.ref)
	r.who, r.ref = c.what, target.ref
	switch {
	case c.who == "disagree" && !hostilePublic(r.path):
		r.want, r.why = http.StatusUnauthorized, "the credentials disagree"
	case target.missing != "" && !opens:
		twin := build(target.missing)
		twin.who, twin.ref = c.what, target.missing
		r.twin = &twin
	}
	return r
}

// route: any documented route, or E2B's, its parameters filled.
func (g *hostileGen) route() hostileReq {
	route := g.pick(g.routes)
	g.hit[route]++
	method, path, _ := strings.Cut(route, " ")
	if strings.HasPrefix(path, "/e2b/") && g.rng.IntN(3) == 0 {
		path = strings.TrimPrefix(path, "/e2b") // E2B's API at the root
	}
	c := g.apiCred()
	target := g.target(route, c)
	body := g.pick(hostileBodies)
	if hostileMakes(route) {
		body = g.pick(hostileInvalid)
	}
	params := g.params()
	return finish(func(ref string) hostileReq {
		return hostileReq{kind: "route", method: method, path: expand(path, ref, params), header: c.header, body: []byte(body),
			proxied: strings.Contains(path, "/ports/")}
	}, target, c, c.opens(target.owner))
}

// execFiles: exec and files in the running sandboxes, bodies good and
// bad.
func (g *hostileGen) execFiles() hostileReq {
	c := g.apiCred()
	target := g.boxRef(g.pickBox(&g.w.box, &g.w.boxA, &g.w.boxB))
	var method, rest, body string
	switch g.rng.IntN(3) {
	case 0:
		method, rest = "POST", "/exec"
		body = g.pick([]string{g.pick(hostileBodies), `{"args":["true"]}`, `{"args":["sh","-c","echo hi"]}`, `{"args":["no-such-cmd"]}`})
	case 1:
		method, rest = "GET", "/files?path="+g.pick([]string{"/etc/hostname", "../x", "/tmp/../..", "%00", "%ff", "", "/nope", "rel"})
	default:
		method, rest = "PUT", "/files?path="+g.pick([]string{"/tmp/h", "../x", "/tmp/%ff", "/", "/proc/x"})
		body = "hello"
	}
	return finish(func(ref string) hostileReq {
		return hostileReq{kind: "exec/files", method: method, path: "/v1/sandboxes/" + ref + rest, header: c.header, body: []byte(body)}
	}, target, c, c.opens(target.owner))
}

// wrongMethod: any method on known paths.
func (g *hostileGen) wrongMethod() hostileReq {
	c := g.apiCred()
	_, path, _ := strings.Cut(g.pick(append(g.routes, "GET /healthz")), " ")
	method, params, body := g.pick(hostileMethods), g.params(), g.pick(hostileInvalid)
	return finish(func(ref string) hostileReq {
		return hostileReq{kind: "method", method: method, path: expand(path, ref, params), header: c.header, body: []byte(body)}
	}, hostileRef{ref: "nosuch"}, c, true)
}

// unknown: routes nobody serves.
func (g *hostileGen) unknown() hostileReq {
	c := g.apiCred()
	method := g.pick(hostileMethods[:5])
	path := g.pick([]string{"/", "/v2", "/v1/nope", "/e2b/nope", "/e2b/", "/v1/sandboxes/x/y/z", "/../etc/passwd", "/v1/%ff", "/e2b/v3/sandboxes", "//", "/v1/sandboxes//start"})
	body := g.pick(hostileBodies)
	return finish(func(string) hostileReq {
		return hostileReq{kind: "unknown", method: method, path: path, header: c.header, body: []byte(body)}
	}, hostileRef{}, c, true)
}

// create: bad bodies to the create routes (never a valid create).
func (g *hostileGen) create() hostileReq {
	c := g.apiCred()
	path := g.pick([]string{"/v1/sandboxes", "/v1/pools", "/e2b/sandboxes", "/e2b/v2/sandboxes"})
	body := g.pick(hostileBodies)
	return finish(func(string) hostileReq {
		return hostileReq{kind: "create", method: "POST", path: path, header: c.header, body: []byte(body)}
	}, hostileRef{}, c, true)
}

// envdRef draws the sandbox an envd or port request names: one of the
// run's by ID (mostly), prefix or name, or a bad name (from bad).
func (g *hostileGen) envdRef(bad []string) hostileRef {
	if g.rng.IntN(4) == 0 {
		return hostileRef{ref: g.pick(bad)}
	}
	box := g.pickBox(&g.w.box, &g.w.boxA, &g.w.boxB, &g.w.gone, &g.w.member)
	if g.rng.IntN(2) == 0 {
		return hostileRef{ref: box.id, missing: g.w.absentID, owner: box.owner, box: box}
	}
	return g.boxRef(box)
}

// envd: envd's routes, with a sandbox's token or not; now and then with
// a port, a valid one making it a request to that port.
func (g *hostileGen) envd() hostileReq {
	target := g.envdRef([]string{"nosuch", "..", "../x", strings.Repeat("a", 300), "\xff"})
	port := ""
	if g.rng.IntN(5) == 0 {
		port = g.pick([]string{"49983", "8080", "0", "99999", "x"})
	}
	c, opens := g.tokenCred(target.box, target.ref, port == "8080", false)
	method := g.pick([]string{"POST", "POST", "POST", "GET", "PUT"})
	path := g.pick(hostileEnvd)
	if path == "/e2b/files" {
		path += "?path=" + g.pick([]string{"/tmp/e", "../x", "%00", "%ff", strings.Repeat("a", 300)})
	}
	body := g.pick([]string{g.pick(hostileBodies), `{"path":"/tmp"}`, `{"path":"/etc/hostname"}`, `{"source":"/tmp/a","destination":"/tmp/../.."}`})
	return finish(func(ref string) hostileReq {
		h := c.header.Clone()
		h.Set("E2b-Sandbox-Id", ref)
		if port != "" {
			h.Set("E2b-Sandbox-Port", port)
		}
		h.Set("Content-Type", "application/json")
		return hostileReq{kind: "envd", method: method, path: path, header: h, body: []byte(body), proxied: true}
	}, target, c, opens)
}

// port: a sandbox's port 8000 (nothing listens) by Host
// (8000-REF.hostileDomain) or by E2B's headers, with its tokens, API
// keys, both, or neither.
func (g *hostileGen) port() hostileReq {
	byHost := g.rng.IntN(2) == 0
	target := g.envdRef(hostileHostNames)
	c, opens := g.tokenCred(target.box, target.ref, true, true)
	method := g.pick([]string{"GET", "GET", "GET", "POST", "PUT", "DELETE", "PATCH"})
	path := g.pick([]string{"/", "/x?y=1", "/static/", "/a/../b", "//"})
	body := g.pick(hostileBodies)
	kind := "port/header"
	if byHost {
		kind = "port/host"
	}
	r := finish(func(ref string) hostileReq {
		r := hostileReq{kind: kind, method: method, path: path, header: c.header.Clone(), body: []byte(body), proxied: true}
		if byHost {
			r.host = "8000-" + ref + "." + hostileDomain
		} else {
			r.path = "/e2b" + path
			r.header.Set("E2b-Sandbox-Id", ref)
			r.header.Set("E2b-Sandbox-Port", "8000")
		}
		return r
	}, target, c, opens)
	if target.missing == "" && target.box == nil {
		// A bad name may be refused as such before any credential is.
		r.want = 0
	}
	return r
}

// large: bodies over the limit, declared or chunked, sent whole or after
// 100 Continue.
func (g *hostileGen) large() hostileReq {
	c := g.apiCred()
	r := hostileReq{kind: "large", method: "POST", header: c.header, who: c.what,
		path: g.pick([]string{"/v1/sandboxes/box/exec", "/v1/sandboxes", "/e2b/v2/sandboxes", "/v1/pools/nosuch/fill", "/e2b/filesystem.Filesystem/Stat"})}
	if strings.Contains(r.path, "filesystem") {
		r.header = http.Header{"E2b-Sandbox-Id": {g.w.box.id}, "X-Access-Token": {g.w.box.envd}}
		r.who = "box's envd token"
	}
	r.large = 2 << 20
	if g.rng.IntN(4) == 0 {
		r.large = 20 << 20
	}
	switch g.rng.IntN(4) {
	case 0:
		r.chunked = true
	case 1:
		r.raw = true
	case 2:
		r.raw, r.expect = true, true
	}
	return r
}

// hostileTexts are requests no client sends, AUTH standing for the
// admin's Authorization header, each with the status it must get (0: any
// but a 5xx). net/http answers most before any handler; its 501 (a
// transfer coding it does not know) and 505 (an HTTP version it does not
// speak) are the statuses RFC 9112 names for them, not faults.
var hostileTexts = []struct {
	text string
	want int
}{
	{"GET\r\n\r\n", 400},
	{"GET /\r\n\r\n", 400},
	{"GET /v1/sandboxes HTTP/1.1\r\n\r\n", 400}, // no Host
	{"GET /v1/sandboxes\x00 HTTP/1.1\r\nHost: x\r\nAUTH\r\n\r\n", 400},
	{"GET /v1/sandboxes HTTP/1.1\r\nHost: x\r\nAUTH\r\nBad Header\r\n\r\n", 400},
	{"GET /v1/sandboxes HTTP/1.1\r\nHost: a\r\nHost: b\r\nAUTH\r\n\r\n", 400},
	{"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nAUTH\r\nContent-Length: -1\r\n\r\n", 400},
	{"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nAUTH\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello", 400},
	{"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 400}, // a TLS hello
	{"GET /v1/sandboxes HTTP/1.1\r\nHost: x\r\nAUTH\r\nTransfer-Encoding: gzip\r\n\r\n", 501},
	{"GET /v1/sandboxes HTTP/9.9\r\nHost: x\r\nAUTH\r\n\r\n", 505},
	{"POST /v1/sandboxes/box/exec HTTP/1.1\r\nHost: x\r\nAUTH\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\nConnection: close\r\n\r\n0\r\n\r\n", 0},
	{"POST /v1/sandboxes/box/exec HTTP/1.1\r\nHost: x\r\nAUTH\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\nzz\r\nhello\r\n0\r\n\r\n", 0},
	{"GET http://elsewhere.example/v1/sandboxes HTTP/1.1\r\nHost: x\r\nAUTH\r\nConnection: close\r\n\r\n", 0},
	{"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 0},
	{"GET /v1/sandboxes HTTP/1.0\r\nAUTH\r\n\r\n", 0},
	{"get /v1/sandboxes HTTP/1.1\r\nHost: x\r\nAUTH\r\nConnection: close\r\n\r\n", 0},
}

// text: a request no client would send, written as is.
func (g *hostileGen) text() hostileReq {
	t := hostileTexts[g.rng.IntN(len(hostileTexts))]
	line, _, _ := strings.Cut(t.text, "\r\n")
	return hostileReq{kind: "text", method: "RAW", path: strconv.Quote(line), who: "admin's bearer", want: t.want, why: "as RFC 9112 says",
		text: strings.ReplaceAll(t.text, "AUTH", "Authorization: Bearer "+g.w.token)}
}
