package cli

import (
	"errors"
	"flag"
	"io"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseFlags(t *testing.T) {
	newFS := func() *flag.FlagSet {
		fs := flag.NewFlagSet("jobs", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		fs.Bool("watch", false, "")
		fs.Bool("json", false, "")
		fs.Int("limit", 1, "")
		fs.String("cluster", "", "")
		return fs
	}
	for _, tc := range []struct {
		args []string
		pos  []string
		err  string
	}{
		{[]string{"a", "-watch", "b"}, []string{"a", "b"}, ""},
		{[]string{"-wat"}, nil, "jobs: unknown flag -wat (did you mean -watch?); see fdbrep help jobs"},
		{[]string{"-wacth"}, nil, "jobs: unknown flag -wacth (did you mean -watch?); see fdbrep help jobs"},
		{[]string{"--jsn"}, nil, "jobs: unknown flag -jsn (did you mean -json?); see fdbrep help jobs"},
		{[]string{"-clusterr=x"}, nil, "jobs: unknown flag -clusterr (did you mean -cluster?); see fdbrep help jobs"},
		{[]string{"-zzzzzz"}, nil, "jobs: unknown flag -zzzzzz; see fdbrep help jobs"},
		{[]string{"-limit", "x"}, nil, `jobs: invalid value "x" for flag -limit: parse error; see fdbrep help jobs`},
	} {
		t.Run(tc.args[0], func(t *testing.T) {
			pos, err := ParseFlags(newFS(), tc.args, true)
			if tc.err == "" {
				require.NoError(t, err)
				require.Equal(t, tc.pos, pos)
				return
			}
			var ee *ExitError
			require.ErrorAs(t, err, &ee)
			require.Equal(t, ExitUsage, ee.Code)
			require.EqualError(t, err, tc.err)
		})
	}
	// -h prints the usage and asks for it.
	fs := newFS()
	printed := false
	fs.Usage = func() { printed = true }
	_, err := ParseFlags(fs, []string{"-h"}, false)
	require.True(t, errors.Is(err, flag.ErrHelp))
	require.True(t, printed)
}
