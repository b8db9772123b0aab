package problem

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestWrite(t *testing.T) {
	rec := httptest.NewRecorder()
	rec.Header().Set("Retry-After", "5")
	rec.Header().Set("Content-Encoding", "gzip")
	Write(rec, DefaultBase, SlugKeyReused, http.StatusUnprocessableEntity, "another body")

	h := rec.Result().Header
	for name, want := range map[string]string{
		"Content-Type": ContentType, "Cache-Control": "no-store", "Retry-After": "5",
		"Content-Length": strconv.Itoa(rec.Body.Len()), "Content-Encoding": "",
	} {
		if got := h.Get(name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	if rec.Code != http.StatusUnprocessableEntity {
		t.Errorf("status %d", rec.Code)
	}
	want := `{"type":"https://idem.dev/problems/idempotency-key-reused","title":"Idempotency-Key reused with a different request","status":422,"detail":"another body"}`
	if rec.Body.String() != want {
		t.Errorf("body\n %s\nwant\n %s", rec.Body, want)
	}
}

func TestWriteWithoutDetailOrTitle(t *testing.T) {
	rec := httptest.NewRecorder()
	Write(rec, "urn:p:", "not-catalogued", http.StatusTeapot, "")
	var d map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &d); err != nil {
		t.Fatal(err)
	}
	if d["type"] != "urn:p:not-catalogued" || d["title"] != "I'm a teapot" || d["status"] != 418.0 {
		t.Errorf("body %s", rec.Body)
	}
	if _, ok := d["detail"]; ok {
		t.Errorf("empty detail written: %s", rec.Body)
	}
}

// Every Slug constant is catalogued with a title, once; each slug is a
// lower-case token that can end a URI.
func TestCatalogue(t *testing.T) {
	declared := map[string]string{} // slug → constant
	f, err := parser.ParseFile(token.NewFileSet(), "catalogue.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			for i, n := range vs.Names {
				slug, _ := strconv.Unquote(vs.Values[i].(*ast.BasicLit).Value)
				if other, dup := declared[slug]; dup {
					t.Errorf("%s and %s are both %q", other, n.Name, slug)
				}
				declared[slug] = n.Name
			}
		}
	}
	token := regexp.MustCompile(`^[a-z][a-z0-9]*(-[a-z0-9]+)*$`)
	for slug, name := range declared {
		if Title(slug) == "" {
			t.Errorf("%s (%q) has no title", name, slug)
		}
		if !token.MatchString(slug) {
			t.Errorf("%s (%q) is not a lower-case token", name, slug)
		}
	}
	for slug := range titles {
		if _, ok := declared[slug]; !ok {
			t.Errorf("title for %q, which no constant declares", slug)
		}
	}
}

// docs/http.md lists every problem type in one table (a row per slug,
// "| `slug` | status | ..."): it and this catalogue name the same slugs.
func TestCatalogueMatchesDocs(t *testing.T) {
	b, err := os.ReadFile("../docs/http.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z0-9-]+)` \\|").FindAllStringSubmatch(string(b), -1) {
		documented[m[1]] = true
	}
	for _, slug := range slices.Sorted(maps.Keys(titles)) {
		if !documented[slug] {
			t.Errorf("%q is not in docs/http.md's table of problem types", slug)
		}
	}
	for slug := range documented {
		if Title(slug) == "" {
			t.Errorf("docs/http.md lists %q, which the catalogue lacks", slug)
		}
	}
	if t.Failed() {
		t.Log("docs/http.md rows found: " + strings.Join(slices.Sorted(maps.Keys(documented)), ", "))
	}
}
