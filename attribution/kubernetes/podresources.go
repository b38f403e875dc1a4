package kubernetes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

const (
	// DefaultPodResourcesSocket is where the kubelet serves the
	// pod-resources API (<root-dir>/pod-resources/kubelet.sock).
	DefaultPodResourcesSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"
	// DefaultCallTimeout bounds one call to the kubelet when the caller's
	// context has no earlier deadline.
	DefaultCallTimeout = 5 * time.Second
	// MaxReceiveBytes is the largest response accepted from the kubelet.
	// gRPC's default of 4 MiB is not enough for a List on a busy node:
	// every pod is listed, with its CPU and memory assignments.
	MaxReceiveBytes = 16 << 20
)

// maxReconnectDelay caps gRPC's reconnection backoff (the pods API's
// connection) so that the connection comes back soon after the kubelet
// restarts.
const maxReconnectDelay = 5 * time.Second

// PodResources is one pod's device allocations, as the kubelet reports them.
type PodResources struct {
	Namespace  string
	Name       string
	Containers []ContainerResources
}

// ContainerResources is one container's device allocations: by device
// plugins (Devices) and by Dynamic Resource Allocation (Claims).
type ContainerResources struct {
	Name    string
	Devices []ResourceDevices
	Claims  []ClaimDevice
}

// ClaimDevice is one device of a DRA ResourceClaim that a container uses.
// The kubelet's pod-resources v1 API (k8s.io/kubelet/pkg/apis/podresources/v1,
// api.proto) reports it as a DynamicResource (claim name and namespace) with
// one ClaimResource per device: "The driver name/pool name/device name
// triplet uniquely identifies the device", and "each device at the DRA API
// level may map to zero or more CDI devices".
type ClaimDevice struct {
	ClaimNamespace string
	ClaimName      string
	Driver         string
	Pool           string
	Device         string
	// ShareID is set when the device was allocated with consumable
	// capacity, one share of several claims on the same device.
	ShareID string
	// CDIDevices are fully qualified CDI device names,
	// "vendor.com/class=name".
	CDIDevices []string
}

// ResourceDevices is the device-plugin IDs of one resource.
type ResourceDevices struct {
	Resource string
	IDs      []string
}

// Client talks to the kubelet pod-resources API v1 over its unix socket. It
// is safe for concurrent use. The connection is made lazily and re-made
// after the kubelet restarts, so one Client serves for the exporter's
// lifetime; a kubelet that is down makes calls fail, not block.
type Client struct {
	socket      string
	callTimeout time.Duration
	rpc         *unaryClient
	list        lastAnswer[[]PodResources]
	allocatable lastAnswer[[]ResourceDevices]
}

// Option configures a Client.
type Option func(*Client)

// WithCallTimeout bounds each call; zero or less keeps DefaultCallTimeout.
// A deadline in the caller's context that comes sooner still applies.
func WithCallTimeout(d time.Duration) Option {
	return func(c *Client) {
		if d > 0 {
			c.callTimeout = d
		}
	}
}

