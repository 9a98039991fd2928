package couch_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/couch"
)

func TestParseSocketOptions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want string // String() of the result, or the error's text
		err  bool
	}{
		{"", "[]", false},
		{"  [ ]  ", "[]", false},
		{"[{keepalive, true}, {nodelay, false}]", "[{keepalive, true}, {nodelay, false}]", false},
		{"[{nodelay,false},{keepalive,false},{sndbuf,262144},{recbuf, 131072},{priority, 3}]",
			"[{keepalive, false}, {nodelay, false}, {sndbuf, 262144}, {recbuf, 131072}, {priority, 3}]", false},
		{"[{nodelay, true}, {nodelay, false}]", "[{nodelay, false}]", false},
		{"[{buffer, 4096}]", "buffer (the Erlang runtime's own receive buffer) has no equivalent", true},
		{"[{tos, 16}]", "tos is not supported; fdbrep applies keepalive, nodelay, sndbuf, recbuf and priority", true},
		{"[{nodelay, yes}]", "nodelay takes true or false, got yes", true},
		{"[{sndbuf, 0}]", "sndbuf takes an integer from 1 to 67108864, got 0", true},
		{"[{recbuf, 99999999999}]", "recbuf takes an integer from 1 to 67108864", true},
		{"[{priority, 7}]", "priority takes an integer from 0 to 6, got 7", true},
		{"{nodelay, true}", "expected a list", true},
		{"[{nodelay, true}", "expected ',' or ']' at the end", true},
		{"[{nodelay, true", "expected '}' closing the option nodelay at the end", true},
		{"[{nodelay, true, 1}]", "nodelay takes one value, got true, 1", true},
		{"[{nodelay, }]", "nodelay has no value", true},
		{"[{raw, 6, 1, <<1:32>>}]", "raw is not supported", true},
		{"[{linger, {true, 10}}, {nodelay, true}]", "linger is not supported", true},
		{"[{nodelay, true}] extra", "expected the end after ']'", true},
		{"[nodelay]", "expected a {name, value} tuple", true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			o, err := couch.ParseSocketOptions(tt.in)
			if tt.err {
				require.ErrorIs(t, err, couch.ErrInvalidOptions)
				require.ErrorContains(t, err, tt.want)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, o.String())
			again, err := couch.ParseSocketOptions(o.String())
			require.NoError(t, err)
			require.Equal(t, o, again)
		})
	}
	require.True(t, couch.SocketOptions{}.IsZero())
	require.ErrorIs(t, couch.Options{Socket: couch.SocketOptions{SendBuffer: -1}}.Validate(), couch.ErrInvalidOptions)
}
