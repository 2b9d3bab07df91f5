package cli

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"smolvm.dev/smolvm/runtime/build"
	"smolvm.dev/smolvm/runtime/image"
	"smolvm.dev/smolvm/sandbox"
)

// buildCmd is `smolvm build`: a Dockerfile built by runtime/build, with
// docker's flags.
func (a *app) buildCmd() *cobra.Command {
	var (
		file, target, progress, backend string
		tags, buildArgs                 []string
		noCache, insecure               bool
		net                             netFlags
	)
	c := a.withSession(&cobra.Command{
		Use:   "build [-f Dockerfile] [-t NAME]... [CONTEXT]",
		Short: "Build an image from a Dockerfile; each RUN runs in a sandbox",
		Long: `Build an image from a Dockerfile, as docker build does: each RUN runs in a
sandbox of the image so far (--net egress by default), each RUN, COPY, ADD and
WORKDIR becomes a layer, and steps are cached by their parent, their text and
their inputs. CONTEXT (default .) is what COPY and ADD read, less .dockerignore.`,
		Args: cobra.MaximumNArgs(1),
	}, func(s *session, args []string) error {
		o := build.Options{Context: ".", Tags: tags, Target: target, NoCache: noCache, Insecure: insecure, Backend: backend, Args: map[string]string{}}
		if len(args) == 1 {
			o.Context = args[0]
		}
		var err error
		if o.Dockerfile, o.Name, err = a.readDockerfile(file, o.Context); err != nil {
			return imageError(err)
		}
		for _, kv := range buildArgs {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				v, ok = os.LookupEnv(k) // docker takes a bare name from the environment
			}
			if ok {
				o.Args[k] = v
			}
		}
		if pol := net.policy(); pol.Enabled() {
			o.Network = &pol
		}
		switch progress {
		case "auto", "plain", "tty":
			o.Progress = a.stderr
		case "quiet":
		default:
			return imageError(fmt.Errorf("%w: --progress %s: want auto, plain or quiet", sandbox.ErrInvalid, progress))
		}
		e, err := s.runtime()
		if err != nil {
			return err
		}
		b, err := build.New(s.ctx, e.mgr, a.dataDir)
		if err != nil {
			return imageError(err)
		}
		img, err := b.Build(s.ctx, o)
		if err != nil {
			return imageError(err)
		}
		_, err = fmt.Fprintln(a.stdout, img.ID)
		return err
	})
	f := c.Flags()
	f.StringVarP(&file, "file", "f", "", "the Dockerfile (default CONTEXT/Dockerfile; - reads stdin)")
	f.StringArrayVarP(&tags, "tag", "t", nil, "name the image (repeatable)")
	f.StringArrayVar(&buildArgs, "build-arg", nil, "ARG value, NAME=VALUE or NAME from the environment (repeatable)")
	f.StringVar(&target, "target", "", "the stage to build (default: the last)")
	f.BoolVar(&noCache, "no-cache", false, "run every step, ignoring cached ones")
	f.StringVar(&progress, "progress", "auto", "progress output: auto, plain or quiet (the image ID only)")
	f.StringVar(&backend, "backend", "", "backend that runs RUN steps (default: the data dir's; vm cannot)")
	f.BoolVar(&insecure, "insecure", false, "allow plain HTTP when pulling base images")
	net.register(f)
	f.Lookup("net").DefValue, net.mode = "egress", "egress"
	return c
}

// readDockerfile reads -f (- is stdin), or CONTEXT/Dockerfile.
func (a *app) readDockerfile(file, context string) ([]byte, string, error) {
	switch file {
	case "-":
		b, err := io.ReadAll(a.stdin)
		return b, "Dockerfile", err
	case "":
		file = filepath.Join(context, "Dockerfile")
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %v", image.ErrNotFound, err)
	}
	return b, filepath.Base(file), nil
}

// imageSaveCmd is `smolvm image save`.
func (a *app) imageSaveCmd() *cobra.Command {
	var out, format string
	c := a.withSession(&cobra.Command{
		Use:   "save IMAGE -o FILE [--format oci|docker]",
		Short: "Write an image as an OCI archive or a docker-save tarball (skopeo, podman, docker load)",
		Args:  cobra.ExactArgs(1),
	}, func(s *session, args []string) error {
		images, err := s.images()
		if err != nil {
			return err
		}
		if out == "" || out == "-" {
			if err := images.Save(s.ctx, args[0], a.stdout, format); err != nil {
				return imageError(err)
			}
			return nil
		}
		f, err := os.Create(out)
		if err != nil {
			return imageError(err)
		}
		defer f.Close()
		if err := images.Save(s.ctx, args[0], f, format); err != nil {
			os.Remove(out) // nothing half-written stays
			return imageError(err)
		}
		return f.Close()
	})
	c.Flags().StringVarP(&out, "output", "o", "", "the file to write (default: stdout)")
	c.Flags().StringVar(&format, "format", image.FormatOCI, "oci (an OCI layout in a tar) or docker (docker save's)")
	return c
}

// imagePruneCmd is `smolvm image prune`: the build cache emptied.
func (a *app) imagePruneCmd() *cobra.Command {
	return a.withSession(&cobra.Command{
		Use:   "prune",
		Short: "Remove the build cache: cached build steps' untagged images and the layers only they use",
		Args:  cobra.NoArgs,
	}, func(s *session, _ []string) error {
		images, err := s.images()
		if err != nil {
			return err
		}
		st, err := s.store()
		if err != nil {
			return err
		}
		n, err := build.Prune(s.ctx, st, images)
		if err != nil {
			return imageError(err)
		}
		_, err = fmt.Fprintf(a.stdout, "Removed %d cached build step images\n", n)
		return err
	})
}
