package kubelettest

import (
	"context"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
	podsv1alpha1 "k8s.io/kubelet/pkg/apis/pods/v1alpha1"
)

// podResourcesService serves pod-resources v1 the way the kubelet does.
type podResourcesService struct {
	podresourcesv1.UnimplementedPodResourcesListerServer
	s *Server
}

func (p *podResourcesService) List(ctx context.Context, _ *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	if err := p.s.wait(ctx); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	_, pods, _ := p.s.snapshot()
	resp := &podresourcesv1.ListPodResourcesResponse{}
	for _, pod := range pods {
		resp.PodResources = append(resp.PodResources, podResources(pod))
	}
	return resp, nil
}

func (p *podResourcesService) Get(ctx context.Context, req *podresourcesv1.GetPodResourcesRequest) (*podresourcesv1.GetPodResourcesResponse, error) {
	if err := p.s.wait(ctx); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	_, pods, _ := p.s.snapshot()
	for _, pod := range pods {
		if pod.Namespace == req.GetPodNamespace() && pod.Name == req.GetPodName() {
			return &podresourcesv1.GetPodResourcesResponse{PodResources: podResources(pod)}, nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "pod %s not found in namespace %s", req.GetPodName(), req.GetPodNamespace())
}

// GetAllocatableResources answers, like the kubelet, with one entry per
// device.
func (p *podResourcesService) GetAllocatableResources(ctx context.Context, _ *podresourcesv1.AllocatableResourcesRequest) (*podresourcesv1.AllocatableResourcesResponse, error) {
	if err := p.s.wait(ctx); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	_, _, alloc := p.s.snapshot()
	resp := &podresourcesv1.AllocatableResourcesResponse{}
	for _, d := range alloc {
		for _, id := range d.IDs {
			resp.Devices = append(resp.Devices, &podresourcesv1.ContainerDevices{
				ResourceName: d.Resource,
				DeviceIds:    []string{id},
			})
		}
	}
	return resp, nil
}

func podResources(p Pod) *podresourcesv1.PodResources {
	out := &podresourcesv1.PodResources{Namespace: p.Namespace, Name: p.Name}
	// Sidecars first, then the app containers, as the kubelet lists them.
	containers := slices.Clone(p.Containers)
	slices.SortStableFunc(containers, func(a, b Container) int {
		switch {
		case a.Sidecar == b.Sidecar:
			return 0
		case a.Sidecar:
			return -1
		}
		return 1
	})
	for _, c := range containers {
		if c.Ephemeral {
			continue
		}
		ctr := &podresourcesv1.ContainerResources{Name: c.Name}
		for _, d := range c.Devices {
			ctr.Devices = append(ctr.Devices, &podresourcesv1.ContainerDevices{
				ResourceName: d.Resource,
				DeviceIds:    append([]string(nil), d.IDs...),
			})
		}
		for _, cl := range c.Claims {
			dr := &podresourcesv1.DynamicResource{ClaimName: cl.Name, ClaimNamespace: cl.Namespace}
			for _, d := range cl.Devices {
				cr := &podresourcesv1.ClaimResource{DriverName: d.Driver, PoolName: d.Pool, DeviceName: d.Device}
				if d.ShareID != "" {
					cr.ShareId = &d.ShareID
				}
				for _, name := range d.CDIDevices {
					cr.CdiDevices = append(cr.CdiDevices, &podresourcesv1.CDIDevice{Name: name})
				}
				dr.ClaimResources = append(dr.ClaimResources, cr)
			}
			ctr.DynamicResources = append(ctr.DynamicResources, dr)
		}
		out.Containers = append(out.Containers, ctr)
	}
	return out
}

// podsService serves the Pods v1alpha1 API the way the kubelet does: pods
// as v1.Pod protobuf bytes.
type podsService struct {
	podsv1alpha1.UnimplementedPodsServer
	s *Server
}

func (p *podsService) ListPods(ctx context.Context, _ *podsv1alpha1.ListPodsRequest) (*podsv1alpha1.ListPodsResponse, error) {
	if err := p.s.wait(ctx); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	node, pods, _ := p.s.snapshot()
	resp := &podsv1alpha1.ListPodsResponse{}
	for _, pod := range pods {
		resp.Pods = append(resp.Pods, pod.protobuf(node))
	}
	return resp, nil
}

func (p *podsService) GetPod(ctx context.Context, req *podsv1alpha1.GetPodRequest) (*podsv1alpha1.GetPodResponse, error) {
	if err := p.s.wait(ctx); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	node, pods, _ := p.s.snapshot()
	for _, pod := range pods {
		if pod.UID == req.GetPodUID() {
			return &podsv1alpha1.GetPodResponse{Pod: pod.protobuf(node)}, nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "pod with UID %s not found", req.GetPodUID())
}

// WatchPods sends every pod as ADDED, then INITIAL_SYNC_COMPLETE, then each
// change as it happens.
func (p *podsService) WatchPods(_ *podsv1alpha1.WatchPodsRequest, stream podsv1alpha1.Pods_WatchPodsServer) error {
	w, node, pods := p.s.subscribe()
	defer p.s.unsubscribe(w)
	for _, pod := range pods {
		if err := stream.Send(&podsv1alpha1.WatchPodsEvent{Type: podsv1alpha1.EventType_ADDED, Pod: pod.protobuf(node)}); err != nil {
			return err
		}
	}
	if err := stream.Send(&podsv1alpha1.WatchPodsEvent{Type: podsv1alpha1.EventType_INITIAL_SYNC_COMPLETE}); err != nil {
		return err
	}
	for {
		select {
		case <-stream.Context().Done():
			return stream.Context().Err()
		case <-w.overflow:
			return status.Error(codes.ResourceExhausted, "watcher fell behind; watch again")
		case ev := <-w.events:
			if err := stream.Send(ev); err != nil {
				return err
			}
		}
	}
}
