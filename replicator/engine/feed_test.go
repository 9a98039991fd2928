package engine

import (
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// feedParser is parseNormalFeed or parseContinuousFeed.
type feedParser func(io.Reader, int64, func(change) error) (json.RawMessage, error)

func collect(t *testing.T, parse feedParser, in string) ([]change, json.RawMessage, error) {
	t.Helper()
	var rows []change
	last, err := parse(strings.NewReader(in), ChangesRowMax, func(c change) error { rows = append(rows, c); return nil })
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
	_, err = parseNormalFeed(strings.NewReader(in), ChangesRowMax, func(change) error { return stop })
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

// endless is a reader of prefix followed by fill, forever: a peer's answer
// that never ends, never held whole.
type endless struct {
	prefix string
	fill   byte
	read   int64
}

func (e *endless) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		if e.read < int64(len(e.prefix)) {
			c := copy(p[n:], e.prefix[e.read:])
			n += c
			e.read += int64(c)
			continue
		}
		p[n] = e.fill
		n++
		e.read++
	}
	return n, nil
}

// A row over its limit fails the parse with errPartTooLarge having read
// about the limit, whatever follows: a row that never ends (continuous),
// a member that never ends (normal); the rows before it are delivered,
// and rows within the limit, however many, are read.
func TestFeedRowMax(t *testing.T) {
	const rowMax = 1000
	row := `{"seq":1,"id":"a","changes":[{"rev":"1-x"}]}`
	for _, tc := range []struct {
		name  string
		parse feedParser
		in    *endless
	}{
		{"continuous row", parseContinuousFeed, &endless{prefix: row + "\n" + `{"seq":2,"id":"`, fill: 'x'}},
		{"continuous spaces", parseContinuousFeed, &endless{prefix: row + "\n", fill: ' '}},
		{"normal row", parseNormalFeed, &endless{prefix: `{"results":[` + row + `,{"seq":2,"id":"`, fill: 'x'}},
		{"normal member", parseNormalFeed, &endless{prefix: `{"pending":"`, fill: 'x'}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rows []change
			_, err := tc.parse(tc.in, rowMax, func(c change) error { rows = append(rows, c); return nil })
			require.ErrorIs(t, err, errPartTooLarge)
			require.Less(t, tc.in.read, int64(len(tc.in.prefix)+2*rowMax+64<<10), "read no further than the limit and a buffer")
			if strings.Contains(tc.in.prefix, row) {
				require.Len(t, rows, 1)
			}
		})
	}
	var many strings.Builder
	many.WriteString(`{"results":[`)
	for i := range 100 {
		if i > 0 {
			many.WriteString(",")
		}
		many.WriteString(row)
	}
	many.WriteString(`],"last_seq":1}`)
	rows, _, err := collect(t, parseNormalFeed, many.String())
	require.NoError(t, err)
	require.Len(t, rows, 100)

	// Heartbeats are not rows: a continuous feed may send any number.
	beats := strings.Repeat("\n", 3*rowMax)
	rows = nil
	last, err := parseContinuousFeed(strings.NewReader(beats+row+"\n"+beats+`{"last_seq":1}`+"\n"), rowMax,
		func(c change) error { rows = append(rows, c); return nil })
	require.NoError(t, err)
	require.Len(t, rows, 1)
	require.Equal(t, "1", string(last))
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
		_, _ = parseNormalFeed(strings.NewReader(in), ChangesRowMax, check)
		_, _ = parseContinuousFeed(strings.NewReader(in), ChangesRowMax, check)
	})
}

func TestSeqEqual(t *testing.T) {
	require.True(t, seqEqual(json.RawMessage(`"1-a"`), json.RawMessage(` "1-a" `)))
	require.True(t, seqEqual(json.RawMessage(`[1, "a"]`), json.RawMessage(`[1,"a"]`)))
	require.False(t, seqEqual(json.RawMessage(`1`), json.RawMessage(`2`)))
	require.False(t, seqEqual(json.RawMessage(`{`), json.RawMessage(`2`)))
}
