package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"smolvm.dev/smolvm/runtime/image"
	"smolvm.dev/smolvm/runtime/manager"
	"smolvm.dev/smolvm/runtime/store"
	"smolvm.dev/smolvm/sandbox"
)

func (a *app) imageCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "image",
		Short: "Manage the images sandboxes run (import, pull, ls, rm, inspect)",
	}
	c.AddCommand(a.imageImportCmd(), a.imagePullCmd(), a.imageLsCmd(), a.imageRmCmd(), a.imageInspectCmd())
	return c
}

// imageInUse reports whether a sandbox uses an image, so that image rm does
// not delete what a sandbox still runs on.
func (a *app) imageInUse(ctx context.Context) func(string) (bool, error) {
	return func(id string) (bool, error) {
		st, err := store.Open(ctx, a.dataDir)
		if err != nil {
			return false, err
		}
		defer st.Close()
		return manager.ImageInUse(ctx, st, id)
	}
}

// imageStore opens the image store of the data directory.
func (a *app) imageStore(ctx context.Context) (*image.Store, func() error, error) {
	st, err := store.Open(ctx, a.dataDir)
	if err != nil {
		return nil, nil, err
	}
	s, err := image.Open(ctx, a.dataDir, st)
	if err != nil {
		st.Close()
		return nil, nil, err
	}
	return s, st.Close, nil
}

func (a *app) imageImportCmd() *cobra.Command {
	var ref string
	var jsonOut bool
	c := &cobra.Command{
		Use:   "import PATH",
		Short: "Store an image from an OCI layout directory or a docker-save tarball",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			s, done, err := a.imageStore(ctx)
			if err != nil {
				return err
			}
			defer done()
			progress, finish := a.imageProgress(jsonOut)
			img, err := s.Import(ctx, args[0], ref, progress)
			finish()
			if err != nil {
				return imageError(err)
			}
			return a.imageStored("Imported", img, jsonOut)
		},
	}
	c.Flags().StringVar(&ref, "name", "", "name to store the image under (default: the archive's own tags)")
	c.Flags().BoolVar(&jsonOut, "json", false, "print progress events and the image as JSON lines")
	return c
}

func (a *app) imagePullCmd() *cobra.Command {
	var opts image.PullOptions
	var jsonOut bool
	c := &cobra.Command{
		Use:   "pull REF",
		Short: "Download an image from a registry",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			s, done, err := a.imageStore(ctx)
			if err != nil {
				return err
			}
			defer done()
			var finish func()
			opts.Progress, finish = a.imageProgress(jsonOut)
			img, err := s.Pull(ctx, args[0], opts)
			finish()
			if err != nil {
				return imageError(err)
			}
			return a.imageStored("Pulled", img, jsonOut)
		},
	}
	c.Flags().BoolVar(&opts.Insecure, "insecure", false, "allow plain HTTP to the registry")
	c.Flags().StringVar(&opts.Platform, "platform", "", "os/arch of the image to pull (default: linux on this machine's architecture)")
	c.Flags().BoolVar(&jsonOut, "json", false, "print progress events and the image as JSON lines")
	return c
}

// imageStored reports a stored image.
func (a *app) imageStored(verb string, img *sandbox.Image, jsonOut bool) error {
	if jsonOut {
		return json.NewEncoder(a.stdout).Encode(map[string]any{"image": img})
	}
	_, err := fmt.Fprintf(a.stdout, "%s %s %s\n", verb, strings.Join(img.Refs, ", "), img.ID)
	return err
}

