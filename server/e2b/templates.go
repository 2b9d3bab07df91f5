package e2b

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"smolvm.dev/smolvm/api/e2bapi"
	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/internal/names"
	"smolvm.dev/smolvm/runtime/tenant"
	"smolvm.dev/smolvm/sandbox"
)

// E2B's template builds (the SDK's Template.build, buildInBackground,
// getBuildStatus, exists and tags) over smolvm's Dockerfile builds
// (runtime/build) and templates (the manager's). The SDK requests a
// build, uploads the files its COPY steps need as tars named by their
// content hash, then sends the steps, which become a Dockerfile (each
// upload unpacked in a stage of its own that COPY --from reads), and polls
// the build's status and log. The image then becomes a template of the
// caller's tenant named as the SDK names it ("name" or "name:tag"), with
// the start command's state when there is one. Sandbox.create(name)
// restores it.

// Bounds of the template builds.
const (
	maxBuilding = 2   // builds running at once; more wait
	maxRuns     = 256 // builds remembered; the oldest finished go first
	uploadsHeld = 2   // a tenant's uploads waiting for builds, in maxUploads
)

// dirBytes is the size of the files in dir.
func dirBytes(dir string) int64 {
	var n int64
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if fi, err := e.Info(); err == nil {
			n += fi.Size()
		}
	}
	return n
}

// builds are one Handler's template builds.
type builds struct {
	b sandbox.Builder
	// dir holds uploads, DIR/OWNER/HASH.tar: the context of each of that
	// tenant's builds.
	dir  string
	ctx  context.Context // ends at Close, and every build with it
	stop context.CancelFunc
	slot chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	runs map[string]*buildRun
}

// buildRun is one build: requested, then started, then ready or failed.
type buildRun struct {
	id, owner, templateID string
	names                 []string // the templates it makes: name and name:tag
	limits                sandbox.Limits
	requested             time.Time

	mu       sync.Mutex
	status   string // waiting (requested or queued), building, ready, error
	started  bool
	log      []e2bapi.LogEntry
	reason   *e2bapi.BuildError
	finished time.Time
}

// newBuilds makes the template builds of b, with their uploads in a new
// directory under parent ("": the system's temporary directory).
func newBuilds(b sandbox.Builder, parent string) (*builds, error) {
	dir, err := os.MkdirTemp(parent, "smolvm-e2b-uploads-")
	if err != nil {
		return nil, fmt.Errorf("e2b: template uploads: %w", err)
	}
	ctx, stop := context.WithCancel(context.Background())
	return &builds{b: b, dir: dir, ctx: ctx, stop: stop, slot: make(chan struct{}, maxBuilding), runs: map[string]*buildRun{}}, nil
}

// close ends the builds, waits for them and removes the uploads.
func (bs *builds) close() {
	if bs == nil {
		return
	}
	bs.stop()
	bs.wg.Wait()
	os.RemoveAll(bs.dir)
}

func (h *Handler) templateRoutes(mux *http.ServeMux, handle func(string, http.HandlerFunc)) {
	handle("POST /v3/templates", h.requestBuild)
	handle("GET /templates/{template}/files/{hash}", h.uploadLink)
	handle("PUT /templates/{template}/files/{hash}", h.uploadFiles)
	handle("POST /v2/templates/{template}/builds/{build}", h.startBuild)
	handle("GET /templates/{template}/builds/{build}/status", h.buildStatus)
	// GET /templates/aliases/{alias} and GET /templates/{template}/tags
	// would both match /templates/aliases/tags: ServeMux takes neither.
	handle("GET /templates/{template}/{alias}", func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.PathValue("template") == "aliases":
			h.alias(w, r)
		case r.PathValue("alias") == "tags":
			h.listTags(w, r)
		default:
			writeAPIError(w, http.StatusNotFound, "no such route: "+r.URL.Path)
		}
	})
	handle("POST /templates/tags", h.assignTags)
	// E2B's DELETE /templates/tags carries the tags in a body, which
	// handle refuses of every DELETE; it has no path parameter to check.
	mux.HandleFunc("DELETE /templates/tags", h.removeTags)
}

