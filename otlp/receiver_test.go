package otlp

import (
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	colmetricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	_ "google.golang.org/grpc/encoding/gzip" // the receiver decompresses what the exporter gzips
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// receiver is an in-process OTLP receiver over gRPC or HTTP that decodes
// the real protobuf messages. While down it refuses every push with a
// retryable error (HTTP 503, gRPC UNAVAILABLE) whose message echoes the
// request's headers, as a careless or hostile backend might; with
// permanent, with an error the exporter does not retry (HTTP 400, gRPC
// INVALID_ARGUMENT), which it then returns as it is rather than, as its
// retries may, the deadline's.
type receiver struct {
	url    *url.URL
	pushes chan push

	mu        sync.Mutex
	down      bool
	permanent bool
	delay     time.Duration // before each answer
	// partial is the partial_success of every answer to a push the
	// receiver takes.
	partial *colmetricpb.ExportMetricsPartialSuccess
	// retryAfter, when set, is the wait a refusal asks for: HTTP 429 with
	// Retry-After, gRPC UNAVAILABLE with RetryInfo.
	retryAfter  time.Duration
	arrived     int // requests received, counted before the delay
	inflight    int
	maxInflight int
	refused     int
	// grpcEncoding is the grpc-encoding of the last gRPC request, which
	// the server consumes before the handler sees the metadata.
	grpcEncoding string
}

type push struct {
	req      *colmetricpb.ExportMetricsServiceRequest
	headers  map[string]string // lower-case names
	encoding string            // gzip or empty
}

func (r *receiver) setDown(down bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.down = down
}

// refusal is the receiver's refusal of a push: retryable unless permanent.
type refusal struct {
	msg        string
	permanent  bool
	retryAfter time.Duration
}

func (e refusal) Error() string { return e.msg }

// enter records one request in flight; the returned error is non-nil
// while the receiver is down.
func (r *receiver) enter(headers map[string]string) (leave func(), err error) {
	r.mu.Lock()
	delay := r.delay
	r.arrived++
	r.mu.Unlock()
	time.Sleep(delay)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inflight++
	r.maxInflight = max(r.maxInflight, r.inflight)
	leave = func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.inflight--
	}
	if r.down {
		r.refused++
		return leave, refusal{msg: fmt.Sprintf("receiver down; you sent %v", headers), permanent: r.permanent, retryAfter: r.retryAfter}
	}
	return leave, nil
}

func (r *receiver) deliver(p push) {
	select {
	case r.pushes <- p:
	default: // the test has seen enough
	}
}

// newReceiver is a receiver of the protocol's kind.
func newReceiver(t *testing.T, protocol string) *receiver {
	if protocol == ProtocolGRPC {
		return newGRPCReceiver(t)
	}
	return newHTTPReceiver(t)
}

func newHTTPReceiver(t *testing.T) *receiver {
	r := &receiver{pushes: make(chan push, 64)}
	srv := httptest.NewServer(r.httpHandler())
	t.Cleanup(srv.Close)
	r.url, _ = url.Parse(srv.URL)
	return r
}

// httpHandler receives OTLP/HTTP: POST /v1/metrics, binary protobuf,
// optionally gzipped.
func (r *receiver) httpHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		headers := map[string]string{}
		for k, v := range req.Header {
			headers[strings.ToLower(k)] = strings.Join(v, ",")
		}
		leave, err := r.enter(headers)
		defer leave()
		if err != nil {
			code := http.StatusServiceUnavailable
			switch ref := err.(refusal); {
			case ref.permanent:
				code = http.StatusBadRequest
			case ref.retryAfter > 0:
				code = http.StatusTooManyRequests
				w.Header().Set("Retry-After", strconv.Itoa(int(ref.retryAfter.Seconds())))
			}
			http.Error(w, err.Error(), code)
			return
		}
		var body io.Reader = http.MaxBytesReader(w, req.Body, 64<<20)
		if req.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		b, err := io.ReadAll(body)
		msg := &colmetricpb.ExportMetricsServiceRequest{}
		if err == nil {
			err = proto.Unmarshal(b, msg)
		}
		if err != nil || req.URL.Path != "/v1/metrics" || req.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, fmt.Sprintf("bad request to %s: %v", req.URL.Path, err), http.StatusBadRequest)
			return
		}
		r.deliver(push{req: msg, headers: headers, encoding: req.Header.Get("Content-Encoding")})
		resp, _ := proto.Marshal(r.answer())
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(resp)
	})
}

type grpcReceiver struct {
	colmetricpb.UnimplementedMetricsServiceServer
	r *receiver
}

func (g grpcReceiver) Export(ctx context.Context, req *colmetricpb.ExportMetricsServiceRequest) (*colmetricpb.ExportMetricsServiceResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	headers := map[string]string{}
	for k, v := range md {
		headers[strings.ToLower(k)] = strings.Join(v, ",")
	}
	leave, err := g.r.enter(headers)
	defer leave()
	if err != nil {
		ref := err.(refusal)
		if ref.permanent {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		st := status.New(codes.Unavailable, err.Error())
		if ref.retryAfter > 0 {
			st, _ = st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(ref.retryAfter)})
		}
		return nil, st.Err()
	}
	g.r.mu.Lock()
	encoding := g.r.grpcEncoding
	g.r.mu.Unlock()
	g.r.deliver(push{req: req, headers: headers, encoding: encoding})
	return g.r.answer(), nil
}

// answer is the receiver's answer to a push it takes.
func (r *receiver) answer() *colmetricpb.ExportMetricsServiceResponse {
	r.mu.Lock()
	defer r.mu.Unlock()
	return &colmetricpb.ExportMetricsServiceResponse{PartialSuccess: r.partial}
}

func newGRPCReceiver(t *testing.T) *receiver {
	r := &receiver{pushes: make(chan push, 64)}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.StatsHandler(encodingRecorder{r}))
	colmetricpb.RegisterMetricsServiceServer(srv, grpcReceiver{r: r})
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	r.url = &url.URL{Scheme: "http", Host: lis.Addr().String()}
	return r
}

// encodingRecorder notes each gRPC request's compression.
type encodingRecorder struct{ r *receiver }

func (e encodingRecorder) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context {
	return ctx
}
func (e encodingRecorder) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}
func (e encodingRecorder) HandleConn(context.Context, stats.ConnStats) {}
func (e encodingRecorder) HandleRPC(_ context.Context, s stats.RPCStats) {
	if h, ok := s.(*stats.InHeader); ok {
		e.r.mu.Lock()
		defer e.r.mu.Unlock()
		e.r.grpcEncoding = h.Compression
	}
}
