package fdbjobs

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/subspace"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// The hand-built keys are the tuple layer's.
func TestDataKeyIsPacked(t *testing.T) {
	k := newKeys(subspace.Sub("jobs\x00"))
	for _, id := range []string{"", "a", "a\x00b", "\x00\xff"} {
		require.Equal(t, k.data.Pack(tuple.Tuple{"type\x00", id}), k.dataKey("type\x00", id), "%q", id)
	}
}

// Rows are the tuples they always were: encodeRow writes what Tuple.Pack
// of the ten elements writes, and decodeRow reads it back.
func TestRowCodec(t *testing.T) {
	vs := tuple.Versionstamp{TransactionVersion: [10]byte{1, 2, 3}, UserVersion: 7}
	tok := []byte{0, 1, 0xff, 0}
	for _, r := range []*row{
		{state: Pending, stime: 1 << 40, data: []byte(`{"a":1}`), shard: 3},
		{state: Pending, stime: -5, data: []byte{}, addToken: []byte{9}, prev: lock{tok, 4}},
		{state: Running, seq: vs, lock: lock{tok, 1 << 50}, stime: 1, resubmit: true, data: []byte{0}, shard: 1<<63 - 1},
		{state: Running, seqNew: true, lock: lock{[]byte{}, 2}, data: []byte("x")},
		{state: Finished, prev: lock{tok, 3}, data: []byte("done"), shard: -1},
	} {
		b, versionstamped := encodeRow(r)
		var seq tuple.TupleElement = int64(0)
		switch {
		case r.state == Finished:
			seq = nil
		case r.state == Running && r.seqNew:
			seq = tuple.IncompleteVersionstamp(0)
		case r.state == Running:
			seq = r.seq
		}
		tokenOf := func(l lock) tuple.TupleElement {
			if l.held() {
				return l.token
			}
			return nil
		}
		var add tuple.TupleElement
		if r.addToken != nil {
			add = r.addToken
		}
		want := tuple.Tuple{seq, tokenOf(r.lock), r.lock.index, r.stime, r.resubmit, tokenOf(r.prev), r.prev.index, r.data, add, r.shard}
		require.Equal(t, r.state == Running && r.seqNew, versionstamped)
		if versionstamped {
			w, err := want.PackWithVersionstamp(nil)
			require.NoError(t, err)
			require.Equal(t, w, b)
			continue
		}
		require.Equal(t, want.Pack(), b)
		got, err := decodeRow(b)
		require.NoError(t, err)
		r.stored, r.storedData = r.state, r.data
		if r.state == Running {
			r.storedSeq, r.storedToken = r.seq, r.lock.token // its lease
		}
		require.Equal(t, r, got)
	}
	for _, bad := range [][]byte{nil, tuple.Tuple{nil}.Pack(), append(tuple.Tuple{nil, nil, 0, 0, false, nil, 0, []byte{}, nil, 0}.Pack(), 0x14)} {
		_, err := decodeRow(bad)
		require.Error(t, err, "%x", bad)
	}
}

// A pending job's key holds its row when the row is small, and nothing
// when it is larger than inlineRowMax; Accept takes either with its data.
func TestPendingKeyHoldsSmallRows(t *testing.T) {
	b := setup(t)
	b.start(t)
	small, large := `{"v":1}`, `{"v":"`+strings.Repeat("x", inlineRowMax)+`"}`
	b.add(t, t1, j1, small, 1)
	b.add(t, t1, j2, large, 2)
	values := map[string][]byte{}
	for _, e := range b.scan(t, b.c.k.pending) {
		tup, err := b.c.k.pending.Unpack(e.Key)
		require.NoError(t, err)
		values[tup[3].(string)] = e.Value
	}
	require.Len(t, values, 2)
	row, err := kv.ReadTransact(b.ctx, b.db, func(tr kv.ReadTransaction) ([]byte, error) {
		return tr.Get(b.c.k.dataKey(t1, j1)).Get()
	})
	require.NoError(t, err)
	require.Equal(t, row, values[j1], "the small row, in its key")
	require.Empty(t, values[j2], "the large row, read by Accept")
	want := map[string]string{j1: small, j2: large}
	for range 2 {
		j, err := b.c.Accept(b.ctx, t1, AcceptOptions{MaxScheduledTime: 2})
		require.NoError(t, err)
		require.JSONEq(t, want[j.ID], string(j.Data))
		require.Equal(t, Running, b.state(t, t1, j.ID))
		require.NoError(t, b.c.Finish(b.ctx, nil, j, nil))
	}
	b.requireClean(t)
}
