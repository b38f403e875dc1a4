package engines

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// acceptHeader asks for the classic text format first: engines built on
// Python's prometheus_client (vLLM, SGLang, NIM) then expose Info metrics as
// gauges instead of the OpenMetrics info type, which the parser cannot read.
const acceptHeader = "text/plain;version=0.0.4;q=1,application/openmetrics-text;version=1.0.0;q=0.5,*/*;q=0.1"

// ErrTooLarge reports a response body over the size limit given to Scrape.
var ErrTooLarge = errors.New("response body exceeds the size limit")

// Scrape fetches an engine's metrics endpoint within ctx's deadline, with
// client, or http.DefaultClient if nil. A body larger than maxBytes is an
// error, never a truncated parse. Duplicate series are rejected, as
// Prometheus would reject them.
func Scrape(ctx context.Context, client *http.Client, url string, maxBytes int64) (map[string]*dto.MetricFamily, error) {
	if client == nil {
		client = http.DefaultClient
	}
	if maxBytes <= 0 {
		return nil, fmt.Errorf("size limit must be positive, got %d", maxBytes)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("building request: %w", err)
	}
	req.Header.Set("Accept", acceptHeader)
	resp, err := client.Do(req)
	if err != nil {
		// The error names the URL, without its password.
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, fmt.Errorf("GET %s: unexpected status %s", req.URL.Redacted(), resp.Status)
	}
	families, err := parse(&cappedReader{r: resp.Body, left: maxBytes}, expfmt.ResponseFormat(resp.Header))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", req.URL.Redacted(), err)
	}
	return families, nil
}

// parse decodes an exposition in the given format, sniffed from the response
// headers. OpenMetrics and unknown content types go to the text parser,
// which reads OpenMetrics 1.0 as produced by the engines.
func parse(r io.Reader, format expfmt.Format) (map[string]*dto.MetricFamily, error) {
	dec := expfmt.NewDecoder(r, format)
	var decoded []*dto.MetricFamily
	for {
		mf := &dto.MetricFamily{}
		err := dec.Decode(mf)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			// The text decoder hands out what it parsed before it
			// reports the error that stopped it: all of it goes.
			return nil, fmt.Errorf("parsing metrics: %w", err)
		}
		decoded = append(decoded, mf)
	}
	families := make(map[string]*dto.MetricFamily, len(decoded))
	for _, mf := range decoded {
		if _, dup := families[mf.GetName()]; dup {
			return nil, fmt.Errorf("parsing metrics: family %q appears twice", mf.GetName())
		}
		if err := checkDuplicates(mf); err != nil {
			return nil, fmt.Errorf("parsing metrics: %w", err)
		}
		families[mf.GetName()] = mf
	}
	return families, nil
}

// checkDuplicates rejects a family holding the same series twice, which the
// text parser lets through: repeated histogram lines with the same labels are
// folded into one histogram with repeated buckets.
func checkDuplicates(mf *dto.MetricFamily) error {
	seen := make(map[string]bool, len(mf.GetMetric()))
	for _, m := range mf.GetMetric() {
		key := seriesName(mf.GetName(), m)
		if seen[key] {
			return fmt.Errorf("duplicate series %s", key)
		}
		seen[key] = true
		bounds := map[float64]bool{}
		for _, b := range m.GetHistogram().GetBucket() {
			if bounds[b.GetUpperBound()] {
				return fmt.Errorf("duplicate bucket le=%g in %s", b.GetUpperBound(), key)
			}
			bounds[b.GetUpperBound()] = true
		}
	}
	return nil
}

// cappedReader fails once more than left bytes are read, so that the parser
// stops and reports ErrTooLarge instead of seeing a short body.
type cappedReader struct {
	r    io.Reader
	left int64
}

func (c *cappedReader) Read(p []byte) (int, error) {
	if c.left < 0 {
		return 0, ErrTooLarge
	}
	// Read one byte past the limit, to tell a body of exactly the limit
	// from a longer one.
	if int64(len(p)) > c.left+1 {
		p = p[:c.left+1]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	if c.left < 0 {
		return 0, ErrTooLarge
	}
	return n, err
}
