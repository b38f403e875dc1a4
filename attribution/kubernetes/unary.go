package kubernetes

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// unaryClient makes gRPC unary calls to one unix socket, one call at a time,
// each in the calling goroutine: the request written and the answer read
// on one HTTP/2 connection kept between calls (gRPC over HTTP2,
// PROTOCOL-HTTP2.md). The pod-resources API is two unary calls at every
// scrape; grpc-go's transport hands each call to a writer goroutine and
// its answer back from a reader goroutine, which cost more CPU than the
// rest of the kubelet's part of a scrape, for what these calls do not
// need: streams in parallel, name resolution, load balancing.
//
// A call that fails for want of a connection (the kubelet restarting, its
// socket not there yet, a connection it closed) is made again on a new one
// after 50 and 100 ms, within the caller's deadline, as the service config
// of the grpc-go client it replaces retried UNAVAILABLE.
type unaryClient struct {
	socket string
	// sem holds the one call under way, so that a call waits for the
	// one before it no longer than its own deadline.
	sem chan struct{}

	mu     sync.Mutex
	conn   *h2conn // nil: none yet, or dropped after a failure
	closed bool
}

func newUnaryClient(socket string) *unaryClient {
	return &unaryClient{socket: socket, sem: make(chan struct{}, 1)}
}

const (
	// maxAttempts is how many times a call is made while it fails as
	// UNAVAILABLE, firstRetryWait the wait before the second (doubling).
	maxAttempts    = 3
	firstRetryWait = 50 * time.Millisecond
	// streamWindow and connWindow are the flow-control windows granted
	// to the kubelet (RFC 9113, 6.9): wide enough for a whole answer of
	// MaxReceiveBytes, so that it never waits on this client.
	streamWindow = 1 << 30
	connWindow   = 1 << 30
	// maxFrameBytes is the largest frame accepted (SETTINGS_MAX_FRAME_SIZE;
	// the default 16 KiB makes a large answer a thousand frames).
	maxFrameBytes = 1 << 20
	// maxHeaderListBytes bounds the decoded headers and trailers of an
	// answer (SETTINGS_MAX_HEADER_LIST_SIZE).
	maxHeaderListBytes = 64 << 10
)

// unaryCall is one call of a round trip: its request, then its answer or
// its error.
type unaryCall struct {
	method string
	req    []byte
	dst    []byte // storage the answer may be read into
	out    []byte
	err    error

	// The attempt under way.
	id      uint32
	headers bool
	done    bool
	body    []byte
}

// calls makes the calls in one round trip: their requests go out in one
// write, on streams of their own, and their answers are read as they come,
// so that two calls cost the kubelet one wake-up and this side one wait.
// Each call ends with its answer's message (out) or a gRPC status error:
// a server's status, or UNAVAILABLE, DEADLINE_EXCEEDED, CANCELED,
// RESOURCE_EXHAUSTED (an answer over MaxReceiveBytes) and INTERNAL (a
// malformed answer) for this side's. The calls that fail as UNAVAILABLE
// are made again.
func (u *unaryClient) calls(ctx context.Context, calls ...*unaryCall) {
	select {
	case u.sem <- struct{}{}:
	case <-ctx.Done():
		for _, c := range calls {
			c.err = contextStatus(ctx.Err())
		}
		return
	}
	defer func() { <-u.sem }()
	wait := firstRetryWait
	for attempt := 1; ; attempt++ {
		u.attempt(ctx, calls)
		var again []*unaryCall
		for _, c := range calls {
			if status.Code(c.err) == codes.Unavailable {
				again = append(again, c)
			}
		}
		if len(again) == 0 || attempt == maxAttempts {
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			// Out of time before the next attempt: that is the call's
			// end, with what made it try again.
			t.Stop()
			for _, c := range again {
				c.err = status.Errorf(status.Code(contextStatus(ctx.Err())), "%v (the last attempt: %s)", ctx.Err(), status.Convert(c.err).Message())
			}
			return
		}
		calls, wait = again, wait*2
	}
}

