// Package kubelettest is a fake kubelet: real gRPC servers for the
// pod-resources v1 and Pods v1alpha1 APIs on unix sockets, laid out as a
// kubelet lays them out, serving a node described by a fixture that can be
// changed while it runs. Tests use it, and so does the exporter's demo mode,
// so nothing here depends on package testing.
package kubelettest

import (
	"bytes"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"os"
	"slices"

	"gopkg.in/yaml.v3"

	"github.com/xpu-exporter/xpu_exporter/attribution/kubernetes/internal/podwire"
)

// Fixture is the node the fake kubelet serves.
type Fixture struct {
	Node string `yaml:"node"`
	Pods []Pod  `yaml:"pods"`
	// Allocatable is every device the kubelet knows of (api.proto,
	// AllocatableResourcesResponses: "all the devices known by the
	// kubelet"), allocated or not, one ID per replica of a shared device.
	Allocatable []Devices `yaml:"allocatable,omitempty"`
}

// Pod is a pod on the node.
type Pod struct {
	Namespace       string            `yaml:"namespace"`
	Name            string            `yaml:"name"`
	UID             string            `yaml:"uid"`
	Labels          map[string]string `yaml:"labels,omitempty"`
	Annotations     map[string]string `yaml:"annotations,omitempty"`
	OwnerReferences []OwnerReference  `yaml:"ownerReferences,omitempty"`
	// IP is the pod's IP (status.podIP), where inference engines are
	// reached.
	IP         string      `yaml:"ip,omitempty"`
	Containers []Container `yaml:"containers"`
	// Phase is status.phase, default Running. Kubelets have listed the
	// devices of a pod that has ended (Succeeded, Failed) in pod-resources
	// List after handing them to another pod
	// (kubernetes/kubernetes#119423), and this fake does.
	Phase string `yaml:"phase,omitempty"`
}

// OwnerReference is an owner of a pod.
type OwnerReference struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Name       string `yaml:"name"`
	UID        string `yaml:"uid,omitempty"`
	Controller bool   `yaml:"controller,omitempty"`
}

// Container is a container of a pod and the devices allocated to it.
type Container struct {
	Name string `yaml:"name"`
	// Sidecar makes it a restartable init container (KEP-753,
	// restartPolicy: Always): the Pods API has it in spec.initContainers
	// and its status in initContainerStatuses, and pod-resources lists it
	// before the app containers, as the kubelet's List and Get do
	// (pkg/kubelet/apis/podresources/server_v1.go).
	Sidecar bool `yaml:"sidecar,omitempty"`
	// Ephemeral makes it an ephemeral container (kubectl debug): the Pods
	// API has it in spec.ephemeralContainers and its status in
	// ephemeralContainerStatuses alone; it holds no device, and
	// pod-resources does not list it.
	Ephemeral bool `yaml:"ephemeral,omitempty"`
	// Image defaults to registry.example/<name>:latest; Ports are the
	// container ports it declares.
	Image   string    `yaml:"image,omitempty"`
	Ports   []int32   `yaml:"ports,omitempty"`
	Devices []Devices `yaml:"devices,omitempty"`
	// Claims are the DRA ResourceClaims the container uses, as the
	// kubelet reports them in pod-resources DynamicResources.
	Claims []Claim `yaml:"claims,omitempty"`
}

// Claim is a DRA ResourceClaim and the devices allocated to it.
type Claim struct {
	Namespace string        `yaml:"namespace"`
	Name      string        `yaml:"name"`
	Devices   []ClaimDevice `yaml:"devices"`
}

// ClaimDevice is one allocated device of a claim (a pod-resources
// ClaimResource).
type ClaimDevice struct {
	Driver     string   `yaml:"driver"`
	Pool       string   `yaml:"pool"`
	Device     string   `yaml:"device"`
	ShareID    string   `yaml:"shareID,omitempty"`
	CDIDevices []string `yaml:"cdiDevices,omitempty"`
}

// Devices is the device-plugin IDs of one resource.
type Devices struct {
	Resource string   `yaml:"resource"`
	IDs      []string `yaml:"ids"`
}

// LoadFixture reads a fixture from a YAML or JSON file. Unknown fields are
// errors, so that a misspelt key does not silently drop data. The file is
// read as YAML 1.2 (gopkg.in/yaml.v3), as demo scenarios, which embed the
// same schema, are: a namespace or pod named y or n stays a string, where
// YAML 1.1 readers make it a boolean.
func LoadFixture(path string) (*Fixture, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f Fixture
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("kubelet fixture %s: %w", path, err)
	}
	if err := f.Validate(); err != nil {
		return nil, fmt.Errorf("kubelet fixture %s: %w", path, err)
	}
	return &f, nil
}

