package e2b

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"path"
	"strconv"
	"time"

	"smolvm.dev/smolvm/api/e2bapi"
	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/internal/httpguard"
	"smolvm.dev/smolvm/internal/names"
	"smolvm.dev/smolvm/sandbox"
)

func (h *Handler) envdServeMux() *http.ServeMux {
	mux := http.NewServeMux()
	// Unknown paths (404) and methods (405) are answered by httpguard.Routed.
	handle := func(pattern string, fn http.HandlerFunc) {
		h.envdRoutes = append(h.envdRoutes, pattern)
		mux.HandleFunc(pattern, fn)
	}
	handle("GET /health", h.health)
	handle("GET /files", h.withSandbox(h.readFile))
	handle("POST /files", h.withSandbox(h.writeFiles))
	rpc := func(method string, fn func(context.Context, *envdCall, []byte) (any, *rpcError)) {
		handle("POST /"+method, h.withSandbox(h.unary(fn)))
	}
	rpc("filesystem.Filesystem/Stat", h.stat)
	rpc("filesystem.Filesystem/ListDir", h.listDir)
	rpc("filesystem.Filesystem/MakeDir", h.makeDir)
	rpc("filesystem.Filesystem/Move", h.move)
	rpc("filesystem.Filesystem/Remove", h.remove)
	handle("POST /filesystem.Filesystem/WatchDir", h.withSandbox(h.watchDir))
	rpc("filesystem.Filesystem/CreateWatcher", h.createWatcher)
	rpc("filesystem.Filesystem/GetWatcherEvents", h.getWatcherEvents)
	rpc("filesystem.Filesystem/RemoveWatcher", h.removeWatcher)
	// Start and Connect stream (as does WatchDir); the rest are unary.
	handle("POST /process.Process/Start", h.withSandbox(h.start))
	handle("POST /process.Process/Connect", h.withSandbox(h.connectProcess))
	rpc("process.Process/List", h.listProcesses)
	rpc("process.Process/SendInput", h.sendInput)
	rpc("process.Process/SendSignal", h.sendSignal)
	rpc("process.Process/CloseStdin", h.closeStdin)
	rpc("process.Process/Update", h.update)
	return mux
}

// serveEnvd serves an envd request for sandbox id: it authenticates it by
// the sandbox's access token (or its tenant's key) before anything else
// (access), then
// checks the path, the port and the body's size, and routes it. An
// unknown method is a 404 (what connect-go answers, and what Connect
// clients read as unimplemented), a wrong HTTP method a 405.
func (h *Handler) serveEnvd(w http.ResponseWriter, r *http.Request, id string) {
	envd := r.Header.Values(headerAccessToken)
	if len(envd) == 0 && h.signedBy(r, id) {
		envd = []string{h.envdToken(id)} // a signed file URL stands for the token (signed.go)
	}
	r, sb, err := h.access(r, id, envd, nil)
	switch {
	case errors.Is(err, errNoAccess):
		envdError(w, r, rpcErrorf(codeUnauthenticated, "missing or invalid envd access token (X-Access-Token)"))
		return
	case errors.Is(err, errdefs.ErrNotFound):
		// E2B's proxy cannot reach a sandbox that is gone: 502, which the
		// SDK reads as "not running" (isRunning is false after a kill).
		err = errdefs.New(errdefs.ErrUnavailable, err.Error())
	}
	if err != nil {
		envdError(w, r, err)
		return
	}
	if err := httpguard.Path(r); err != nil {
		envdError(w, r, errdefs.New(errdefs.ErrInvalid, err.Error()))
		return
	}
	if p := r.Header.Get(headerSandboxPort); p != "" && p != e2bapi.EnvdPort {
		// ServeHTTP forwards every valid port but envd's.
		if err := names.Check(names.Port, p); err != nil {
			envdError(w, r, fmt.Errorf("%s: %w", headerSandboxPort, err))
			return
		}
	}
	// The guards' answers: Connect has no codes for a body too large or
	// a server busy: keep the status.
	fail := func(w http.ResponseWriter, status int, msg string) {
		if isEnvdHTTP(r) {
			writeAPIError(w, status, msg)
			return
		}
		code := codeInvalidArgument
		switch status {
		case http.StatusRequestEntityTooLarge, http.StatusTooManyRequests, http.StatusServiceUnavailable:
			code = codeResourceExhausted
		case http.StatusRequestTimeout:
			code = codeDeadlineExceeded
		}
		writeRPCError(w, status, &rpcError{Code: code, Message: msg})
	}
	release, err := h.acquire(r, sb.Tenant)
	if err != nil {
		httpguard.RefuseBusy(w, err, fail)
		return
	}
	defer release()
	if h.envd != nil {
		h.envd(w, r, sb)
		return
	}
	// A GET takes no body; uploads stream, with a limit per file
	// (writeFiles); every other request is one small message.
	route := r.Method + " " + r.URL.Path
	switch {
	case httpguard.Bodiless(route):
		err = httpguard.NoBody(r, route)
	case route != "POST /files":
		err = httpguard.Buffer(r, maxRequest)
	}
	if err != nil {
		httpguard.RefuseBody(w, err, fail)
		return
	}
	unknown := func(w http.ResponseWriter, status int, msg string) {
		if isEnvdHTTP(r) {
			writeAPIError(w, status, msg)
			return
		}
		rerr := rpcErrorf(codeUnimplemented, "%s (smolvm's envd does not serve it)", msg)
		if isStreaming(r) {
			newStream(w).End(rerr)
			return
		}
		writeRPCError(w, status, rerr)
	}
	if httpguard.Routed(w, r, h.envdMux, unknown) {
		h.envdMux.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), sandboxKey{}, sb)))
	}
}

