package build

import (
	"bytes"
	"fmt"
	"io"
	"sync"
	"time"
)

// progress prints docker's plain progress: a number per step, its output
// lines with the seconds since it began, and DONE, CACHED or ERROR.
type progress struct {
	w  io.Writer
	mu sync.Mutex
	n  int
}

func newProgress(w io.Writer) *progress { return &progress{w: w} }

// begin numbers a step and prints its title.
func (p *progress) begin(title string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n++
	p.printf("#%d %s\n", p.n, title)
	return p.n
}

func (p *progress) logf(n int, format string, args ...any) {
	p.printf("#%d %s\n", n, fmt.Sprintf(format, args...))
}

func (p *progress) cached(n int) { p.printf("#%d CACHED\n", n) }

func (p *progress) done(n int, start time.Time) {
	p.printf("#%d DONE %.1fs\n", n, time.Since(start).Seconds())
}

func (p *progress) failed(n int, err error) { p.printf("#%d ERROR: %v\n", n, err) }

func (p *progress) printf(format string, args ...any) {
	if p.w != nil {
		fmt.Fprintf(p.w, format, args...)
	}
}

// output is a step's output: each line goes to progress with its time,
// and the whole is kept for the error a failure reports.
type output struct {
	p     *progress
	n     int
	start time.Time
	mu    sync.Mutex
	part  []byte
	all   bytes.Buffer
}

func (o *output) Write(b []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.all.Len() < 1<<20 {
		o.all.Write(b)
	}
	o.part = append(o.part, b...)
	for {
		i := bytes.IndexByte(o.part, '\n')
		if i < 0 {
			break
		}
		o.line(o.part[:i])
		o.part = o.part[i+1:]
	}
	return len(b), nil
}

func (o *output) line(b []byte) {
	o.p.printf("#%d %.3f %s\n", o.n, time.Since(o.start).Seconds(), b)
}

// flush prints a last line that had no newline.
func (o *output) flush() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.part) > 0 {
		o.line(o.part)
		o.part = nil
	}
}
