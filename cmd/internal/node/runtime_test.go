package node

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/config"
)

// [log] level changes the level of every copy of a node's logger.
func TestLogLevelAtRunTime(t *testing.T) {
	c, err := config.FromMap(map[string]map[string]string{"log": {"format": "json", "level": "info"}})
	require.NoError(t, err)
	var buf testutil.SyncBuffer
	lg := NewLog(c, &buf)
	copied := lg.With().Str("component", "x").Logger()
	for _, tc := range []struct {
		level       string
		debug, info bool
		warn        bool
	}{
		{"info", false, true, true},
		{"debug", true, true, true},
		{"warn", false, false, true},
	} {
		lg.level.set(tc.level)
		before := len(buf.String())
		copied.Debug().Msg("d-" + tc.level)
		copied.Info().Msg("i-" + tc.level)
		copied.Warn().Msg("w-" + tc.level)
		out := buf.String()[before:]
		require.Equal(t, tc.debug, strings.Contains(out, "d-"+tc.level), tc.level)
		require.Equal(t, tc.info, strings.Contains(out, "i-"+tc.level), tc.level)
		require.Equal(t, tc.warn, strings.Contains(out, "w-"+tc.level), tc.level)
	}
}
