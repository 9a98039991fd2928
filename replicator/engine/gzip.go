package engine

import (
	"bytes"
	"compress/gzip"
	"io"
)

// gunzip decodes a gzip-encoded attachment body.
func gunzip(data []byte) ([]byte, error) {
	r, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}
