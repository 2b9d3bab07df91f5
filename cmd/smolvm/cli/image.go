package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"smolvm.dev/smolvm/runtime/build"
	"smolvm.dev/smolvm/runtime/image"
	"smolvm.dev/smolvm/runtime/manager"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/workflow/browser"
)

func (a *app) imageCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "image",
		Short: "Manage the images sandboxes run (build, import, pull, ls, rm, inspect, save, prune)",
	}
	c.AddCommand(a.imageBuildCmd(), a.imageImportCmd(), a.imagePullCmd(), a.imageLsCmd(), a.imageRmCmd(), a.imageInspectCmd(), a.imageSaveCmd(), a.imagePruneCmd())
	return c
}

// recipes are the images smolvm knows how to build, by name.
func recipes() map[string]sandbox.Recipe {
	return map[string]sandbox.Recipe{image.BaseName: image.BaseRecipe(), browser.ImageName: browser.ImageRecipe()}
}

// recipeNames lists the recipes for help and errors.
func recipeNames() string {
	return strings.Join(slices.Sorted(maps.Keys(recipes())), ", ")
}

func (a *app) imageBuildCmd() *cobra.Command {
	var jsonOut bool
	var cache string
	c := a.withSession(&cobra.Command{
		Use:   "build RECIPE",
		Short: "Build an image from one of smolvm's recipes (base: Debian with python3, node, git, curl; browser: Debian's chromium) with mmdebstrap, once",
		Long: "Build an image from a recipe with mmdebstrap (root, apt access) and store it under the recipe's name. " +
			"An image of the same recipe already stored is kept and printed. Recipes: " + recipeNames() + ". " +
			"Once base is stored, sandboxes that name no image run it instead of the builtin host image.",
		Args: cobra.ExactArgs(1),
	}, func(s *session, args []string) error {
		r, ok := recipes()[args[0]]
		if !ok {
			return imageError(fmt.Errorf("%w: no recipe %q (recipes: %s)", sandbox.ErrInvalid, args[0], recipeNames()))
		}
		return a.storeImage(s, "Built", jsonOut, func(images *image.Store, progress func(image.Progress)) (*sandbox.Image, error) {
			img, _, err := images.Build(s.ctx, r, image.BuildOptions{Progress: progress, Cache: cache})
			return img, err
		})
	})
	c.Flags().BoolVar(&jsonOut, "json", false, "print progress events and the image as JSON lines")
	c.Flags().StringVar(&cache, "cache", "", "keep the root filesystem tarball in this directory by recipe digest, so that the same recipe builds into other data dirs without mmdebstrap")
	return c
}

func (a *app) imageImportCmd() *cobra.Command {
	var ref string
	var jsonOut bool
	c := a.withSession(&cobra.Command{
		Use:   "import PATH",
		Short: "Store an image from an OCI layout directory or a docker-save tarball",
		Args:  cobra.ExactArgs(1),
	}, func(s *session, args []string) error {
		return a.storeImage(s, "Imported", jsonOut, func(images *image.Store, progress func(image.Progress)) (*sandbox.Image, error) {
			return images.Import(s.ctx, args[0], ref, progress)
		})
	})
	c.Flags().StringVar(&ref, "name", "", "name to store the image under (default: the archive's own tags)")
	c.Flags().BoolVar(&jsonOut, "json", false, "print progress events and the image as JSON lines")
	return c
}

func (a *app) imagePullCmd() *cobra.Command {
	var opts image.PullOptions
	var jsonOut bool
	c := a.withSession(&cobra.Command{
		Use:   "pull REF",
		Short: "Download an image from a registry",
		Args:  cobra.ExactArgs(1),
	}, func(s *session, args []string) error {
		return a.storeImage(s, "Pulled", jsonOut, func(images *image.Store, progress func(image.Progress)) (*sandbox.Image, error) {
			opts.Progress = progress
			return images.Pull(s.ctx, args[0], opts)
		})
	})
	c.Flags().BoolVar(&opts.Insecure, "insecure", false, "allow plain HTTP to the registry")
	c.Flags().StringVar(&opts.Platform, "platform", "", "os/arch of the image to pull (default: linux on this machine's architecture)")
	c.Flags().BoolVar(&jsonOut, "json", false, "print progress events and the image as JSON lines")
	return c
}

// storeImage stores an image with store, reporting its progress, and
// then the image (verb: what was done).
func (a *app) storeImage(s *session, verb string, jsonOut bool, store func(*image.Store, func(image.Progress)) (*sandbox.Image, error)) error {
	images, err := s.images()
	if err != nil {
		return err
	}
	progress, finish := a.imageProgress(jsonOut)
	img, err := store(images, progress)
	finish()
	if err != nil {
		return imageError(err)
	}
	if jsonOut {
		return json.NewEncoder(a.stdout).Encode(map[string]any{"image": img})
	}
	_, err = fmt.Fprintf(a.stdout, "%s %s %s\n", verb, strings.Join(img.Refs, ", "), img.ID)
	return err
}

func (a *app) imageLsCmd() *cobra.Command {
	var all bool
	c := command(a, &cobra.Command{
		Use:   "ls",
		Short: "List stored images",
		Args:  cobra.NoArgs,
	}, "print the images as a JSON array", func(w io.Writer, imgs []sandbox.Image) error {
		return table(w, "REF\tID\tSIZE\tCREATED\tSOURCE", func(tw io.Writer) {
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
		})
	}, on((*session).images, func(s *session, images *image.Store, _ []string) ([]sandbox.Image, error) {
		imgs, err := images.List(s.ctx)
		if all || err != nil {
			return imgs, err
		}
		return slices.DeleteFunc(imgs, build.Cache), nil
	}))
	c.Flags().BoolVarP(&all, "all", "a", false, "also list the untagged images of cached build steps")
	return c
}

func (a *app) imageRmCmd() *cobra.Command {
	return removeCmd(a, &cobra.Command{
		Use:   "rm REF...",
		Short: "Untag images, deleting those left without a name and the layers no other image uses",
	}, (*session).images, func(images *image.Store, ctx context.Context, ref string, inUse func(string) (bool, error)) error {
		if err := images.Remove(ctx, ref, inUse); err != nil {
			return imageError(err)
		}
		return nil
	}, manager.ImageInUse)
}

// imageView is an image as inspect shows it.
type imageView struct {
	*sandbox.Image
	Rootfs image.Rootfs `json:"rootfs"`
}

func (a *app) imageInspectCmd() *cobra.Command {
	return command(a, &cobra.Command{
		Use:   "inspect REF",
		Short: "Print an image and its root filesystem as JSON",
		Args:  cobra.ExactArgs(1),
	}, "", printJSON, on((*session).images, func(s *session, images *image.Store, args []string) (imageView, error) {
		img, err := images.Get(s.ctx, args[0])
		if err != nil {
			return imageView{}, imageError(err)
		}
		return imageView{img, images.Rootfs(img)}, nil
	}))
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
