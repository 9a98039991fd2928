package config

import (
	"fmt"
	"io"
	"strings"
)

// WriteReference writes the key reference of docs/CONFIG.md: one table per
// section, every key of Keys with its type, default, where a change at
// run time applies ("restart" for keys read at start-up only) and meaning.
func WriteReference(w io.Writer) error {
	var b strings.Builder
	section := ""
	for _, k := range frozen().ordered {
		if k.Section != section {
			writeNotImplemented(&b, section)
			section = k.Section
			fmt.Fprintf(&b, "\n### [%s]\n\n| key | type | default | changes apply | meaning |\n| --- | --- | --- | --- | --- |\n", section)
		}
		def := "`" + k.Default + "`"
		if k.Default == "" {
			def = "(empty)"
		}
		typ := k.Kind.String()
		switch {
		case !k.HasRange:
		case k.Max >= maxInt:
			typ += " ≥ " + num(k.Min)
		default:
			typ += " " + num(k.Min) + ".." + num(k.Max)
		}
		if u := k.unit(); u != "" {
			typ += ", " + u
		}
		if k.Infinity {
			typ += ", or " + InfinityWord
		}
		if len(k.OneOf) > 0 {
			typ += ": " + strings.Join(k.OneOf, ", ")
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", k.Name, typ, def, k.Apply, strings.ReplaceAll(k.Doc, "|", "\\|"))
	}
	writeNotImplemented(&b, section)
	_, err := io.WriteString(w, b.String())
	return err
}

// writeNotImplemented writes the table of section's CouchDB keys that
// fdbrep does not implement, if it has any.
func writeNotImplemented(b *strings.Builder, section string) {
	head := false
	for _, n := range notImplemented {
		if n.Section != section {
			continue
		}
		if !head {
			fmt.Fprintf(b, "\nCouchDB's other [%s] keys, which fdbrep does not implement: set, each is ignored with a warning at start-up "+
				"that names it and says why, and the _config API refuses it (COMPAT.md).\n\n"+
				"| key | in CouchDB | why fdbrep does not implement it |\n| --- | --- | --- |\n", section)
			head = true
		}
		fmt.Fprintf(b, "| `%s` | %s | %s |\n", n.Name, strings.ReplaceAll(n.CouchDB, "|", "\\|"), strings.ReplaceAll(n.Reason, "|", "\\|"))
	}
}