// sandboxKey holds, in a request's context, the sandbox serveEnvd
// authenticated the request for.
type sandboxKey struct{}

// isEnvdHTTP reports whether r is for one of envd's plain HTTP routes,
// whose errors are envd's {code, message} rather than Connect's.
func isEnvdHTTP(r *http.Request) bool { return r.URL.Path == "/health" || r.URL.Path == "/files" }

// envdCall is an authenticated envd request for one running sandbox.
type envdCall struct {
	w  http.ResponseWriter
	r  *http.Request
	sb *sandbox.Sandbox
	// user is the account named by the request's Basic authorization,
	// "" for the sandbox's default.
	user string
}

// withSandbox runs fn for the sandbox serveEnvd authenticated, if it
// runs. Failures take the shape the SDK's client for that route expects
// (see envdError).
func (h *Handler) withSandbox(fn func(*envdCall)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sb, ok := r.Context().Value(sandboxKey{}).(*sandbox.Sandbox)
		if !ok {
			envdError(w, r, rpcErrorf(codeUnauthenticated, "envd request without an authenticated sandbox"))
			return
		}
		if sb.State != sandbox.StateRunning {
			// E2B's proxy cannot reach a sandbox that is not running.
			envdError(w, r, errdefs.New(errdefs.ErrUnavailable, notLive(sb)))
			return
		}
		fn(&envdCall{w: w, r: r, sb: sb, user: basicUser(r)})
	}
}

// envdError answers a failed envd request: envd's {code, message} for its
// HTTP routes (/files, /health), a Connect error for the RPC services,
// whose client reads the code from the body (or, for a stream, from its
// end message).
func envdError(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case isEnvdHTTP(r):
		httpError(w, err)
	case isStreaming(r):
		newStream(w).End(rpcFrom(err))
	default:
		writeUnary(w, nil, rpcFrom(err))
	}
}

// httpError answers a request to one of envd's HTTP routes with err.
func httpError(w http.ResponseWriter, err error) {
	rerr := rpcFrom(err)
	writeAPIError(w, rerr.fileStatus(), rerr.Message)
}

// basicUser returns the user of "Authorization: Basic base64(user:)",
// which is how the SDK names the account a command or file belongs to.
func basicUser(r *http.Request) string {
	u, _, ok := r.BasicAuth()
	if !ok {
		return ""
	}
	return u
}

func (h *Handler) health(w http.ResponseWriter, r *http.Request) {
	h.withSandbox(func(c *envdCall) { w.WriteHeader(http.StatusNoContent) })(w, r)
}

