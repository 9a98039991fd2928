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
	a := tr.begin(json.RawMessage("10"), 10, 0)
	b := tr.begin(json.RawMessage("20"), 4, 0)
	c := tr.begin(json.RawMessage("30"), 7, 0)
	tr.done(b)
	through, highest, n := tr.snapshot()
	require.Equal(t, "0", string(through))
	require.Equal(t, "20", string(highest))
	require.Equal(t, 3, n)
	tr.done(a)
	through, _, n = tr.snapshot()
	require.Equal(t, "20", string(through), "skips over the finished batch b")
	require.Equal(t, 1, n)
	_, passed := tr.passedThrough()
	require.EqualValues(t, 14, passed, "the changes of a and b")
	tr.done(c)
	tr.done(99) // unknown tickets are ignored
	through, highest, n = tr.snapshot()
	require.Equal(t, "30", string(through))
	require.Equal(t, "30", string(highest))
	require.Equal(t, 0, n)
	_, passed = tr.passedThrough()
	require.EqualValues(t, 21, passed)
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
			tickets[i] = tr.begin(json.RawMessage(strconv.Itoa((i+1)*10)), i+1, 0)
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
			_, passed := tr.passedThrough()
			require.EqualValues(t, prefix*(prefix+1)/2, passed, "the changes of the finished prefix")
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
		{name: "opaque: counted down by the batch's changes", start: `"0-a"`, end: `"40-b"`, recorded: ptr(int64(7)), want: 4},
		{name: "opaque: more changes than counted", start: `"0-a"`, end: `"40-b"`, recorded: ptr(int64(2)), want: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newSeqTracker(json.RawMessage(tc.start))
			c := &checkpointer{tracker: tr, stats: &counters{}}
			var u json.RawMessage
			if tc.updateSeq != "" {
				u = json.RawMessage(tc.updateSeq)
			}
			c.setPending(tc.recorded, 0, u)
			tr.done(tr.begin(json.RawMessage(tc.end), 3, 0))
			got := c.progress().ChangesPending
			require.NotNil(t, got)
			require.Equal(t, tc.want, *got)
		})
	}
	c := &checkpointer{tracker: newSeqTracker(json.RawMessage("0")), stats: &counters{}}
	c.setPending(nil, 0, json.RawMessage(`"not-a-number"`))
	require.Nil(t, c.progress().ChangesPending, "unknown")
}

func ptr[T any](v T) *T { return &v }

// Batches done past through_seq (a slow batch before them still in
// flight) count as processed, so changes_pending leaves them out: the
// processed and pending counts never add up to more than the source has.
func TestPendingLeavesOutBatchesDonePastThrough(t *testing.T) {
	for _, tc := range []struct {
		name      string
		recorded  *int64
		updateSeq string
	}{
		{name: "opaque", recorded: ptr(int64(100))},
		{name: "integer", updateSeq: "100"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newSeqTracker(json.RawMessage("0"))
			c := &checkpointer{tracker: tr, stats: &counters{}}
			var u json.RawMessage
			if tc.updateSeq != "" {
				u = json.RawMessage(tc.updateSeq)
			}
			c.setPending(tc.recorded, 0, u)
			slow := tr.begin(json.RawMessage("10"), 10, 0)
			tr.done(tr.begin(json.RawMessage("30"), 20, 0))
			tr.done(tr.begin(json.RawMessage("60"), 30, 0))
			require.Equal(t, int64(50), *c.progress().ChangesPending, "100 less the 50 done past through_seq")
			tr.done(slow)
			require.Equal(t, int64(40), *c.progress().ChangesPending, "through_seq passed them all")
		})
	}
}
