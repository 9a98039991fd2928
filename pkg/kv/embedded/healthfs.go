package embedded

import (
	"errors"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// healthFS is the file system under pebble. A write that fails (a full
// disk above all: ENOSPC) is not returned to pebble, which would either
// treat it as fatal (WAL and MANIFEST writes) or retry a failed flush in a
// tight loop, logging each time. The write waits instead and is retried
// with a growing delay until it succeeds, while the store reports itself
// unhealthy and refuses new commits (see health.go). When space returns the
// waiting writes complete and the store resumes where it was: nothing is
// lost. Syncs are not retried: after a failed fsync the kernel may have
// dropped the dirty pages, so a retry could report durability falsely; the
// error goes to pebble, which stops the process.
type healthFS struct {
	vfs.FS
	h *health
}

// Write retry delays: the first retry after writeRetryInitial, doubling up
// to writeRetryMax.
const (
	writeRetryInitial = 10 * time.Millisecond
	writeRetryMax     = time.Second
)

func (fs *healthFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	var f vfs.File
	err := fs.h.retry(name, func() error {
		var err error
		f, err = fs.FS.Create(name, category)
		return err
	})
	return fs.wrap(name, f), err
}

func (fs *healthFS) OpenReadWrite(name string, category vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.OpenReadWrite(name, category, opts...)
	return fs.wrap(name, f), err
}

func (fs *healthFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname, category)
	return fs.wrap(newname, f), err
}

func (fs *healthFS) Unwrap() vfs.FS { return fs.FS }

func (fs *healthFS) wrap(name string, f vfs.File) vfs.File {
	if f == nil {
		return nil
	}
	return &healthFile{File: f, name: name, h: fs.h}
}

// healthFile retries its writes as healthFS describes.
type healthFile struct {
	vfs.File
	name string
	h    *health
}

func (f *healthFile) Write(p []byte) (int, error) {
	done := 0
	err := f.h.retry(f.name, func() error {
		n, err := f.File.Write(p[done:])
		done += n
		return err
	})
	return done, err
}

func (f *healthFile) WriteAt(p []byte, off int64) (int, error) {
	done := 0
	err := f.h.retry(f.name, func() error {
		n, err := f.File.WriteAt(p[done:], off+int64(done))
		done += n
		return err
	})
	return done, err
}

func (f *healthFile) Preallocate(offset, length int64) error {
	return f.h.retry(f.name, func() error { return f.File.Preallocate(offset, length) })
}

// writeWaiter coordinates the writes that wait for the disk: how many wait,
// since when, on what, and a channel to wake them early (tests).
type writeWaiter struct {
	mu      sync.Mutex
	waiting int
	since   time.Time
	err     error // the first error of the current episode
	file    string
	wake    chan struct{}
}

// retry runs write until it succeeds. While it fails the store is
// unhealthy; the first failure of an episode makes the store refuse
// commits at once and fail those in flight.
func (h *health) retry(file string, write func() error) error {
	err := write()
	if err == nil {
		return nil
	}
	delay := writeRetryInitial
	h.waitBegin(file, err)
	defer h.waitEnd()
	for {
		h.w.mu.Lock()
		wake := h.w.wake
		h.w.mu.Unlock()
		h.logWaiting(file, err)
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-wake:
			t.Stop()
		}
		delay = min(2*delay, writeRetryMax)
		if err = write(); err == nil {
			return nil
		}
	}
}

func (h *health) waitBegin(file string, err error) {
	h.w.mu.Lock()
	h.w.waiting++
	first := h.w.waiting == 1
	if first {
		h.w.since, h.w.err, h.w.file = h.clock.Now(), err, file
	}
	h.w.mu.Unlock()
	if first {
		h.logWaiting(file, err)
		h.changed()
		if h.onBlocked != nil {
			h.onBlocked()
		}
	}
}

func (h *health) logWaiting(file string, err error) {
	h.logf("waiting", "embedded: %s: writing %s failed (%v); retrying, commits are refused meanwhile", h.dir, file, err)
}

func (h *health) waitEnd() {
	h.w.mu.Lock()
	h.w.waiting--
	last := h.w.waiting == 0
	if last {
		h.w.err, h.w.file = nil, ""
	}
	h.w.mu.Unlock()
	if last {
		h.logf("resumed", "embedded: %s: writes succeed again; commits are accepted", h.dir)
		h.changed()
	}
}

// wakeWriters makes the waiting writes retry at once.
func (h *health) wakeWriters() {
	h.w.mu.Lock()
	close(h.w.wake)
	h.w.wake = make(chan struct{})
	h.w.mu.Unlock()
}

// writesBlocked returns the error the waiting writes failed with, the file
// and since when, or a nil error if no write waits.
func (h *health) writesBlocked() (err error, file string, since time.Time) {
	h.w.mu.Lock()
	defer h.w.mu.Unlock()
	if h.w.waiting == 0 {
		return nil, "", time.Time{}
	}
	return h.w.err, h.w.file, h.w.since
}

// isNoSpace reports whether err means the disk (or the user's quota) is
// full.
func isNoSpace(err error) bool {
	return vfs.IsNoSpaceError(err) || errors.Is(err, errQuota)
}
