package kubernetes

// Adversarial tests of the unary client against a fake HTTP/2 server
// (x/net/http2 Framer on a unix socket) sending frames in the orders a
// real server may, and some it should not (written by review26).

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

type advReq struct {
	id   uint32
	path string
}

type advConn struct {
	t    *testing.T
	nc   net.Conn
	fr   *http2.Framer
	bw   *bufio.Writer
	hbuf bytes.Buffer
	henc *hpack.Encoder
	n    int // connection number
	mu   sync.Mutex
	// frames received from the client other than requests
	pingAcks, settingsAcks, windowUpdates int
}

func (s *advConn) flush() { _ = s.bw.Flush() }

// readReqs reads until n requests (HEADERS + DATA END_STREAM) are in.
func (s *advConn) readReqs(n int) ([]advReq, error) {
	var out []advReq
	paths := map[uint32]string{}
	for len(out) < n {
		f, err := s.fr.ReadFrame()
		if err != nil {
			return out, err
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			paths[f.StreamID] = f.PseudoValue("path")
		case *http2.DataFrame:
			if f.StreamEnded() {
				out = append(out, advReq{f.StreamID, paths[f.StreamID]})
			}
		case *http2.PingFrame:
			if f.IsAck() {
				s.mu.Lock()
				s.pingAcks++
				s.mu.Unlock()
			}
		case *http2.SettingsFrame:
			if f.IsAck() {
				s.mu.Lock()
				s.settingsAcks++
				s.mu.Unlock()
			}
		case *http2.WindowUpdateFrame:
			s.mu.Lock()
			s.windowUpdates++
			s.mu.Unlock()
		}
	}
	return out, nil
}

// drain reads the client's frames in the background, counting ACKs.
func (s *advConn) drain() {
	go func() {
		for {
			f, err := s.fr.ReadFrame()
			if err != nil {
				return
			}
			s.mu.Lock()
			switch f := f.(type) {
			case *http2.PingFrame:
				if f.IsAck() {
					s.pingAcks++
				}
			case *http2.SettingsFrame:
				if f.IsAck() {
					s.settingsAcks++
				}
			}
			s.mu.Unlock()
		}
	}()
}

func (s *advConn) headers(id uint32, end bool, fields ...string) {
	s.hbuf.Reset()
	for i := 0; i+1 < len(fields); i += 2 {
		_ = s.henc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	_ = s.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: s.hbuf.Bytes(), EndHeaders: true, EndStream: end})
}

func (s *advConn) respHeaders(id uint32) {
	s.headers(id, false, ":status", "200", "content-type", "application/grpc")
}

func (s *advConn) trailers(id uint32, code int, msg string) {
	f := []string{"grpc-status", itoa(code)}
	if msg != "" {
		f = append(f, "grpc-message", msg)
	}
	s.headers(id, true, f...)
}

func itoa(i int) string { return strconv.Itoa(i) }

func lpm(msg []byte) []byte {
	var p [5]byte
	binary.BigEndian.PutUint32(p[1:], uint32(len(msg)))
	return append(p[:], msg...)
}

// answer writes a whole OK answer on id.
func (s *advConn) answer(id uint32, msg []byte) {
	s.respHeaders(id)
	_ = s.fr.WriteData(id, false, lpm(msg))
	s.trailers(id, 0, "")
}

type advServer struct {
	socket string
	conns  atomic.Int32
}

// startAdv serves each connection with serve (its number from 1).
func startAdv(t *testing.T, serve func(s *advConn)) *advServer {
	t.Helper()
	as := &advServer{}
	as.socket = listenUnix(t, func(nc net.Conn) {
		n := int(as.conns.Add(1))
		defer nc.Close()
		pre := make([]byte, len(http2.ClientPreface))
		if _, err := io.ReadFull(nc, pre); err != nil {
			return
		}
		s := &advConn{t: t, nc: nc, n: n, bw: bufio.NewWriterSize(nc, 1<<20)}
		s.fr = http2.NewFramer(s.bw, nc)
		s.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
		s.henc = hpack.NewEncoder(&s.hbuf)
		_ = s.fr.WriteSettings()
		s.flush()
		serve(s)
		s.flush()
	})
	return as
}

// bothAnswered makes calls A and B to the server at socket on one client
// and fails t unless each got its own answer ("answer-A", "answer-B").
func bothAnswered(t *testing.T, socket string) {
	t.Helper()
	u := newUnaryClient(socket)
	defer u.close()
	a, b := twoCalls()
	u.calls(ctxFor(t, 3*time.Second), a, b)
	if a.err != nil || b.err != nil || string(a.out) != "answer-A" || string(b.out) != "answer-B" {
		t.Fatalf("A %q %v; B %q %v", a.out, a.err, b.out, b.err)
	}
}

