package archtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// module is the module's path. Packages of the module are named below by
// their path inside it ("" is the root package).
const module = "github.com/idemhq/idem"

// A layer is a set of the module's packages that follow the same rules.
type layer string

const (
	command    layer = "command"              // the idem command, its subcommands, the bench tool
	surface    layer = "HTTP surface"         // the middleware, the proxy, the webhook receiver
	adapter    layer = "metrics adapter"      // hooks turned into one metrics system's metrics
	concern    layer = "concern"              // what decides: request keys, inbox, order, outbox, key templates
	wire       layer = "wire helper"          // formats on the wire: CloudEvents, signatures, problems
	storeAPI   layer = "store"                // the storage interfaces
	storeImpl  layer = "store implementation" // one database each
	machinery  layer = "machinery"            // internal runtime helpers: migrations, background loops
	suite      layer = "conformance suite"    // the storage contract, checked by calling stores alone
	testClock  layer = "test clock"           // the one test helper the conformance suite uses
	testHelper layer = "test helper"          // imported by tests only
	example    layer = "example"              // programs a user could copy out of the module, and the tour
)

// layers places every package of the module ("x/..." is x and everything
// under it). A package in none fails TestRules: place a new package here
// before it lands. Names of packages that do not exist yet are fine (a
// future execution or workflow package is a concern).
var layers = []struct {
	layer layer
	pkgs  []string
}{
	{command, []string{"cmd/...", "internal/cli/...", "internal/loadtest"}},
	{surface, []string{"httpidem", "proxy", "webhook", "serve"}},
	{adapter, []string{"prom"}},
	{concern, []string{"key", "inbox", "order", "outbox", "keytemplate", "execution", "workflow"}},
	{wire, []string{"event", "signature", "problem", "internal/canonjson"}},
	{storeAPI, []string{"store"}},
	{storeImpl, []string{"store/memstore", "store/sqlitestore", "store/pgstore", "store/redisstore"}},
	{machinery, []string{"internal/migrate", "internal/loop"}},
	{suite, []string{"store/storetest"}},
	{testClock, []string{"internal/testutil/testclock"}}, // before testHelper: a package is in the first layer that names it
	{testHelper, []string{"store/storetest/...", "internal/testutil/...", "internal/chaos", "internal/hostile", "internal/growth",
		"internal/archtest"}},
	{example, []string{"", "examples/..."}},
}

// arrows says which of the module's layers the packages of one layer may
// import, and why.
type arrows struct {
	from layer
	to   []layer
	why  string
}

// mayImport says which of the module's layers the packages of a layer may
// import directly (non-test files). Every import of every package is
// checked, so nothing reaches further through a chain either.
var mayImport = []arrows{
	{command, []layer{command, adapter, surface, concern, wire, storeAPI, storeImpl, machinery},
		"commands wire everything together, but never test helpers or examples"},
	{surface, []layer{concern, wire, storeAPI, machinery},
		"an HTTP surface is handed its store and builds on the concerns; choosing a store is the command's job, and one surface does not lean on another"},
	{adapter, []layer{surface, concern, wire},
		"a metrics adapter reads the hooks and types of the components it counts, and nothing else"},
	{concern, []layer{concern, wire, storeAPI, machinery},
		"a concern reaches storage only through package store's interfaces (so every store serves it and shares the caller's transaction) and knows nothing of the HTTP surfaces or the commands"},
	{wire, nil,
		"a wire helper is about one format and imports nothing of idem's"},
	{storeAPI, nil,
		"package store is the floor every layer stands on and imports nothing of idem's"},
	{storeImpl, []layer{storeAPI, machinery},
		"a store implementation serves package store's interfaces; it knows no concern, no HTTP surface, no other store"},
	{machinery, []layer{storeAPI},
		"runtime machinery serves the stores and commands and knows none of them"},
	{suite, []layer{storeAPI, testClock},
		"the conformance suite is the storage contract: it calls stores through package store alone and knows no concern (package flowtest runs those over every store)"},
	{testClock, nil,
		"the test clock imports nothing of idem's, so that the conformance suite may use it"},
	{testHelper, []layer{command, adapter, surface, concern, wire, storeAPI, storeImpl, machinery, suite, testClock, testHelper},
		"a test helper may use anything but an example"},
	{example, []layer{adapter, surface, concern, wire, storeAPI, storeImpl},
		"an example uses the public packages only, as a user's program would"},
}

