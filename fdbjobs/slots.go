package fdbjobs

import (
	"context"
	"sync"
)

// slots counts the jobs of a kind that a Runtime accepted and that have
// not ended, up to the kind's Concurrency, which SetConcurrency changes
// while the Runtime runs.
type slots struct {
	mu sync.Mutex
	// limit is the kind's Concurrency and held the slots taken; mu guards
	// both.
	limit, held int
	// room is signalled (buffer of one) when a slot may have become free.
	room chan struct{}
}

func newSlots(limit int) *slots { return &slots{limit: limit, room: make(chan struct{}, 1)} }

// take waits for a free slot, then takes as many free ones as there are,
// up to most; 0 when ctx ends first.
func (s *slots) take(ctx context.Context, most int) int {
	for {
		s.mu.Lock()
		if free := s.limit - s.held; free > 0 {
			n := min(free, most)
			s.held += n
			s.mu.Unlock()
			if free > n {
				s.signal() // for another fetcher
			}
			return n
		}
		s.mu.Unlock()
		select {
		case <-s.room:
		case <-ctx.Done():
			return 0
		}
	}
}

// give frees n slots.
func (s *slots) give(n int) {
	s.mu.Lock()
	s.held -= n
	room := s.held < s.limit
	s.mu.Unlock()
	if room {
		s.signal()
	}
}

// setLimit makes limit the most slots taken at once; slots taken beyond
// it stay taken until given back.
func (s *slots) setLimit(limit int) {
	s.mu.Lock()
	s.limit = limit
	s.mu.Unlock()
	s.signal()
}

// size is the limit.
func (s *slots) size() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.limit
}

func (s *slots) signal() {
	select {
	case s.room <- struct{}{}:
	default:
	}
}
