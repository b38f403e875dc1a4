package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
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

const (
	// reconnectWait is how long a call on a connection in transient failure
	// waits for the immediate reconnection attempt it asks for. A unix
	// socket connects or fails at once, so a live kubelet answers well
	// within it and a dead one costs a scrape no more than this.
	reconnectWait = 250 * time.Millisecond
	// maxReconnectDelay caps gRPC's reconnection backoff so that the
	// connection comes back soon after the kubelet restarts.
	maxReconnectDelay = 5 * time.Second
)

// podResourcesServiceConfig retries the read-only pod-resources calls once
// they fail as UNAVAILABLE. A call made just as the kubelet restarts can
// be sent on the connection that is going away; the retry goes out on the
// new one, within the same deadline.
const podResourcesServiceConfig = `{"methodConfig": [{
	"name": [{"service": "v1.PodResourcesLister"}],
	"retryPolicy": {
		"maxAttempts": 3,
		"initialBackoff": "0.05s",
		"maxBackoff": "0.2s",
		"backoffMultiplier": 2,
		"retryableStatusCodes": ["UNAVAILABLE"]
	}
}]}`

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
	conn        *grpc.ClientConn
	api         podresourcesv1.PodResourcesListerClient
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
	conn, err := dialUnix(socketPath, grpc.WithDefaultServiceConfig(podResourcesServiceConfig))
	if err != nil {
		return nil, fmt.Errorf("pod-resources socket %q: %w", socketPath, err)
	}
	c := &Client{
		socket:      socketPath,
		callTimeout: DefaultCallTimeout,
		conn:        conn,
		api:         podresourcesv1.NewPodResourcesListerClient(conn),
	}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// Close releases the connection.
func (c *Client) Close() error { return c.conn.Close() }

// List returns the device allocations of every pod on the node.
func (c *Client) List(ctx context.Context) ([]PodResources, error) {
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	resp, err := c.api.List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		return nil, c.callError("List", err)
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
// is what Allocations counts replicas from.
func (c *Client) Allocatable(ctx context.Context) ([]ResourceDevices, error) {
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	resp, err := c.api.GetAllocatableResources(ctx, &podresourcesv1.AllocatableResourcesRequest{})
	if err != nil {
		return nil, c.callError("GetAllocatableResources", err)
	}
	return convertDevices(resp.GetDevices()), nil
}

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

// callContext applies the call timeout and, when the connection is in
// transient failure, asks for an immediate reconnection and waits briefly
// for it. Without that, the first scrape after a kubelet restart would fail
// for as long as gRPC's backoff still had to run.
func (c *Client) callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, c.callTimeout)
	if c.conn.GetState() == connectivity.TransientFailure {
		c.conn.ResetConnectBackoff()
		waitReady(ctx, c.conn, reconnectWait)
	}
	return ctx, cancel
}

func (c *Client) callError(method string, err error) error {
	return fmt.Errorf("kubelet pod-resources %s on %s: %w", method, c.socket, err)
}

// waitReady waits up to d (and no longer than ctx allows) for conn to be
// ready.
func waitReady(ctx context.Context, conn *grpc.ClientConn, d time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for s := conn.GetState(); s != connectivity.Ready; s = conn.GetState() {
		if !conn.WaitForStateChange(ctx, s) {
			return
		}
	}
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