// drivers are the database client packages, by path prefix.
var drivers = []string{
	"github.com/jackc/pgx", "github.com/lib/pq", // PostgreSQL
	"github.com/redis/go-redis",                         // Redis
	"modernc.org/sqlite", "github.com/mattn/go-sqlite3", // SQLite
	"github.com/go-sql-driver/mysql",
}

// ban keeps the packages of some layers from importing packages by path
// prefix (a prefix names itself and everything under it); with deps, from
// reaching them through any chain of imports too.
type ban struct {
	layers   []layer
	prefixes []string
	deps     bool
	why      string
}

// forbidden are the bans, outside packages mostly.
var forbidden = []ban{
	{[]layer{concern, wire, storeAPI, machinery, suite}, drivers, true,
		"a database driver belongs to its store implementation"},
	{[]layer{surface, concern, wire, storeAPI, storeImpl, machinery, suite}, []string{"github.com/prometheus"}, true,
		"components report through their Hooks, and package prom alone turns them into Prometheus metrics, so a program on another metrics system carries no Prometheus"},
	{[]layer{concern}, []string{"net/http"}, false,
		"a concern decides, and HTTP is the surfaces' job (the wire helpers it uses may bring net/http along)"},
	{[]layer{command, adapter, surface, concern, wire, storeAPI, storeImpl, machinery, example}, []string{"testing"}, true,
		"package testing belongs to tests and test helpers"},
	{[]layer{example}, []string{module + "/internal"}, false,
		"an example uses the public packages only, as a user's program would"},
}

// exception allows one package (inside the module) one import path.
type exception struct{ from, to, why string }

// allowed are the arrows that the tables above refuse but one package
// needs, each with its reason ("to" is an import path). The same holds for
// an internal type in a public API (TestRules, api). An entry that nothing
// uses any more fails TestRules: remove it.
var allowed = []exception{
	{"proxy", module + "/httpidem",
		"the proxy is the httpidem middleware in front of an upstream"},
	{"serve", module + "/httpidem",
		"task creation and rerun take request keys through the middleware, in the store's transaction"},
	{"outbox", "net/http",
		"its relay delivers intents over HTTP: Target.URL, Config.Client, the response policy over status codes and Retry-After"},
	{"workflow", "net/http",
		"its GATEWAY steps call their targets over HTTP, as the outbox's relay does: Caller.Client, the verify read, the response policy over status codes and Retry-After"},
}

// TestRules checks every package of the module against the tables above.
func TestRules(t *testing.T) {
	pkgs := listModule(t)
	used := map[int]bool{}
	report := func(t *testing.T, vs []violation) {
		for _, v := range vs {
			if i := allowedIndex(v.from, v.to); i >= 0 {
				used[i] = true
				continue
			}
			t.Error(v)
		}
	}
	t.Run("imports", func(t *testing.T) {
		vs, unplaced := importViolations(pkgs)
		for _, p := range unplaced {
			t.Errorf("package %q is in no layer: add it to layers in internal/archtest/imports_test.go", p)
		}
		report(t, vs)
	})
	t.Run("api", func(t *testing.T) {
		vs, err := apiViolations(pkgs)
		if err != nil {
			t.Fatal(err)
		}
		report(t, vs)
	})
	if t.Failed() {
		return // an unused entry may only look unused
	}
	for i, a := range allowed {
		if !used[i] {
			t.Errorf("allowed %s → %s is no longer needed: remove it from internal/archtest/imports_test.go", a.from, a.to)
		}
	}
}

