// Package docs_test checks the references between the documentation and
// the packages' doc.go files, and the lists the documents keep of what
// the code defines (benchmarks, the replicator's job types).
package docs_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/config"
)

// docRef finds a reference to a section of a doc.go: `see doc.go, "Shards"`,
// `replicator/scheduler's doc.go, "Live progress"`, `fdbjobs' doc.go,
// "Holding a job"`, `[doc.go](../fdbjobs/doc.go), "Holding a job"`,
// `replicator/doc.go`, "View index" and "Deleted databases"; a path is
// from the repository's root, a link from the file's directory, a bare
// name that of a package.
var docRef = regexp.MustCompile("(?:([\\w/.]+?)(?:'s|')? )?`?(?:([\\w/.]+)/)?doc\\.go`?(?:\\]\\(([\\w/.]+)/doc\\.go\\))?\\)?, (?:section )?\"([^\"]+)\"((?: and \"[^\"]+\")*)")

var andRef = regexp.MustCompile(`"([^"]+)"`)

// Every reference to a section of a doc.go, in Go comments and in the
// Markdown documents, names a section ("// # Heading") that exists there.
func TestDocReferencesNameSections(t *testing.T) {
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	headings := map[string]map[string]bool{} // by directory
	sections := func(dir string) map[string]bool {
		if h, ok := headings[dir]; ok {
			return h
		}
		h := map[string]bool{}
		b, err := os.ReadFile(filepath.Join(dir, "doc.go"))
		if err == nil {
			for _, line := range strings.Split(string(b), "\n") {
				if s, ok := strings.CutPrefix(line, "// # "); ok {
					h[strings.TrimSpace(s)] = true
				}
			}
		}
		headings[dir] = h
		return h
	}
	// resolve finds the package a reference names, from the file's
	// directory: a path from the root, a link, or a package's name.
	resolve := func(from, name, link string) string {
		switch {
		case link != "":
			return filepath.Join(from, link)
		case name == "" || name == "see" || name == "of" || name == "in":
			return from
		}
		name = strings.Trim(name, "`")
		if st, err := os.Stat(filepath.Join(root, name)); err == nil && st.IsDir() {
			return filepath.Join(root, name)
		}
		var found string
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() && d.Name() == name && found == "" {
				found = p
			}
			return nil
		})
		if found == "" {
			return from
		}
		return found
	}
	refs := 0
	err = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "node_modules", "bin", "data":
				return filepath.SkipDir
			}
			return nil
		}
		ext := filepath.Ext(p)
		if ext != ".go" && ext != ".md" || filepath.Base(p) == "refs_test.go" {
			return nil // this file's examples are not references
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		// References wrap across comment lines: join them.
		var text strings.Builder
		for _, line := range strings.Split(string(b), "\n") {
			line = strings.TrimSpace(line)
			if ext == ".go" {
				_, line, _ = strings.Cut(line, "//")
			}
			text.WriteString(strings.TrimSpace(line))
			text.WriteByte(' ')
		}
		rel, _ := filepath.Rel(root, p)
		for _, m := range docRef.FindAllStringSubmatch(text.String(), -1) {
			name := m[1]
			if m[2] != "" {
				name = m[2] // a path from the root
			}
			dir := resolve(filepath.Dir(p), name, m[3])
			names := []string{m[4]}
			for _, a := range andRef.FindAllStringSubmatch(m[5], -1) {
				names = append(names, a[1])
			}
			for _, name := range names {
				refs++
				target, _ := filepath.Rel(root, filepath.Join(dir, "doc.go"))
				require.True(t, sections(dir)[name], "%s refers to section %q of %s, which has no such heading", rel, name, target)
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.Greater(t, refs, 15, "the references were not found: is the pattern still right?")
}

// readRoot reads a file by its path from the repository's root.
func readRoot(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", name))
	require.NoError(t, err)
	return string(b)
}

// Every benchmark fdbrep-bench registers is listed where a reader looks
// for it: the command's usage comment, ARCHITECTURE.md's package map, a
// Makefile target and README's table; and each of those names one that
// is registered.
func TestBenchmarkListsNameTheRegisteredOnes(t *testing.T) {
	dir := filepath.Join("..", "cmd", "fdbrep-bench")
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	require.NoError(t, err)
	registered := map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range regexp.MustCompile(`register\("([\w-]+)"`).FindAllStringSubmatch(string(b), -1) {
			registered[m[1]] = true
		}
	}
	require.Greater(t, len(registered), 5, "no register(\"…\") calls found: is the pattern still right?")

	arch := regexp.MustCompile(`(?m)^cmd/fdbrep-bench\s+benchmarks: ([^(]+)\(`).FindStringSubmatch(readRoot(t, "docs/ARCHITECTURE.md"))
	require.NotNil(t, arch, "ARCHITECTURE.md's package map has no cmd/fdbrep-bench line of benchmarks")
	var archNames []string
	for _, n := range strings.Split(arch[1], ",") {
		archNames = append(archNames, strings.TrimSpace(n))
	}
	lists := map[string][]string{"ARCHITECTURE.md's package map": archNames}
	for where, re := range map[string]struct {
		file string
		re   *regexp.Regexp
	}{
		"cmd/fdbrep-bench/main.go's usage": {"cmd/fdbrep-bench/main.go", regexp.MustCompile(`(?m)^//\s+fdbrep-bench ([\w-]+) \[flags\]`)},
		"the Makefile's targets":           {"Makefile", regexp.MustCompile(`(?m)^bench-([\w-]+):`)},
		"README's table":                   {"README.md", regexp.MustCompile("(?m)^\\| `make bench-([\\w-]+)` \\|")},
	} {
		for _, m := range re.re.FindAllStringSubmatch(readRoot(t, re.file), -1) {
			lists[where] = append(lists[where], m[1])
		}
	}
	for where, names := range lists {
		require.ElementsMatch(t, keys(registered), names, "%s lists other benchmarks than cmd/fdbrep-bench registers", where)
	}
}

// Every fdbjobs type the replicator keeps its jobs in is named where its
// keys are described: replicator/doc.go's "Key layout" and
// ARCHITECTURE.md's key layout.
func TestJobTypesInTheKeyLayouts(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "replicator", "*.go"))
	require.NoError(t, err)
	var types []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range regexp.MustCompile(`(?m)^const \w+Type = "(\w+)"`).FindAllStringSubmatch(string(b), -1) {
			types = append(types, m[1])
		}
	}
	require.GreaterOrEqual(t, len(types), 2, "no job type constants found: is the pattern still right?")
	doc := readRoot(t, "replicator/doc.go")
	_, layout, ok := strings.Cut(doc, "// # Key layout")
	require.True(t, ok, "replicator/doc.go has no \"Key layout\" section")
	layout, _, _ = strings.Cut(layout, "\n// # ")
	heading := regexp.MustCompile("(?m)^### replicator .*$").FindString(readRoot(t, "docs/ARCHITECTURE.md"))
	require.NotEmpty(t, heading, "ARCHITECTURE.md has no key layout heading for the replicator")
	for _, typ := range types {
		require.True(t, strings.Contains(layout, typ), "replicator/doc.go's \"Key layout\" does not name the job type %s", typ)
		require.True(t, strings.Contains(heading, typ), "ARCHITECTURE.md's key layout heading for the replicator does not name the job type %s", typ)
	}
}

// Every CouchDB key fdbrep knows and does not implement has its row in
// COMPAT.md (CONFIG.md's reference lists them from the same table).
func TestNotImplementedKeysInCompat(t *testing.T) {
	compat := readRoot(t, "docs/COMPAT.md")
	for _, n := range config.NotImplementedKeys() {
		require.Regexp(t, "(?m)^\\|[^\n]*`"+regexp.QuoteMeta(n.Name)+"`", compat, "COMPAT.md has no row naming [%s] %s", n.Section, n.Name)
	}
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
