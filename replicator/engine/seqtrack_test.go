package engine

import (
	"encoding/json"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSeqTrackerOrdersBatches(t *testing.T) {
	tr := newSeqTracker(json.RawMessage("0"))
	a := tr.begin(json.RawMessage("10"))
	b := tr.begin(json.RawMessage("20"))
	c := tr.begin(json.RawMessage("30"))
	tr.done(b)
	through, highest, n := tr.snapshot()
	require.Equal(t, "0", string(through))
	require.Equal(t, "20", string(highest))
	require.Equal(t, 3, n)
	tr.done(a)
	through, _, n = tr.snapshot()
	require.Equal(t, "20", string(through), "skips over the finished batch b")
	require.Equal(t, 1, n)
	tr.done(c)
	tr.done(99) // unknown tickets are ignored
	through, highest, n = tr.snapshot()
	require.Equal(t, "30", string(through))
	require.Equal(t, "30", string(highest))
	require.Equal(t, 0, n)
}

// TestSeqTrackerRandom checks the tracker against a model: through is always
// the last sequence of the longest finished prefix.
func TestSeqTrackerRandom(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	for round := 0; round < 50; round++ {
		tr := newSeqTracker(json.RawMessage("0"))
		n := 1 + rng.IntN(40)
		tickets := make([]uint64, n)
		for i := range tickets {
			tickets[i] = tr.begin(json.RawMessage(strconv.Itoa((i + 1) * 10)))
		}
		done := make([]bool, n)
		for _, i := range rng.Perm(n) {
			tr.done(tickets[i])
			done[i] = true
			prefix := 0
			for prefix < n && done[prefix] {
				prefix++
			}
			through, _, inFlight := tr.snapshot()
			require.Equal(t, strconv.Itoa(prefix*10), string(through))
			require.Equal(t, n-prefix, inFlight)
		}
	}
}

// TestProgressCountsPendingDown: with an integer update_seq recorded,
// changes_pending follows through_seq between checkpoints; with opaque
// sequences it stays the count last recorded.
func TestProgressCountsPendingDown(t *testing.T) {
	for _, tc := range []struct {
		name       string
		start, end string
		updateSeq  string
		recorded   *int64
		want       int64 // after one batch ending at end
	}{
		{name: "integer", start: "0", end: "40", updateSeq: "100", want: 60},
		{name: "past update_seq", start: "90", end: "120", updateSeq: "100", want: 0},
		{name: "opaque", start: `"0-a"`, end: `"40-b"`, recorded: ptr(int64(7)), want: 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newSeqTracker(json.RawMessage(tc.start))
			c := &checkpointer{tracker: tr, stats: &counters{}}
			var u json.RawMessage
			if tc.updateSeq != "" {
				u = json.RawMessage(tc.updateSeq)
			}
			c.setPending(tc.recorded, u)
			tr.done(tr.begin(json.RawMessage(tc.end)))
			got := c.progress().ChangesPending
			require.NotNil(t, got)
			require.Equal(t, tc.want, *got)
		})
	}
	c := &checkpointer{tracker: newSeqTracker(json.RawMessage("0")), stats: &counters{}}
	c.setPending(nil, json.RawMessage(`"not-a-number"`))
	require.Nil(t, c.progress().ChangesPending, "unknown")
}

func ptr[T any](v T) *T { return &v }