func twoCalls() (*unaryCall, *unaryCall) {
	return &unaryCall{method: "/svc/A", req: []byte("a")}, &unaryCall{method: "/svc/B", req: []byte("b")}
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// Interleaved DATA of both streams, B answered first, SETTINGS and PING
// mid-answer, DATA on an unknown stream: each call gets its own answer.
func TestAdvInterleaved(t *testing.T) {
	msgA, msgB := bytes.Repeat([]byte("A"), 40000), bytes.Repeat([]byte("B"), 30000)
	as := startAdv(t, func(s *advConn) {
		reqs, err := s.readReqs(2)
		if err != nil {
			return
		}
		ids := map[string]uint32{}
		for _, r := range reqs {
			ids[r.path] = r.id
		}
		a, b := ids["/svc/A"], ids["/svc/B"]
		s.respHeaders(b)
		s.respHeaders(a)
		pa, pb := lpm(msgA), lpm(msgB)
		_ = s.fr.WriteData(a, false, pa[:10000])
		_ = s.fr.WriteSettings(http2.Setting{ID: http2.SettingHeaderTableSize, Val: 0})
		_ = s.fr.WritePing(false, [8]byte{1, 2, 3})
		_ = s.fr.WriteData(b, false, pb[:7])
		_ = s.fr.WriteData(99, false, []byte("junk for a stream never opened"))
		_ = s.fr.WriteData(a, false, pa[10000:])
		_ = s.fr.WriteData(b, false, pb[7:])
		s.trailers(b, 0, "")
		s.trailers(a, 0, "")
		s.flush()
		s.drain()
		time.Sleep(200 * time.Millisecond)
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.pingAcks != 1 || s.settingsAcks != 2 { // the initial SETTINGS and the one mid-answer
			t.Errorf("ping acks %d settings acks %d, want 1 and 2", s.pingAcks, s.settingsAcks)
		}
	})
	u := newUnaryClient(as.socket)
	defer u.close()
	a, b := twoCalls()
	u.calls(ctxFor(t, 3*time.Second), a, b)
	if a.err != nil || b.err != nil || !bytes.Equal(a.out, msgA) || !bytes.Equal(b.out, msgB) {
		t.Fatalf("A: %d bytes %v; B: %d bytes %v", len(a.out), a.err, len(b.out), b.err)
	}
	time.Sleep(300 * time.Millisecond)
}

// GOAWAY naming stream A as the last processed: A's answer still counts, B
// is made again on a new connection.
func TestAdvGoAwayLastA(t *testing.T) {
	for _, last := range []string{"A", "none", "both"} {
		t.Run(last, func(t *testing.T) {
			as := startAdv(t, func(s *advConn) {
				if s.n == 1 {
					reqs, err := s.readReqs(2)
					if err != nil {
						return
					}
					a, b := reqs[0].id, reqs[1].id
					if reqs[0].path != "/svc/A" {
						a, b = b, a
					}
					switch last {
					case "A":
						_ = s.fr.WriteGoAway(a, http2.ErrCodeNo, nil)
						s.answer(a, []byte("answer-A"))
					case "none":
						_ = s.fr.WriteGoAway(0, http2.ErrCodeNo, nil)
					case "both":
						_ = s.fr.WriteGoAway(b, http2.ErrCodeNo, nil)
						s.answer(b, []byte("answer-B"))
						s.answer(a, []byte("answer-A"))
					}
					s.flush()
					time.Sleep(50 * time.Millisecond)
					return
				}
				for {
					reqs, err := s.readReqs(1)
					if err != nil {
						return
					}
					s.answer(reqs[0].id, []byte("answer-"+strings.TrimPrefix(reqs[0].path, "/svc/")))
					s.flush()
				}
			})
			bothAnswered(t, as.socket)
		})
	}
}

// A header block that never ends (CONTINUATION after CONTINUATION): the
// call fails at once, memory stays bounded, no hang.
func TestAdvEndlessContinuation(t *testing.T) {
	as := startAdv(t, func(s *advConn) {
		reqs, err := s.readReqs(2)
		if err != nil {
			return
		}
		s.hbuf.Reset()
		_ = s.henc.WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
		_ = s.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: reqs[0].id, BlockFragment: s.hbuf.Bytes(), EndHeaders: false})
		frag := bytes.Repeat([]byte{0x40, 0x01, 'x', 0x7f, 0x00}, 3000) // literal "x" with huge value length prefix
		for i := 0; i < 5000; i++ {
			if err := s.fr.WriteContinuation(reqs[0].id, false, frag); err != nil {
				return
			}
			if i%16 == 0 {
				s.flush()
			}
		}
	})
	u := newUnaryClient(as.socket)
	defer u.close()
	a, b := twoCalls()
	start := time.Now()
	u.calls(ctxFor(t, 2*time.Second), a, b)
	if a.err == nil || b.err == nil {
		t.Fatalf("A %v B %v", a.err, b.err)
	}
	t.Logf("A: %v (%v)", a.err, time.Since(start))
	if time.Since(start) > 2500*time.Millisecond {
		t.Errorf("took %v", time.Since(start))
	}
}

