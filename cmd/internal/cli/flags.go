package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/agnivade/levenshtein"
)

// ParseFlags parses args with fs, whose name is the command's, and
// returns the positional arguments: with interleaved, flags may stand
// anywhere among them (fdbrep replicate SRC TGT -continuous); otherwise
// the first non-flag ends the flags. -h prints fs.Usage and returns
// flag.ErrHelp. Any other problem is one line, an ExitError with
// ExitUsage, instead of the flag package's message followed by the whole
// usage: "jobs: unknown flag -wat (did you mean -watch?); see fdbrep help
// jobs".
func ParseFlags(fs *flag.FlagSet, args []string, interleaved bool) ([]string, error) {
	usage, out := fs.Usage, fs.Output()
	if usage == nil {
		usage = func() {
			fmt.Fprintf(fs.Output(), "usage: fdbrep %s [flags]\n\nflags:\n", fs.Name())
			fs.PrintDefaults()
		}
	}
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	defer func() { fs.Usage = usage; fs.SetOutput(out) }()
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fs.SetOutput(out)
				usage()
				return nil, err
			}
			return nil, &ExitError{Code: ExitUsage, Err: newFlagError(fs, err)}
		}
		args = fs.Args()
		if !interleaved || len(args) == 0 {
			return append(pos, args...), nil
		}
		pos, args = append(pos, args[0]), args[1:]
	}
}

// FlagError is a command line's flag problem, as ParseFlags reports it.
type FlagError struct {
	// Cmd is the command whose flags were parsed.
	Cmd string
	// Unknown is the name of an undefined flag given ("" for another
	// problem), and Suggest the defined flag it most likely meant ("" when
	// none is close).
	Unknown, Suggest string
	// Problem is the flag package's message for other problems.
	Problem string
}

func newFlagError(fs *flag.FlagSet, err error) *FlagError {
	fe := &FlagError{Cmd: fs.Name(), Problem: err.Error()}
	if name, ok := strings.CutPrefix(fe.Problem, "flag provided but not defined: -"); ok {
		fe.Unknown, fe.Suggest = name, ClosestFlag(fs, name)
	}
	return fe
}

func (e *FlagError) Error() string {
	problem := e.Problem
	if e.Unknown != "" {
		problem = "unknown flag -" + e.Unknown
		if e.Suggest != "" {
			problem += " (did you mean -" + e.Suggest + "?)"
		}
	}
	return fmt.Sprintf("%s: %s; see fdbrep help %s", e.Cmd, problem, e.Cmd)
}

// ClosestFlag is the flag of fs nearest to name: one that name is a
// prefix of, or within an edit distance of a third of its length (at
// least 2: a transposed pair); "" when none is.
func ClosestFlag(fs *flag.FlagSet, name string) string {
	best, bestD := "", max(2, len(name)/3)+1
	fs.VisitAll(func(f *flag.Flag) {
		d := levenshtein.ComputeDistance(name, f.Name)
		if strings.HasPrefix(f.Name, name) {
			d = min(d, 1)
		}
		if d < bestD {
			best, bestD = f.Name, d
		}
	})
	return best
}
