package enginetest

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDiff(t *testing.T) {
	base := func() Snapshot {
		return Snapshot{
			"a": {"1-x": {Body: map[string]any{"v": "1"}, Path: []string{"1-x"}}},
			"b": {"2-y": {Path: []string{"2-y", "1-y"}, Attachments: map[string]Attachment{"f": {ContentType: "text/plain", Data: []byte("hi")}}}},
		}
	}
	require.Empty(t, Diff(base(), base()))

	got := base()
	delete(got, "a")
	got["c"] = map[string]Revision{"1-z": {}}
	got["b"]["3-w"] = Revision{}
	got["b"]["2-y"].Attachments["f"] = Attachment{ContentType: "text/plain", Data: []byte("ho")}
	diffs := Diff(base(), got)
	require.Len(t, diffs, 4)
	require.Equal(t, "b: leaf 2-y differs", diffs[0][:len("b: leaf 2-y differs")])
	require.Equal(t, "b: unexpected leaf 3-w", diffs[1])
	require.Equal(t, "missing document a", diffs[2])
	require.Equal(t, "unexpected document c", diffs[3])
}