// Dial returns a Client for the pod-resources socket at socketPath. It does
// not connect: a missing socket shows as an error of the first call.
func Dial(socketPath string, opts ...Option) (*Client, error) {
	if socketPath == "" {
		return nil, errors.New("pod-resources socket: no socket path")
	}
	abs, err := filepath.Abs(socketPath)
	if err != nil {
		return nil, fmt.Errorf("pod-resources socket %q: %w", socketPath, err)
	}
	c := &Client{
		socket:      socketPath,
		callTimeout: DefaultCallTimeout,
		rpc:         newUnaryClient(abs),
	}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// Close releases the connection.
func (c *Client) Close() error { return c.rpc.close() }

// List returns the device allocations of every pod on the node. While the
// kubelet's answer is unchanged, byte for byte, List returns the slice it
// returned before: callers must not modify it.
func (c *Client) List(ctx context.Context) ([]PodResources, error) {
	return call(ctx, c, &c.list, podresourcesv1.PodResourcesLister_List_FullMethodName, decodeList)
}

// ListAllocatable is List and Allocatable in one round trip to the
// kubelet, which a scrape asks for together: each answer and error is the
// one its method alone would give.
func (c *Client) ListAllocatable(ctx context.Context) (pods []PodResources, podsErr error, devs []ResourceDevices, devsErr error) {
	list := prepare(&c.list, podresourcesv1.PodResourcesLister_List_FullMethodName)
	alloc := prepare(&c.allocatable, podresourcesv1.PodResourcesLister_GetAllocatableResources_FullMethodName)
	ctx, cancel := context.WithTimeout(ctx, c.callTimeout)
	defer cancel()
	c.rpc.calls(ctx, list, alloc)
	pods, podsErr = finish(c, &c.list, list, decodeList)
	devs, devsErr = finish(c, &c.allocatable, alloc, decodeAllocatable)
	return pods, podsErr, devs, devsErr
}

func decodeList(b []byte) ([]PodResources, error) {
	var resp podresourcesv1.ListPodResourcesResponse
	if err := proto.Unmarshal(b, &resp); err != nil {
		return nil, err
	}
	return convertPods(resp.GetPodResources()), nil
}

func convertPods(in []*podresourcesv1.PodResources) []PodResources {
	pods := make([]PodResources, 0, len(in))
	for _, p := range in {
		pod := PodResources{Namespace: p.GetNamespace(), Name: p.GetName()}
		for _, ctr := range p.GetContainers() {
			pod.Containers = append(pod.Containers, ContainerResources{
				Name:    ctr.GetName(),
				Devices: convertDevices(ctr.GetDevices()),
				Claims:  convertClaims(ctr.GetDynamicResources()),
			})
		}
		pods = append(pods, pod)
	}
	return pods
}

// Allocatable returns every device the kubelet knows of, allocated or not
// (api.proto, AllocatableResourcesResponses: "informations about all the
// devices known by the kubelet"). Each time-slicing replica is a device of its own, which
// is what Allocations counts replicas from. As with List, an unchanged
// answer returns the slice returned before: callers must not modify it.
func (c *Client) Allocatable(ctx context.Context) ([]ResourceDevices, error) {
	return call(ctx, c, &c.allocatable, podresourcesv1.PodResourcesLister_GetAllocatableResources_FullMethodName, decodeAllocatable)
}

func decodeAllocatable(b []byte) ([]ResourceDevices, error) {
	var resp podresourcesv1.AllocatableResourcesResponse
	if err := proto.Unmarshal(b, &resp); err != nil {
		return nil, err
	}
	return convertDevices(resp.GetDevices()), nil
}

// lastAnswer is a method's last answer, undecoded and converted. A busy
// node's kubelet answers the same at nearly every scrape, and decoding
// and converting that answer again was most of the call's cost.
type lastAnswer[T any] struct {
	mu    sync.Mutex
	raw   []byte
	val   T
	valid bool
	spare []byte // the buffer the next answer is read into
}

// call invokes method and converts its answer with decode, or returns the
// last conversion when the answer is the same bytes as last time.
func call[T any](ctx context.Context, c *Client, last *lastAnswer[T], method string, decode func([]byte) (T, error)) (T, error) {
	u := prepare(last, method)
	ctx, cancel := context.WithTimeout(ctx, c.callTimeout)
	defer cancel()
	c.rpc.calls(ctx, u)
	return finish(c, last, u, decode)
}

// prepare is a call of method, to be read into the buffer the last answer
// left spare. Its request is the empty message: ListPodResourcesRequest
// and AllocatableResourcesRequest have no fields (api.proto), and a
// protobuf message with none set encodes as no bytes.
func prepare[T any](last *lastAnswer[T], method string) *unaryCall {
	last.mu.Lock()
	spare := last.spare
	last.spare = nil
	last.mu.Unlock()
	return &unaryCall{method: method, dst: spare}
}

// finish is a call's answer converted with decode, or the last conversion
// when the answer is the same bytes as last time.
func finish[T any](c *Client, last *lastAnswer[T], u *unaryCall, decode func([]byte) (T, error)) (T, error) {
	var zero T
	name := u.method[strings.LastIndexByte(u.method, '/')+1:]
	if u.err != nil {
		return zero, c.callError(name, u.err)
	}
	answer := u.out
	last.mu.Lock()
	defer last.mu.Unlock()
	if last.valid && bytes.Equal(answer, last.raw) {
		last.spare = answer
		return last.val, nil
	}
	val, err := decode(answer)
	switch {
	case err != nil:
		if len(answer) <= maxKeptAnswer {
			last.spare = answer
		}
		return zero, c.callError(name, fmt.Errorf("decoding the answer: %w", err))
	case len(answer) > maxKeptAnswer:
		// Decoded at every call rather than held twice over.
		last.raw, last.val, last.valid, last.spare = nil, zero, false, nil
		return val, nil
	}
	last.spare, last.raw, last.val, last.valid = last.raw, answer, val, true
	return val, nil
}

// maxKeptAnswer bounds an answer kept undecoded, which is held with a spare
// buffer as large: the List of a node of a thousand pods is a few hundred
// KiB, and an answer may be MaxReceiveBytes.
const maxKeptAnswer = 1 << 20

// convertDevices merges the entries of one resource: the kubelet sends one
// entry per device for allocatable resources (each with its NUMA topology)
// and may split a container's devices the same way.
func convertDevices(devs []*podresourcesv1.ContainerDevices) []ResourceDevices {
	var out []ResourceDevices
	index := map[string]int{}
	for _, d := range devs {
		i, seen := index[d.GetResourceName()]
		if !seen {
			i = len(out)
			index[d.GetResourceName()] = i
			out = append(out, ResourceDevices{Resource: d.GetResourceName()})
		}
		out[i].IDs = append(out[i].IDs, d.GetDeviceIds()...)
	}
	return out
}

// convertClaims flattens a container's DRA claims to one entry per device.
// A ClaimResource without a device name is another kind of resource
// (api.proto: "Should DRA get extended to other kinds of resources, then
// device_name will be empty") and is left out.
func convertClaims(drs []*podresourcesv1.DynamicResource) []ClaimDevice {
	var out []ClaimDevice
	for _, dr := range drs {
		for _, cr := range dr.GetClaimResources() {
			if cr.GetDeviceName() == "" {
				continue
			}
			cd := ClaimDevice{
				ClaimNamespace: dr.GetClaimNamespace(),
				ClaimName:      dr.GetClaimName(),
				Driver:         cr.GetDriverName(),
				Pool:           cr.GetPoolName(),
				Device:         cr.GetDeviceName(),
				ShareID:        cr.GetShareId(),
			}
			for _, c := range cr.GetCdiDevices() {
				cd.CDIDevices = append(cd.CDIDevices, c.GetName())
			}
			out = append(out, cd)
		}
	}
	return out
}

func (c *Client) callError(method string, err error) error {
	return fmt.Errorf("kubelet pod-resources %s on %s: %w", method, c.socket, err)
}

// dialUnix makes a lazy gRPC connection to a unix socket. Nothing blocks
// here: connecting happens on the first call, under that call's deadline.
func dialUnix(socketPath string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	if socketPath == "" {
		return nil, errors.New("no socket path")
	}
	abs, err := filepath.Abs(socketPath)
	if err != nil {
		return nil, err
	}
	bc := backoff.DefaultConfig
	bc.MaxDelay = maxReconnectDelay
	return grpc.NewClient("unix://"+abs, append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxReceiveBytes)),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: bc, MinConnectTimeout: time.Second}),
	}, opts...)...)
}
