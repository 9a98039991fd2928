package embedded

import (
	"errors"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// ErrInvalidOptions is returned by Open for bad Options.
var ErrInvalidOptions = errors.New("embedded: invalid options")

// ErrInUse is wrapped by Open's error when the store's directory is held
// by another open store: another process (named by its pid when the
// system tells it) or this one.
var ErrInUse = errors.New("embedded: store in use")

// ErrStoreFailed is wrapped, with kv.Error{Code: kv.CodeIOError}, by the
// error of every commit after pebble failed to apply a batch; the DB must
// be closed and reopened. (A full or failing disk is not such a failure:
// see DB.Health.)
var ErrStoreFailed = errors.New("embedded: store failed")

func kvErr(code int) error { return kv.Error{Code: code} }

var (
	errTooOld            = kvErr(kv.CodeTransactionTooOld)
	errNotCommitted      = kvErr(kv.CodeNotCommitted)
	errCancelled         = kvErr(kv.CodeTransactionCancelled)
	errTimedOut          = kvErr(kv.CodeTransactionTimedOut)
	errUsedDuringCommit  = kvErr(kv.CodeUsedDuringCommit)
	errOutsideLegalRange = kvErr(kv.CodeKeyOutsideLegalRange)
	errSpecialKeysWrite  = kvErr(kv.CodeSpecialKeysWriteDisabled)
	errInvertedRange     = kvErr(kv.CodeInvertedRange)
	errUnreadable        = kvErr(kv.CodeAccessedUnreadable)
	errOperationCancel   = kvErr(kv.CodeOperationCancelled)
	errInvalidOption     = kvErr(kv.CodeInvalidOptionValue)
	errInvalidOperation  = kvErr(kv.CodeClientInvalidOperation)
	errTooLarge          = kvErr(kv.CodeTransactionTooLarge)
	errKeyTooLarge       = kvErr(kv.CodeKeyTooLarge)
	errValueTooLarge     = kvErr(kv.CodeValueTooLarge)
	errTooManyWatches    = kvErr(kv.CodeTooManyWatches)
	errNoCommitVersion   = kvErr(kv.CodeNoCommitVersion)
	errRangeLimits       = kvErr(kv.CodeRangeLimitsInvalid)
	errExactMode         = kvErr(kv.CodeExactModeWithoutLimits)
	errIO                = kvErr(kv.CodeIOError)
	errUnknownResult     = kvErr(kv.CodeCommitUnknownResult)
)
