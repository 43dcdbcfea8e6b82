package twopc

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestUnitArchitectureIsTrue keeps what ARCHITECTURE.md says of the code
// true: the number of Coordinator's methods it gives, and that every .go
// file it names exists.
func TestUnitArchitectureIsTrue(t *testing.T) {
	doc, err := os.ReadFile("ARCHITECTURE.md")
	require.NoError(t, err)
	m := regexp.MustCompile("`Coordinator` has (\\d+) methods").FindSubmatch(doc)
	require.NotNil(t, m, "ARCHITECTURE.md gives Coordinator's method count")
	said, _ := strconv.Atoi(string(m[1]))

	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	require.NoError(t, err)
	methods := 0
	for _, f := range pkgs["twopc"].Files {
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || len(fn.Recv.List) != 1 {
				continue
			}
			if star, ok := fn.Recv.List[0].Type.(*ast.StarExpr); ok {
				if id, ok := star.X.(*ast.Ident); ok && id.Name == "Coordinator" {
					methods++
				}
			}
		}
	}
	require.Equal(t, methods, said, "ARCHITECTURE.md's count of Coordinator's methods")

	for _, name := range regexp.MustCompile(`\b([a-z_]+\.go)\b`).FindAllString(string(doc), -1) {
		_, err := os.Stat(name)
		require.NoError(t, err, "ARCHITECTURE.md names %s", name)
	}
}
