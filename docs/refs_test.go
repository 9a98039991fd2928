// Package docs_test checks the references between the documentation and
// the packages' doc.go files.
package docs_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
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
