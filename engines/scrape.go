package engines

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/klauspost/compress/gzip"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// acceptHeader asks for the classic text format, and names no other:
// Python's prometheus_client (vLLM, SGLang, NIM) answers OpenMetrics to any
// Accept header that names it, whatever its q (exposition.py,
// choose_encoder), where its Info and Enum metrics are of types no mapping
// reads. An engine that sends OpenMetrics anyway is read as well.
const acceptHeader = "text/plain;version=0.0.4;q=1,*/*;q=0.1"

// ErrTooLarge reports a response body over the size limit given to Scrape.
var ErrTooLarge = errors.New("response body exceeds the size limit")

// ErrTooManyLabels reports a kept series with more labels than maxLabels.
var ErrTooManyLabels = errors.New("too many labels in one series")

// ErrTooManyLabelPairs reports more label pairs in all the kept series than
// Limits.MaxLabelPairs.
var ErrTooManyLabelPairs = errors.New("more label pairs than the limit")

// ErrTooManySeries reports more series kept than Limits.MaxSeries.
var ErrTooManySeries = errors.New("more series than the limit")

// Limits bound what one scrape may cost. Parsing a text exposition builds
// every series in memory, ten or more times the bytes it came in; so series
// of families no one reads are dropped as lines, before parsing, and the
// series kept are counted.
type Limits struct {
	// MaxBytes is the largest body read; a larger one is an error, never a
	// truncated parse.
	MaxBytes int64
	// MaxSeries is the most sample lines kept (a histogram's bucket, sum
	// and count lines count one each); 0 means no limit.
	MaxSeries int
	// Keep says which families to parse; nil keeps every family.
	Keep func(family string) bool
	// MaxLabelPairs is the most label pairs of all the series kept
	// together, DefaultMaxLabelPairs if 0. A series costs memory for each
	// of its labels, so the bytes and series limits alone let a body of
	// series with dozens of unique labels each take hundreds of MiB.
	MaxLabelPairs int
}

// DefaultMaxLabelPairs allows, for instance, 20,000 series of 10 labels: an
// engine or dcgm-exporter sends a few thousand series of fewer than 15. It
// bounds a parse to a few tens of MiB.
const DefaultMaxLabelPairs = 200_000

// parseSlots bounds how many expositions are parsed at once, whatever the
// number of targets, so that peak memory is that of a few bounded parses.
var parseSlots = make(chan struct{}, 2)

// readAhead is how much of a body is read before a parse slot is taken:
// engines' and dcgm-exporter's are a few hundred KiB at most on a node of
// 8 GPUs, and a body read whole is parsed in milliseconds.
const readAhead = 1 << 20

// readBudget is the bytes of bodies read ahead past their first readAhead,
// across targets, at most maxReadBudget: two bodies of the default
// --engines.max-bytes. Past it, a body streams into its parse.
var readBudget atomic.Int64

const maxReadBudget = 32 << 20

