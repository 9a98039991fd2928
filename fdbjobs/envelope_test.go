package fdbjobs

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDecodeEnvelopeArgsOnly checks decodeEnvelope's fast path for an
// envelope of arguments alone against json.Unmarshal: the same envelope,
// or (for a form it leaves to json.Unmarshal) the same outcome; data that
// is valid JSON but no envelope (a job added with Add) are the arguments.
// A partitioned job's envelope with its arguments and plain partition
// alone takes the fast path too (trailingPartition).
func TestDecodeEnvelopeArgsOnly(t *testing.T) {
	for _, tc := range []struct {
		data string
		fast bool // argsOnly takes it
	}{
		{`{"args":{"to":"ada"}}`, true},
		{`{"args":{"s":"a,}]\"{"}}`, true},
		{`{"args":[1,[2,{"a":[]}]]}`, true},
		{`{"args":"x"}`, true},
		{`{"args":12}`, true},
		{`{"args":null}`, true},
		{`{"args":{"to":"ada"},"attempt":2}`, false},
		{`{"args":1,"attempt":2}`, false},
		{`{"args":{"a":1}}{"x":2}`, false},
		{`{"args": {"a":1}}`, false},
		{`{"args":{"a":1}`, false},
		{`{"args":"unterminated}`, false},
		{`{"args":}`, false},
		{`{"attempt":1,"args":{}}`, false},
		{`{"group":"g","since":"12"}`, false},
		{`[1,2]`, false},
		{`"text"`, false},
		{`{"args":1,"attempt":"x"}`, false},
		// A partitioned job's first attempt: trailingPartition, then argsOnly.
		{`{"args":{"to":"ada"},"partition":"t1"}`, false},
		{`{"args":{"s":",\"partition\":\"x"},"partition":"t1"}`, false},
		{`{"args":{"a":1,"partition":"x"}}`, true},
		{`{"args":{"a":1},"partition":"a\"b"}`, false},
		{`{"args":{"a":1},"partition":"\u003c"}`, false},
		{`{"args":{"a":1},"attempt":2,"partition":"t"}`, false},
		{`{"args":{"a":1},"partition":"t","attempt":2}`, false},
		{`{"args":{"a":1},"partition":"é"}`, false},
		{`{"args":{"a":1},"partition":""}`, false},
		{`{"args":{"a":1},"partition":"t"`, false},
		{`{"args":,"partition":"t"}`, false},
	} {
		t.Run(tc.data, func(t *testing.T) {
			_, fast := argsOnly([]byte(tc.data))
			require.Equal(t, tc.fast, fast)
			got, err := decodeEnvelope(json.RawMessage(tc.data))
			var want envelope
			werr := json.Unmarshal([]byte(tc.data), &want)
			switch {
			case !json.Valid([]byte(tc.data)):
				require.ErrorIs(t, err, errDecode)
				return
			case werr != nil || want.Args == nil:
				want = envelope{Args: json.RawMessage(tc.data)} // no envelope: its data are its arguments
			}
			require.NoError(t, err)
			require.JSONEq(t, string(want.Args), string(got.Args))
			got.Args, want.Args = nil, nil
			require.Equal(t, want, *got)
		})
	}
}

// A partitioned job's envelope of arguments and a plain partition splits
// without decoding; others are left to json.Unmarshal.
func TestTrailingPartition(t *testing.T) {
	for _, tc := range []struct{ data, rest, part string }{
		{`{"args":{"to":"ada"},"partition":"t1"}`, `{"args":{"to":"ada"}`, "t1"},
		{`{"args":1,"outcome":"completed","finished_at":5,"partition":"é"}`, `{"args":1,"outcome":"completed","finished_at":5`, "é"},
		{`{"args":1,"partition":""}`, `{"args":1`, ""},
		{`{"args":1,"partition":"a\"b"}`, "", ""},
		{`{"args":1,"partition":"\u003c"}`, "", ""},
		{`{"args":1,"partition":"t","x":"y"}`, "", ""},
		{`{"args":1}`, "", ""},
		{"{\"args\":1,\"partition\":\"\xff\"}", "", ""},
	} {
		rest, p, ok := trailingPartition([]byte(tc.data))
		require.Equal(t, tc.rest != "", ok, tc.data)
		require.Equal(t, tc.rest, string(rest), tc.data)
		require.Equal(t, tc.part, p, tc.data)
	}
}