// unary adapts a unary Connect method. fn gets the raw request message and
// decodes it itself, into its own type.
func (h *Handler) unary(fn func(context.Context, *envdCall, []byte) (any, *rpcError)) func(*envdCall) {
	return func(c *envdCall) {
		var raw rawMessage
		if rerr := readUnary(c.r, &raw); rerr != nil {
			writeUnary(c.w, nil, rerr)
			return
		}
		out, rerr := fn(c.r.Context(), c, raw)
		writeUnary(c.w, out, rerr)
	}
}

// rawMessage keeps a request message for the method to decode.
type rawMessage []byte

func (m *rawMessage) UnmarshalJSON(b []byte) error {
	*m = append((*m)[:0], b...)
	return nil
}

// checkPath refuses what is not a plain path. Paths resolve inside the
// sandbox's own file system (the agent runs in the sandbox), so nothing
// can reach the host; ".." is refused anyway so that a path means what it
// says and the API never walks above where a caller pointed it.
func checkPath(field, p string) error {
	if p == "" {
		return fmt.Errorf("%s: required", field)
	}
	if err := names.CheckPath(p); err != nil {
		return fmt.Errorf("%s: %w", field, err)
	}
	return nil
}

// fsError maps an agent failure to a Connect error.
func fsError(op, p string, err error) *rpcError {
	msg := err.Error()
	switch {
	case sandbox.ErrorKind(err) == sandbox.KindIO:
		// The sandbox refused it (busy, read-only, not empty, another
		// device): the caller's to fix, not a failure of the server.
		return rpcErrorf(codeFailedPrecond, "%s %s: %s", op, p, msg)
	case errors.Is(err, errdefs.ErrNotFound):
		msg = "no such file or directory"
	case errors.Is(err, errdefs.ErrAlreadyExists):
		msg = "already exists"
	}
	return rpcErrorf(replyOf(err).code, "%s %s: %s", op, p, msg)
}

// The filesystem service's messages, with protobuf's JSON names.

type entryInfo struct {
	Name          string `json:"name"`
	Type          string `json:"type"`
	Path          string `json:"path"`
	Size          string `json:"size"` // int64: a string in protobuf JSON
	Mode          uint32 `json:"mode"`
	Permissions   string `json:"permissions"`
	Owner         string `json:"owner"`
	Group         string `json:"group"`
	ModifiedTime  string `json:"modifiedTime"`
	SymlinkTarget string `json:"symlinkTarget,omitempty"`
}

var fileTypes = map[string]string{"file": "FILE_TYPE_FILE", "dir": "FILE_TYPE_DIRECTORY", "symlink": "FILE_TYPE_SYMLINK"}

func newEntryInfo(fi sandbox.FileInfo) entryInfo {
	t, ok := fileTypes[fi.Type]
	if !ok {
		t = "FILE_TYPE_UNSPECIFIED" // the SDK skips these in listings
	}
	return entryInfo{
		Name: fi.Name, Type: t, Path: fi.Path, Size: strconv.FormatInt(fi.Size, 10),
		Mode: fi.Mode, Permissions: fi.Perm,
		Owner: idName(fi.UID), Group: idName(fi.GID),
		ModifiedTime:  fi.ModTime.UTC().Format(time.RFC3339Nano),
		SymlinkTarget: fi.Target,
	}
}

// idName names a uid or gid. The sandbox's account names live in its own
// /etc, which the host does not read; root is the one name every image has.
func idName(id uint32) string {
	if id == 0 {
		return "root"
	}
	return strconv.FormatUint(uint64(id), 10)
}

type pathRequest struct {
	Path string `json:"path"`
}

func (r *pathRequest) paths() map[string]string { return map[string]string{"path": r.Path} }

type entryResponse struct {
	Entry entryInfo `json:"entry"`
}

// fsBegin decodes a filesystem request into req, checks its paths and
// returns the sandbox's file system.
func (h *Handler) fsBegin(ctx context.Context, c *envdCall, raw []byte, req any, paths func() map[string]string) (sandbox.FS, *rpcError) {
	if rerr := decodeMessage(raw, req); rerr != nil {
		return nil, rerr
	}
	for field, p := range paths() {
		if err := checkPath(field, p); err != nil {
			return nil, rpcErrorf(codeInvalidArgument, "%v", err)
		}
	}
	fsys, err := h.m.FS(ctx, c.sb.ID)
	if err != nil {
		return nil, rpcFrom(err)
	}
	return fsys, nil
}