func (a *app) imageLsCmd() *cobra.Command {
	var jsonOut bool
	c := &cobra.Command{
		Use:   "ls",
		Short: "List stored images",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			s, done, err := a.imageStore(ctx)
			if err != nil {
				return err
			}
			defer done()
			imgs, err := s.List(ctx)
			if err != nil {
				return err
			}
			if jsonOut {
				return a.imageJSON(imgs)
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "REF\tID\tSIZE\tCREATED\tSOURCE")
			for _, img := range imgs {
				refs := img.Refs
				if len(refs) == 0 {
					refs = []string{"<none>"}
				}
				for _, r := range refs {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r, imageShortID(img.ID), imageBytes(img.Size),
						img.Created.Local().Format(time.DateTime), img.Source)
				}
			}
			return tw.Flush()
		},
	}
	c.Flags().BoolVar(&jsonOut, "json", false, "print the images as a JSON array")
	return c
}

func (a *app) imageRmCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "rm REF...",
		Short: "Untag images, deleting those left without a name and the layers no other image uses",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			s, done, err := a.imageStore(ctx)
			if err != nil {
				return err
			}
			defer done()
			var last error
			for _, ref := range args {
				if err := s.Remove(ctx, ref, a.imageInUse(ctx)); err != nil {
					if last != nil {
						fmt.Fprintln(a.stderr, "smolvm:", last)
					}
					last = imageError(err)
					continue
				}
				fmt.Fprintln(a.stdout, "Removed", ref)
			}
			return last
		},
	}
}

func (a *app) imageInspectCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "inspect REF",
		Short: "Print an image and its root filesystem as JSON",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			s, done, err := a.imageStore(ctx)
			if err != nil {
				return err
			}
			defer done()
			img, err := s.Get(ctx, args[0])
			if err != nil {
				return imageError(err)
			}
			return a.imageJSON(struct {
				*sandbox.Image
				Rootfs image.Rootfs `json:"rootfs"`
			}{img, s.Rootfs(img)})
		},
	}
}

func (a *app) imageJSON(v any) error {
	enc := json.NewEncoder(a.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// imageError keeps an error on one line: registry errors can span several.
func imageError(err error) error {
	msg := strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " ")
	return &exitError{code: exitFailure, err: fmt.Errorf("%s", msg)}
}

// imageProgress returns the progress callback for an import or pull and a
// function to call when it ends: JSON events on stdout with --json, live
// per-layer lines when stderr is a terminal, nothing otherwise.
func (a *app) imageProgress(jsonOut bool) (func(image.Progress), func()) {
	if jsonOut {
		enc := json.NewEncoder(a.stdout)
		return func(p image.Progress) { enc.Encode(map[string]any{"progress": p}) }, func() {}
	}
	if !isTerminal(a.stderr) {
		return nil, func() {}
	}
	r := &imageProgressLines{w: a.stderr, state: map[string]image.Progress{}}
	return r.update, r.finish
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// imageProgressLines redraws one line per layer in place.
type imageProgressLines struct {
	w     io.Writer
	order []string
	state map[string]image.Progress
	drawn int // lines on screen; the cursor is at the end of the last
}

func (r *imageProgressLines) update(p image.Progress) {
	if _, ok := r.state[p.Layer]; !ok {
		r.order = append(r.order, p.Layer)
	}
	r.state[p.Layer] = p
	var b strings.Builder
	if r.drawn > 1 {
		fmt.Fprintf(&b, "\x1b[%dA", r.drawn-1)
	}
	for i, l := range r.order {
		if i > 0 {
			b.WriteString("\n")
		}
		p := r.state[l]
		size := imageBytes(p.Done)
		if p.Total > 0 {
			size += " / " + imageBytes(p.Total)
		}
		fmt.Fprintf(&b, "\r\x1b[2K%s  %-11s %s", imageShortID(l), p.Status, size)
	}
	r.drawn = len(r.order)
	io.WriteString(r.w, b.String())
}

func (r *imageProgressLines) finish() {
	if r.drawn > 0 {
		io.WriteString(r.w, "\n")
	}
}

func imageShortID(id string) string {
	h := strings.TrimPrefix(id, "sha256:")
	if len(h) > 12 {
		h = h[:12]
	}
	return h
}

// imageBytes formats a byte count with a binary unit.
func imageBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
