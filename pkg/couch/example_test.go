package couch_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/fdbrep/fdbrep/pkg/couch"
)

func ExampleDB_DoJSON() {
	// A stand-in peer: GET /db answers the database info, anything else 404.
	peer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/db/" {
			_, _ = io.WriteString(w, `{"db_name":"db","update_seq":7,"instance_start_time":"0"}`)
			return
		}
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"error":"not_found","reason":"missing"}`)
	}))
	defer peer.Close()

	ep, err := couch.ParseEndpoint(json.RawMessage(`"` + peer.URL + `/db"`))
	if err != nil {
		fmt.Println(err)
		return
	}
	limiter, _ := couch.NewRateLimiter(couch.RateLimiterConfig{}) // one per process
	db, err := couch.NewDB(ep, couch.Options{HTTPConnections: 4}, limiter)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()

	var info struct {
		UpdateSeq json.RawMessage `json:"update_seq"`
	}
	if err := db.DoJSON(context.Background(), couch.Request{}, &info); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("update_seq", string(info.UpdateSeq))

	err = db.DoJSON(context.Background(), couch.Request{Path: couch.EscapeDocID("_local/checkpoint")}, nil)
	var herr *couch.HTTPError
	fmt.Println(errors.Is(err, couch.ErrNotFound), errors.As(err, &herr) && herr.Reason == "missing")
	// Output:
	// update_seq 7
	// true true
}
