package cli

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/workflow/browser"
)

func (a *app) browserCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "browser",
		Short: "Headless Chromium sandboxes: a golden browser, forked per run",
		Long: "Headless Chromium sandboxes. start boots Chromium once and checkpoints it as the golden;\n" +
			"new restores a fresh browser from it (no cookies, storage, cache or history from any other run)\n" +
			"and prints its CDP WebSocket URL; screenshot does fork, page, PNG and cleanup in one command.",
	}
	cmd.AddCommand(a.browserStartCmd(), a.browserNewCmd(), a.browserRmCmd(), a.browserScreenshotCmd())
	return cmd
}

// portDialer dials published ports where the network host binds them;
// through a server (--host), directly.
func (s *session) portDialer() browser.Dialer {
	if s.host != "" || s.env == nil {
		return nil
	}
	return s.env.mgr.DialPublished
}

func (a *app) browserStartCmd() *cobra.Command {
	var (
		o       browser.StartOptions
		net     netFlags
		limits  limitFlags
		timeout time.Duration
		pool    int
	)
	cmd := command(a, &cobra.Command{
		Use:   "start [--golden NAME] [--pool N] [--net egress|full] [--allow-host H]... [--allow-cidr C]...",
		Short: "Boot headless Chromium in a sandbox and checkpoint it as the golden browser",
		Long: "Boot headless Chromium in a sandbox, wait until its DevTools endpoint answers, and checkpoint it\n" +
			"as the golden browser (a snapshot named --golden), which browser new and screenshot restore.\n" +
			"Browsers may reach what --allow-host and --allow-cidr allow (--net egress, the default).\n" +
			"--pool N keeps N browsers restored from the golden ahead of time (a hot pool named after the\n" +
			"golden, filled in the background), which browser new and screenshot claim.\n" +
			"The host image needs Debian's chromium installed on the host. Prints the snapshot ID.",
		Args: cobra.NoArgs,
	}, "print the snapshot's record as JSON", printLine(func(snap *sandbox.Snapshot) string { return snap.ID }),
		on((*session).sandboxes, func(s *session, ops sandbox.Service, args []string) (*sandbox.Snapshot, error) {
			l, err := limits.limits(s.cmd.Flags())
			if err != nil {
				return nil, err
			}
			if pool < 0 || pool > sandbox.MaxPoolSize {
				return nil, fmt.Errorf("--pool %d: 0 to %d", pool, sandbox.MaxPoolSize)
			}
			o.Limits, o.Network, o.Timeout, o.Dial = l, net.policy(), timeout, s.portDialer()
			snap, err := browser.Start(s.ctx, ops, o)
			if err != nil || pool == 0 {
				return snap, err
			}
			if _, err := a.createPool(s, sandbox.PoolOptions{Name: snap.Name, From: snap.ID, Hot: pool}, false); err != nil {
				return nil, fmt.Errorf("golden %s saved, but its pool: %w", snap.ID, err)
			}
			return snap, nil
		}))
	fs := cmd.Flags()
	fs.StringVar(&o.Golden, "golden", browser.DefaultGolden, "name of the golden browser's snapshot")
	fs.StringVar(&o.Image, "image", "", "image with chromium at "+browser.Chromium+" (default: host)")
	net.register(fs)
	fs.Lookup("net").DefValue, net.mode = string(sandbox.NetEgress), string(sandbox.NetEgress)
	limits.register(fs)
	fs.DurationVar(&timeout, "timeout", browser.DefaultBootTimeout, "how long to wait for Chromium's DevTools endpoint")
	fs.IntVar(&pool, "pool", 0, fmt.Sprintf("browsers to keep restored ahead in a hot pool named after the golden (0 to %d)", sandbox.MaxPoolSize))
	return cmd
}

