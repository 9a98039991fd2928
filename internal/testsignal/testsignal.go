// Package testsignal lets tests wait for something to happen inside a
// service instead of sleeping or polling, after River's testsignal.
//
// A service keeps a struct of Signals and calls Signal at the moments
// tests care about ("an interval's rescheduling ended", "a job started").
// A Signal does nothing, at no cost beyond a nil check, until a test calls
// Init before the service starts; then every value is kept (up to
// BufferSize) for the test to receive from C or with testutil.Wait.
package testsignal

// BufferSize is how many values an initialised Signal keeps before Signal
// drops further ones: a test that lets that many pile up is not waiting on
// them.
const BufferSize = 1024

// Signal carries values of T from a service to a test.
type Signal[T any] struct {
	ch chan T
}

// Init turns the signal on. Call it before the service that signals runs.
func (s *Signal[T]) Init() { s.ch = make(chan T, BufferSize) }

// Signal records v if the signal was initialised; it never blocks.
func (s *Signal[T]) Signal(v T) {
	if s.ch == nil {
		return
	}
	select {
	case s.ch <- v:
	default:
	}
}

// C returns the channel the values arrive on (nil, which blocks for ever,
// when the signal was not initialised).
func (s *Signal[T]) C() <-chan T { return s.ch }
