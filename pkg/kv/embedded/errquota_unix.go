//go:build unix

package embedded

import "syscall"

// errQuota is the error of a write beyond the user's disk quota, which
// counts as a full disk.
var errQuota error = syscall.EDQUOT