// Validate checks that pods are named and unique, so that watch events and
// pod-resources answers are well defined.
func (f *Fixture) Validate() error {
	var errs []error
	names := map[string]bool{}
	uids := map[string]bool{}
	for i, p := range f.Pods {
		if err := p.validate(); err != nil {
			errs = append(errs, fmt.Errorf("pods[%d]: %w", i, err))
			continue
		}
		if key := p.Namespace + "/" + p.Name; names[key] {
			errs = append(errs, fmt.Errorf("pods[%d]: duplicate pod %s", i, key))
		} else {
			names[key] = true
		}
		if uids[p.UID] {
			errs = append(errs, fmt.Errorf("pods[%d]: duplicate uid %s", i, p.UID))
		}
		uids[p.UID] = true
	}
	return errors.Join(errs...)
}

func (p Pod) validate() error {
	if p.Namespace == "" || p.Name == "" || p.UID == "" {
		return fmt.Errorf("pod %s/%s: namespace, name and uid are required", p.Namespace, p.Name)
	}
	switch p.Phase {
	case "", podwire.PhasePending, podwire.PhaseRunning, podwire.PhaseSucceeded, podwire.PhaseFailed, podwire.PhaseUnknown:
	default:
		return fmt.Errorf("pod %s/%s: phase %q is not Pending, Running, Succeeded, Failed or Unknown", p.Namespace, p.Name, p.Phase)
	}
	for _, c := range p.Containers {
		if c.Name == "" {
			return fmt.Errorf("pod %s/%s: a container has no name", p.Namespace, p.Name)
		}
		if c.Ephemeral && (c.Sidecar || len(c.Devices)+len(c.Claims) > 0) {
			return fmt.Errorf("pod %s/%s container %s: an ephemeral container is no sidecar and holds no device", p.Namespace, p.Name, c.Name)
		}
		for _, cl := range c.Claims {
			if cl.Namespace == "" || cl.Name == "" {
				return fmt.Errorf("pod %s/%s container %s: a claim needs namespace and name", p.Namespace, p.Name, c.Name)
			}
			for _, d := range cl.Devices {
				if d.Driver == "" || d.Pool == "" || d.Device == "" {
					return fmt.Errorf("pod %s/%s claim %s: a device needs driver, pool and device", p.Namespace, p.Name, cl.Name)
				}
			}
		}
	}
	return nil
}

// ContainerID is the runtime ID the fake node gives a pod's container: 64
// hexadecimal digits, as containerd's, derived from the pod UID and the
// container's name so that a simulated procfs can put the container's
// processes in the cgroup the kubelet reports.
func ContainerID(podUID, container string) string {
	h := fnv.New64a()
	h.Write([]byte(podUID + "/" + container))
	return fmt.Sprintf("%048x%016x", 0, h.Sum64())
}

// clone deep-copies a fixture so that the server owns its state.
func (f *Fixture) clone() *Fixture {
	out := &Fixture{Node: f.Node, Allocatable: cloneDevices(f.Allocatable)}
	for _, p := range f.Pods {
		out.Pods = append(out.Pods, p.clone())
	}
	return out
}

func (p Pod) clone() Pod {
	out := p
	out.Labels = maps.Clone(p.Labels)
	out.Annotations = maps.Clone(p.Annotations)
	out.OwnerReferences = append([]OwnerReference(nil), p.OwnerReferences...)
	out.Containers = nil
	for _, c := range p.Containers {
		out.Containers = append(out.Containers, Container{Name: c.Name, Sidecar: c.Sidecar, Ephemeral: c.Ephemeral, Image: c.Image, Ports: slices.Clone(c.Ports), Devices: cloneDevices(c.Devices), Claims: cloneClaims(c.Claims)})
	}
	return out
}

func cloneDevices(ds []Devices) []Devices {
	var out []Devices
	for _, d := range ds {
		out = append(out, Devices{Resource: d.Resource, IDs: append([]string(nil), d.IDs...)})
	}
	return out
}

func cloneClaims(cs []Claim) []Claim {
	var out []Claim
	for _, c := range cs {
		cc := Claim{Namespace: c.Namespace, Name: c.Name}
		for _, d := range c.Devices {
			d.CDIDevices = slices.Clone(d.CDIDevices)
			cc.Devices = append(cc.Devices, d)
		}
		out = append(out, cc)
	}
	return out
}
