// Command apilist prints the exported API of the Go package in a directory,
// one declaration a line, sorted: constants and variables with their types
// or values, functions and methods with their parameter and result types
// (names left out), types with their kind, and each exported field of a
// struct and method of an interface on a line of its own. Doc comments,
// parameter names and unexported parts are left out, so the listing changes
// only when the API does.
//
// Usage: go run ./internal/apilist DIR. .ci/run compares it with api.txt:
// every line of api.txt must still be printed (the API changes only by
// addition).
package main

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"os"
	"sort"
	"strings"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: apilist DIR")
		os.Exit(2)
	}
	lines, err := list(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "apilist:", err)
		os.Exit(1)
	}
	for _, l := range lines {
		fmt.Println(l)
	}
}

// list returns the API lines of the non-test files of the package in dir.
func list(dir string) ([]string, error) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, func(fi os.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, pkg := range pkgs {
		for _, f := range pkg.Files {
			for _, d := range f.Decls {
				out = append(out, decl(fset, d)...)
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

func decl(fset *token.FileSet, d ast.Decl) []string {
	switch d := d.(type) {
	case *ast.FuncDecl:
		if !d.Name.IsExported() {
			return nil
		}
		recv := ""
		if d.Recv != nil {
			t := d.Recv.List[0].Type
			base := t
			if s, ok := base.(*ast.StarExpr); ok {
				base = s.X
			}
			if id, ok := base.(*ast.Ident); !ok || !id.IsExported() {
				return nil
			}
			recv = "(" + node(fset, t) + ") "
		}
		return []string{"func " + recv + d.Name.Name + strings.TrimPrefix(node(fset, unnamed(d.Type)), "func")}
	case *ast.GenDecl:
		var out []string
		for _, s := range d.Specs {
			switch s := s.(type) {
			case *ast.ValueSpec:
				for i, n := range s.Names {
					if !n.IsExported() {
						continue
					}
					l := d.Tok.String() + " " + n.Name
					if s.Type != nil {
						l += " " + node(fset, s.Type)
					}
					if i < len(s.Values) {
						l += " = " + node(fset, s.Values[i])
					}
					out = append(out, l)
				}
			case *ast.TypeSpec:
				if !s.Name.IsExported() {
					continue
				}
				out = append(out, typeLines(fset, s)...)
			}
		}
		return out
	}
	return nil
}

func typeLines(fset *token.FileSet, s *ast.TypeSpec) []string {
	head := "type " + s.Name.Name
	if s.Assign.IsValid() {
		head += " ="
	}
	switch t := s.Type.(type) {
	case *ast.StructType:
		out := []string{head + " struct"}
		for _, f := range t.Fields.List {
			tag := ""
			if f.Tag != nil {
				tag = " " + f.Tag.Value
			}
			if len(f.Names) == 0 { // embedded
				out = append(out, head+" struct, embedded "+node(fset, f.Type)+tag)
			}
			for _, n := range f.Names {
				if n.IsExported() {
					out = append(out, head+" struct, field "+n.Name+" "+node(fset, f.Type)+tag)
				}
			}
		}
		return out
	case *ast.InterfaceType:
		out := []string{head + " interface"}
		for _, m := range t.Methods.List {
			for _, n := range m.Names {
				if n.IsExported() {
					out = append(out, head+" interface, method "+n.Name+strings.TrimPrefix(node(fset, unnamed(m.Type.(*ast.FuncType))), "func"))
				}
			}
			if len(m.Names) == 0 {
				out = append(out, head+" interface, embedded "+node(fset, m.Type))
			}
		}
		return out
	case *ast.FuncType:
		return []string{head + " " + node(fset, unnamed(t))}
	default:
		return []string{head + " " + node(fset, s.Type)}
	}
}

// unnamed returns a copy of t without parameter and result names.
func unnamed(t *ast.FuncType) *ast.FuncType {
	strip := func(fl *ast.FieldList) *ast.FieldList {
		if fl == nil {
			return nil
		}
		out := &ast.FieldList{}
		for _, f := range fl.List {
			n := len(f.Names)
			if n == 0 {
				n = 1
			}
			for range n {
				out.List = append(out.List, &ast.Field{Type: f.Type})
			}
		}
		return out
	}
	return &ast.FuncType{TypeParams: t.TypeParams, Params: strip(t.Params), Results: strip(t.Results)}
}

func node(fset *token.FileSet, n ast.Node) string {
	var b bytes.Buffer
	if err := printer.Fprint(&b, fset, n); err != nil {
		return fmt.Sprintf("<%v>", err)
	}
	return strings.Join(strings.Fields(b.String()), " ")
}