// A huge but finite header block with many fields (within frame size):
// headers over the list limit end the call (Truncated) without taking the
// other stream's answer with it.
func TestAdvHugeHeadersOneStream(t *testing.T) {
	as := startAdv(t, func(s *advConn) {
		reqs, err := s.readReqs(2)
		if err != nil {
			return
		}
		a, b := reqs[0].id, reqs[1].id
		if reqs[0].path != "/svc/A" {
			a, b = b, a
		}
		f := []string{":status", "200", "content-type", "application/grpc"}
		for i := 0; i < 2000; i++ {
			f = append(f, "x-pad", strings.Repeat("p", 60))
		}
		s.headers(a, false, f...)
		s.answer(b, []byte("answer-B"))
		s.flush()
		time.Sleep(100 * time.Millisecond)
	})
	u := newUnaryClient(as.socket)
	defer u.close()
	a, b := twoCalls()
	u.calls(ctxFor(t, 2*time.Second), a, b)
	t.Logf("A: %v; B: %q %v", a.err, b.out, b.err)
	if a.err == nil {
		t.Error("A: no error for headers over the limit")
	}
}

// One stream's answer over MaxReceiveBytes, the other's good: the good one
// is answered; the next call does not reuse the connection.
func TestAdvOversizeOneGoodOther(t *testing.T) {
	for _, mode := range []string{"prefix", "lying prefix"} {
		t.Run(mode, func(t *testing.T) {
			as := startAdv(t, func(s *advConn) {
				reqs, err := s.readReqs(2)
				if err != nil {
					return
				}
				a, b := reqs[0].id, reqs[1].id
				if reqs[0].path != "/svc/A" {
					a, b = b, a
				}
				s.respHeaders(a)
				s.respHeaders(b)
				var p [5]byte
				if mode == "prefix" {
					binary.BigEndian.PutUint32(p[1:], MaxReceiveBytes+1)
				} else {
					binary.BigEndian.PutUint32(p[1:], 100)
				}
				_ = s.fr.WriteData(a, false, p[:])
				chunk := make([]byte, 1<<14)
				for sent := 0; sent < MaxReceiveBytes+(1<<20); sent += len(chunk) {
					if err := s.fr.WriteData(a, false, chunk); err != nil {
						return
					}
				}
				_ = s.fr.WriteData(b, false, lpm([]byte("answer-B")))
				s.trailers(b, 0, "")
				s.flush()
				time.Sleep(200 * time.Millisecond)
			})
			u := newUnaryClient(as.socket)
			defer u.close()
			a, b := twoCalls()
			var ms runtime.MemStats
			u.calls(ctxFor(t, 10*time.Second), a, b)
			runtime.ReadMemStats(&ms)
			if status.Code(a.err) != codes.ResourceExhausted || b.err != nil || string(b.out) != "answer-B" {
				t.Fatalf("A %v; B %q %v", a.err, b.out, b.err)
			}
			if u.conn != nil {
				t.Error("the connection of an abandoned stream is kept")
			}
			t.Logf("heap in use %d MiB", ms.HeapInuse>>20)
		})
	}
}

// The server stalls mid-answer: the call ends by its deadline, and the
// connection is not the next call's.
func TestAdvStallMidAnswer(t *testing.T) {
	as := startAdv(t, func(s *advConn) {
		reqs, err := s.readReqs(2)
		if err != nil {
			return
		}
		s.respHeaders(reqs[0].id)
		_ = s.fr.WriteData(reqs[0].id, false, []byte{0, 0, 0, 0, 10, 1, 2})
		s.flush()
		// keep the peer trickling PINGs to keep it "busy"
		for i := 0; i < 100; i++ {
			_ = s.fr.WritePing(false, [8]byte{byte(i)})
			s.flush()
			time.Sleep(20 * time.Millisecond)
		}
	})
	u := newUnaryClient(as.socket)
	defer u.close()
	a, b := twoCalls()
	start := time.Now()
	u.calls(ctxFor(t, 300*time.Millisecond), a, b)
	el := time.Since(start)
	if status.Code(a.err) != codes.DeadlineExceeded || status.Code(b.err) != codes.DeadlineExceeded || el > 600*time.Millisecond {
		t.Fatalf("A %v B %v after %v", a.err, b.err, el)
	}
	if u.conn != nil {
		t.Error("connection kept after a stream was abandoned mid-answer")
	}
}

