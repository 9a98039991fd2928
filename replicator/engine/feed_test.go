package engine

import (
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func collect(t *testing.T, parse func(io.Reader, func(change) error) (json.RawMessage, error), in string) ([]change, json.RawMessage, error) {
	t.Helper()
	var rows []change
	last, err := parse(strings.NewReader(in), func(c change) error { rows = append(rows, c); return nil })
	return rows, last, err
}

func TestParseNormalFeed(t *testing.T) {
	in := `{"results":[
{"seq":1,"id":"a","changes":[{"rev":"1-x"}]},
{"seq":2,"id":"b","changes":[{"rev":"2-y"},{"rev":"2-z"}],"deleted":true},
{"seq":3,"id":"","changes":[{"rev":"1-q"}]},
{"seq":4,"id":"c","changes":[{"rev":"1-r"}],"removed":true},
{"seq":"5-g1AAA","id":"d","changes":[{"rev":"3-s"}],"doc":{"ignored":true}}
],"last_seq":"5-g1AAA","pending":0}`
	rows, last, err := collect(t, parseNormalFeed, in)
	require.NoError(t, err)
	require.Equal(t, `"5-g1AAA"`, string(last))
	require.Len(t, rows, 3)
	require.Equal(t, change{Seq: json.RawMessage("1"), ID: "a", Revs: []string{"1-x"}}, rows[0])
	require.Equal(t, []string{"2-y", "2-z"}, rows[1].Revs)
	require.True(t, rows[1].Deleted)
	require.Equal(t, "d", rows[2].ID)

	_, last, err = collect(t, parseNormalFeed, `{"results":[]}`)
	require.NoError(t, err)
	require.Nil(t, last)

	for _, bad := range []string{``, `[]`, `{"results":[{"seq":1,"id":"a"`, `{"results":{}}`, `{"results":[1]}`, `{"last_seq":}`} {
		_, _, err := collect(t, parseNormalFeed, bad)
		require.Error(t, err, bad)
	}

	stop := errors.New("stop")
	_, err = parseNormalFeed(strings.NewReader(in), func(change) error { return stop })
	require.ErrorIs(t, err, stop)
}

func TestParseContinuousFeed(t *testing.T) {
	in := "{\"seq\":1,\"id\":\"a\",\"changes\":[{\"rev\":\"1-x\"}]}\n\n\n{\"seq\":2,\"id\":\"b\",\"changes\":[{\"rev\":\"1-y\"}]}\n{\"last_seq\":2}\n"
	rows, last, err := collect(t, parseContinuousFeed, in)
	require.NoError(t, err)
	require.Len(t, rows, 2)
	require.Equal(t, "2", string(last))

	rows, last, err = collect(t, parseContinuousFeed, "{\"seq\":1,\"id\":\"a\",\"changes\":[{\"rev\":\"1-x\"}]}\n\n")
	require.NoError(t, err)
	require.Len(t, rows, 1)
	require.Nil(t, last)

	_, _, err = collect(t, parseContinuousFeed, "{\"seq\":1,\"id\":\"a\",\"chan")
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
	_, _, err = collect(t, parseContinuousFeed, "garbage")
	require.ErrorIs(t, err, errBadFeed)
}

func FuzzParseFeed(f *testing.F) {
	f.Add(`{"results":[{"seq":1,"id":"a","changes":[{"rev":"1-x"}]}],"last_seq":1}`)
	f.Add(`{"results":[{"seq":"2-x","id":"b","changes":[{"rev":"2-y"},{"rev":"2-z"}],"deleted":true,"removed":true}],"last_seq":"2-x","pending":3}`)
	f.Add("{\"seq\":1,\"id\":\"a\",\"changes\":[{\"rev\":\"1-x\"}]}\n\n{\"last_seq\":1}\n")
	f.Add(`{"results":[{"seq":[1,"x"],"id":"","changes":[]}]}`)
	f.Fuzz(func(t *testing.T, in string) {
		check := func(c change) error {
			if c.ID == "" || len(c.Revs) == 0 {
				t.Fatalf("unusable row delivered: %+v", c)
			}
			return nil
		}
		_, _ = parseNormalFeed(strings.NewReader(in), check)
		_, _ = parseContinuousFeed(strings.NewReader(in), check)
	})
}

func TestSeqEqual(t *testing.T) {
	require.True(t, seqEqual(json.RawMessage(`"1-a"`), json.RawMessage(` "1-a" `)))
	require.True(t, seqEqual(json.RawMessage(`[1, "a"]`), json.RawMessage(`[1,"a"]`)))
	require.False(t, seqEqual(json.RawMessage(`1`), json.RawMessage(`2`)))
	require.False(t, seqEqual(json.RawMessage(`{`), json.RawMessage(`2`)))
}
