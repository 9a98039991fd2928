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
