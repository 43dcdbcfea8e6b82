package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// module writes a module of its own named m with files (path: contents)
// and returns its directory.
func module(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	files["go.mod"] = "module m\n\ngo 1.25\n"
	for name, text := range files {
		path := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(text), 0o644))
	}
	return dir
}

// goTest runs go test -json with args in dir through a report and returns
// what it printed, its last line and go test's exit status.
func goTest(t *testing.T, dir string, verbose bool, args ...string) (*report, string, string, int) {
	t.Helper()
	t.Setenv("GOWORK", "off")
	t.Setenv("GOFLAGS", "")
	var out, log bytes.Buffer
	r := newReport(&out, &log, verbose)
	code, err := r.run(append([]string{"go", "-C", dir, "test", "-json", "-count=1"}, args...))
	require.NoError(t, err)
	last := r.summary("part", code, 83*time.Second, "LOG")
	if code == 0 {
		assert.Contains(t, log.String(), "--- PASS", "the log has every test's output")
	}
	return r, out.String(), last, code
}

const (
	passing = `package pass

import "testing"

func TestA(t *testing.T) { t.Log("a's own words") }

func TestSkipped(t *testing.T) { t.Skip("not here") }

func TestTable(t *testing.T) {
	for _, name := range []string{"one", "two"} {
		t.Run(name, func(t *testing.T) {})
	}
}
`
	failing = `package fail

import "testing"

func TestPasses(t *testing.T) { t.Log("the passing test's words") }

func TestFails(t *testing.T) {
	t.Log("before the subtests")
	t.Run("fine", func(t *testing.T) {})
	t.Run("broken", func(t *testing.T) { t.Errorf("invariant broken: %d != %d", 1, 2) })
}
`
	dies = `package dies

import "testing"

func TestFirst(t *testing.T) {}

func TestDies(t *testing.T) { panic("the binary dies") }
`
	broken = `package broken

import "testing"

func TestX(t *testing.T) { undefinedFunction() }
`
)

// TestPasses: a passing part prints one line per package with tests as it
// finishes, none of the tests' own output, and a last line with the
// counts; tests count at the top level.
func TestPasses(t *testing.T) {
	dir := module(t, map[string]string{"pass/pass_test.go": passing, "notests/notests.go": "package notests\n"})
	r, out, last, code := goTest(t, dir, false, "./...")
	require.Equal(t, 0, code, out)
	assert.Regexp(t, `^ok   m/pass [0-9]+\.[0-9]s\n$`, out, "one line, for the package with tests")
	assert.Equal(t, "part: ok, 1 packages passed (1 without tests), 2 tests passed (1 skipped), in 1m23s", last)
	assert.Equal(t, [3]int{2, 0, 1}, [3]int{r.passed, r.failed, r.skipped}, "TestA and TestTable passed, its two subtests not counted")

	_, out, _, _ = goTest(t, dir, true, "./...")
	assert.Contains(t, out, "a's own words", "-v prints everything")
	assert.Contains(t, out, "=== RUN   TestTable/two")
}

// TestFailures: a failing test's whole output is printed (its subtests',
// and the package's own lines), not the passing tests'; a binary that
// dies fails the test it was running; a package that does not build
// counts as one failed test.
func TestFailures(t *testing.T) {
	dir := module(t, map[string]string{
		"pass/pass_test.go": passing, "fail/fail_test.go": failing,
		"dies/dies_test.go": dies, "broken/broken_test.go": broken,
	})
	r, out, last, code := goTest(t, dir, false, "./...")
	require.Equal(t, 1, code, out)

	assert.Regexp(t, `(?m)^ok   m/pass [0-9.]+s$`, out)
	for _, p := range []string{"fail", "dies", "broken"} {
		assert.Regexp(t, `(?m)^FAIL m/`+p+` [0-9.]+s$`, out)
	}
	fails := regexp.MustCompile(`(?s)=== RUN   TestFails\n.*before the subtests.*=== RUN   TestFails/fine.*=== RUN   TestFails/broken.*invariant broken: 1 != 2.*--- FAIL: TestFails/broken.*--- FAIL: TestFails `)
	assert.Regexp(t, fails, out, "the failing test's whole output, in order")
	assert.Contains(t, out, "the binary dies")
	assert.Contains(t, out, "undefined: undefinedFunction", "the build's errors")
	assert.NotContains(t, out, "the passing test's words")
	assert.NotContains(t, out, "a's own words")
	assert.NotContains(t, out, "=== RUN   TestPasses")

	// pass: TestA, TestTable; fail: TestPasses; dies: TestFirst. Failed:
	// TestFails, TestDies, broken.
	assert.Equal(t, [3]int{4, 3, 1}, [3]int{r.passed, r.failed, r.skipped}, out)
	assert.Equal(t, "part: FAIL, 3 failed, 4 passed (go test exit 1, 1m23s; the output above says which test and why; all of it is in LOG)", last)
}

// TestGoFails: go test failing before any package (a bad flag) counts as
// one failed test and prints what go said.
func TestGoFails(t *testing.T) {
	dir := module(t, map[string]string{"pass/pass_test.go": passing})
	r, out, last, code := goTest(t, dir, false, "-timeout=soon", "./...")
	require.NotEqual(t, 0, code)
	assert.Contains(t, out, `invalid value "soon" for flag -timeout`)
	assert.Equal(t, 1, r.failed)
	assert.True(t, strings.HasPrefix(last, "part: FAIL, 1 failed, 0 passed (go test exit "), last)
}

// TestFuzz: a fuzzing part's last line says how many inputs it tried.
func TestFuzz(t *testing.T) {
	dir := module(t, map[string]string{"f/f_test.go": `package f

import "testing"

func FuzzF(f *testing.F) {
	f.Add(1)
	f.Fuzz(func(t *testing.T, n int) {})
}
`})
	r, out, last, code := goTest(t, dir, false, "-run", "^$", "-fuzz", "^FuzzF$", "-fuzztime", "50x", "-parallel", "1", "./f")
	require.Equal(t, 0, code, out)
	assert.Equal(t, "part: ok, 50 inputs, no failure, in 1m23s", last)
	assert.Equal(t, 1, r.passed, "the fuzz target counts as a test")
}

// TestCounts: -counts adds a line per part.
func TestCounts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "counts")
	require.NoError(t, appendCounts(path, 3, 1, 0))
	require.NoError(t, appendCounts(path, 5, 0, 2))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, "3 1 0\n5 0 2\n", string(b))
}