func (h *Handler) stat(ctx context.Context, c *envdCall, raw []byte) (any, *rpcError) {
	var req pathRequest
	fsys, rerr := h.fsBegin(ctx, c, raw, &req, req.paths)
	if rerr != nil {
		return nil, rerr
	}
	fi, err := fsys.Stat(ctx, req.Path)
	if err != nil {
		return nil, fsError("stat", req.Path, err)
	}
	return entryResponse{newEntryInfo(fi)}, nil
}

type listDirRequest struct {
	Path  string `json:"path"`
	Depth uint32 `json:"depth"`
}

func (h *Handler) listDir(ctx context.Context, c *envdCall, raw []byte) (any, *rpcError) {
	var req listDirRequest
	fsys, rerr := h.fsBegin(ctx, c, raw, &req, func() map[string]string { return map[string]string{"path": req.Path} })
	if rerr != nil {
		return nil, rerr
	}
	fis, err := fsys.List(ctx, req.Path, int(req.Depth))
	if err != nil {
		return nil, fsError("list", req.Path, err)
	}
	out := struct {
		Entries []entryInfo `json:"entries"`
	}{Entries: []entryInfo{}}
	for _, fi := range fis {
		out.Entries = append(out.Entries, newEntryInfo(fi))
	}
	return out, nil
}

func (h *Handler) makeDir(ctx context.Context, c *envdCall, raw []byte) (any, *rpcError) {
	var req pathRequest
	fsys, rerr := h.fsBegin(ctx, c, raw, &req, req.paths)
	if rerr != nil {
		return nil, rerr
	}
	fi, err := fsys.Mkdir(ctx, req.Path)
	if err != nil {
		return nil, fsError("make directory", req.Path, err)
	}
	return entryResponse{newEntryInfo(fi)}, nil
}

type moveRequest struct {
	Source      string `json:"source"`
	Destination string `json:"destination"`
}

func (h *Handler) move(ctx context.Context, c *envdCall, raw []byte) (any, *rpcError) {
	var req moveRequest
	fsys, rerr := h.fsBegin(ctx, c, raw, &req, func() map[string]string {
		return map[string]string{"source": req.Source, "destination": req.Destination}
	})
	if rerr != nil {
		return nil, rerr
	}
	fi, err := fsys.Rename(ctx, req.Source, req.Destination)
	if err != nil {
		return nil, fsError("move", req.Source, err)
	}
	return entryResponse{newEntryInfo(fi)}, nil
}

func (h *Handler) remove(ctx context.Context, c *envdCall, raw []byte) (any, *rpcError) {
	var req pathRequest
	fsys, rerr := h.fsBegin(ctx, c, raw, &req, req.paths)
	if rerr != nil {
		return nil, rerr
	}
	if err := fsys.Remove(ctx, req.Path); err != nil {
		return nil, fsError("remove", req.Path, err)
	}
	return struct{}{}, nil
}

// readFile answers GET /files?path=: the file's bytes.
func (h *Handler) readFile(c *envdCall) {
	p := c.r.URL.Query().Get("path")
	if err := checkPath("path", p); err != nil {
		writeAPIError(c.w, http.StatusBadRequest, err.Error())
		return
	}
	fsys, err := h.m.FS(c.r.Context(), c.sb.ID)
	if err != nil {
		httpError(c.w, err)
		return
	}
	lw := &lazyWriter{w: c.w}
	if err := fsys.ReadFile(c.r.Context(), p, lw); err != nil {
		if !lw.started {
			httpError(c.w, fsError("read", p, err))
		}
		return
	}
	lw.start()
}

// lazyWriter commits a 200 with the first byte, so a failure before any
// byte can still be answered with an error status.
type lazyWriter struct {
	w       http.ResponseWriter
	started bool
}

func (l *lazyWriter) start() {
	if !l.started {
		l.started = true
		l.w.Header().Set("Content-Type", "application/octet-stream")
		l.w.WriteHeader(http.StatusOK)
	}
}

func (l *lazyWriter) Write(p []byte) (int, error) {
	l.start()
	return l.w.Write(p)
}

// writtenEntry is envd's reply element for an upload.
type writtenEntry struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Path string `json:"path"`
}