// Close while a call waits on a silent server: the call returns at once.
func TestAdvCloseDuringCall(t *testing.T) {
	as := startAdv(t, func(s *advConn) {
		_, _ = s.readReqs(2)
		time.Sleep(3 * time.Second)
	})
	u := newUnaryClient(as.socket)
	a, b := twoCalls()
	done := make(chan struct{})
	start := time.Now()
	go func() { u.calls(ctxFor(t, 5*time.Second), a, b); close(done) }()
	time.Sleep(100 * time.Millisecond)
	_ = u.close()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("the call did not end after Close")
	}
	t.Logf("A %v B %v after %v", a.err, b.err, time.Since(start))
	if status.Code(a.err) != codes.Canceled {
		t.Errorf("A %v, want Canceled", a.err)
	}
}

// The kubelet restarts mid-answer: the connection closes after A's
// headers; both calls are made again on the new one and answered.
func TestAdvRestartMidAnswer(t *testing.T) {
	as := startAdv(t, func(s *advConn) {
		if s.n == 1 {
			reqs, err := s.readReqs(2)
			if err != nil {
				return
			}
			s.respHeaders(reqs[0].id)
			_ = s.fr.WriteData(reqs[0].id, false, []byte{0, 0, 0})
			s.flush()
			return
		}
		reqs, err := s.readReqs(2)
		if err != nil {
			return
		}
		for _, r := range reqs {
			s.answer(r.id, []byte("answer-"+strings.TrimPrefix(r.path, "/svc/")))
		}
		s.flush()
		time.Sleep(100 * time.Millisecond)
	})
	bothAnswered(t, as.socket)
}

// RST_STREAM REFUSED_STREAM on B (MAX_CONCURRENT_STREAMS 1): B is made
// again, on the kept connection, and answered.
func TestAdvRefusedStream(t *testing.T) {
	as := startAdv(t, func(s *advConn) {
		reqs, err := s.readReqs(2)
		if err != nil {
			return
		}
		a, b := reqs[0].id, reqs[1].id
		if reqs[0].path != "/svc/A" {
			a, b = b, a
		}
		_ = s.fr.WriteRSTStream(b, http2.ErrCodeRefusedStream)
		s.answer(a, []byte("answer-A"))
		s.flush()
		reqs, err = s.readReqs(1)
		if err != nil {
			return
		}
		s.answer(reqs[0].id, []byte("answer-B"))
		s.flush()
		time.Sleep(100 * time.Millisecond)
	})
	bothAnswered(t, as.socket)
}

// Stale frames of a finished stream arriving on the next round trip of a
// kept connection (DATA and HEADERS of stream 1 after its trailers) are
// never taken for the new streams' answers.
func TestAdvStaleFramesNextTrip(t *testing.T) {
	as := startAdv(t, func(s *advConn) {
		reqs, err := s.readReqs(1)
		if err != nil {
			return
		}
		s.answer(reqs[0].id, []byte("first"))
		s.flush()
		reqs2, err := s.readReqs(1)
		if err != nil {
			return
		}
		// stale answer of the first stream, then the real one
		s.respHeaders(reqs[0].id)
		_ = s.fr.WriteData(reqs[0].id, false, lpm([]byte("STALE")))
		s.trailers(reqs[0].id, 0, "")
		s.answer(reqs2[0].id, []byte("second"))
		s.flush()
		time.Sleep(100 * time.Millisecond)
	})
	u := newUnaryClient(as.socket)
	defer u.close()
	ctx := ctxFor(t, 3*time.Second)
	first := &unaryCall{method: "/svc/A"}
	u.calls(ctx, first)
	if first.err != nil || string(first.out) != "first" {
		t.Fatalf("%q %v", first.out, first.err)
	}
	second := &unaryCall{method: "/svc/A"}
	u.calls(ctx, second)
	if second.err != nil || string(second.out) != "second" {
		t.Fatalf("second call: %q %v", second.out, second.err)
	}
}
