package proctest

import (
	"encoding/json"
	"net/http"
	"time"
)

// DocCount is a CouchDB database's doc_count, read with a bounded request
// (-1 when it cannot be read).
func DocCount(dbURL string) int {
	res, err := countClient.Get(dbURL)
	if err != nil {
		return -1
	}
	defer res.Body.Close()
	var body struct {
		DocCount *int `json:"doc_count"`
	}
	if res.StatusCode != http.StatusOK || json.NewDecoder(res.Body).Decode(&body) != nil || body.DocCount == nil {
		return -1
	}
	return *body.DocCount
}

var countClient = &http.Client{Timeout: 30 * time.Second}