func (a *app) browserNewCmd() *cobra.Command {
	var (
		o   browser.NewOptions
		net netFlags
	)
	cmd := command(a, &cobra.Command{
		Use:   "new [--golden NAME] [--name NAME] [--ttl D] [--allow-host H]...",
		Short: "Start a fresh browser from the golden and print its CDP WebSocket URL",
		Long: "Restore a fresh browser from the golden and print its CDP WebSocket URL once it answers, for\n" +
			"Playwright's connectOverCDP, Puppeteer's connect or chrome-remote-interface. It ends after --ttl,\n" +
			"or at smolvm browser rm. --allow-host/--allow-cidr replace the golden's allow-list for this one.",
		Args: cobra.NoArgs,
	}, "print the browser (id, name, cdp_url, http_url, expires_at) as JSON", printLine(func(b *browser.Browser) string { return b.CDP }),
		on((*session).sandboxes, func(s *session, ops sandbox.Service, args []string) (*browser.Browser, error) {
			if f := s.cmd.Flags(); f.Changed("net") || f.Changed("allow-host") || f.Changed("allow-cidr") {
				p := net.policy()
				if !f.Changed("net") {
					p.Mode = sandbox.NetEgress
				}
				o.Network = &p
			}
			o.Dial = s.portDialer()
			return browser.New(s.ctx, ops, o)
		}))
	fs := cmd.Flags()
	fs.StringVar(&o.Golden, "golden", browser.DefaultGolden, "the golden browser's snapshot")
	fs.StringVar(&o.Name, "name", "", "the browser sandbox's name (default sb-<id>)")
	fs.DurationVar(&o.TTL, "ttl", browser.DefaultTTL, "how long the browser lives unless removed first")
	net.register(fs)
	// A browser needs a network: without --net it keeps the golden's.
	f := fs.Lookup("net")
	f.DefValue, f.Usage = "", "network: egress (allowed hosts and CIDRs only) or full; default: the golden's policy, or egress with --allow-host/--allow-cidr alone"
	return cmd
}

func (a *app) browserRmCmd() *cobra.Command {
	return removeCmd(a, &cobra.Command{Use: "rm BROWSER...", Short: "Remove browsers (release them)"}, (*session).sandboxes,
		func(ops sandbox.Service, ctx context.Context, ref string, _ func(string) (bool, error)) error {
			return browser.Release(ctx, ops, ref)
		}, nil)
}

func (a *app) browserScreenshotCmd() *cobra.Command {
	var (
		o               browser.ScreenshotOptions
		golden, out, vp string
	)
	cmd := a.withSession(&cobra.Command{
		Use:   "screenshot URL -o FILE [--full-page] [--viewport WxH]",
		Short: "Take a PNG screenshot of a page in a fresh browser, removed afterwards",
		Args:  cobra.ExactArgs(1),
	}, func(s *session, args []string) error {
		if out == "" {
			return fmt.Errorf("%w: -o FILE is required", sandbox.ErrInvalid)
		}
		if vp != "" {
			w, h, err := parseViewport(vp)
			if err != nil {
				return err
			}
			o.Width, o.Height = w, h
		}
		ops, err := s.sandboxes()
		if err != nil {
			return err
		}
		o.URL, o.Dial = args[0], s.portDialer()
		png, err := browser.Capture(s.ctx, ops, golden, o)
		if err != nil {
			return err
		}
		if out == "-" {
			_, err = s.stdout.Write(png)
			return err
		}
		return os.WriteFile(out, png, 0o644)
	})
	fs := cmd.Flags()
	fs.StringVarP(&out, "output", "o", "", "PNG file to write (- for stdout)")
	fs.BoolVar(&o.FullPage, "full-page", false, "capture the whole page, not only the viewport")
	fs.StringVar(&vp, "viewport", fmt.Sprintf("%dx%d", browser.DefaultWidth, browser.DefaultHeight), "viewport WIDTHxHEIGHT in CSS pixels")
	fs.StringVar(&golden, "golden", browser.DefaultGolden, "the golden browser's snapshot")
	fs.DurationVar(&o.Timeout, "timeout", 30*time.Second, "how long the page may take to load")
	return cmd
}

func parseViewport(s string) (int, int, error) {
	ws, hs, ok := strings.Cut(strings.ToLower(s), "x")
	w, werr := strconv.Atoi(ws)
	h, herr := strconv.Atoi(hs)
	if !ok || werr != nil || herr != nil {
		return 0, 0, fmt.Errorf("%w: --viewport %q: want WIDTHxHEIGHT, e.g. 1280x800", sandbox.ErrInvalid, s)
	}
	return w, h, nil
}