// attempt makes the calls once, on the kept connection or a new one. A
// connection that failed, or that the server is closing, is dropped.
func (u *unaryClient) attempt(ctx context.Context, calls []*unaryCall) {
	fail := func(err error) {
		for _, c := range calls {
			c.out, c.err = nil, err
		}
	}
	u.mu.Lock()
	conn, closed := u.conn, u.closed
	u.mu.Unlock()
	if closed {
		fail(status.Error(codes.Canceled, "client closed"))
		return
	}
	if conn == nil {
		var err error
		if conn, err = dialH2(ctx, u.socket); err != nil {
			if ctx.Err() != nil {
				fail(contextStatus(ctx.Err()))
			} else {
				fail(status.Error(codes.Unavailable, err.Error()))
			}
			return
		}
		u.mu.Lock()
		if u.closed {
			u.mu.Unlock()
			conn.nc.Close()
			fail(status.Error(codes.Canceled, "client closed"))
			return
		}
		u.conn = conn
		u.mu.Unlock()
	}
	deadline, _ := ctx.Deadline() // zero: none
	_ = conn.nc.SetDeadline(deadline)
	// A context canceled before its deadline ends the I/O under way too.
	stop := context.AfterFunc(ctx, func() { _ = conn.nc.SetDeadline(time.Unix(1, 0)) })
	keep, err := conn.roundTrip(calls, deadline)
	if !stop() {
		// The deadline set when the context ended may land after this
		// call: the connection is not the next call's.
		keep = false
	}
	if !keep {
		u.drop(conn)
	}
	for _, c := range calls {
		if !c.done {
			c.out, c.err = nil, err
		}
		if c.err != nil && ctx.Err() != nil {
			c.out, c.err = nil, contextStatus(ctx.Err())
		}
	}
}

func (u *unaryClient) drop(c *h2conn) {
	u.mu.Lock()
	if u.conn == c {
		u.conn = nil
	}
	u.mu.Unlock()
	c.nc.Close()
}

func (u *unaryClient) close() error {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.closed = true
	if u.conn != nil {
		u.conn.nc.Close()
		u.conn = nil
	}
	return nil
}

func contextStatus(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return status.Error(codes.Canceled, err.Error())
}

// h2conn is one HTTP/2 connection of a unaryClient.
type h2conn struct {
	nc         net.Conn
	bw         *bufio.Writer
	fr         *http2.Framer
	hbuf       bytes.Buffer
	henc       *hpack.Encoder
	nextStream uint32
	// unacked is DATA received (any stream's, padding included) since
	// the connection's window was last topped up.
	unacked uint32
}

// dialH2 connects and writes the client's connection preface (RFC 9113,
// 3.4): the preface string, SETTINGS, and the connection window widened;
// they go out with the first request.
func dialH2(ctx context.Context, socket string) (*h2conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return nil, err
	}
	c := &h2conn{nc: nc, bw: bufio.NewWriterSize(nc, 4<<10), nextStream: 1}
	c.fr = http2.NewFramer(c.bw, bufio.NewReaderSize(nc, 64<<10))
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.fr.MaxHeaderListSize = maxHeaderListBytes
	c.fr.SetMaxReadFrameSize(maxFrameBytes)
	c.henc = hpack.NewEncoder(&c.hbuf)
	_, _ = io.WriteString(c.bw, http2.ClientPreface)
	_ = c.fr.WriteSettings(
		http2.Setting{ID: http2.SettingEnablePush, Val: 0},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: streamWindow},
		http2.Setting{ID: http2.SettingMaxFrameSize, Val: maxFrameBytes},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: maxHeaderListBytes},
	)
	_ = c.fr.WriteWindowUpdate(0, connWindow-65535) // from the initial 65,535 (RFC 9113, 6.9.2)
	return c, nil
}

