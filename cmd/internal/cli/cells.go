package cli

import (
	"io"
	"os"
	"slices"
	"strings"

	"github.com/mattn/go-runewidth"
	"golang.org/x/term"
)

// Tables are laid out in terminal cells, not runes or bytes: a CJK
// character or an emoji takes two cells, a combining mark none
// (github.com/mattn/go-runewidth, over Unicode's East Asian Width and
// grapheme clusters; characters of ambiguous width count as the locale
// says, as terminals draw them).

const (
	// columnGap is the space between two columns, in cells.
	columnGap = 2
	// columnMin is the narrowest a column is cut to when a table is fitted
	// to the terminal's width (a narrower one stays as it is): a table
	// with many columns on a narrow terminal still wraps.
	columnMin = 8
	// ellipsis ends a cut cell.
	ellipsis = "…"
)

// terminalWidth is w's width in cells when it is a terminal whose size
// can be read, else 0 (a pipe, a file: no limit). It is read at each
// table, so a watch follows a resized window.
func terminalWidth(w io.Writer) int {
	f, ok := w.(*os.File)
	if !ok || !isTerminal(w) {
		return 0
	}
	width, _, err := term.GetSize(int(f.Fd()))
	if err != nil || width <= 0 {
		return 0
	}
	return width
}

// cells is s's width on a terminal.
func cells(s string) int { return runewidth.StringWidth(s) }

// cutCells cuts s to at most w cells, ending it with "…": at the last
// space of its second half when there is one (so a time or a word is not
// cut in two; the punctuation before it goes too), else within the word.
func cutCells(s string, w int) string {
	if cells(s) <= w {
		return s
	}
	if w <= cells(ellipsis) {
		return runewidth.Truncate(s, w, "")
	}
	head := runewidth.Truncate(s, w-cells(ellipsis), "")
	if i := strings.LastIndexByte(head, ' '); i > 0 && cells(head[:i]) >= (w-cells(ellipsis))/2 {
		head = strings.TrimRight(head[:i], " ,;:")
	}
	return head + ellipsis
}

// fitWidths returns the widths of columns whose widest cells are widths
// so that a line, gaps included, takes at most width cells: the widest
// columns that may be cut (cut[i]) are cut first, to a common cap, the
// largest that fits (the cells left over widen the first cut columns by
// one), never below columnMin; ok is false when even that does not fit.
// width 0 leaves them as they are.
func fitWidths(widths []int, cut []bool, width int) (fitted []int, ok bool) {
	line := func(limit int) int {
		n := columnGap * (len(widths) - 1)
		for i, w := range widths {
			if cut[i] {
				w = min(w, limit)
			}
			n += w
		}
		return n
	}
	widest := 0
	for _, w := range widths {
		widest = max(widest, w)
	}
	if width <= 0 || line(widest) <= width {
		return widths, true
	}
	limit := widest
	for limit > columnMin && line(limit) > width {
		limit--
	}
	spare := width - line(limit)
	fitted = make([]int, len(widths))
	for i, w := range widths {
		fitted[i] = w
		if cut[i] && w > limit {
			fitted[i] = limit
			if spare > 0 {
				fitted[i]++
				spare--
			}
		}
	}
	return fitted, line(limit) <= width
}

// columnsFit are a table's rules for a terminal's width.
type columnsFit struct {
	// keep names the columns never cut (counts, states: a cut one would
	// mislead).
	keep []string
	// drop names the columns left out, in this order, while the table
	// does not fit with the others cut to columnMin.
	drop []string
}

// layout lays header and rows out in columns of cells, columnGap apart,
// fitted to width cells (0: no limit) by cutting the widest columns
// first and, where that is not enough, leaving out those of fit.drop; it
// returns the table and the headers of the columns left out. The last
// column is not padded.
func layout(header []string, rows [][]string, width int, fit columnsFit) (string, []string) {
	var dropped []string
	var widths []int
	for next := 0; ; next++ {
		widths = make([]int, len(header))
		cut := make([]bool, len(header))
		for i, h := range header {
			cut[i] = !slices.Contains(fit.keep, h)
			widths[i] = cells(h)
			for _, r := range rows {
				widths[i] = max(widths[i], cells(r[i]))
			}
		}
		var ok bool
		if widths, ok = fitWidths(widths, cut, width); ok || next == len(fit.drop) {
			break
		}
		if name := fit.drop[next]; slices.Contains(header, name) {
			dropped = append(dropped, name)
			header, rows = columns(header, rows, false, name)
		}
	}
	var b strings.Builder
	for _, r := range append([][]string{header}, rows...) {
		for i, c := range r {
			c = cutCells(c, widths[i])
			if i == len(r)-1 {
				b.WriteString(c)
				break
			}
			b.WriteString(runewidth.FillRight(c, widths[i]+columnGap))
		}
		b.WriteByte('\n')
	}
	return b.String(), dropped
}
