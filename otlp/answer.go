package otlp

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strconv"
	"time"

	colmetricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// The SDK's exporters turn a receiver's partial success into an error of a
// type internal to them, indistinguishable from a failed push but by its
// text, and keep a throttling receiver's wait to themselves, honouring it
// only within the push. The bridge reads what the receiver answered where
// it arrives instead, an HTTP round tripper or a gRPC interceptor under the
// exporter, into the answer of the push under way, which the request's
// context carries.

// answer is what the receiver said to the requests of one push.
type answer struct {
	// accepted is a 2xx (OTLP/HTTP) or OK (OTLP/gRPC): the receiver took
	// the push, all of it or, with rejected > 0, the rest.
	accepted bool
	rejected int64  // partial_success.rejected_data_points
	message  string // partial_success.error_message
	// retryAt is when the last answer, a throttling one, asked for the
	// next request; zero when it asked for no wait.
	retryAt time.Time
}

// maxWait bounds a throttling receiver's wait: a hint far off, from a
// misconfigured proxy say, stops the pushes for minutes, not for good.
const maxWait = 5 * time.Minute

// waitFor notes the wait an answer arriving at now asks for.
func (a *answer) waitFor(now time.Time, wait time.Duration) {
	a.retryAt = time.Time{}
	if wait > 0 {
		a.retryAt = now.Add(min(wait, maxWait))
	}
}

// retryAfter reads an HTTP Retry-After header (RFC 9110): a number of
// seconds, or a date, which may be past.
func retryAfter(v string, now time.Time) time.Duration {
	if s, err := strconv.ParseUint(v, 10, 32); err == nil {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return t.Sub(now)
	}
	return 0
}

type answerKey struct{}

func withAnswer(ctx context.Context, a *answer) context.Context {
	return context.WithValue(ctx, answerKey{}, a)
}

func answerOf(ctx context.Context) *answer {
	a, _ := ctx.Value(answerKey{}).(*answer)
	return a
}

func (a *answer) accept(p *colmetricpb.ExportMetricsPartialSuccess) {
	*a = answer{accepted: true, rejected: p.GetRejectedDataPoints(), message: p.GetErrorMessage()}
}

// maxAnswerBytes bounds the success answer read to find its
// partial_success, a count and a message; a longer answer is handed on
// unread and its push counted as a full success.
const maxAnswerBytes = 64 << 10

// answerTransport notes the answers to OTLP/HTTP requests. It runs within
// the request's http.Client.Do, so the push's Export has its answer by the
// time it returns.
type answerTransport struct{ next http.RoundTripper }

func (t answerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	a := answerOf(req.Context())
	if err != nil || a == nil {
		return resp, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		// OTLP/HTTP throttling: "HTTP 429 Too Many Requests or HTTP 503
		// Service Unavailable" with "Retry-After", which "The client
		// SHOULD honour".
		now, wait := time.Now(), time.Duration(0)
		if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
			wait = retryAfter(resp.Header.Get("Retry-After"), now)
		}
		a.waitFor(now, wait)
		return resp, nil
	}
	// The exporter reads the body after us: it gets what we read, then
	// the rest.
	body, readErr := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes+1))
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(body), resp.Body), resp.Body}
	var msg colmetricpb.ExportMetricsServiceResponse
	// Only the binary encoding, as the exporter: OTLP's answer comes in
	// the request's Content-Type.
	if readErr != nil || len(body) > maxAnswerBytes || resp.Header.Get("Content-Type") != "application/x-protobuf" ||
		proto.Unmarshal(body, &msg) != nil {
		a.accept(nil)
		return resp, nil
	}
	a.accept(msg.GetPartialSuccess())
	return resp, nil
}

// answerInterceptor notes the answers to OTLP/gRPC requests.
func answerInterceptor(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	a := answerOf(ctx)
	if a == nil {
		return err
	}
	if st := status.Convert(err); st.Code() != codes.OK {
		// OTLP/gRPC throttling: UNAVAILABLE, or RESOURCE_EXHAUSTED when
		// recovery is possible, with RetryInfo's retry_delay.
		wait := time.Duration(0)
		if st.Code() == codes.Unavailable || st.Code() == codes.ResourceExhausted {
			for _, d := range st.Details() {
				if info, ok := d.(*errdetails.RetryInfo); ok {
					wait = info.GetRetryDelay().AsDuration()
				}
			}
		}
		a.waitFor(time.Now(), wait)
		return err
	}
	resp, _ := reply.(*colmetricpb.ExportMetricsServiceResponse)
	a.accept(resp.GetPartialSuccess())
	return err
}
