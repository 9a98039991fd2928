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
		if len(k.OneOf) > 0 {
			typ += ": " + strings.Join(k.OneOf, ", ")
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", k.Name, typ, def, k.Apply, strings.ReplaceAll(k.Doc, "|", "\\|"))
	}
	_, err := io.WriteString(w, b.String())
	return err
}
