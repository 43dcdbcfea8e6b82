package main

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReadmeListsEveryCommand: the README's table of the tool's commands
// has a row for every command the tool has, and installs the tool from a
// clone (nothing is published for go install ...@latest to find).
func TestReadmeListsEveryCommand(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	readme := string(b)
	start := strings.Index(readme, "## Operating it: the twopc tool")
	require.GreaterOrEqual(t, start, 0, "README has the tool's section")
	section := readme[start:]
	if end := strings.Index(section[1:], "\n## "); end >= 0 {
		section = section[:end+1]
	}
	var rows []string
	for _, line := range strings.Split(section, "\n") {
		if strings.HasPrefix(line, "| `") {
			first, _, _ := strings.Cut(strings.TrimPrefix(line, "| "), " |")
			rows = append(rows, first)
		}
	}
	for _, c := range commands {
		name := regexp.MustCompile("`" + regexp.QuoteMeta(c.name) + "[ `]")
		found := false
		for _, r := range rows {
			found = found || name.MatchString(r)
		}
		assert.True(t, found, "the README's table of commands has no row for %s: %q", c.name, rows)
	}
	assert.Contains(t, section, "`go install ./cmd/twopc`")
	assert.NotRegexp(t, "go install github.com/twopc/twopc/cmd/twopc@latest`,", section)
}