// roundTrip writes each call's request on a new stream and reads until
// every one of those streams has ended, the calls' answers or errors set
// as they do. err is the connection's failure, for the calls not done.
// keep says the connection may carry the next round trip: every stream
// ended as the protocol says, whatever status it gave.
func (c *h2conn) roundTrip(calls []*unaryCall, deadline time.Time) (keep bool, err error) {
	if c.nextStream+2*uint32(len(calls)) > 1<<31-1 {
		return false, status.Error(codes.Unavailable, "stream IDs used up")
	}
	for _, call := range calls {
		call.id, call.headers, call.done, call.body = c.nextStream, false, false, call.dst[:0]
		c.nextStream += 2
		if err := c.writeRequest(call, deadline); err != nil {
			return false, unavailable(err)
		}
	}
	if err := c.bw.Flush(); err != nil {
		return false, unavailable(err)
	}
	keep = true
	left := len(calls)
	end := func(call *unaryCall, out []byte, err error) {
		call.out, call.err, call.done = out, err, true
		left--
	}
	of := func(id uint32) *unaryCall {
		for _, call := range calls {
			if call.id == id && !call.done {
				return call
			}
		}
		return nil
	}
	for left > 0 {
		f, err := c.fr.ReadFrame()
		if err != nil {
			return false, unavailable(err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if f.IsAck() {
				continue
			}
			_ = f.ForeachSetting(func(s http2.Setting) error {
				if s.ID == http2.SettingHeaderTableSize {
					c.henc.SetMaxDynamicTableSizeLimit(s.Val)
				}
				return nil
			})
			if err := c.reply(c.fr.WriteSettingsAck()); err != nil {
				return false, err
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				if err := c.reply(c.fr.WritePing(true, f.Data)); err != nil {
					return false, err
				}
			}
		case *http2.GoAwayFrame:
			keep = false
			for _, call := range calls {
				if !call.done && call.id > f.LastStreamID {
					// Not processed (RFC 9113, 6.8): safe to make again.
					end(call, nil, status.Errorf(codes.Unavailable, "the server is closing the connection (GOAWAY %v)", f.ErrCode))
				}
			}
		case *http2.RSTStreamFrame:
			if call := of(f.StreamID); call != nil {
				code := codes.Internal
				switch {
				case f.ErrCode == http2.ErrCodeRefusedStream:
					code = codes.Unavailable
				case f.ErrCode == http2.ErrCodeCancel && !deadline.IsZero():
					// The grpc-timeout sent ran out on the server's
					// clock, as this side's deadline is about to.
					code = codes.DeadlineExceeded
				}
				end(call, nil, status.Errorf(code, "stream reset by the server: %v", f.ErrCode))
			}
		case *http2.DataFrame:
			if err := c.credit(f.Header().Length); err != nil {
				return false, err
			}
			call := of(f.StreamID)
			if call == nil {
				continue
			}
			if !call.headers {
				keep = false
				end(call, nil, status.Error(codes.Internal, "data before headers"))
				continue
			}
			if call.body, err = appendMessage(call.body, f.Data()); err != nil {
				// The rest of the stream is not read: nor is the
				// connection used again.
				keep = false
				end(call, nil, err)
				continue
			}
			if f.StreamEnded() {
				end(call, nil, status.Error(codes.Internal, "the answer ended without trailers"))
			}
		case *http2.MetaHeadersFrame:
			call := of(f.StreamID)
			if call == nil {
				continue
			}
			if f.Truncated {
				keep = false
				end(call, nil, status.Errorf(codes.Internal, "headers of more than %d bytes", maxHeaderListBytes))
				continue
			}
			if !call.headers {
				call.headers = true
				if err := checkResponseHeaders(f); err != nil {
					keep = keep && f.StreamEnded()
					end(call, nil, err)
					continue
				}
				if !f.StreamEnded() {
					continue
				}
				// Trailers-Only: a status and no message.
			} else if !f.StreamEnded() {
				keep = false
				end(call, nil, status.Error(codes.Internal, "headers after the message without END_STREAM"))
				continue
			}
			out, err := answerMessage(call.body, f)
			end(call, out, err)
		}
	}
	return keep, nil
}

// writeRequest writes a call's HEADERS and DATA frames on its stream.
func (c *h2conn) writeRequest(call *unaryCall, deadline time.Time) error {
	c.hbuf.Reset()
	for _, f := range [...]hpack.HeaderField{
		{Name: ":method", Value: "POST"},
		{Name: ":scheme", Value: "http"},
		{Name: ":path", Value: call.method},
		{Name: ":authority", Value: "localhost"},
		{Name: "content-type", Value: "application/grpc"},
		{Name: "te", Value: "trailers"},
	} {
		_ = c.henc.WriteField(f)
	}
	if !deadline.IsZero() {
		// "Timeout → "grpc-timeout" TimeoutValue TimeoutUnit", at most 8
		// digits: the server ends its work when the caller has gone, and
		// not before (rounded up).
		ms := max(1, min((time.Until(deadline)+time.Millisecond-1).Milliseconds(), 99999999))
		_ = c.henc.WriteField(hpack.HeaderField{Name: "grpc-timeout", Value: strconv.FormatInt(ms, 10) + "m"})
	}
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: call.id, BlockFragment: c.hbuf.Bytes(), EndHeaders: true}); err != nil {
		return err
	}
	// "Length-Prefixed-Message → Compressed-Flag Message-Length Message".
	var prefix [5]byte
	binary.BigEndian.PutUint32(prefix[1:], uint32(len(call.req)))
	return c.fr.WriteData(call.id, true, append(prefix[:], call.req...))
}

