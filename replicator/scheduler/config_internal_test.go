package scheduler

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestBackoffBounds(t *testing.T) {
	cfg := Config{MinBackoff: 32 * time.Second, MaxBackoff: 48 * time.Hour}.withDefaults()
	for n, want := range map[int]time.Duration{1: 32 * time.Second, 2: 64 * time.Second, 3: 128 * time.Second, 20: 48 * time.Hour, 1000: 48 * time.Hour} {
		for i := 0; i < 50; i++ {
			got := cfg.backoff(n, rand.Float64())
			require.LessOrEqual(t, got, want)
			require.GreaterOrEqual(t, got, want-want/4)
		}
	}
}