// isUpload tells a COPY step's upload, whose body is a tar up to
// maxUpload, not a JSON request.
func isUpload(r *http.Request) bool {
	return r.Method == http.MethodPut && strings.HasPrefix(r.URL.Path, "/templates/") && strings.Contains(r.URL.Path, "/files/")
}

// splitName cuts "name:tag" into its name and tag ("" for none).
func splitName(s string) (string, string) {
	name, tag, _ := strings.Cut(s, ":")
	return name, tag
}

// tagged is the template of name's tag: E2B's "default" tag is the name.
func tagged(name, tag string) string {
	if tag == "" || tag == "default" {
		return name
	}
	return name + ":" + tag
}

func (h *Handler) requestBuild(w http.ResponseWriter, r *http.Request) {
	var req e2bapi.BuildRequest
	if err := decodeBody(r, &req); err != nil {
		writeAPIError(w, http.StatusBadRequest, err.Error())
		return
	}
	name, tag := splitName(cmp.Or(req.Name, req.Alias))
	tags := req.Tags
	if tag != "" {
		tags = append([]string{tag}, tags...)
	}
	run := &buildRun{id: newBuildID(), owner: tenant.Owner(r.Context()), templateID: name, requested: time.Now(), status: "waiting",
		limits: sandbox.Limits{CPUs: float64(req.CPUCount), Memory: req.MemoryMB << 20}}
	if len(tags) == 0 {
		run.names = []string{name}
	}
	for _, t := range tags {
		run.names = append(run.names, tagged(name, t))
	}
	for _, n := range run.names {
		if err := names.Check(names.Template, n); err != nil {
			writeAPIError(w, http.StatusBadRequest, "name: "+err.Error())
			return
		}
	}
	h.builds.add(run)
	writeJSON(w, http.StatusAccepted, e2bapi.BuildRequested{TemplateID: name, BuildID: run.id, Aliases: []string{name}, Names: []string{name}, Tags: nonNil(tags)})
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func newBuildID() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// add remembers run, forgetting the oldest finished runs past maxRuns.
func (bs *builds) add(run *buildRun) {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	for len(bs.runs) >= maxRuns {
		var oldest *buildRun
		for _, r := range bs.runs {
			r.mu.Lock()
			done := !r.finished.IsZero() || !r.started
			r.mu.Unlock()
			if done && (oldest == nil || r.requested.Before(oldest.requested)) {
				oldest = r
			}
		}
		if oldest == nil {
			break
		}
		delete(bs.runs, oldest.id)
	}
	bs.runs[run.id] = run
}

// run returns the caller's build id of template; another tenant's is
// not found.
func (h *Handler) run(w http.ResponseWriter, r *http.Request) (*buildRun, bool) {
	h.builds.mu.Lock()
	run := h.builds.runs[r.PathValue("build")]
	h.builds.mu.Unlock()
	if run == nil || !tenant.Owns(r.Context(), run.owner) || run.templateID != r.PathValue("template") {
		writeAPIError(w, http.StatusNotFound, fmt.Sprintf("build %s of template %s not found", r.PathValue("build"), r.PathValue("template")))
		return nil, false
	}
	return run, true
}

// uploads is the directory of ctx's tenant's uploaded files.
func (bs *builds) uploads(ctx context.Context) string {
	return filepath.Join(bs.dir, "_"+tenant.Owner(ctx))
}

// uploadLink answers where to PUT a COPY step's files: this server, with
// the caller's own credentials (the SDK sends only the headers given).
func (h *Handler) uploadLink(w http.ResponseWriter, r *http.Request) {
	hash := r.PathValue("hash")
	_, err := os.Stat(filepath.Join(h.builds.uploads(r.Context()), hash+".tar"))
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	// The handler may be mounted under a prefix (/e2b) that StripPrefix
	// took off r.URL.Path but not off RequestURI.
	uri, _, _ := strings.Cut(r.RequestURI, "?")
	base := strings.TrimSuffix(uri, r.URL.EscapedPath())
	hdr := map[string]string{}
	for _, k := range []string{"X-API-KEY", "Authorization"} {
		if v := r.Header.Get(k); v != "" {
			hdr[k] = v
		}
	}
	writeJSON(w, http.StatusCreated, e2bapi.FileUpload{Present: err == nil, URL: scheme + "://" + r.Host + base + r.URL.EscapedPath(), Headers: hdr})
}

// uploadFiles stores a COPY step's tar, up to maxUpload bytes.
func (h *Handler) uploadFiles(w http.ResponseWriter, r *http.Request) {
	// A failure to store says why, not where: the path is the server's.
	storeFailed := func(err error) {
		if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
			err = pe.Err
		}
		writeAPIError(w, http.StatusInternalServerError, "store the upload: "+err.Error())
	}
	dir := h.builds.uploads(r.Context())
	if err := os.MkdirAll(dir, 0o700); err != nil {
		storeFailed(err)
		return
	}
	// What waits for builds is bounded per tenant: a build removes the
	// files it used once it ends.
	if held := dirBytes(dir); held+max(r.ContentLength, 0) > uploadsHeld*h.maxUpload {
		writeErr(w, errdefs.New(errdefs.ErrQuota, fmt.Sprintf("uploads waiting for builds hold %d bytes, at most %d: start the builds that use them", held, uploadsHeld*h.maxUpload)))
		return
	}
	f, err := os.CreateTemp(dir, ".upload-*")
	if err != nil {
		storeFailed(err)
		return
	}
	defer os.Remove(f.Name())
	n, err := io.Copy(f, io.LimitReader(r.Body, h.maxUpload+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	switch {
	case err != nil:
		storeFailed(err)
	case n > h.maxUpload:
		writeAPIError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("upload larger than %d bytes", h.maxUpload))
	default:
		if err := os.Rename(f.Name(), filepath.Join(dir, r.PathValue("hash")+".tar")); err != nil {
			storeFailed(err)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}
}

func (h *Handler) startBuild(w http.ResponseWriter, r *http.Request) {
	run, ok := h.run(w, r)
	if !ok {
		return
	}
	var req e2bapi.BuildStart
	if err := decodeBody(r, &req); err != nil {
		writeAPIError(w, http.StatusBadRequest, err.Error())
		return
	}
	run.mu.Lock()
	started := run.started
	run.started = true
	run.mu.Unlock()
	if started {
		writeAPIError(w, http.StatusConflict, "build "+run.id+" was started already")
		return
	}
	dir := h.builds.uploads(r.Context())
	h.builds.wg.Add(1)
	go func() {
		defer h.builds.wg.Done()
		h.runBuild(tenant.With(h.builds.ctx, run.owner), run, req, dir)
	}()
	// No body, said so: the SDK reads a body it is not told is empty.
	w.Header().Set("Content-Length", "0")
	w.WriteHeader(http.StatusAccepted)
}

// runBuild builds run's image from req's steps, then its templates, and
// records how it ended.
func (h *Handler) runBuild(ctx context.Context, run *buildRun, req e2bapi.BuildStart, dir string) {
	fail := func(step string, err error) {
		run.logf("error", step, "%v", err)
		run.mu.Lock()
		defer run.mu.Unlock()
		run.status, run.finished = "error", time.Now()
		run.reason = &e2bapi.BuildError{Message: err.Error(), Step: step}
	}
	select {
	case h.builds.slot <- struct{}{}:
		defer func() { <-h.builds.slot }()
	case <-ctx.Done():
		fail("base", ctx.Err())
		return
	}
	run.mu.Lock()
	run.status = "building"
	run.mu.Unlock()

	spec, err := h.dockerfile(ctx, req)
	defer func() {
		for _, hash := range spec.uploads {
			os.Remove(filepath.Join(dir, hash+".tar"))
		}
	}()
	if err != nil {
		fail("base", err)
		return
	}
	run.logf("info", "base", "Building the image (%d steps)", len(req.Steps))
	netPolicy, err := (&e2bapi.NetworkRequest{}).Policy(nil, nil)
	if err != nil {
		fail("base", err)
		return
	}
	img, err := h.builds.b.Build(ctx, sandbox.BuildOptions{Dockerfile: spec.dockerfile, Name: "template " + run.templateID, Context: dir,
		NoCache: spec.noCache, Network: netPolicy, Progress: run.writer("info")})
	if err != nil {
		fail("finalize", err)
		return
	}
	o := sandbox.TemplateOptions{Name: run.names[0], Build: run.id, Image: img.ID, Limits: run.limits, Log: run.writer("info")}
	if spec.start != "" {
		o.Start, o.Ready = []string{"/bin/sh", "-c", spec.start}, spec.ready
	}
	if _, err := h.m.BuildTemplate(ctx, o); err != nil {
		fail("finalize", err)
		return
	}
	for _, n := range run.names[1:] {
		if _, err := h.m.TagTemplate(ctx, run.names[0], n); err != nil {
			fail("finalize", err)
			return
		}
	}
	run.logf("info", "finalize", "Template %s is ready", strings.Join(run.names, ", "))
	run.mu.Lock()
	run.status, run.finished = "ready", time.Now()
	run.mu.Unlock()
}

func (run *buildRun) logf(level, step, format string, args ...any) {
	run.mu.Lock()
	defer run.mu.Unlock()
	run.log = append(run.log, e2bapi.LogEntry{Timestamp: time.Now().UTC(), Level: level, Message: fmt.Sprintf(format, args...), Step: step})
}

// writer is an io.Writer whose lines are log entries.
func (run *buildRun) writer(level string) io.Writer { return &logWriter{run: run, level: level} }

type logWriter struct {
	run     *buildRun
	level   string
	partial []byte
}

func (lw *logWriter) Write(p []byte) (int, error) {
	lw.partial = append(lw.partial, p...)
	for {
		line, rest, ok := strings.Cut(string(lw.partial), "\n")
		if !ok {
			return len(p), nil
		}
		lw.run.logf(lw.level, "", "%s", line)
		lw.partial = []byte(rest)
	}
}

func (h *Handler) buildStatus(w http.ResponseWriter, r *http.Request) {
	run, ok := h.run(w, r)
	if !ok {
		return
	}
	offset := 0
	if v := r.URL.Query().Get("logsOffset"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			writeAPIError(w, http.StatusBadRequest, "logsOffset: want a number of entries, 0 or more")
			return
		}
		offset = n
	}
	run.mu.Lock()
	defer run.mu.Unlock()
	info := e2bapi.BuildInfo{TemplateID: run.templateID, BuildID: run.id, Status: run.status, Logs: []string{}, Reason: run.reason,
		LogEntries: slices.Clone(run.log[min(offset, len(run.log)):])}
	if info.LogEntries == nil {
		info.LogEntries = []e2bapi.LogEntry{}
	}
	writeJSON(w, http.StatusOK, info)
}

// alias answers Template.exists: 200 for a template the caller sees, 404
// for any other (another tenant's included).
func (h *Handler) alias(w http.ResponseWriter, r *http.Request) {
	t, err := h.m.Template(r.Context(), r.PathValue("alias"))
	if err != nil {
		writeErr(w, err)
		return
	}
	name, _ := splitName(t.Name)
	writeJSON(w, http.StatusOK, e2bapi.AliasInfo{TemplateID: name, Public: t.Public})
}

func (h *Handler) listTags(w http.ResponseWriter, r *http.Request) {
	ts, err := h.m.Templates(r.Context())
	if err != nil {
		writeErr(w, err)
		return
	}
	out := []e2bapi.TemplateTag{}
	for _, t := range ts {
		name, tag := splitName(t.Name)
		if name == r.PathValue("template") && tenant.Owns(r.Context(), t.Tenant) {
			out = append(out, e2bapi.TemplateTag{Tag: cmp.Or(tag, "default"), BuildID: t.Build, CreatedAt: t.Built})
		}
	}
	if len(out) == 0 {
		writeAPIError(w, http.StatusNotFound, fmt.Sprintf("template %s not found", r.PathValue("template")))
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *Handler) assignTags(w http.ResponseWriter, r *http.Request) {
	var req e2bapi.TagsRequest
	if err := decodeBody(r, &req); err != nil {
		writeAPIError(w, http.StatusBadRequest, err.Error())
		return
	}
	if err := checkTags(req.Target, req.Tags); err != nil {
		writeAPIError(w, http.StatusBadRequest, "target: "+err.Error())
		return
	}
	name, tag := splitName(req.Target)
	out := e2bapi.TagsAssigned{Tags: []string{}}
	for _, t := range req.Tags {
		tmpl, err := h.m.TagTemplate(r.Context(), tagged(name, tag), tagged(name, t))
		if err != nil {
			writeErr(w, badName(err))
			return
		}
		out.BuildID = tmpl.Build
		out.Tags = append(out.Tags, t)
	}
	writeJSON(w, http.StatusCreated, out)
}

func (h *Handler) removeTags(w http.ResponseWriter, r *http.Request) {
	var req e2bapi.TagsRequest
	if err := decodeBody(r, &req); err != nil {
		writeAPIError(w, http.StatusBadRequest, err.Error())
		return
	}
	if err := checkTags(req.Name, req.Tags); err != nil {
		writeAPIError(w, http.StatusBadRequest, "name: "+err.Error())
		return
	}
	for _, t := range req.Tags {
		if err := h.m.RemoveTemplate(r.Context(), tagged(req.Name, t)); err != nil {
			writeErr(w, badName(err))
			return
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

// checkTags checks a tags request's template name and that it names
// tags.
func checkTags(name string, tags []string) error {
	if err := names.Check(names.Template, name); err != nil {
		return err
	}
	if len(tags) == 0 {
		return errors.New("tags: give at least one")
	}
	return nil
}

// badName makes a bad template name in a body a 400, as the SDK expects
// of a bad argument.
func badName(err error) error {
	if errors.Is(err, names.ErrInvalid) {
		return errdefs.New(errdefs.ErrInvalid, err.Error())
	}
	return err
}

// buildSpec is what a BuildStart becomes.
type buildSpec struct {
	dockerfile []byte
	uploads    []string // the hashes of the files its COPY steps use
	noCache    bool
	start      string
	ready      sandbox.Ready
}

// dockerfile turns req into a Dockerfile over the caller's uploads: each
// COPY's tar is unpacked in a stage of its own, "FROM scratch AS f<hash>"
// and "ADD <hash>.tar /", which the step copies from with docker's
// semantics (globs, a directory's contents); a RUN with a user is
// wrapped in USER lines. A base template gives its image, and its start
// and ready commands unless req has its own.
func (h *Handler) dockerfile(ctx context.Context, req e2bapi.BuildStart) (buildSpec, error) {
	spec := buildSpec{noCache: req.Force, start: req.StartCmd, ready: readyOf(req.ReadyCmd)}
	if req.FromImageRegistry != nil {
		return spec, errdefs.New(errdefs.ErrUnsupported, "fromImageRegistry: registry credentials are not supported; pull or import the image into smolvm (smolvm image pull/import) and name it in fromImage")
	}
	base := req.FromImage
	switch {
	case req.FromTemplate != "" && base != "":
		return spec, errdefs.New(errdefs.ErrInvalid, "give fromImage or fromTemplate, not both")
	case req.FromTemplate != "":
		t, err := h.m.Template(ctx, req.FromTemplate)
		if err != nil {
			return spec, fmt.Errorf("fromTemplate: %w", err)
		}
		base = t.ImageID
		if spec.start == "" && len(t.Start) == 3 {
			spec.start, spec.ready = t.Start[2], t.Ready // ["/bin/sh", "-c", CMD]
		}
	case base == "":
		return spec, errdefs.New(errdefs.ErrInvalid, "fromImage or fromTemplate: required")
	case base == e2bapi.BaseImage:
		b, err := h.baseImage(ctx)
		if err != nil {
			return spec, err
		}
		base = b
	}
	user := ""
	if img, err := h.images.Get(ctx, base); err == nil {
		user = img.Config.User
	}
	var stages, body strings.Builder
	quote := func(ss ...string) string { b, _ := json.Marshal(ss); return string(b) }
	for i, s := range req.Steps {
		spec.noCache = spec.noCache || s.Force
		arg := func(n int) string {
			if n < len(s.Args) {
				return s.Args[n]
			}
			return ""
		}
		bad := func(why string) (buildSpec, error) {
			return spec, errdefs.New(errdefs.ErrInvalid, fmt.Sprintf("step %d (%s): %s", i+1, s.Type, why))
		}
		oneLine := func(v string) bool { return v != "" && !strings.ContainsAny(v, "\n\r") }
		switch s.Type {
		case "RUN":
			if arg(0) == "" {
				return bad("no command")
			}
			if u := arg(1); u != "" {
				fmt.Fprintf(&body, "USER %s\nRUN %s\nUSER %s\n", u, quote("/bin/sh", "-c", arg(0)), cmp.Or(user, "root"))
			} else {
				fmt.Fprintf(&body, "RUN %s\n", quote("/bin/sh", "-c", arg(0)))
			}
		case "COPY":
			if names.Check(names.Hex, s.FilesHash) != nil || arg(0) == "" || arg(1) == "" {
				return bad("want a source, a destination and the files' hash")
			}
			if arg(3) != "" {
				return bad("a mode is not supported: chmod in a runCmd after it")
			}
			if _, err := os.Stat(filepath.Join(h.builds.uploads(ctx), s.FilesHash+".tar")); err != nil {
				return bad("its files were not uploaded")
			}
			if !slices.Contains(spec.uploads, s.FilesHash) {
				spec.uploads = append(spec.uploads, s.FilesHash)
				fmt.Fprintf(&stages, "FROM scratch AS f%s\nADD %s.tar /\n", s.FilesHash, s.FilesHash)
			}
			chown := ""
			if u := arg(2); u != "" {
				if !oneLine(u) || strings.ContainsAny(u, " \t") {
					return bad("bad user")
				}
				chown = " --chown=" + u
			}
			fmt.Fprintf(&body, "COPY --from=f%s%s %s\n", s.FilesHash, chown, quote("/"+strings.TrimPrefix(arg(0), "./"), arg(1)))
		case "ENV":
			if len(s.Args)%2 != 0 || len(s.Args) == 0 {
				return bad("want names and values in pairs")
			}
			body.WriteString("ENV")
			for k := 0; k < len(s.Args); k += 2 {
				if !oneLine(s.Args[k]) || strings.ContainsAny(s.Args[k], "= \t\"") || strings.ContainsAny(s.Args[k+1], "\n\r") {
					return bad(fmt.Sprintf("bad variable %q", s.Args[k]))
				}
				fmt.Fprintf(&body, " %s=%s", s.Args[k], strconv.Quote(s.Args[k+1]))
			}
			body.WriteString("\n")
		case "WORKDIR":
			if !oneLine(arg(0)) {
				return bad("want one path")
			}
			fmt.Fprintf(&body, "WORKDIR %s\n", arg(0))
		case "USER":
			if !oneLine(arg(0)) || strings.ContainsAny(arg(0), " \t") {
				return bad("want one user")
			}
			user = arg(0)
			fmt.Fprintf(&body, "USER %s\n", user)
		default:
			return bad("not supported")
		}
	}
	spec.dockerfile = []byte(stages.String() + "FROM " + base + "\n" + body.String())
	return spec, nil
}

// readyOf reads the SDK's ready commands (waitForPort, waitForURL,
// waitForProcess, waitForFile, waitForTimeout) as the checks smolvm runs
// from the host, which need none of ss, curl or pgrep in the image (but
// waitForProcess's pgrep); any other command is run as it is.
func readyOf(cmd string) sandbox.Ready {
	cmd = strings.TrimSpace(cmd)
	if cmd == "" {
		return sandbox.Ready{}
	}
	if p, ok := between(cmd, `[ -n "$(ss -Htuln sport = :`, `)" ]`); ok {
		if port, err := strconv.Atoi(p); err == nil {
			return sandbox.Ready{Port: port}
		}
	}
	if rest, ok := strings.CutPrefix(cmd, `curl -s -o /dev/null -w "%{http_code}" `); ok {
		if u, code, ok := strings.Cut(rest, ` | grep -q "`); ok {
			status, err := strconv.Atoi(strings.TrimSuffix(code, `"`))
			if r := (sandbox.Ready{URL: unquote(u), Status: status}); err == nil && r.Check() == nil {
				return r
			}
		}
	}
	if p, ok := between(cmd, "pgrep ", " > /dev/null"); ok {
		return sandbox.Ready{Process: unquote(p)}
	}
	if f, ok := between(cmd, "[ -f ", " ]"); ok {
		return sandbox.Ready{File: unquote(f)}
	}
	if s, ok := strings.CutPrefix(cmd, "sleep "); ok {
		if n, err := strconv.Atoi(s); err == nil && n >= 0 && time.Duration(n)*time.Second < sandbox.DefaultReadyTimeout {
			return sandbox.Ready{After: time.Duration(n) * time.Second}
		}
	}
	return sandbox.Ready{Cmd: cmd}
}

// between returns what s holds between prefix and suffix.
func between(s, prefix, suffix string) (string, bool) {
	rest, ok := strings.CutPrefix(s, prefix)
	if !ok {
		return "", false
	}
	return strings.CutSuffix(rest, suffix)
}

// unquote undoes the SDK's shellQuote: 'it'"'"'s' is it's; a bare word is
// itself.
func unquote(s string) string {
	if len(s) < 2 || s[0] != '\'' || s[len(s)-1] != '\'' {
		return s
	}
	return strings.ReplaceAll(s[1:len(s)-1], `'"'"'`, `'`)
}

// baseImage is what fromBaseImage() names: E2B's base image if the
// store has it (imported or built as e2bdev/base), else smolvm's base
// image, which has the tools E2B's does (python3, node, git, curl). Not
// the host image: a template is meant to run elsewhere than this host.
func (h *Handler) baseImage(ctx context.Context) (string, error) {
	for _, name := range []string{e2bapi.BaseImage, sandbox.BaseImage} {
		_, err := h.images.Get(ctx, name)
		if err == nil {
			return name, nil
		}
		if !errors.Is(err, sandbox.ErrImageNotFound) {
			return "", fmt.Errorf("fromBaseImage: %w", err)
		}
	}
	return "", errdefs.New(errdefs.ErrInvalid, fmt.Sprintf("fromBaseImage: neither %s nor smolvm's %s image is in the store; make one with smolvm image build %s (or import %s)", e2bapi.BaseImage, sandbox.BaseImage, sandbox.BaseImage, e2bapi.BaseImage))
}
