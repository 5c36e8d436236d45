package testenv

import (
	"context"
	"io"
	"net/http"
)

// HTTPGet gets url: the status code and the body (0 and nil when nothing
// answers).
func HTTPGet(ctx context.Context, url string) (int, []byte) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil
	}
	return resp.StatusCode, body
}