// reply writes a frame the server asked for (a SETTINGS or PING ACK).
func (c *h2conn) reply(err error) error {
	if err == nil {
		err = c.bw.Flush()
	}
	if err != nil {
		return unavailable(err)
	}
	return nil
}

// credit counts n bytes of DATA against the connection's window and gives
// them back once half the window is used.
func (c *h2conn) credit(n uint32) error {
	c.unacked += n
	if c.unacked < connWindow/2 {
		return nil
	}
	if err := c.reply(c.fr.WriteWindowUpdate(0, c.unacked)); err != nil {
		return err
	}
	c.unacked = 0
	return nil
}

// appendMessage adds DATA to the message read so far, refusing one whose
// length prefix says it is compressed or over MaxReceiveBytes as soon as
// the prefix is in.
func appendMessage(body, data []byte) ([]byte, error) {
	had := len(body)
	body = append(body, data...)
	if had < 5 && len(body) >= 5 {
		if body[0] != 0 {
			return nil, status.Error(codes.Internal, "a compressed message, though none was asked for")
		}
		if n := binary.BigEndian.Uint32(body[1:5]); n > MaxReceiveBytes {
			return nil, status.Errorf(codes.ResourceExhausted, "received message larger than max (%d vs. %d)", n, MaxReceiveBytes)
		}
	}
	if len(body) > 5+MaxReceiveBytes {
		return nil, status.Errorf(codes.ResourceExhausted, "received more than %d bytes", MaxReceiveBytes)
	}
	return body, nil
}

// checkResponseHeaders checks an answer's first headers: HTTP status 200
// and a gRPC content type (PROTOCOL-HTTP2.md, "Responses"). A status
// other than 200 maps to a code as gRPC's http-grpc-status-mapping.md
// says.
func checkResponseHeaders(f *http2.MetaHeadersFrame) error {
	if s := f.PseudoValue("status"); s != "200" {
		code := codes.Unknown
		switch s {
		case "400":
			code = codes.Internal
		case "401":
			code = codes.Unauthenticated
		case "403":
			code = codes.PermissionDenied
		case "404":
			code = codes.Unimplemented
		case "429", "502", "503", "504":
			code = codes.Unavailable
		}
		return status.Errorf(code, "HTTP status %q from the server", s)
	}
	if ct := field(f, "content-type"); !strings.HasPrefix(ct, "application/grpc") {
		return status.Errorf(codes.Internal, "content type %q is not gRPC's", ct)
	}
	return nil
}

// answerMessage is the answer's one message once its trailers say OK, else the
// status they give.
func answerMessage(body []byte, trailers *http2.MetaHeadersFrame) ([]byte, error) {
	grpcStatus := field(trailers, "grpc-status")
	code, err := strconv.ParseUint(grpcStatus, 10, 32)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "no grpc-status in the trailers (%q)", grpcStatus)
	}
	if code != 0 {
		// "Status-Message → "grpc-message" Percent-Encoded".
		msg := field(trailers, "grpc-message")
		if m, err := url.PathUnescape(msg); err == nil {
			msg = m
		}
		return nil, status.Error(codes.Code(code), msg)
	}
	if len(body) < 5 || int(binary.BigEndian.Uint32(body[1:5])) != len(body)-5 {
		return nil, status.Error(codes.Internal, fmt.Sprintf("the answer is not one message (%d bytes)", len(body)))
	}
	return body[5:], nil
}

// field is the value of a regular header field, "" when absent. hpack
// decodes names as sent; HTTP/2 requires them in lower case (RFC 9113,
// 8.2.1), which the Framer checks.
func field(f *http2.MetaHeadersFrame, name string) string {
	for _, hf := range f.RegularFields() {
		if hf.Name == name {
			return hf.Value
		}
	}
	return ""
}

// unavailable is the status of a call whose connection failed: the
// deadline's, when that is what ended the read or write.
func unavailable(err error) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return status.Error(codes.Unavailable, err.Error())
}
