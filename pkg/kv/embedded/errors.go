package embedded

import (
	"errors"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// ErrInvalidOptions is returned by Open for bad Options.
var ErrInvalidOptions = errors.New("embedded: invalid options")

// ErrStoreFailed is wrapped by the error of every commit after the store
// failed to write a batch durably; the DB must be closed and reopened.
var ErrStoreFailed = errors.New("embedded: store failed")

// Codes this backend returns that kv does not name.
const (
	codeNoCommitVersion    = 2021 // no_commit_version
	codeRangeLimitsInvalid = 2210 // range_limits_invalid
)

func kvErr(code int) error { return kv.Error{Code: code} }

var (
	errTooOld            = kvErr(kv.CodeTransactionTooOld)
	errNotCommitted      = kvErr(kv.CodeNotCommitted)
	errCancelled         = kvErr(kv.CodeTransactionCancelled)
	errTimedOut          = kvErr(kv.CodeTransactionTimedOut)
	errUsedDuringCommit  = kvErr(kv.CodeUsedDuringCommit)
	errOutsideLegalRange = kvErr(kv.CodeKeyOutsideLegalRange)
	errInvertedRange     = kvErr(kv.CodeInvertedRange)
	errUnreadable        = kvErr(kv.CodeAccessedUnreadable)
	errOperationCancel   = kvErr(kv.CodeOperationCancelled)
	errInvalidOption     = kvErr(kv.CodeInvalidOptionValue)
	errInvalidOperation  = kvErr(kv.CodeClientInvalidOperation)
	errTooLarge          = kvErr(kv.CodeTransactionTooLarge)
	errKeyTooLarge       = kvErr(kv.CodeKeyTooLarge)
	errValueTooLarge     = kvErr(kv.CodeValueTooLarge)
	errTooManyWatches    = kvErr(kv.CodeTooManyWatches)
	errNoCommitVersion   = kvErr(codeNoCommitVersion)
	errRangeLimits       = kvErr(codeRangeLimitsInvalid)
	errUnknownResult     = kvErr(kv.CodeCommitUnknownResult)
)
