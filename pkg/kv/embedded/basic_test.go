package embedded

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

func TestSetGetClear(t *testing.T) {
	db := openMem(t)
	put(t, db, "a", "1", "b", "2")
	v, ok := read(t, db, "a")
	require.True(t, ok)
	require.Equal(t, "1", v)
	_, err := db.Transact(context.Background(), func(tr kv.Transaction) (any, error) {
		tr.Clear(kv.Key("a"))
		return nil, nil
	})
	require.NoError(t, err)
	_, ok = read(t, db, "a")
	require.False(t, ok)
	put(t, db, "e", "")
	v, ok = read(t, db, "e")
	require.True(t, ok, "an empty value is present")
	require.Equal(t, "", v)
}