// readAheads are the read-ahead buffers, reused across scrapes.
var readAheads = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// Scrape fetches an engine's metrics endpoint within ctx's deadline, with
// client, or http.DefaultClient if nil, within lim. Duplicate series are
// rejected, as Prometheus would reject them.
func Scrape(ctx context.Context, client *http.Client, url string, lim Limits) (map[string]*dto.MetricFamily, error) {
	if client == nil {
		client = http.DefaultClient
	}
	if lim.MaxBytes <= 0 {
		return nil, fmt.Errorf("size limit must be positive, got %d", lim.MaxBytes)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("building request: %w", err)
	}
	req.Header.Set("Accept", acceptHeader)
	// Uncompressed: Python's prometheus_client (vLLM, SGLang) gzips its
	// exposition, at gzip.compress's level 9, in the engine's own process,
	// whenever the scraper accepts gzip (exposition.py, _bake_output: "if
	// not disable_compression and gzip_accepted(accept_encoding_header)"),
	// which Go's transport does unless a request names an encoding itself
	// (and without any Accept-Encoding a server "MAY assume that the
	// client will accept any content coding", RFC 2616, 14.3).
	// The endpoint is on this node: compressing it costs the engine and
	// this exporter CPU at every scrape, and saves no network.
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := client.Do(req)
	if err != nil {
		// The error names the URL, without its password.
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, &StatusError{URL: req.URL.Redacted(), Code: resp.StatusCode, Status: resp.Status}
	}
	format := expfmt.ResponseFormat(resp.Header)
	switch format.FormatType() {
	case expfmt.TypeTextPlain, expfmt.TypeOpenMetrics, expfmt.TypeUnknown:
	default:
		// acceptHeader asks for text only. Protobuf would bypass the line
		// filter and its series limit, and its decoder trusts each
		// message's length prefix (expfmt's protoDecoder sets protodelim
		// MaxSize -1, "no limit"): a prefix claiming terabytes is
		// allocated before a byte of it is read.
		return nil, fmt.Errorf("GET %s: content type %q was not asked for", req.URL.Redacted(), resp.Header.Get("Content-Type"))
	}
	// expfmt.ResponseFormat knows only the text and protobuf types, and
	// reads OpenMetrics as unknown.
	mediaType, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	openMetrics := mediaType == "application/openmetrics-text"
	content, err := decoded(resp)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", req.URL.Redacted(), err)
	}
	capped := &cappedReader{r: content, left: lim.MaxBytes}
	// The body is read ahead without a parse slot: a slot is then held by
	// a parse that runs on, never by a body that trickles in. An endpoint
	// that sent its headers and then its body a byte at a time held a slot
	// to the deadline, and two of them failed every other engine and
	// dcgm-exporter (probe H, PH1; over the first MiB, probe J, PJ1). The
	// first readAhead bytes of every body are read so; the rest while the
	// bytes read ahead of all targets stay within readBudget. A body the
	// budget cannot hold is parsed as it comes, under a slot, as memory is
	// bounded by parsing few at once.
	head := readAheads.Get().(*bytes.Buffer)
	defer func() {
		if head.Cap() <= readAhead {
			head.Reset()
			readAheads.Put(head)
		}
	}()
	n, err := head.ReadFrom(io.LimitReader(capped, readAhead))
	whole := n < readAhead
	var taken int64
	defer func() { readBudget.Add(-taken) }()
	for err == nil && !whole && readBudget.Add(readAhead) <= maxReadBudget {
		taken += readAhead
		n, err = head.ReadFrom(io.LimitReader(capped, readAhead))
		whole = n < readAhead
	}
	if !whole && err == nil {
		readBudget.Add(-readAhead) // the step the budget could not hold
	}
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", req.URL.Redacted(), err)
	}
	var src io.Reader = bytes.NewReader(head.Bytes())
	if !whole {
		src = io.MultiReader(src, capped)
	}
	select {
	case parseSlots <- struct{}{}:
		defer func() { <-parseSlots }()
	case <-ctx.Done():
		return nil, fmt.Errorf("GET %s: waiting to parse: %w", req.URL.Redacted(), ctx.Err())
	}
	body := newLineFilter(src, lim)
	body.openMetrics = openMetrics
	maxPairs := lim.MaxLabelPairs
	if maxPairs <= 0 {
		maxPairs = DefaultMaxLabelPairs
	}
	families, err := parseLines(body.next, maxPairs, openMetrics)
	body.release()
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", req.URL.Redacted(), err)
	}
	return families, nil
}

// decoded is resp's body without its content coding. A body asked for
// with "Accept-Encoding: identity" may come gzipped all the same, from a
// server or proxy that compresses whatever is asked (RFC 2616, 14.3, would
// have it answer 406 Not Acceptable instead): it is decoded here, under the
// same size limit as any body, which counts the decoded bytes, so a small
// body that decodes to gigabytes fails at the limit.
func decoded(resp *http.Response) (io.Reader, error) {
	switch enc := strings.ToLower(strings.TrimSpace(resp.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
		return resp.Body, nil
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(resp.Body)
		if err != nil {
			return nil, fmt.Errorf("gzip body: %w", err)
		}
		return zr, nil
	default:
		return nil, fmt.Errorf("content encoding %q was not asked for", enc)
	}
}

// lineFilter passes the lines of a text exposition (Prometheus text or
// OpenMetrics) that belong to kept families, and fails once more sample
// lines than the limit are kept. Label values cannot hold a raw newline in
// either format (it is escaped as \n), so lines are whole records.
type lineFilter struct {
	in      *bufio.Reader
	lim     Limits
	samples int
	// no is the number of the line last read, counting dropped lines.
	no  int
	err error
	// decided are Keep's answers by name (wanted).
	decided map[string]bool
	// openMetrics says the body is OpenMetrics, which must end with the
	// line "# EOF" (OpenMetrics 1.0, "Overall Structure"): a body cut
	// short, or with data after it, is refused as Prometheus refuses it.
	// sawEOF says that line was read.
	openMetrics, sawEOF bool
}

// maxLine bounds one line, so that a body without newlines cannot make the
// filter hold it whole.
const maxLine = 1 << 20

// lineReaders are the filters' 64 KiB read buffers, one per parse slot in
// use: a new one for every target at every scrape was most of what the
// engines collector allocated.
var lineReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 64<<10) }}

func newLineFilter(r io.Reader, lim Limits) *lineFilter {
	in := lineReaders.Get().(*bufio.Reader)
	in.Reset(r)
	return &lineFilter{in: in, lim: lim}
}

