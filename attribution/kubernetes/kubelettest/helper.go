package kubelettest

import "os"

// TB is the part of testing.TB that Start uses, so that this package does
// not import testing into the binaries that embed the fake kubelet.
type TB interface {
	Helper()
	Cleanup(func())
	Fatalf(format string, args ...any)
}

// Start runs a fake kubelet for the duration of a test. Its sockets live in
// a fresh directory under the system temporary directory, not t.TempDir():
// a unix socket path must fit in 107 bytes and test names make long paths.
func Start(t TB, fx *Fixture, opts ...Option) *Server {
	t.Helper()
	dir, err := os.MkdirTemp("", "kubelet")
	if err != nil {
		t.Fatalf("fake kubelet: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	s, err := New(dir, fx, opts...)
	if err != nil {
		t.Fatalf("fake kubelet: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

// StartFile is Start with a fixture file.
func StartFile(t TB, path string, opts ...Option) *Server {
	t.Helper()
	fx, err := LoadFixture(path)
	if err != nil {
		t.Fatalf("%v", err)
	}
	return Start(t, fx, opts...)
}
