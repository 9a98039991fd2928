package kvtest

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

var errorTests = []conformanceTest{
	{"Predicates", testErrorPredicates},
	inScenario("BackendErrorsAreUnwrapped", testErrorsUnwrapped),
}

func testErrorPredicates(t *testing.T, _ OpenFunc) {
	for _, tc := range []struct {
		code                                 int
		retryable, maybeCommitted, notCommit bool
	}{
		{kv.CodeNotCommitted, true, false, true},
		{kv.CodeTransactionTooOld, true, false, true},
		{kv.CodeFutureVersion, true, false, true},
		{kv.CodeProcessBehind, true, false, true},
		{kv.CodeDatabaseLocked, true, false, true},
		{kv.CodeProxyMemoryLimit, true, false, true},
		{kv.CodeBatchTransactionThrottl, true, false, true},
		{kv.CodeTagThrottled, true, false, true},
		{kv.CodeGRVProxyMemoryLimit, true, false, true},
		{kv.CodeProxyTagThrottled, true, false, true},
		{kv.CodeBlobGranuleRequest, false, false, false},
		{kv.CodeIOError, false, false, false},
		{kv.CodeUsedDuringCommit, false, false, false},
		{kv.CodeRangeLimitsInvalid, false, false, false},
		{kv.CodeCommitUnknownResult, true, true, false},
		{kv.CodeClusterVersionChanged, true, true, false},
		{kv.CodeTransactionTimedOut, false, false, false},
		{kv.CodeTransactionCancelled, false, false, false},
		{kv.CodeOperationCancelled, false, false, false},
		{kv.CodeAccessedUnreadable, false, false, false},
		{kv.CodeTransactionTooLarge, false, false, false},
		{kv.CodeKeyTooLarge, false, false, false},
		{kv.CodeValueTooLarge, false, false, false},
		{kv.CodeKeyOutsideLegalRange, false, false, false},
		{kv.CodeInternalError, false, false, false},
	} {
		e := kv.Error{Code: tc.code}
		t.Run(e.Name(), func(t *testing.T) {
			require.Equal(t, tc.retryable, e.Retryable())
			require.Equal(t, tc.maybeCommitted, e.MaybeCommitted())
			require.Equal(t, tc.notCommit, e.RetryableNotCommitted())
			wrapped := fmt.Errorf("context: %w", e)
			require.Equal(t, tc.retryable, kv.IsRetryable(wrapped))
			require.Equal(t, tc.maybeCommitted, kv.IsMaybeCommitted(wrapped))
			require.True(t, kv.HasCode(wrapped, tc.code))
			require.True(t, strings.HasPrefix(e.Error(), fmt.Sprintf("FoundationDB error code %d (", tc.code)),
				"the binding's format: %s", e.Error())
		})
	}
	require.False(t, kv.IsRetryable(errors.New("other")))
	require.False(t, kv.HasCode(nil, kv.CodeNotCommitted))
	require.Equal(t, "unknown_error_12345", kv.Error{Code: 12345}.Name())
}

// testErrorsUnwrapped: what the backend returns for a conflict is a kv.Error
// value itself, not a wrapper, so code that type-switches works too.
func testErrorsUnwrapped(t *testing.T, db kv.Database, ks keyspace) {
	tr := newTr(t, db)
	wait(t, tr.Get(ks.key("k")))
	err := commitAfterWrite(t, db, ks, tr, "k", true)
	_, ok := err.(kv.Error)
	require.True(t, ok, "error is %T, want kv.Error", err)

	tr = newTr(t, db)
	tr.Cancel()
	_, err = tr.Get(ks.key("k")).Get()
	mustCode(t, err, kv.CodeTransactionCancelled)
	_, ok = err.(kv.Error)
	require.True(t, ok, "error is %T, want kv.Error", err)
}
