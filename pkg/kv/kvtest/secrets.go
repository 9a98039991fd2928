package kvtest

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// RequireNotStored fails t when a key or value of db (nil: none) or a
// file under dir ("": none) holds one of secrets: the check that
// credentials are not kept in the clear at rest. It returns how many keys
// and files it read.
func RequireNotStored(t testing.TB, db kv.Database, dir string, secrets ...[]byte) (keys, files int) {
	t.Helper()
	if db != nil {
		require.NoError(t, kv.ReadPages(context.Background(), db, kv.KeyRange{Begin: kv.Key(""), End: kv.Key("\xff")}, 1000,
			func(page []kv.KeyValue) (bool, error) {
				for _, kvp := range page {
					keys++
					for _, sec := range secrets {
						require.False(t, bytes.Contains(kvp.Key, sec) || bytes.Contains(kvp.Value, sec),
							"a credential in the clear under key %q", kvp.Key)
					}
				}
				return false, nil
			}))
	}
	if dir != "" {
		require.NoError(t, filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
			// A file the open store removed meanwhile (an obsolete
			// OPTIONS or log file) holds nothing any more.
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			if err != nil || e.IsDir() {
				return err
			}
			b, err := os.ReadFile(path)
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			if err != nil {
				return err
			}
			files++
			for _, sec := range secrets {
				require.False(t, bytes.Contains(b, sec), "a credential in the clear in %s", path)
			}
			return nil
		}))
	}
	return keys, files
}
