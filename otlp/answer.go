package otlp

import (
	"bytes"
	"context"
	"io"
	"net/http"

	colmetricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// The SDK's exporters turn a receiver's partial success into an error of a
// type internal to them, indistinguishable from a failed push but by its
// text. The bridge reads what the receiver answered where it arrives
// instead, an HTTP round tripper or a gRPC interceptor under the exporter,
// into the answer of the push under way, which the request's context
// carries.

// answer is what the receiver said to the requests of one push.
type answer struct {
	// accepted is a 2xx (OTLP/HTTP) or OK (OTLP/gRPC): the receiver took
	// the push, all of it or, with rejected > 0, the rest.
	accepted bool
	rejected int64  // partial_success.rejected_data_points
	message  string // partial_success.error_message
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
	a.accepted = true
	a.rejected, a.message = p.GetRejectedDataPoints(), p.GetErrorMessage()
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
	if err != nil || a == nil || resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp, err
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
	if a == nil || status.Code(err) != codes.OK {
		return err
	}
	resp, _ := reply.(*colmetricpb.ExportMetricsServiceResponse)
	a.accept(resp.GetPartialSuccess())
	return err
}
