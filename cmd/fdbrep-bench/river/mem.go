package main

import (
	"runtime/metrics"
	"sync/atomic"
	"time"
)

// goMemSamples are the runtime metrics whose sum is a process's live Go
// memory as a job library grows it: the heap the last garbage collection
// found live, and the goroutine stacks (the River peer samples the same).
// Live, not all heap objects: these would count the garbage not collected
// yet, which measures how fast a side allocates, not what it holds.
var goMemSamples = []string{"/gc/heap/live:bytes", "/memory/classes/heap/stacks:bytes"}

// goMem is this process's live heap plus goroutine stacks, in bytes.
func goMem() int64 {
	s := make([]metrics.Sample, len(goMemSamples))
	for i, name := range goMemSamples {
		s[i].Name = name
	}
	metrics.Read(s)
	var n int64
	for _, x := range s {
		if x.Value.Kind() == metrics.KindUint64 {
			n += int64(x.Value.Uint64())
		}
	}
	return n
}

// memSampler keeps the peak of goMem, sampled every memSampleEvery from
// its start until end.
type memSampler struct {
	base int64
	peak atomic.Int64
	stop chan struct{}
	done chan struct{}
}

const memSampleEvery = 20 * time.Millisecond

func startMem() *memSampler {
	m := &memSampler{base: goMem(), stop: make(chan struct{}), done: make(chan struct{})}
	m.peak.Store(m.base)
	go func() {
		defer close(m.done)
		t := time.NewTicker(memSampleEvery)
		defer t.Stop()
		for {
			select {
			case <-m.stop:
				return
			case <-t.C:
				if v := goMem(); v > m.peak.Load() {
					m.peak.Store(v)
				}
			}
		}
	}()
	return m
}

// end stops the sampling and returns the memory at its start and its
// peak.
func (m *memSampler) end() (base, peak int64) {
	close(m.stop)
	<-m.done
	return m.base, m.peak.Load()
}
