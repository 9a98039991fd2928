package engine

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
)

// gunzip decodes a gzip-encoded attachment body, counting what it decodes
// on lease: however well a body compresses (a thousandfold, for a
// decompression bomb), it decodes no further than the document may hold,
// and fails with errDocMax past it.
func gunzip(ctx context.Context, data []byte, lease *docLease) ([]byte, error) {
	r, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var out bytes.Buffer
	chunk := make([]byte, 32<<10)
	for {
		n, err := r.Read(chunk)
		if n > 0 {
			if gerr := lease.grow(ctx, n); gerr != nil {
				return nil, gerr
			}
			out.Write(chunk[:n])
		}
		if err == io.EOF {
			return out.Bytes(), nil
		}
		if err != nil {
			return nil, err
		}
	}
}