// writeFiles answers POST /files: a multipart form of "file" parts (each
// part's file name is its path when the query names none), or, from envd
// 0.5.7, one application/octet-stream body, optionally gzip-encoded.
func (h *Handler) writeFiles(c *envdCall) {
	qpath := c.r.URL.Query().Get("path")
	fsys, err := h.m.FS(c.r.Context(), c.sb.ID)
	if err != nil {
		httpError(c.w, err)
		return
	}
	ct, _, _ := mime.ParseMediaType(c.r.Header.Get("Content-Type"))
	var out []writtenEntry
	write := func(p string, body io.Reader) bool {
		if err := checkPath("path", p); err != nil {
			writeAPIError(c.w, http.StatusBadRequest, err.Error())
			return false
		}
		fi, status, err := h.upload(c.r.Context(), fsys, p, body)
		if err != nil {
			if status == http.StatusRequestEntityTooLarge {
				httpguard.Refuse(c.w) // the rest of the body stays unread
			}
			writeAPIError(c.w, status, err.Error())
			return false
		}
		out = append(out, writtenEntry{Name: fi.Name, Type: fi.Type, Path: fi.Path})
		return true
	}
	switch ct {
	case "application/octet-stream":
		var body io.Reader = c.r.Body
		if c.r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(c.r.Body)
			if err != nil {
				writeAPIError(c.w, http.StatusBadRequest, "body: not gzip: "+err.Error())
				return
			}
			body = zr
		}
		if !write(qpath, body) {
			return
		}
	case "multipart/form-data":
		mr, err := c.r.MultipartReader()
		if err != nil {
			writeAPIError(c.w, http.StatusBadRequest, "body: "+err.Error())
			return
		}
		for {
			part, err := mr.NextPart()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				writeAPIError(c.w, http.StatusBadRequest, "body: "+err.Error())
				return
			}
			if part.FormName() != "file" {
				continue
			}
			p := qpath
			if p == "" {
				p = partPath(part.Header.Get("Content-Disposition"))
			}
			if !write(p, part) {
				return
			}
		}
		if len(out) == 0 {
			writeAPIError(c.w, http.StatusBadRequest, "body: no \"file\" part")
			return
		}
	default:
		writeAPIError(c.w, http.StatusBadRequest, fmt.Sprintf("Content-Type: %q is neither multipart/form-data nor application/octet-stream", ct))
		return
	}
	writeJSON(c.w, http.StatusOK, out)
}

// partPath reads a part's file name unaltered. multipart.Part.FileName
// keeps only the base name, but the SDK puts the whole path there.
func partPath(disposition string) string {
	_, params, err := mime.ParseMediaType(disposition)
	if err != nil {
		return ""
	}
	return path.Clean(params["filename"])
}

// upload streams body into p inside the sandbox, at most h.maxUpload
// bytes. Past the limit the reader fails, which aborts the upload: the
// agent writes to a temporary file and renames it only when complete, so
// nothing is left behind.
func (h *Handler) upload(ctx context.Context, fsys sandbox.FS, p string, body io.Reader) (sandbox.FileInfo, int, error) {
	lr := &limitReader{r: body, n: h.maxUpload}
	fi, err := fsys.WriteFile(ctx, p, lr)
	if lr.over {
		return fi, http.StatusRequestEntityTooLarge, fmt.Errorf("%s: upload larger than %d bytes", p, h.maxUpload)
	}
	if httpguard.IsSlow(lr.err) {
		return fi, http.StatusRequestTimeout, fmt.Errorf("%s: %w", p, lr.err)
	}
	if err != nil {
		rerr := fsError("write", p, err)
		return fi, rerr.fileStatus(), errors.New(rerr.Message)
	}
	return fi, http.StatusOK, nil
}

// limitReader fails once more than n bytes come; err keeps the body's
// own error, if reading it failed.
type limitReader struct {
	r    io.Reader
	n    int64
	over bool
	err  error
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.over {
		return 0, errTooLarge
	}
	if int64(len(p)) > l.n+1 {
		p = p[:l.n+1]
	}
	n, err := l.r.Read(p)
	if err != nil && err != io.EOF {
		l.err = err
	}
	l.n -= int64(n)
	if l.n < 0 {
		l.over = true
		return 0, errTooLarge
	}
	return n, err
}

var errTooLarge = errors.New("upload too large")
