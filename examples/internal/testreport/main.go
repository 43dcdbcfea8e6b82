// Command testreport runs go test -json and reports on it as make test
// wants it (.ci/gotest runs it): one line per package as the package
// finishes ("ok  PKG 12.3s", "FAIL PKG 12.3s"), the whole output of each
// failing test as its package fails, and a last line for the part: its
// label, packages and tests, and how long it took. Every test's output is
// also written to a file (-log), as go test -v would print it.
//
//	testreport [-label LABEL] [-log FILE] [-counts FILE] [-v] go test -json [arguments]
//
// Tests are counted at the top level: a test function, example or fuzz
// target, whatever its subtests; a failing subtest fails its parent, which
// counts once. A package that fails with no failing test (it does not
// build, or its binary dies outside a test) counts as one failed test, as
// does each test its binary never finished, and a go test that fails
// without a package failing. With -counts, the part's counts are added to
// that file as a line "PASSED FAILED SKIPPED", for the last line of
// make test. With -v everything is printed as it comes. It exits with go
// test's status.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"time"
)

func main() {
	label := flag.String("label", "go test", "the part's name, at the start of its last line")
	logPath := flag.String("log", "", "write every test's output to this `file`")
	counts := flag.String("counts", "", "add the part's counts to this `file`, a line \"PASSED FAILED SKIPPED\"")
	verbose := flag.Bool("v", false, "print all output as it comes")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: testreport [flags] go test -json [arguments]")
		os.Exit(2)
	}
	var log io.Writer = io.Discard
	if *logPath != "" {
		f, err := os.Create(*logPath)
		if err != nil {
			fmt.Fprintln(os.Stderr, "testreport:", err)
			os.Exit(2)
		}
		defer f.Close()
		log = f
	}
	start := time.Now()
	r := newReport(os.Stdout, log, *verbose)
	code, err := r.run(flag.Args())
	if err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(2)
	}
	fmt.Fprintln(os.Stdout, r.summary(*label, code, time.Since(start), *logPath))
	if *counts != "" {
		if err := appendCounts(*counts, r.passed, r.failed, r.skipped); err != nil {
			fmt.Fprintln(os.Stderr, "testreport:", err)
			os.Exit(2)
		}
	}
	os.Exit(code)
}

func appendCounts(path string, passed, failed, skipped int) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(f, "%d %d %d\n", passed, failed, skipped); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// event is one line of go test -json (see go doc test2json).
type event struct {
	Action      string
	Package     string
	Test        string
	Elapsed     float64
	Output      string
	ImportPath  string // build-output and build-fail
	FailedBuild string // a package's fail: the build that failed
}

// line is a line of a package's output and the test it belongs to ("":
// the package's own).
type line struct {
	test, text string
}

// pkg is what is known of a package that has not finished.
type pkg struct {
	output []line
	ended  map[string]string // top-level test: pass, fail or skip; "" while it runs
}

type report struct {
	out, log io.Writer
	verbose  bool

	pkgs   map[string]*pkg
	builds map[string]*strings.Builder // build output by ImportPath

	passed, failed, skipped int // top-level tests
	okPkgs, failedPkgs      int
	noTests                 int // packages without test files
	fuzzExecs               string
	stderr                  bytes.Buffer // go test's own standard error
}

func newReport(out, log io.Writer, verbose bool) *report {
	return &report{out: out, log: log, verbose: verbose, pkgs: map[string]*pkg{}, builds: map[string]*strings.Builder{}}
}

// run runs the command (go test -json ...), reporting on its output as it
// comes, and returns its exit status.
func (r *report) run(args []string) (int, error) {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stderr = io.MultiWriter(&r.stderr, r.log)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	if err := r.read(stdout); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return 0, err
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &exit):
		r.exited(exit.ExitCode())
		return exit.ExitCode(), nil
	default:
		return 0, err
	}
}

// read reads go test -json's output to its end.
func (r *report) read(in io.Reader) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var e event
		if b := sc.Bytes(); len(b) == 0 || b[0] != '{' || json.Unmarshal(b, &e) != nil {
			// Not an event: the go command's own words.
			r.text(sc.Text() + "\n")
			continue
		}
		r.event(e)
	}
	return sc.Err()
}

// text is output outside any package.
func (r *report) text(s string) {
	_, _ = io.WriteString(r.log, s)
	if r.verbose {
		_, _ = io.WriteString(r.out, s)
	} else {
		r.stderr.WriteString(s)
	}
}

