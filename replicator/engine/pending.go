package engine

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"

	"github.com/rs/zerolog"
)

// Pending asks rep's source whether it has changes after since (a
// sequence as Stats.CheckpointedSourceSeq shows it; "" for the start) and
// returns how many: the exact check of a parked replication (one
// _changes?since=…&limit=1 request; the "pending" count where the source
// gives one, else whether a change came back). It counts every change,
// whatever the replication's filter, and never the writes of _local
// documents (checkpoints). A source that cannot be asked is an error.
func Pending(ctx context.Context, rep Replication, opts Options, since string) (int64, error) {
	rep = rep.WithDefaults()
	var nolog zerolog.Logger // requests are not logged here
	src, tgt, err := newPeers(rep, opts, &nolog, nil)
	if err != nil {
		return 0, err
	}
	defer src.t.close()
	defer tgt.t.close()
	if since == "" {
		since = "0"
	}
	var reply struct {
		Results []json.RawMessage `json:"results"`
		Pending *int64            `json:"pending"`
	}
	q := url.Values{"since": {since}, "limit": {"1"}}
	if err := src.do(ctx, http.MethodGet, "_changes", q, nil, &reply); err != nil {
		return 0, err
	}
	n := int64(len(reply.Results))
	if reply.Pending != nil {
		n += *reply.Pending
	}
	return n, nil
}
