package replicator

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestEnqueueTime(t *testing.T) {
	cfg := Config{FairShareWindow: time.Hour, StartupJitter: time.Second, Shares: map[string]int{"a/_replicator": 200}}.WithDefaults()
	now := time.UnixMilli(10_000_000_000)
	base := Millis(now) - 2000 - time.Hour.Milliseconds()
	usage := Usage{"a/_replicator": 2000, "b/_replicator": 1000, "c/_replicator": 500}
	// p: a 10, b 10, c 5 -> a and b at the back, c half way.
	require.Equal(t, base+time.Hour.Milliseconds(), cfg.EnqueueTime(now, usage, "a/_replicator"))
	require.Equal(t, base+time.Hour.Milliseconds(), cfg.EnqueueTime(now, usage, "b/_replicator"))
	require.Equal(t, base+time.Hour.Milliseconds()/2, cfg.EnqueueTime(now, usage, "c/_replicator"))
	require.Equal(t, base, cfg.EnqueueTime(now, usage, "idle/_replicator"))
	require.Equal(t, base, cfg.EnqueueTime(now, nil, "a/_replicator"))
	off := Config{FairShareWindow: -1, StartupJitter: time.Second}.WithDefaults()
	require.Equal(t, Millis(now)-2000, off.EnqueueTime(now, usage, "a/_replicator"))
}