var fuzzExecs = regexp.MustCompile(`^fuzz: elapsed: .*execs: ([0-9]+)`)

func (r *report) event(e event) {
	switch e.Action {
	case "build-output":
		b := r.builds[e.ImportPath]
		if b == nil {
			b = new(strings.Builder)
			r.builds[e.ImportPath] = b
		}
		b.WriteString(e.Output)
		_, _ = io.WriteString(r.log, e.Output)
		if r.verbose {
			_, _ = io.WriteString(r.out, e.Output)
		}
		return
	case "build-fail":
		return
	}
	p := r.pkgs[e.Package]
	if p == nil {
		p = &pkg{ended: map[string]string{}}
		r.pkgs[e.Package] = p
	}
	top, _, sub := strings.Cut(e.Test, "/")
	switch e.Action {
	case "run":
		if e.Test != "" && !sub {
			if _, ok := p.ended[top]; !ok {
				p.ended[top] = ""
			}
		}
	case "output":
		p.output = append(p.output, line{top, e.Output})
		_, _ = io.WriteString(r.log, e.Output)
		if r.verbose {
			_, _ = io.WriteString(r.out, e.Output)
		}
		if m := fuzzExecs.FindStringSubmatch(e.Output); m != nil {
			r.fuzzExecs = m[1]
		}
	case "pass", "fail", "skip":
		switch {
		case e.Test != "" && !sub:
			p.ended[top] = e.Action
			switch e.Action {
			case "pass":
				r.passed++
			case "fail":
				r.failed++
			case "skip":
				r.skipped++
			}
		case e.Test == "":
			r.finished(e, p)
		}
	}
}

// finished reports a package that has finished.
func (r *report) finished(e event, p *pkg) {
	delete(r.pkgs, e.Package)
	switch e.Action {
	case "skip":
		r.noTests++
		return
	case "pass":
		r.okPkgs++
		fmt.Fprintf(r.out, "ok   %s %.1fs\n", e.Package, e.Elapsed)
		return
	}
	r.failedPkgs++
	// Tests the binary never finished failed, and a package that failed
	// with no failing test counts as one.
	failing := map[string]bool{}
	for t, action := range p.ended {
		if action == "" {
			r.failed++
		}
		if action == "" || action == "fail" {
			failing[t] = true
		}
	}
	if len(failing) == 0 {
		r.failed++
	}
	if !r.verbose {
		if b := r.builds[e.FailedBuild]; e.FailedBuild != "" && b != nil {
			_, _ = io.WriteString(r.out, b.String())
		}
		for _, l := range p.output {
			if l.test == "" || failing[l.test] {
				_, _ = io.WriteString(r.out, l.text)
			}
		}
	}
	fmt.Fprintf(r.out, "FAIL %s %.1fs\n", e.Package, e.Elapsed)
}

// exited is told go test's exit status, when it is not 0: packages that
// never finished failed, and so did go test itself if no package did.
func (r *report) exited(code int) {
	for name, p := range r.pkgs {
		r.finished(event{Action: "fail", Package: name}, p)
	}
	if !r.verbose {
		_, _ = r.out.Write(r.stderr.Bytes())
	}
	if r.failed == 0 {
		r.failed++
	}
}

// summary is the part's last line.
func (r *report) summary(label string, code int, took time.Duration, logPath string) string {
	s := int(took.Round(time.Second).Seconds())
	d := fmt.Sprintf("%dm%ds", s/60, s%60)
	if code != 0 {
		where := ""
		if logPath != "" {
			where = "; all of it is in " + logPath
		}
		return fmt.Sprintf("%s: FAIL, %d failed, %d passed (go test exit %d, %s; the output above says which test and why%s)",
			label, r.failed, r.passed, code, d, where)
	}
	if r.fuzzExecs != "" {
		return fmt.Sprintf("%s: ok, %s inputs, no failure, in %s", label, r.fuzzExecs, d)
	}
	skipped := ""
	if r.skipped > 0 {
		skipped = fmt.Sprintf(" (%d skipped)", r.skipped)
	}
	return fmt.Sprintf("%s: ok, %d packages passed (%d without tests), %d tests passed%s, in %s",
		label, r.okPkgs, r.noTests, r.passed, skipped, d)
}