// release gives the read buffer back once the parser is done with the
// filter: lines it returned point into that buffer.
func (f *lineFilter) release() {
	f.in.Reset(nil)
	lineReaders.Put(f.in)
	f.in = nil
}

// next returns the next kept line, valid until the following call, and its
// number in the body. After the last line it returns errEOF, or the error
// that ended the body.
func (f *lineFilter) next() ([]byte, int, error) {
	for f.err == nil {
		line, err := f.readLine()
		f.no++
		if err != nil {
			f.err = err
			if errors.Is(err, io.EOF) {
				f.err = errEOF
			}
		}
		if f.openMetrics {
			switch content := trimBlanks(bytes.TrimSuffix(line, []byte("\n"))); {
			case f.sawEOF && len(content) > 0:
				f.err = errors.New("data after # EOF")
				return nil, f.no, f.err
			case string(content) == "# EOF":
				f.sawEOF = true
			}
			if f.err == errEOF && !f.sawEOF {
				f.err = errors.New("OpenMetrics body without # EOF at its end: cut short")
				return nil, f.no, f.err
			}
		}
		// A body that ends without a newline is refused whatever its
		// last line holds, so that line goes to the parser even if unwanted.
		kept := len(line) > 0 && (f.keep(line) || f.err == errEOF && len(trimBlanks(line)) > 0)
		if f.lim.MaxSeries > 0 && f.samples > f.lim.MaxSeries {
			f.err = fmt.Errorf("%w (%d)", ErrTooManySeries, f.lim.MaxSeries)
			return nil, f.no, f.err
		}
		if kept {
			// A kept line that ended the body comes with the error.
			return line, f.no, f.err
		}
	}
	return nil, f.no, f.err
}

// readLine returns the next line; a line that fits the reader's buffer is
// returned without a copy, valid until the next call.
func (f *lineFilter) readLine() ([]byte, error) {
	chunk, err := f.in.ReadSlice('\n')
	if err != bufio.ErrBufferFull {
		return chunk, err
	}
	line := slices.Clone(chunk)
	for {
		chunk, err := f.in.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > maxLine {
			return nil, fmt.Errorf("a line longer than %d bytes", maxLine)
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		return line, err
	}
}

// keep decides on one line and counts the sample lines kept. Names are
// turned into strings once per body (wantedName): a huge body of unread
// families costs little more than reading it.
func (f *lineFilter) keep(line []byte) bool {
	b := trimBlanks(bytes.TrimSuffix(line, []byte("\n")))
	if len(b) > 0 && b[0] == '#' {
		// Only HELP and TYPE lines mean anything to the parser, which
		// reads them as this does ("#TYPE x" too: the blanks after '#'
		// are optional; found by fuzzing, when such a TYPE line was
		// dropped and x's histogram read as untyped lines).
		keyword, rest := token(trimBlanks(b[1:]))
		if string(keyword) != "HELP" && string(keyword) != "TYPE" {
			return false
		}
		name, _ := token(trimBlanks(rest))
		return len(name) > 0 && f.wanted(name)
	}
	name := b
	if i := bytes.IndexAny(b, "{ \t\r"); i >= 0 {
		name = b[:i]
	}
	if len(name) == 0 {
		return true // blank lines are harmless
	}
	if !f.wanted(name) {
		return false
	}
	f.samples++
	return true
}

// maxDecisions bounds the names whose Keep answer a filter remembers, so
// that a body of distinct names cannot grow the memory without limit.
const maxDecisions = 4096

// wanted asks Keep about a family, or the family a sample line's name
// (x_bucket, x_count, …) belongs to, once per name and body.
func (f *lineFilter) wanted(name []byte) bool {
	if f.lim.Keep == nil {
		return true
	}
	if v, ok := f.decided[string(name)]; ok {
		return v
	}
	n := string(name)
	v := f.wantedName(n)
	if len(f.decided) < maxDecisions {
		if f.decided == nil {
			f.decided = map[string]bool{}
		}
		f.decided[n] = v
	}
	return v
}

func (f *lineFilter) wantedName(name string) bool {
	if f.lim.Keep(name) {
		return true
	}
	for _, suffix := range []string{"_bucket", "_count", "_sum", "_total", "_created", "_info", "_gcount", "_gsum"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && f.lim.Keep(base) {
			return true
		}
	}
	return false
}

// maxLabels bounds the labels of one series: engines and dcgm-exporter send
// fewer than 20, pod labels included.
const maxLabels = 64

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

// StatusError is an answer whose status is not 2xx. Status is the status
// line's code and reason phrase, which the server words as it likes (a
// request ID in it changes at every answer): Code is what the answer says.
type StatusError struct {
	URL    string
	Code   int
	Status string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("GET %s: unexpected status %s", e.URL, e.Status)
}
