package frontend

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestChangesLongpoll(t *testing.T) {
	e := newEnv(t)
	r := e.do("PUT", "/_replicator/a", asAdmin, repDoc())
	require.Equal(t, 201, r.Status)
	last := e.do("GET", "/_replicator/_changes", asAdmin, nil).Body["last_seq"].(string)

	// Existing changes answer at once.
	r = e.do("GET", "/_replicator/_changes?feed=longpoll", asAdmin, nil)
	require.Len(t, r.Body["results"], 1)

	// Nothing new: the request waits until a write.
	got := make(chan resp, 1)
	go func() { got <- e.do("GET", "/_replicator/_changes?feed=longpoll&since="+last, asAdmin, nil) }()
	select {
	case r := <-got:
		t.Fatalf("longpoll answered before any change: %s", r.Raw)
	default:
	}
	require.Equal(t, 201, e.do("PUT", "/_replicator/b", asAdmin, repDoc()).Status)
	r = <-got
	require.Equal(t, 200, r.Status, r.Raw)
	res := r.Body["results"].([]any)
	require.Len(t, res, 1)
	require.Equal(t, "b", res[0].(map[string]any)["id"])

	// timeout ends the wait with no results.
	last = r.Body["last_seq"].(string)
	r = e.do("GET", "/_replicator/_changes?feed=longpoll&timeout=10&since="+last, asAdmin, nil)
	require.Equal(t, 200, r.Status)
	require.Empty(t, r.Body["results"])
	require.Equal(t, last, r.Body["last_seq"])
	requireError(t, e.do("GET", "/_replicator/_changes?feed=longpoll&timeout=x", asAdmin, nil), 400, "query_parse_error")

	// Deleting the database ends a waiting request with 404.
	require.Equal(t, 201, e.do("PUT", "/x%2F_replicator", asAdmin, nil).Status)
	go func() { got <- e.do("GET", "/x%2F_replicator/_changes?feed=longpoll", asAdmin, nil) }()
	require.Equal(t, 200, e.do("DELETE", "/x%2F_replicator", asAdmin, nil).Status)
	r = <-got
	// The request either saw the database (and was woken by its deletion)
	// or came after it.
	requireError(t, r, 404, "not_found")
}