// TestRulesCatch feeds the checks a made-up module with one crossing of
// each kind, so that a table or a check that lets everything through fails.
func TestRulesCatch(t *testing.T) {
	p := func(path string, imports []string, deps ...string) pkg {
		return pkg{ImportPath: path, Imports: imports, Deps: append(deps, imports...)}
	}
	m := func(rel string) string { return strings.TrimSuffix(module+"/"+rel, "/") }
	pkgs := []pkg{
		p(m("key"), []string{m("store"), m("store/pgstore")}),                                                                   // concern → store implementation
		p(m("order"), []string{m("internal/loop")}, "github.com/jackc/pgx/v5"),                                                  // concern reaching a driver
		p(m("outbox"), []string{m("store")}, "github.com/prometheus/client_golang/prometheus"),                                  // concern reaching Prometheus
		p(m("prom"), []string{m("inbox"), m("store/sqlitestore")}),                                                              // adapter → store implementation
		p(m("inbox"), []string{"net/http", m("order")}),                                                                         // concern → net/http
		p(m("store/sqlitestore"), []string{m("store"), m("inbox")}),                                                             // store implementation → concern
		p(m("store/pgstore"), []string{m("store"), m("webhook")}),                                                               // store implementation → surface
		p(m("webhook"), []string{m("httpidem")}),                                                                                // surface → surface
		p(m("signature"), []string{m("store/storetest")}, "testing"),                                                            // test helper in non-test code
		p(m("examples/demo"), []string{m("internal/loadtest"), m("proxy")}),                                                     // example → internal
		p(m("store/storetest"), []string{m("store"), m("internal/testutil/testclock"), m("key"), m("internal/testutil/fault")}), // the contract → a concern, a test helper
		p(m("store/storetest/flowtest"), []string{m("store/storetest"), m("key"), m("internal/testutil/fault")}),                // the flows, fine
		p(m(""), []string{m("store/memstore")}),                                                                                 // the tour, fine
		p(m("newthing"), nil),                                                                                                   // in no layer
	}
	want := []string{
		"key imports " + m("store/pgstore"),
		"order reaches github.com/jackc/pgx/v5",
		"outbox reaches github.com/prometheus/client_golang/prometheus",
		"prom imports " + m("store/sqlitestore"),
		"inbox imports net/http",
		"store/sqlitestore imports " + m("inbox"),
		"store/pgstore imports " + m("webhook"),
		"webhook imports " + m("httpidem"),
		"signature imports " + m("store/storetest"),
		"signature reaches testing",
		"examples/demo imports " + m("internal/loadtest"),
		"store/storetest imports " + m("key"),
		"store/storetest imports " + m("internal/testutil/fault"),
	}
	vs, unplaced := importViolations(pkgs)
	var got []string
	for _, v := range vs {
		got = append(got, v.String())
	}
	for _, w := range want {
		if !slices.ContainsFunc(got, func(g string) bool { return strings.HasPrefix(g, w+":") }) {
			t.Errorf("not caught: %s", w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("got %d violations, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	if !slices.Equal(unplaced, []string{"newthing"}) {
		t.Errorf("unplaced = %q, want [newthing]", unplaced)
	}
}

// TestAPICatch feeds the API check a made-up public package: only what its
// exported declarations name counts.
func TestAPICatch(t *testing.T) {
	dir := t.TempDir()
	src := `package x

import (
	"github.com/idemhq/idem/internal/migrate"
	m2 "github.com/idemhq/idem/internal/loop"
)

func Migrate() ([]migrate.Result, error) { return nil, nil }  // exposed
type Store struct {
	Hook   func(m2.Thing)                                        // exposed
	hidden migrate.Result
}
func (s *Store) Last() migrate.Result { return s.hidden }       // exposed
func (s *Store) last() migrate.Result { return s.hidden }
func helper(migrate.Result) {}
type private struct{ R migrate.Result }
func (private) Get() migrate.Result { return migrate.Result{} }
var Applied []migrate.Result                                    // exposed
`
	if err := os.WriteFile(filepath.Join(dir, "x.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	vs, err := apiViolations([]pkg{
		{ImportPath: module + "/store/x", Name: "x", Dir: dir, GoFiles: []string{"x.go"}},
		{ImportPath: module + "/internal/migrate", Name: "migrate"},
		{ImportPath: module + "/internal/loop", Name: "loop"},
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range vs {
		got = append(got, v.detail[:strings.Index(v.detail, " at ")])
	}
	want := []string{"migrate.Result", "m2.Thing", "migrate.Result", "migrate.Result"}
	if !slices.Equal(got, want) {
		t.Errorf("exposed %q, want %q", got, want)
	}
}

// pkg is what `go list -json` says of one package (non-test files only).
type pkg struct {
	ImportPath string
	Name       string
	Dir        string
	GoFiles    []string
	Imports    []string
	Deps       []string
	Error      *struct{ Err string }
}

// listModule lists every package of the module as the go command sees it
// on this platform.
func listModule(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-e", "-json=ImportPath,Name,Dir,GoFiles,Imports,Deps,Error", module+"/...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		if p.Error != nil {
			t.Fatalf("go list %s: %s", p.ImportPath, p.Error.Err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) == 0 {
		t.Fatal("go list found no package")
	}
	return pkgs
}

// violation is one import (or one internal type in a public API) that the
// rules refuse.
type violation struct {
	from   string // the package, inside the module
	to     string // an import path
	reach  string // "imports", "reaches" (through a chain) or "exposes" (in its API)
	detail string // where, for an exposed type
	why    string
}

func (v violation) String() string {
	s := fmt.Sprintf("%s %s %s: %s", v.from, v.reach, v.to, v.why)
	if v.detail != "" {
		s += " (" + v.detail + ")"
	}
	return s
}

// inModule returns path's place inside the module.
func inModule(path string) (string, bool) {
	if path == module {
		return "", true
	}
	rel, ok := strings.CutPrefix(path, module+"/")
	return rel, ok
}

// under reports whether path is prefix or inside it.
func under(path, prefix string) bool {
	return path == prefix || strings.HasPrefix(path, prefix+"/")
}

// layerOf returns the layer of a package of the module.
func layerOf(rel string) (layer, bool) {
	for _, l := range layers {
		for _, p := range l.pkgs {
			if sub, ok := strings.CutSuffix(p, "/..."); ok && under(rel, sub) || p == rel {
				return l.layer, true
			}
		}
	}
	return "", false
}

func allowedIndex(from, to string) int {
	return slices.IndexFunc(allowed, func(a exception) bool { return a.from == from && a.to == to })
}

// importViolations checks every package's imports against mayImport and
// forbidden, and returns the packages that are in no layer.
func importViolations(pkgs []pkg) (vs []violation, unplaced []string) {
	for _, p := range pkgs {
		rel, ok := inModule(p.ImportPath)
		if !ok {
			continue
		}
		l, ok := layerOf(rel)
		if !ok {
			unplaced = append(unplaced, rel)
			continue
		}
		seen := map[string]bool{}
		for _, f := range forbidden {
			if !slices.Contains(f.layers, l) {
				continue
			}
			set := p.Imports
			if f.deps {
				set = p.Deps
			}
			for _, imp := range set {
				if seen[imp] || !slices.ContainsFunc(f.prefixes, func(pre string) bool { return under(imp, pre) }) {
					continue
				}
				seen[imp] = true
				reach := "imports"
				if !slices.Contains(p.Imports, imp) {
					reach = "reaches"
				}
				vs = append(vs, violation{from: rel, to: imp, reach: reach, why: fmt.Sprintf("[%s] %s", l, f.why)})
			}
		}
		i := slices.IndexFunc(mayImport, func(a arrows) bool { return a.from == l })
		for _, imp := range p.Imports {
			irel, ok := inModule(imp)
			if !ok || seen[imp] || irel == rel {
				continue
			}
			il, ok := layerOf(irel)
			if !ok || slices.Contains(mayImport[i].to, il) {
				continue // an unplaced import is reported as unplaced itself
			}
			vs = append(vs, violation{from: rel, to: imp, reach: "imports",
				why: fmt.Sprintf("[%s → %s] %s", l, il, mayImport[i].why)})
		}
	}
	return vs, unplaced
}

// apiViolations returns, for every importable package outside internal/,
// the internal packages whose types its exported API names: in exported
// functions and methods, exported types (their exported fields and
// methods), and the declared types of exported variables and constants. A
// user can neither name such a type nor read its documentation.
func apiViolations(pkgs []pkg) ([]violation, error) {
	names := map[string]string{} // import path → package name
	for _, p := range pkgs {
		names[p.ImportPath] = p.Name
	}
	var vs []violation
	for _, p := range pkgs {
		rel, ok := inModule(p.ImportPath)
		if !ok || p.Name == "main" || under(rel, "internal") || strings.Contains(rel, "/internal/") {
			continue
		}
		for _, file := range p.GoFiles {
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, filepath.Join(p.Dir, file), nil, parser.SkipObjectResolution)
			if err != nil {
				return nil, err
			}
			internal := map[string]string{} // name in this file → import path
			for _, is := range f.Imports {
				path, _ := strconv.Unquote(is.Path.Value)
				irel, ok := inModule(path)
				if !ok || !(under(irel, "internal") || strings.Contains(irel, "/internal/")) {
					continue
				}
				name := names[path]
				if is.Name != nil {
					name = is.Name.Name
				}
				internal[name] = path
			}
			if len(internal) == 0 {
				continue
			}
			for _, e := range exposedNames(f) {
				id, ok := e.X.(*ast.Ident)
				if !ok || internal[id.Name] == "" {
					continue
				}
				vs = append(vs, violation{from: rel, to: internal[id.Name], reach: "exposes",
					detail: fmt.Sprintf("%s.%s at %s", id.Name, e.Sel.Name, fset.Position(e.Pos())),
					why:    "a public API names no type from internal/, which a user cannot name"})
			}
		}
	}
	return vs, nil
}

// exposedNames returns the qualified names (pkg.Name) that the exported
// declarations of f use.
func exposedNames(f *ast.File) []*ast.SelectorExpr {
	var out []*ast.SelectorExpr
	var walk func(ast.Node)
	walk = func(n ast.Node) {
		ast.Inspect(n, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.SelectorExpr:
				out = append(out, n)
				return false
			case *ast.StructType:
				fieldsOf(n.Fields, walk)
				return false
			case *ast.InterfaceType:
				fieldsOf(n.Methods, walk)
				return false
			}
			return true
		})
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Name.IsExported() && (d.Recv == nil || receiverExported(d.Recv)) {
				walk(d.Type)
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					if s.Name.IsExported() {
						walk(s.Type)
					}
				case *ast.ValueSpec:
					if s.Type != nil && slices.ContainsFunc(s.Names, (*ast.Ident).IsExported) {
						walk(s.Type)
					}
				}
			}
		}
	}
	return out
}

// fieldsOf walks the types of a struct's or interface's exported and
// embedded members.
func fieldsOf(fl *ast.FieldList, walk func(ast.Node)) {
	for _, fd := range fl.List {
		if len(fd.Names) == 0 || slices.ContainsFunc(fd.Names, (*ast.Ident).IsExported) {
			walk(fd.Type)
		}
	}
}

// receiverExported reports whether a method's receiver type is exported.
func receiverExported(recv *ast.FieldList) bool {
	t := recv.List[0].Type
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
		case *ast.IndexExpr:
			t = x.X
		case *ast.IndexListExpr:
			t = x.X
		case *ast.ParenExpr:
			t = x.X
		case *ast.Ident:
			return x.IsExported()
		default:
			return false
		}
	}
}
