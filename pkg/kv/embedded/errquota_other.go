//go:build !unix

package embedded

import "errors"

// errQuota matches nothing where the platform has no EDQUOT.
var errQuota = errors.New("embedded: no quota error on this platform")
