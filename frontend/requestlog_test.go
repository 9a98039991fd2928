package frontend

import (
	"encoding/json"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testsignal"
	"github.com/fdbrep/fdbrep/internal/testutil"
)

// lineSignal is a log writer that signals each line (zerolog writes one
// line per Write).
type lineSignal struct{ testsignal.Signal[string] }

func (s *lineSignal) Write(p []byte) (int, error) {
	s.Signal.Signal(string(p))
	return len(p), nil
}

// The request line names its fields' units: duration_ms is the time the
// request took, in milliseconds, as a number.
func TestRequestLogLine(t *testing.T) {
	lines := &lineSignal{}
	lines.Init()
	e := newEnv(t, func(o *Options) {
		logger := zerolog.New(lines)
		o.Logger = &logger
	})
	require.Equal(t, 200, e.do("GET", "/", anon, nil).Status)
	var line map[string]any
	testutil.WaitUntil(t, &lines.Signal, "the request line of GET /", func(l string) bool {
		line = nil
		require.NoError(t, json.Unmarshal([]byte(l), &line))
		return line["message"] == "request" && line["path"] == "/"
	})
	require.Equal(t, "GET", line["method"])
	require.EqualValues(t, 200, line["status"])
	require.IsType(t, float64(0), line["duration_ms"])
	require.GreaterOrEqual(t, line["duration_ms"], float64(0))
	require.NotContains(t, line, "duration")
}
