//go:build unix

package embedded

import (
	"errors"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// lockRefused reports whether pebble's open failed because another process
// holds the store's LOCK file (fcntl locks answer EAGAIN or EACCES).
func lockRefused(err error) bool {
	return errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES)
}

// lockHolder returns the pid of the process holding dir's LOCK file, or 0
// when it cannot tell.
func lockHolder(dir string) int {
	f, err := os.Open(filepath.Join(dir, "LOCK"))
	if err != nil {
		return 0
	}
	defer f.Close()
	spec := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart}
	if err := unix.FcntlFlock(f.Fd(), unix.F_GETLK, &spec); err != nil || spec.Type == unix.F_UNLCK {
		return 0
	}
	return int(spec.Pid)
}
