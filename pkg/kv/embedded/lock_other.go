//go:build !unix

package embedded

// lockRefused is false where the lock's error is not known.
func lockRefused(error) bool { return false }

// lockHolder is 0 (unknown) where locks cannot be queried.
func lockHolder(string) int { return 0 }
