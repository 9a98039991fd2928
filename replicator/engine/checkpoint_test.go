package engine

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func hist(pairs ...string) []HistoryEntry {
	var h []HistoryEntry
	for i := 0; i+1 < len(pairs); i += 2 {
		h = append(h, HistoryEntry{SessionID: pairs[i], RecordedSeq: json.RawMessage(pairs[i+1])})
	}
	return h
}

func TestCompareLogs(t *testing.T) {
	tests := []struct {
		name     string
		src, tgt *CheckpointDoc
		seq      string
		history  int
		found    bool
	}{
		{"no logs", nil, nil, "0", 0, false},
		{"source only", &CheckpointDoc{SessionID: "a"}, nil, "0", 0, false},
		{
			"same session",
			&CheckpointDoc{SessionID: "a", SourceLastSeq: json.RawMessage(`"5-x"`), History: hist("a", `"5-x"`)},
			&CheckpointDoc{SessionID: "a", SourceLastSeq: json.RawMessage(`"5-x"`), History: hist("a", `"5-x"`)},
			`"5-x"`, 1, true,
		},
		{
			"source head found in target history",
			&CheckpointDoc{SessionID: "c", History: hist("c", "30", "b", "20", "a", "10")},
			&CheckpointDoc{SessionID: "d", History: hist("d", "40", "c", "30", "a", "10")},
			"30", 2, true,
		},
		{
			"target head found in source history",
			&CheckpointDoc{SessionID: "x", History: hist("x", "50", "b", "20")},
			&CheckpointDoc{SessionID: "b", History: hist("b", "20", "a", "10")},
			"20", 1, true,
		},
		{
			"ancestor deeper in both",
			&CheckpointDoc{SessionID: "x", History: hist("x", "50", "y", "40", "a", "10")},
			&CheckpointDoc{SessionID: "p", History: hist("p", "55", "q", "45", "a", "10")},
			"10", 0, true,
		},
		{
			"no common ancestry",
			&CheckpointDoc{SessionID: "x", History: hist("x", "50")},
			&CheckpointDoc{SessionID: "y", History: hist("y", "60")},
			"0", 0, false,
		},
		{
			"same session without seq",
			&CheckpointDoc{SessionID: "a"}, &CheckpointDoc{SessionID: "a"}, "0", 0, true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			seq, h, found := compareLogs(tt.src, tt.tgt)
			require.Equal(t, tt.seq, string(seq))
			require.Len(t, h, tt.history)
			require.Equal(t, tt.found, found)
		})
	}
}

func TestHistoryWithCaps(t *testing.T) {
	var h []HistoryEntry
	for i := 0; i < HistoryLimit+10; i++ {
		h = historyWith(HistoryEntry{SessionID: string(rune('a' + i%26))}, h)
	}
	require.Len(t, h, HistoryLimit)
	require.Equal(t, "Sun, 11 Aug 2013 20:38:50 GMT", rfc1123(time.Date(2013, 8, 11, 20, 38, 50, 0, time.UTC)))
	require.True(t, isZeroSeq(json.RawMessage(`"0"`)))
	require.False(t, isZeroSeq(json.RawMessage(`"1-abc"`)))
}
