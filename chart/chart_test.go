package chart

// Tests of the Helm chart. The ones that render need helm: $HELM, else
// ../bin/helm (make chart-tools builds it); without it they are skipped,
// unless XPU_REQUIRE_HELM is set, as `make chart-check` does, or CI is
// (internal/testenv).

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/xpu-exporter/xpu_exporter/internal/testenv"
	"github.com/xpu-exporter/xpu_exporter/vendors/gaudi"
)

const (
	release   = "xpu-exporter"
	namespace = "monitoring"
)

// ---------------------------------------------------------------------------
// Rendering and strict decoding.

// object is one rendered manifest, decoded strictly into its API type.
type object struct {
	kind string // apiVersion/kind
	name string
	obj  any
	raw  []byte
}

// kinds maps apiVersion/kind to the Go type a manifest is decoded into.
// A kind missing here fails the test: the chart renders nothing unchecked.
var kinds = map[string]func() any{
	"apps/v1/DaemonSet": func() any { return &appsv1.DaemonSet{} },
	"v1/Service":        func() any { return &corev1.Service{} },
	"v1/ServiceAccount": func() any { return &corev1.ServiceAccount{} },
	"v1/ConfigMap":      func() any { return &corev1.ConfigMap{} },
	"rbac.authorization.k8s.io/v1/ClusterRole":        func() any { return &rbacv1.ClusterRole{} },
	"rbac.authorization.k8s.io/v1/ClusterRoleBinding": func() any { return &rbacv1.ClusterRoleBinding{} },
	"monitoring.coreos.com/v1/ServiceMonitor":         func() any { return &monitoringv1.ServiceMonitor{} },
	"monitoring.coreos.com/v1/PrometheusRule":         func() any { return &monitoringv1.PrometheusRule{} },
}

var clusterScoped = map[string]bool{
	"rbac.authorization.k8s.io/v1/ClusterRole":        true,
	"rbac.authorization.k8s.io/v1/ClusterRoleBinding": true,
}

func helmBin(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("HELM"); p != "" {
		return p
	}
	if p, err := filepath.Abs("../bin/helm"); err == nil {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if os.Getenv("XPU_REQUIRE_HELM") != "" {
		t.Fatal("helm not found: set HELM or run make chart-tools")
	}
	testenv.Unavailable(t, "helm not found ($HELM, ../bin/helm)", "make chart-tools builds bin/helm; make chart-check runs these tests")
	return ""
}

// helm runs helm in the chart directory.
func helm(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	cmd := exec.Command(helmBin(t), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("helm %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return out, nil
}

// render runs helm template with extra arguments and decodes every object.
func render(t *testing.T, args ...string) []object {
	t.Helper()
	out, err := helm(t, append([]string{"template", release, ".", "--namespace", namespace}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decodeAll(out)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func decodeAll(manifests []byte) ([]object, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(manifests)))
	var objs []object
	seen := map[string]bool{}
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, err
		}
		var head struct {
			APIVersion string            `json:"apiVersion"`
			Kind       string            `json:"kind"`
			Metadata   metav1.ObjectMeta `json:"metadata"`
		}
		if err := yaml.Unmarshal(doc, &head); err != nil {
			return nil, fmt.Errorf("%v in\n%s", err, doc)
		}
		if head.Kind == "" && head.APIVersion == "" {
			continue // a document of comments only
		}
		kind := head.APIVersion + "/" + head.Kind
		newObj, ok := kinds[kind]
		if !ok {
			return nil, fmt.Errorf("rendered %s %q: no API type to check it against (add it to kinds)", kind, head.Metadata.Name)
		}
		obj := newObj()
		// Strict: an unknown or duplicate field is an error. And as helm
		// sends it: YAML to JSON without the target type, so a YAML number
		// or boolean where the API wants a string is refused, as the API
		// server refuses it (yaml.Unmarshal would convert it).
		j, err := yaml.YAMLToJSONStrict(doc)
		if err == nil {
			dec := json.NewDecoder(bytes.NewReader(j))
			dec.DisallowUnknownFields()
			err = dec.Decode(obj)
		}
		if err != nil {
			return nil, fmt.Errorf("%s %q does not decode strictly: %v", kind, head.Metadata.Name, err)
		}
		id := kind + "/" + head.Metadata.Namespace + "/" + head.Metadata.Name
		if seen[id] {
			return nil, fmt.Errorf("%s rendered twice", id)
		}
		seen[id] = true
		objs = append(objs, object{kind: kind, name: head.Metadata.Name, obj: obj, raw: doc})
	}
}

func all[T any](objs []object) []*T {
	var out []*T
	for _, o := range objs {
		if v, ok := o.obj.(*T); ok {
			out = append(out, v)
		}
	}
	return out
}

func one[T any](t *testing.T, objs []object) *T {
	t.Helper()
	got := all[T](objs)
	if len(got) != 1 {
		t.Fatalf("want one %T, rendered %d", *new(T), len(got))
	}
	return got[0]
}

// profile is a set of values to render the chart with: the defaults, or one
// of the files in ci/.
type profile struct {
	name string
	args []string
}

func profiles(t *testing.T) []profile {
	files, err := filepath.Glob("ci/*-values.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no profiles in ci/: %v", err)
	}
	ps := []profile{{name: "default"}}
	for _, f := range files {
		ps = append(ps, profile{name: strings.TrimSuffix(filepath.Base(f), "-values.yaml"), args: []string{"-f", f}})
	}
	return ps
}

func renderProfile(t *testing.T, name string) []object {
	t.Helper()
	for _, p := range profiles(t) {
		if p.name == name {
			return render(t, p.args...)
		}
	}
	t.Fatalf("no profile %q", name)
	return nil
}

// ---------------------------------------------------------------------------
// Every profile: lint, render, strict decoding and the invariants every
// rendering keeps.

func TestProfilesRenderAndDecode(t *testing.T) {
	helmBin(t)
	for _, p := range profiles(t) {
		t.Run(p.name, func(t *testing.T) {
			if _, err := helm(t, append([]string{"lint", "--strict", "--quiet", "."}, p.args...)...); err != nil {
				t.Fatal(err)
			}
			objs := render(t, p.args...)
			// GKE has no NVIDIA container runtime: NVML opens the device
			// nodes only from a privileged container (TestGKEProfile).
			checkInvariants(t, objs, p.name == "gke")
		})
	}
}

func checkInvariants(t *testing.T, objs []object, privilegedNVIDIA bool) {
	t.Helper()
	for _, o := range objs {
		meta := reflect.ValueOf(o.obj).Elem().FieldByName("ObjectMeta").Interface().(metav1.ObjectMeta)
		for _, msg := range validation.IsDNS1123Subdomain(o.name) {
			t.Errorf("%s name %q: %s", o.kind, o.name, msg)
		}
		if clusterScoped[o.kind] != (meta.Namespace == "") {
			t.Errorf("%s %q: namespace %q", o.kind, o.name, meta.Namespace)
		}
		for k, v := range meta.Labels {
			for _, msg := range append(validation.IsQualifiedName(k), validation.IsValidLabelValue(v)...) {
				t.Errorf("%s %q label %s=%s: %s", o.kind, o.name, k, v, msg)
			}
		}
		if meta.Labels["app.kubernetes.io/instance"] != release {
			t.Errorf("%s %q: no app.kubernetes.io/instance label", o.kind, o.name)
		}
	}

	dss := all[appsv1.DaemonSet](objs)
	if len(dss) == 0 {
		t.Fatal("no DaemonSet rendered")
	}
	svc := one[corev1.Service](t, objs)
	sas := all[corev1.ServiceAccount](objs)
	for _, ds := range dss {
		checkDaemonSet(t, ds, privilegedNVIDIA && strings.HasSuffix(ds.Name, "-nvidia"))
		pod := ds.Spec.Template
		if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(pod.Labels)) {
			t.Errorf("Service selector %v does not select DaemonSet %s's pods %v", svc.Spec.Selector, ds.Name, pod.Labels)
		}
		if len(sas) == 1 && pod.Spec.ServiceAccountName != sas[0].Name {
			t.Errorf("DaemonSet %s runs as %q, the chart creates ServiceAccount %q", ds.Name, pod.Spec.ServiceAccountName, sas[0].Name)
		}
		for _, sp := range svc.Spec.Ports {
			if !slices.ContainsFunc(pod.Spec.Containers[0].Ports, func(p corev1.ContainerPort) bool { return p.Name == sp.TargetPort.StrVal }) {
				t.Errorf("Service port %s targets %q, which DaemonSet %s's container does not have", sp.Name, sp.TargetPort.String(), ds.Name)
			}
		}
	}
	// The token is mounted exactly when there is RBAC to use it with.
	crs := all[rbacv1.ClusterRole](objs)
	for _, ds := range dss {
		mounted := ds.Spec.Template.Spec.AutomountServiceAccountToken
		if mounted == nil || *mounted != (len(crs) == 1) {
			t.Errorf("DaemonSet %s: automountServiceAccountToken %v with %d ClusterRoles", ds.Name, mounted, len(crs))
		}
	}
	for _, sa := range sas {
		if sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
			t.Errorf("ServiceAccount %s mounts its token into every pod; only the pods that need it should", sa.Name)
		}
	}
	for _, crb := range all[rbacv1.ClusterRoleBinding](objs) {
		if len(crs) != 1 || crb.RoleRef.Name != crs[0].Name || crb.RoleRef.Kind != "ClusterRole" {
			t.Errorf("ClusterRoleBinding %s binds %v", crb.Name, crb.RoleRef)
		}
		if len(sas) != 1 || len(crb.Subjects) != 1 || crb.Subjects[0].Name != sas[0].Name || crb.Subjects[0].Namespace != namespace {
			t.Errorf("ClusterRoleBinding %s subjects %v", crb.Name, crb.Subjects)
		}
	}
	for _, cr := range crs {
		checkClusterRole(t, cr)
	}
	for _, sm := range all[monitoringv1.ServiceMonitor](objs) {
		if !labels.SelectorFromSet(sm.Spec.Selector.MatchLabels).Matches(labels.Set(svc.Labels)) {
			t.Errorf("ServiceMonitor selector %v does not select the Service %v", sm.Spec.Selector.MatchLabels, svc.Labels)
		}
		if !slices.Contains(sm.Spec.NamespaceSelector.MatchNames, svc.Namespace) {
			t.Errorf("ServiceMonitor namespaceSelector %v misses the Service's namespace %s", sm.Spec.NamespaceSelector, svc.Namespace)
		}
		for _, ep := range sm.Spec.Endpoints {
			if ep.Port != svc.Spec.Ports[0].Name {
				t.Errorf("ServiceMonitor endpoint port %q, Service port %q", ep.Port, svc.Spec.Ports[0].Name)
			}
		}
	}
}

func checkClusterRole(t *testing.T, cr *rbacv1.ClusterRole) {
	t.Helper()
	want := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}}}
	if !reflect.DeepEqual(cr.Rules, want) {
		t.Errorf("ClusterRole %s rules %+v, want pods get/list/watch only", cr.Name, cr.Rules)
	}
}

// acceleratorResource reports resource names that would take a device
// from the workloads.
func acceleratorResource(name corev1.ResourceName) bool {
	n := string(name)
	return n != "cpu" && n != "memory" && n != "ephemeral-storage"
}

// checkDaemonSet checks the least privilege every DaemonSet keeps; a
// privileged one keeps the rest.
func checkDaemonSet(t *testing.T, ds *appsv1.DaemonSet, privileged bool) {
	t.Helper()
	pod := ds.Spec.Template.Spec
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil || !sel.Matches(labels.Set(ds.Spec.Template.Labels)) {
		t.Errorf("DaemonSet %s: selector %v does not match its pods %v (%v)", ds.Name, ds.Spec.Selector, ds.Spec.Template.Labels, err)
	}
	if pod.SecurityContext == nil || pod.SecurityContext.SeccompProfile == nil || pod.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("DaemonSet %s: seccomp profile is not RuntimeDefault", ds.Name)
	}
	if pod.HostNetwork || pod.HostIPC {
		t.Errorf("DaemonSet %s: host network or IPC namespace", ds.Name)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("DaemonSet %s: %d containers", ds.Name, len(pod.Containers))
	}
	c := pod.Containers[0]
	sc := c.SecurityContext
	switch {
	case sc == nil:
		t.Errorf("DaemonSet %s: no container securityContext", ds.Name)
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Errorf("DaemonSet %s: root filesystem is writable", ds.Name)
	case privileged:
		if sc.Privileged == nil || !*sc.Privileged {
			t.Errorf("DaemonSet %s: not privileged", ds.Name)
		}
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Errorf("DaemonSet %s: privilege escalation allowed", ds.Name)
	case sc.Privileged != nil && *sc.Privileged:
		t.Errorf("DaemonSet %s: privileged", ds.Name)
	case sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL"):
		t.Errorf("DaemonSet %s: capabilities %+v, want all dropped", ds.Name, sc.Capabilities)
	case len(sc.Capabilities.Add) > 0 && !((strings.HasSuffix(ds.Name, "-gaudi") || strings.HasSuffix(ds.Name, "-amd")) && slices.Equal(sc.Capabilities.Add, []corev1.Capability{"SYS_PTRACE"})):
		// The Gaudi and AMD exporters alone may read other processes'
		// descriptors (hl-smi lists no processes; AMD's per-process usage
		// is in their DRM fdinfo); NVML lists processes itself.
		t.Errorf("DaemonSet %s: capabilities %v added", ds.Name, sc.Capabilities.Add)
	}
	for _, rl := range []corev1.ResourceList{c.Resources.Requests, c.Resources.Limits} {
		for name := range rl {
			if acceleratorResource(name) {
				t.Errorf("DaemonSet %s requests %s: the exporter must not take a device from workloads", ds.Name, name)
			}
		}
		if rl.Cpu().IsZero() || rl.Memory().IsZero() {
			t.Errorf("DaemonSet %s: CPU and memory requests and limits must be set, got %v", ds.Name, rl)
		}
	}
	if c.Resources.Requests.Cpu().Cmp(*c.Resources.Limits.Cpu()) > 0 || c.Resources.Requests.Memory().Cmp(*c.Resources.Limits.Memory()) > 0 {
		t.Errorf("DaemonSet %s: requests above limits", ds.Name)
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v
	}
	used := map[string]bool{}
	for _, m := range c.VolumeMounts {
		v, ok := volumes[m.Name]
		if !ok {
			t.Errorf("DaemonSet %s mounts volume %q, which it does not have", ds.Name, m.Name)
			continue
		}
		used[m.Name] = true
		if v.HostPath != nil && !m.ReadOnly {
			t.Errorf("DaemonSet %s mounts host path %s writable", ds.Name, v.HostPath.Path)
		}
		// Without a type the kubelet checks nothing and the runtime creates
		// a missing path on the host, as an empty directory.
		if v.HostPath != nil && (v.HostPath.Type == nil || *v.HostPath.Type == corev1.HostPathUnset) {
			t.Errorf("DaemonSet %s: host path %s has no type", ds.Name, v.HostPath.Path)
		}
	}
	for name := range volumes {
		if !used[name] {
			t.Errorf("DaemonSet %s: volume %q is not mounted", ds.Name, name)
		}
	}
	if len(pod.Tolerations) == 0 {
		t.Errorf("DaemonSet %s tolerates no taint: tainted GPU nodes would go unmonitored", ds.Name)
	}
}

// ---------------------------------------------------------------------------
// The default rendering in detail.

func hostPaths(pod corev1.PodSpec) map[string]string {
	m := map[string]string{}
	mounts := map[string]string{}
	for _, vm := range pod.Containers[0].VolumeMounts {
		mounts[vm.Name] = vm.MountPath
	}
	for _, v := range pod.Volumes {
		if v.HostPath != nil {
			m[v.HostPath.Path] = mounts[v.Name]
		}
	}
	return m
}

func env(c corev1.Container) map[string]corev1.EnvVar {
	m := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		m[e.Name] = e
	}
	return m
}

func TestDefaults(t *testing.T) {
	objs := render(t)
	kindsRendered := map[string]int{}
	for _, o := range objs {
		kindsRendered[o.kind]++
	}
	want := map[string]int{
		"apps/v1/DaemonSet": 1, "v1/Service": 1, "v1/ServiceAccount": 1,
		"rbac.authorization.k8s.io/v1/ClusterRole": 1, "rbac.authorization.k8s.io/v1/ClusterRoleBinding": 1,
		"monitoring.coreos.com/v1/ServiceMonitor": 1,
	}
	for k, n := range want {
		if kindsRendered[k] != n {
			t.Errorf("rendered %d %s, want %d", kindsRendered[k], k, n)
		}
	}

	ds := one[appsv1.DaemonSet](t, objs)
	if ds.Name != "xpu-exporter-nvidia" {
		t.Errorf("DaemonSet %s", ds.Name)
	}
	pod := ds.Spec.Template.Spec
	c := pod.Containers[0]
	if pod.RuntimeClassName == nil || *pod.RuntimeClassName != "nvidia" {
		t.Errorf("runtimeClassName %v, want nvidia", pod.RuntimeClassName)
	}
	e := env(c)
	if e["NVIDIA_VISIBLE_DEVICES"].Value != "all" || e["NVIDIA_DRIVER_CAPABILITIES"].Value != "utility" {
		t.Errorf("NVIDIA env %v", c.Env)
	}
	if nn := e["NODE_NAME"]; nn.ValueFrom == nil || nn.ValueFrom.FieldRef == nil || nn.ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
		t.Errorf("NODE_NAME not from the downward API: %+v", nn)
	}
	if !pod.HostPID {
		t.Error("hostPID is off by default")
	}
	if ps := pod.SecurityContext; ps.RunAsUser == nil || *ps.RunAsUser != 0 {
		t.Errorf("runAsUser %v: the kubelet sockets are root's", ps.RunAsUser)
	}
	wantHost := map[string]string{
		"/var/lib/kubelet/pod-resources": "/var/lib/kubelet/pod-resources",
		"/var/lib/kubelet/pods-api":      "/var/lib/kubelet/pods-api",
		"/etc/passwd":                    "/host/etc/passwd",
		// The DRA drivers' CDI specs, to attribute devices of DRA claims.
		"/var/run/cdi": "/var/run/cdi",
	}
	if got := hostPaths(pod); !reflect.DeepEqual(got, wantHost) {
		t.Errorf("host paths %v, want %v", got, wantHost)
	}
	for _, a := range []string{"--collector.nvidia", "--web.listen-address=:9835", "--path.rootfs=/host", "--no-attribution.slurm", "--kubernetes.cdi-spec-dir=/var/run/cdi"} {
		if !slices.Contains(c.Args, a) {
			t.Errorf("args %v lack %s", c.Args, a)
		}
	}
	if slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--kubernetes.pods-api-socket") }) {
		t.Errorf("args %v override the Pods API socket: metadata enrichment is on by default", c.Args)
	}
	// A node with any of the NVIDIA labels.
	terms := pod.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	var keys []string
	for _, term := range terms {
		if len(term.MatchExpressions) != 1 || !reflect.DeepEqual(term.MatchExpressions[0].Values, []string{"true"}) {
			t.Errorf("node selector term %+v", term)
			continue
		}
		keys = append(keys, term.MatchExpressions[0].Key)
	}
	if !reflect.DeepEqual(keys, []string{"nvidia.com/gpu.present", "feature.node.kubernetes.io/pci-10de.present"}) {
		t.Errorf("node affinity keys %v", keys)
	}
	if !reflect.DeepEqual(pod.Tolerations, []corev1.Toleration{{Operator: corev1.TolerationOpExists}}) {
		t.Errorf("tolerations %v", pod.Tolerations)
	}
	svc := one[corev1.Service](t, objs)
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 9835 {
		t.Errorf("Service ports %v", svc.Spec.Ports)
	}
}

// ---------------------------------------------------------------------------
// The ServiceMonitor's labels, checked by running its relabelings.

// relabel applies Prometheus relabeling (the actions the chart uses) to a
// target's labels.
func relabel(t *testing.T, lset map[string]string, cfgs []monitoringv1.RelabelConfig) map[string]string {
	t.Helper()
	out := map[string]string{}
	for k, v := range lset {
		out[k] = v
	}
	for _, c := range cfgs {
		re := regexp.MustCompile("^(?:" + cmp(c.Regex, "(.*)") + ")$")
		sep := ";"
		if c.Separator != nil {
			sep = *c.Separator
		}
		var vals []string
		for _, l := range c.SourceLabels {
			vals = append(vals, out[string(l)])
		}
		val := strings.Join(vals, sep)
		switch strings.ToLower(cmp(c.Action, "replace")) {
		case "replace":
			m := re.FindStringSubmatchIndex(val)
			if m == nil {
				continue
			}
			repl := "$1"
			if c.Replacement != nil {
				repl = *c.Replacement
			}
			res := string(re.ExpandString(nil, repl, val, m))
			if res == "" {
				delete(out, c.TargetLabel)
			} else {
				out[c.TargetLabel] = res
			}
		case "labeldrop":
			for k := range out {
				if re.MatchString(k) {
					delete(out, k)
				}
			}
		case "labelkeep":
			for k := range out {
				if !re.MatchString(k) {
					delete(out, k)
				}
			}
		case "keep":
			if !re.MatchString(val) {
				return nil
			}
		case "drop":
			if re.MatchString(val) {
				return nil
			}
		default:
			t.Fatalf("relabel action %q not simulated", c.Action)
		}
	}
	if _, ok := out["instance"]; !ok {
		out["instance"] = out["__address__"]
	}
	for k := range out {
		if strings.HasPrefix(k, "__") {
			delete(out, k)
		}
	}
	return out
}

func cmp(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// scrape merges a series' own labels with the target's as Prometheus does
// with honor_labels: true.
func scrape(series, target map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range target {
		out[k] = v
	}
	for k, v := range series {
		out[k] = v
	}
	return out
}

// The labels the Prometheus operator gives a target of a ServiceMonitor
// before the ServiceMonitor's own relabelings run.
func operatorTarget() map[string]string {
	return map[string]string{
		"__address__":                                        "10.0.3.17:9835",
		"__meta_kubernetes_pod_node_name":                    "gpu-node-07",
		"__meta_kubernetes_pod_host_ip":                      "192.168.1.7",
		"__meta_kubernetes_pod_label_xpu_exporter_io_vendor": "nvidia",
		"namespace": namespace,
		"service":   "xpu-exporter",
		"pod":       "xpu-exporter-nvidia-x7k2p",
		"container": "exporter",
		"endpoint":  "metrics",
		"job":       "xpu-exporter",
	}
}

// podTarget is operatorTarget for a pod of ds on the node: the operator
// turns each of the pod's labels into __meta_kubernetes_pod_label_<name>
// (sanitized) and names the pod.
func podTarget(ds *appsv1.DaemonSet, node, pod string) map[string]string {
	target := operatorTarget()
	delete(target, "__meta_kubernetes_pod_label_xpu_exporter_io_vendor")
	for k, v := range ds.Spec.Template.Labels {
		target["__meta_kubernetes_pod_label_"+regexp.MustCompile(`[^a-zA-Z0-9_]`).ReplaceAllString(k, "_")] = v
	}
	target["__meta_kubernetes_pod_node_name"] = node
	target["pod"] = pod
	return target
}

// promrulesJob is the job the generated rules select.
func promrulesJob(t *testing.T) string {
	t.Helper()
	re := regexp.MustCompile(`job="([^"]+)"`)
	jobs := map[string]bool{}
	files, _ := filepath.Glob("../promrules/*.yaml")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			jobs[m[1]] = true
		}
	}
	if len(jobs) != 1 {
		t.Fatalf("the rules in promrules/ select jobs %v, want one", jobs)
	}
	for j := range jobs {
		return j
	}
	return ""
}

func TestServiceMonitorLabels(t *testing.T) {
	sm := one[monitoringv1.ServiceMonitor](t, render(t))
	if len(sm.Spec.Endpoints) != 1 {
		t.Fatalf("endpoints %v", sm.Spec.Endpoints)
	}
	ep := sm.Spec.Endpoints[0]
	if !ep.HonorLabels {
		t.Fatal("honorLabels is off: the exporter's namespace/pod/container owner labels would be renamed exported_*")
	}
	target := relabel(t, operatorTarget(), ep.RelabelConfigs)
	// instance is the node, not the pod's address, so that a rollout (a
	// new pod IP) keeps every device series and every alert's for: timer.
	want := map[string]string{
		"instance": "gpu-node-07",
		"job":      promrulesJob(t),
		"node":     "gpu-node-07",
		"exporter": "nvidia",
		"service":  "xpu-exporter",
		"endpoint": "metrics",
	}
	if !reflect.DeepEqual(target, want) {
		t.Errorf("target labels %v, want %v", target, want)
	}

	owned := map[string]string{"gpu": "0", "namespace": "inference", "pod": "llm-serve-0", "container": "vllm"}
	unowned := map[string]string{"gpu": "7"}
	if got := scrape(owned, target); got["namespace"] != "inference" || got["pod"] != "llm-serve-0" || got["container"] != "vllm" {
		t.Errorf("an owned device's series %v lost its owner", got)
	}
	got := scrape(unowned, target)
	for _, l := range []string{"namespace", "pod", "container"} {
		if v, ok := got[l]; ok {
			t.Errorf("an unowned device's series has %s=%q: it would look owned by the exporter", l, v)
		}
	}
	if got["node"] != "gpu-node-07" {
		t.Errorf("series %v has no node label", got)
	}

	// The cluster label, extra relabelings after the chart's, other settings.
	full := one[monitoringv1.ServiceMonitor](t, renderProfile(t, "full"))
	fep := full.Spec.Endpoints[0]
	ft := relabel(t, operatorTarget(), fep.RelabelConfigs)
	if ft["cluster"] != "prod-eu-1" || ft["host_ip"] != "192.168.1.7" || ft["node"] != "gpu-node-07" {
		t.Errorf("full profile target labels %v", ft)
	}
	if full.Namespace != "monitoring" || full.Labels["release"] != "kube-prometheus-stack" || fep.Scheme == nil || fep.Scheme.String() != "https" ||
		fep.Interval != "30s" || fep.ScrapeTimeout != "20s" || len(fep.MetricRelabelConfigs) != 1 || fep.TLSConfig == nil {
		t.Errorf("full profile ServiceMonitor %+v", full)
	}
	// webConfig's basic auth: the scrape authenticates with the Secret's
	// keys (the operator reads them from the ServiceMonitor's namespace).
	if ba := fep.BasicAuth; ba == nil || ba.Username.Name != "xpu-exporter-scrape" || ba.Username.Key != "username" ||
		ba.Password.Name != "xpu-exporter-scrape" || ba.Password.Key != "password" {
		t.Errorf("full profile basicAuth %+v, want the username and password keys of Secret xpu-exporter-scrape", fep.BasicAuth)
	}
	if ep.BasicAuth != nil {
		t.Errorf("default basicAuth %+v, want none", ep.BasicAuth)
	}
}

// A node labelled for two or three vendors runs one exporter pod of each
// vendor's DaemonSet (a pod has one runtimeClassName). Their targets differ
// by exporter (the DaemonSet's vendor), so each pod's up and self-series are
// its own: with instance (the node) alone they were one series written by
// two processes, and XpuExporterDown never saw a dead one. The label stays
// the same across a rollout (a new pod of the same DaemonSet), as instance
// does. Each pod reads its own vendor's devices only, so no device is
// served twice.
func TestVendorsOnOneNode(t *testing.T) {
	objs := render(t, "--set", "amd.enabled=true", "--set", "gaudi.enabled=true")
	sm := one[monitoringv1.ServiceMonitor](t, objs)
	collectors := map[string]string{"nvidia": "collector.nvidia", "amd": "collector.amd", "gaudi": "collector.gaudi"}
	targets := map[string]string{}
	for _, ds := range all[appsv1.DaemonSet](objs) {
		vendor := ds.Spec.Template.Labels["xpu-exporter.io/vendor"]
		target := relabel(t, podTarget(ds, "mixed-node", ds.Name+"-abcde"), sm.Spec.Endpoints[0].RelabelConfigs)
		if target["instance"] != "mixed-node" || target["exporter"] != vendor {
			t.Errorf("%s: target labels %v, want instance mixed-node and exporter %s", ds.Name, target, vendor)
		}
		key := fmt.Sprint(target)
		if other, ok := targets[key]; ok {
			t.Errorf("%s and %s on one node have the same target labels %v", ds.Name, other, target)
		}
		targets[key] = ds.Name
		// A rollout's new pod on the node: the same target labels.
		if again := relabel(t, podTarget(ds, "mixed-node", ds.Name+"-fghij"), sm.Spec.Endpoints[0].RelabelConfigs); !reflect.DeepEqual(again, target) {
			t.Errorf("%s: a new pod has target labels %v, the old one %v", ds.Name, again, target)
		}
		args := ds.Spec.Template.Spec.Containers[0].Args
		for v, flag := range collectors {
			on := !slices.Contains(args, "--no-"+flag)
			if on != (v == vendor) {
				t.Errorf("%s: %s on = %v, want only its own vendor's device collector (args %v)", ds.Name, flag, on, args)
			}
		}
	}
	if len(targets) != 3 {
		t.Errorf("%d distinct targets on one node, want 3", len(targets))
	}
}

// notes renders templates/NOTES.txt, which helm template leaves out, through
// a copy of the chart in which it is a ConfigMap's data.
func notes(t *testing.T, args ...string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(".")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "templates/NOTES.txt"), filepath.Join(dir, "notes.txt")); err != nil {
		t.Fatal(err)
	}
	tmpl := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\n  namespace: " + namespace +
		"\n  labels: {app.kubernetes.io/instance: " + release + "}\ndata:\n  notes: {{ tpl (.Files.Get \"notes.txt\") . | quote }}\n"
	if err := os.WriteFile(filepath.Join(dir, "templates/notes.yaml"), []byte(tmpl), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := helm(t, append([]string{"template", release, dir, "--namespace", namespace, "--show-only", "templates/notes.yaml"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decodeAll(out)
	if err != nil {
		t.Fatal(err)
	}
	return one[corev1.ConfigMap](t, objs).Data["notes"]
}

// Without a ServiceMonitor, NOTES.txt tells how to scrape the pods: it names
// every label the ServiceMonitor's relabelings set, take from or drop, so
// that a hand-written scrape config gives the targets the rules join on.
func TestNotesScrapeHintMatchesServiceMonitor(t *testing.T) {
	helmBin(t)
	sm := one[monitoringv1.ServiceMonitor](t, render(t))
	text := notes(t, "--set", "serviceMonitor.enabled=false,prometheusRule.enabled=false,dashboards.enabled=false,amd.enabled=true")
	var want []string
	for _, r := range sm.Spec.Endpoints[0].RelabelConfigs {
		switch strings.ToLower(r.Action) {
		case "labeldrop":
			want = append(want, strings.Split(r.Regex, "|")...)
		default:
			want = append(want, r.TargetLabel)
			for _, l := range r.SourceLabels {
				want = append(want, string(l))
			}
		}
	}
	for _, w := range append(want, "honor_labels: true") {
		if !regexp.MustCompile(`\b` + regexp.QuoteMeta(w) + `\b`).MatchString(text) {
			t.Errorf("NOTES.txt without a ServiceMonitor does not mention %q, which the ServiceMonitor's relabelings use:\n%s", w, text)
		}
	}
}

// ---------------------------------------------------------------------------
// Rules and dashboards: the chart ships the generated ones unchanged.

func TestChartFilesMatchSources(t *testing.T) {
	for _, c := range []struct{ src, copy string }{
		{"../promrules/*.yaml", "files/promrules"},
		{"../dashboards/*.json", "files/dashboards"},
	} {
		srcs, _ := filepath.Glob(c.src)
		copies, _ := filepath.Glob(filepath.Join(c.copy, "*"))
		if len(srcs) == 0 {
			t.Fatalf("no %s", c.src)
		}
		var names, copyNames []string
		for _, s := range srcs {
			names = append(names, filepath.Base(s))
			a, _ := os.ReadFile(s)
			b, err := os.ReadFile(filepath.Join(c.copy, filepath.Base(s)))
			if err != nil || !bytes.Equal(a, b) {
				t.Errorf("chart/%s/%s differs from %s (%v): run make chart-files", c.copy, filepath.Base(s), s, err)
			}
		}
		for _, s := range copies {
			copyNames = append(copyNames, filepath.Base(s))
		}
		if !reflect.DeepEqual(names, copyNames) {
			t.Errorf("chart/%s holds %v, the sources are %v: run make chart-files", c.copy, copyNames, names)
		}
	}
}

func TestPrometheusRulesEqualPromrules(t *testing.T) {
	rules := all[monitoringv1.PrometheusRule](render(t))
	srcs, _ := filepath.Glob("../promrules/*.yaml")
	if len(rules) != len(srcs) {
		t.Fatalf("rendered %d PrometheusRules, promrules/ has %d", len(rules), len(srcs))
	}
	for _, r := range rules {
		src := r.Annotations["xpu-exporter.io/source"]
		b, err := os.ReadFile(filepath.Join("..", src))
		if err != nil {
			t.Fatalf("PrometheusRule %s: source %q: %v", r.Name, src, err)
		}
		var want monitoringv1.PrometheusRule
		if err := yaml.UnmarshalStrict(b, &want); err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		if !reflect.DeepEqual(r.Spec, want.Spec) {
			g, _ := json.MarshalIndent(r.Spec, "", " ")
			w, _ := json.MarshalIndent(want.Spec, "", " ")
			t.Errorf("PrometheusRule %s differs from %s:\n%s\nwant\n%s", r.Name, src, g, w)
		}
		for k, v := range want.Labels {
			if r.Labels[k] != v {
				t.Errorf("PrometheusRule %s: label %s=%q, the source has %q", r.Name, k, r.Labels[k], v)
			}
		}
	}
	// additionalLabels and namespace reach every rule.
	for _, r := range all[monitoringv1.PrometheusRule](renderProfile(t, "full")) {
		if r.Namespace != "monitoring" || r.Labels["release"] != "kube-prometheus-stack" {
			t.Errorf("full profile PrometheusRule %s: namespace %s labels %v", r.Name, r.Namespace, r.Labels)
		}
	}
}

// Alerts are tuned from values: one dropped, one with another for: and
// threshold, labels on every alert, the recording rules untouched.
func TestAlertTuning(t *testing.T) {
	rules := all[monitoringv1.PrometheusRule](render(t,
		"--set", "prometheusRule.alertLabels.team=gpu-infra",
		"--set", "prometheusRule.alerts.XpuFleetIdleFractionHigh.enabled=false",
		"--set", "prometheusRule.alerts.XpuMemoryNearlyFull.for=15m",
		"--set-string", "prometheusRule.alerts.XpuMemoryNearlyFull.expr=xpu_memory_used_bytes / xpu_memory_total_bytes > 0.99",
		"--set", "prometheusRule.alerts.XpuMemoryNearlyFull.labels.severity=info",
	))
	alerts, records := map[string]monitoringv1.Rule{}, 0
	for _, r := range rules {
		for _, g := range r.Spec.Groups {
			if len(g.Rules) == 0 {
				t.Errorf("%s: group %s left empty", r.Name, g.Name)
			}
			for _, rule := range g.Rules {
				if rule.Alert == "" {
					records++
					if rule.Labels["team"] != "" {
						t.Errorf("recording rule %s got the alert labels", rule.Record)
					}
					continue
				}
				alerts[rule.Alert] = rule
				if rule.Labels["team"] != "gpu-infra" {
					t.Errorf("%s: labels %v, want team=gpu-infra added", rule.Alert, rule.Labels)
				}
			}
		}
	}
	if _, ok := alerts["XpuFleetIdleFractionHigh"]; ok || len(alerts) != 16 {
		t.Errorf("%d alerts, want the 17 less the disabled XpuFleetIdleFractionHigh", len(alerts))
	}
	m := alerts["XpuMemoryNearlyFull"]
	if m.For == nil || *m.For != "15m" || m.Expr.String() != "xpu_memory_used_bytes / xpu_memory_total_bytes > 0.99" || m.Labels["severity"] != "info" {
		t.Errorf("XpuMemoryNearlyFull tuned to %+v", m)
	}
	if x := alerts["XpuXidErrors"]; x.Labels["severity"] != "warning" || x.Annotations["runbook_url"] == "" {
		t.Errorf("an untuned alert changed: %+v", x)
	}
	if records == 0 {
		t.Error("no recording rules rendered")
	}
}

// A rollout stops a node's old exporter pod before it starts the new one.
// Both serve the same target labels (instance is the node, exporter the
// vendor): started side by side (maxSurge 1), every series had two writers,
// and the counters each process keeps (Xids, AMD RAS events, its own)
// alternated between their two values, each fall a reset to increase()
// (found by probing: 91.4 Xids where 3 happened). A node is without its
// exporter for the seconds the new pod takes to start; the alerts' for:
// clauses outlast that.
func TestRolloutHasOneExporterPerNode(t *testing.T) {
	for _, ds := range all[appsv1.DaemonSet](render(t)) {
		ru := ds.Spec.UpdateStrategy.RollingUpdate
		if ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType || ru == nil ||
			ru.MaxUnavailable == nil || ru.MaxUnavailable.IntValue() != 1 || ru.MaxSurge == nil || ru.MaxSurge.IntValue() != 0 {
			t.Errorf("%s: update strategy %+v, want RollingUpdate with maxUnavailable 1, maxSurge 0", ds.Name, ds.Spec.UpdateStrategy)
		}
	}
}

func TestDashboardConfigMaps(t *testing.T) {
	cms := all[corev1.ConfigMap](render(t))
	srcs, _ := filepath.Glob("../dashboards/*.json")
	if len(cms) != len(srcs) {
		t.Fatalf("rendered %d ConfigMaps, dashboards/ has %d", len(cms), len(srcs))
	}
	got := map[string]string{}
	for _, cm := range cms {
		if cm.Labels["grafana_dashboard"] != "1" {
			t.Errorf("ConfigMap %s lacks the Grafana sidecar label: %v", cm.Name, cm.Labels)
		}
		for k, v := range cm.Data {
			got[k] = v
		}
	}
	for _, s := range srcs {
		b, _ := os.ReadFile(s)
		v, ok := got[filepath.Base(s)]
		if !ok || strings.TrimRight(v, "\n") != strings.TrimRight(string(b), "\n") {
			t.Errorf("dashboard %s not shipped unchanged", s)
		}
		if !json.Valid([]byte(v)) {
			t.Errorf("dashboard %s is not valid JSON once rendered", s)
		}
	}
	for _, cm := range all[corev1.ConfigMap](renderProfile(t, "full")) {
		if cm.Namespace != "grafana" || cm.Annotations["grafana_folder"] != "GPUs" {
			t.Errorf("full profile ConfigMap %s: namespace %s annotations %v", cm.Name, cm.Namespace, cm.Annotations)
		}
	}
}

// ---------------------------------------------------------------------------
// Profiles.

func TestNoMetadataProfile(t *testing.T) {
	objs := renderProfile(t, "no-metadata")
	if n := len(all[rbacv1.ClusterRole](objs)) + len(all[rbacv1.ClusterRoleBinding](objs)); n != 0 {
		t.Errorf("%d RBAC objects without metadata enrichment", n)
	}
	ds := one[appsv1.DaemonSet](t, objs)
	pod := ds.Spec.Template.Spec
	if *pod.AutomountServiceAccountToken {
		t.Error("service-account token mounted without metadata enrichment")
	}
	if _, ok := env(pod.Containers[0])["NODE_NAME"]; ok {
		t.Error("NODE_NAME set: the exporter would start an API-server watch")
	}
	if !slices.Contains(pod.Containers[0].Args, "--kubernetes.pods-api-socket=") {
		t.Errorf("args %v still use the Pods API", pod.Containers[0].Args)
	}
	if _, ok := hostPaths(pod)["/var/lib/kubelet/pods-api"]; ok {
		t.Error("Pods API directory mounted")
	}
	if _, ok := hostPaths(pod)["/var/lib/kubelet/pod-resources"]; !ok {
		t.Error("pod-resources not mounted: owners need it even without metadata")
	}
}

func TestPodsAPIOnlyAndNoHostPID(t *testing.T) {
	objs := renderProfile(t, "full")
	if n := len(all[rbacv1.ClusterRole](objs)); n != 0 {
		t.Errorf("%d ClusterRoles with the Pods API as the only metadata source", n)
	}
	for _, ds := range all[appsv1.DaemonSet](objs) {
		pod := ds.Spec.Template.Spec
		c := pod.Containers[0]
		if _, ok := hostPaths(pod)["/var/lib/kubelet/pods-api"]; !ok {
			t.Errorf("%s: Pods API directory not mounted", ds.Name)
		}
		if _, ok := env(c)["NODE_NAME"]; ok {
			t.Errorf("%s: NODE_NAME set: without a token the API-server fallback would fail", ds.Name)
		}
		// The node's name all the same, without a watch: --cost.file's
		// per-node prices are keyed by it, and a pod's host name is the
		// pod's (found by probing: probe15-chart).
		if n := env(c)["XPU_NODE_NAME"]; n.ValueFrom == nil || n.ValueFrom.FieldRef == nil || n.ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
			t.Errorf("%s: XPU_NODE_NAME %+v, want spec.nodeName", ds.Name, n)
		}
		// Each exporter knows the others, so that an engine is served once.
		for _, v := range []string{"nvidia", "amd", "habana"} {
			if !slices.Contains(c.Args, "--kubernetes.exporter-vendor="+v) {
				t.Errorf("%s: args %v lack --kubernetes.exporter-vendor=%s", ds.Name, c.Args, v)
			}
		}
		if pod.HostPID || !slices.Contains(c.Args, "--no-attribution.processes") {
			t.Errorf("%s: hostPID %v with args %v", ds.Name, pod.HostPID, c.Args)
		}
		if _, ok := hostPaths(pod)["/etc/passwd"]; ok {
			t.Errorf("%s: /etc/passwd mounted without hostPID", ds.Name)
		}
		if !strings.Contains(c.Image, "@sha256:") || pod.PriorityClassName != "system-node-critical" {
			t.Errorf("%s: image %s, priority class %q", ds.Name, c.Image, pod.PriorityClassName)
		}
		if !slices.Contains(c.Args, "--web.config.file=/etc/xpu_exporter/web/web-config.yml") {
			t.Errorf("%s: args %v lack the web config", ds.Name, c.Args)
		}
	}
	// All three vendors.
	if n := len(all[appsv1.DaemonSet](objs)); n != 3 {
		t.Errorf("%d DaemonSets with every vendor on", n)
	}
}

func TestAMDOnlyProfile(t *testing.T) {
	ds := one[appsv1.DaemonSet](t, renderProfile(t, "amd-only"))
	pod := ds.Spec.Template.Spec
	c := pod.Containers[0]
	if ds.Name != "xpu-exporter-amd" || pod.RuntimeClassName != nil {
		t.Errorf("DaemonSet %s, runtimeClassName %v", ds.Name, pod.RuntimeClassName)
	}
	if hostPaths(pod)["/sys"] != "/host/sys" {
		t.Errorf("host /sys not mounted at /host/sys: %v", hostPaths(pod))
	}
	for _, a := range []string{"--no-collector.nvidia", "--no-collector.gaudi", "--path.sysfs=/host/sys"} {
		if !slices.Contains(c.Args, a) {
			t.Errorf("args %v lack %s", c.Args, a)
		}
	}
	for name := range env(c) {
		if strings.HasPrefix(name, "NVIDIA_") {
			t.Errorf("AMD exporter has %s", name)
		}
	}
	keys := pod.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(keys) != 2 || keys[0].MatchExpressions[0].Key != "feature.node.kubernetes.io/amd-gpu" {
		t.Errorf("node affinity %+v", keys)
	}
	// Least privilege as values.yaml documents it: every host path
	// read-only, no device node (the collector opens none), ptrace alone
	// for other processes' fdinfo. No GPU is requested: checked for every
	// profile (acceleratorResource).
	for _, m := range c.VolumeMounts {
		if !m.ReadOnly {
			t.Errorf("mount %s at %s is writable", m.Name, m.MountPath)
		}
	}
	for host := range hostPaths(pod) {
		if strings.HasPrefix(host, "/dev") {
			t.Errorf("device nodes %s mounted: the AMD collector opens none", host)
		}
	}
	if caps := c.SecurityContext.Capabilities; caps == nil || !slices.Equal(caps.Add, []corev1.Capability{"SYS_PTRACE"}) || !slices.Contains(caps.Drop, "ALL") {
		t.Errorf("capabilities %+v, want ALL dropped and SYS_PTRACE added", caps)
	}
	for _, tc := range []struct {
		set  []string
		want []corev1.Capability
	}{
		{[]string{"hostPID=false"}, nil},
		{[]string{"amd.ptrace=false"}, nil},
		{[]string{"amd.dacReadSearch=true"}, []corev1.Capability{"SYS_PTRACE", "DAC_READ_SEARCH"}},
		{[]string{"amd.dacReadSearch=true", "hostPID=false"}, nil},
	} {
		args := []string{"--values", "ci/amd-only-values.yaml"}
		for _, s := range tc.set {
			args = append(args, "--set", s)
		}
		got := one[appsv1.DaemonSet](t, render(t, args...)).Spec.Template.Spec.Containers[0].SecurityContext.Capabilities.Add
		if !slices.Equal(got, tc.want) {
			t.Errorf("%v: capabilities %v added, want %v", tc.set, got, tc.want)
		}
	}
}

// TestGKEProfile: on GKE (Google's driver installer and device plugin,
// container-engine-accelerators cmd/nvidia_gpu/device-plugin.yaml: node
// affinity cloud.google.com/gke-accelerator Exists, the host's
// /home/kubernetes/bin/nvidia mounted, privileged) the exporter loads NVML
// from the host's driver directory, read-only, and asks for no NVIDIA
// runtime.
func TestGKEProfile(t *testing.T) {
	ds := one[appsv1.DaemonSet](t, renderProfile(t, "gke"))
	pod := ds.Spec.Template.Spec
	c := pod.Containers[0]
	if ds.Name != "xpu-exporter-nvidia" || pod.RuntimeClassName != nil {
		t.Errorf("DaemonSet %s, runtimeClassName %v", ds.Name, pod.RuntimeClassName)
	}
	if got := hostPaths(pod)["/home/kubernetes/bin/nvidia"]; got != "/home/kubernetes/bin/nvidia" {
		t.Errorf("driver directory mounted at %q, want /home/kubernetes/bin/nvidia", got)
	}
	for _, m := range c.VolumeMounts {
		if !m.ReadOnly {
			t.Errorf("mount %s at %s is writable", m.Name, m.MountPath)
		}
	}
	if !slices.Contains(c.Args, "--nvidia.nvml-library=/home/kubernetes/bin/nvidia/lib64/libnvidia-ml.so.1") {
		t.Errorf("args %v do not load NVML from the driver directory", c.Args)
	}
	for name := range env(c) {
		if strings.HasPrefix(name, "NVIDIA_") {
			t.Errorf("%s set: no NVIDIA runtime reads it on GKE", name)
		}
	}
	found := false
	for _, term := range pod.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		e := term.MatchExpressions[0]
		found = found || e.Key == "cloud.google.com/gke-accelerator" && e.Operator == corev1.NodeSelectorOpExists
	}
	if !found {
		t.Errorf("no node term for cloud.google.com/gke-accelerator: %+v", pod.Affinity.NodeAffinity)
	}
	if sc := c.SecurityContext; sc.Privileged == nil || !*sc.Privileged || sc.Capabilities != nil {
		t.Errorf("securityContext %+v, want privileged without a capability list", sc)
	}
	// A library path given keeps its say.
	args := one[appsv1.DaemonSet](t, render(t, "--values", "ci/gke-values.yaml", "--set", "nvidia.nvmlLibrary=/opt/nv/libnvidia-ml.so.1")).Spec.Template.Spec.Containers[0].Args
	if !slices.Contains(args, "--nvidia.nvml-library=/opt/nv/libnvidia-ml.so.1") {
		t.Errorf("args %v ignore nvidia.nvmlLibrary", args)
	}
}

func TestGaudiOnlyProfile(t *testing.T) {
	ds := one[appsv1.DaemonSet](t, renderProfile(t, "gaudi-only"))
	pod := ds.Spec.Template.Spec
	c := pod.Containers[0]
	if ds.Name != "xpu-exporter-gaudi" || pod.RuntimeClassName == nil || *pod.RuntimeClassName != "habana" {
		t.Errorf("DaemonSet %s, runtimeClassName %v", ds.Name, pod.RuntimeClassName)
	}
	if env(c)["HABANA_VISIBLE_DEVICES"].Value != "all" {
		t.Errorf("env %v", c.Env)
	}
	for _, a := range []string{"--no-collector.nvidia", "--gaudi.hl-smi-path=/usr/bin/hl-smi", "--path.sysfs=/host/sys"} {
		if !slices.Contains(c.Args, a) {
			t.Errorf("args %v lack %s", c.Args, a)
		}
	}
	mounts := hostPaths(pod)
	for host, want := range map[string]string{"/sys": "/host/sys", "/usr/bin/hl-smi": "/usr/bin/hl-smi", "/usr/lib/habanalabs": "/usr/lib/habanalabs"} {
		if mounts[host] != want {
			t.Errorf("host %s mounted at %q, want %s (mounts %v)", host, mounts[host], want, mounts)
		}
	}
	// hl-smi must be a file and its library a directory on the node: a
	// missing one stops the pod instead of being created on the host. A
	// path of another name is a Directory unless its entry says File.
	for _, tc := range []struct {
		args []string
		want map[string]corev1.HostPathType
	}{
		{nil, map[string]corev1.HostPathType{"/usr/bin/hl-smi": corev1.HostPathFile, "/usr/lib/habanalabs": corev1.HostPathDirectory}},
		{[]string{"--set", "gaudi.hlsmiPath=/opt/habanalabs/bin/hl-smi", "--set-json", `gaudi.hlsmiHostPaths=["/opt/habanalabs/bin/hl-smi","/opt/habanalabs/lib",{"path":"/usr/lib/libhlml.so","type":"File"}]`},
			map[string]corev1.HostPathType{"/opt/habanalabs/bin/hl-smi": corev1.HostPathFile, "/opt/habanalabs/lib": corev1.HostPathDirectory, "/usr/lib/libhlml.so": corev1.HostPathFile}},
	} {
		got := map[string]corev1.HostPathType{}
		for _, v := range one[appsv1.DaemonSet](t, render(t, append([]string{"--values", "ci/gaudi-only-values.yaml"}, tc.args...)...)).Spec.Template.Spec.Volumes {
			if strings.HasPrefix(v.Name, "host-tool-") && v.HostPath.Type != nil {
				got[v.HostPath.Path] = *v.HostPath.Type
			}
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%v: hl-smi host path types %v, want %v", tc.args, got, tc.want)
		}
	}
	if caps := c.SecurityContext.Capabilities; caps == nil || !slices.Equal(caps.Add, []corev1.Capability{"SYS_PTRACE"}) || !slices.Contains(caps.Drop, "ALL") {
		t.Errorf("capabilities %+v, want ALL dropped and SYS_PTRACE added", caps)
	}
	// Without the host PID namespace there are no processes to read.
	noPID := one[appsv1.DaemonSet](t, render(t, "--values", "ci/gaudi-only-values.yaml", "--set", "hostPID=false", "--set", "gaudi.dacReadSearch=true"))
	if caps := noPID.Spec.Template.Spec.Containers[0].SecurityContext.Capabilities; len(caps.Add) != 0 {
		t.Errorf("without hostPID: capabilities %v added", caps.Add)
	}
	if slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--gaudi.query-fields") }) {
		t.Errorf("args %v narrow the hl-smi fields by default", c.Args)
	}
	narrow := one[appsv1.DaemonSet](t, render(t, "--values", "ci/gaudi-only-values.yaml", "--set", "gaudi.queryFields={index,uuid,utilization.aip}"))
	if args := narrow.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--gaudi.query-fields=index,uuid,utilization.aip") {
		t.Errorf("gaudi.queryFields: args %v", args)
	}
	dac := one[appsv1.DaemonSet](t, render(t, "--values", "ci/gaudi-only-values.yaml", "--set", "gaudi.dacReadSearch=true"))
	if caps := dac.Spec.Template.Spec.Containers[0].SecurityContext.Capabilities; !slices.Equal(caps.Add, []corev1.Capability{"SYS_PTRACE", "DAC_READ_SEARCH"}) {
		t.Errorf("gaudi.dacReadSearch: capabilities %v added", caps.Add)
	}
}

func TestOTLPProfile(t *testing.T) {
	ds := one[appsv1.DaemonSet](t, renderProfile(t, "otlp"))
	pod := ds.Spec.Template.Spec
	c := pod.Containers[0]
	var otlpArgs []string
	for _, a := range c.Args {
		if strings.HasPrefix(a, "--otlp.") {
			otlpArgs = append(otlpArgs, a)
		}
	}
	want := []string{
		"--otlp.endpoint=https://otel-collector.observability:4317", "--otlp.protocol=grpc", "--otlp.interval=15s", "--otlp.timeout=5s",
		"--otlp.compression=gzip", "--otlp.header=X-Scope-OrgID=gpu-fleet", "--otlp.header-from-env=Authorization=XPU_OTLP_HEADER_0",
		"--otlp.tls.ca-file=/etc/xpu_exporter/otlp/ca.crt", "--otlp.tls.cert-file=/etc/xpu_exporter/otlp/tls.crt",
		"--otlp.tls.key-file=/etc/xpu_exporter/otlp/tls.key", "--otlp.k8s-cluster-name=prod-eu", "--otlp.semconv=also",
	}
	if !slices.Equal(otlpArgs, want) {
		t.Errorf("OTLP args\n%v\nwant\n%v", otlpArgs, want)
	}
	// Resource attributes, percent-encoded as OTEL_RESOURCE_ATTRIBUTES
	// wants (by hand: "ml infra, EU" is ml%20infra%2C%20EU), after the
	// node they refer to.
	names := []string{}
	for _, e := range c.Env {
		names = append(names, e.Name)
	}
	if i, j := slices.Index(names, "XPU_OTLP_NODE_NAME"), slices.Index(names, "OTEL_RESOURCE_ATTRIBUTES"); i < 0 || j < i {
		t.Errorf("env %v: XPU_OTLP_NODE_NAME must come before OTEL_RESOURCE_ATTRIBUTES", names)
	}
	if n := env(c)["XPU_OTLP_NODE_NAME"]; n.ValueFrom == nil || n.ValueFrom.FieldRef == nil || n.ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
		t.Errorf("XPU_OTLP_NODE_NAME: %+v", n)
	}
	wantAttrs := "host.name=$(XPU_OTLP_NODE_NAME),k8s.node.name=$(XPU_OTLP_NODE_NAME),deployment.environment.name=prod,team=ml%20infra%2C%20EU"
	if got := env(c)["OTEL_RESOURCE_ATTRIBUTES"].Value; got != wantAttrs {
		t.Errorf("OTEL_RESOURCE_ATTRIBUTES=%s\nwant %s", got, wantAttrs)
	}
	// The secret reaches the exporter as a variable, never in its args.
	h := env(c)["XPU_OTLP_HEADER_0"]
	if h.ValueFrom == nil || h.ValueFrom.SecretKeyRef == nil || h.ValueFrom.SecretKeyRef.Name != "otlp-auth" || h.ValueFrom.SecretKeyRef.Key != "token" {
		t.Errorf("header from Secret: %+v", h)
	}
	var mounted bool
	for _, m := range c.VolumeMounts {
		mounted = mounted || (m.Name == "otlp-tls" && m.MountPath == "/etc/xpu_exporter/otlp" && m.ReadOnly)
	}
	var volume bool
	for _, v := range pod.Volumes {
		volume = volume || (v.Name == "otlp-tls" && v.Secret != nil && v.Secret.SecretName == "otlp-tls")
	}
	if !mounted || !volume {
		t.Errorf("TLS Secret otlp-tls not mounted read-only at /etc/xpu_exporter/otlp: mounts %v", c.VolumeMounts)
	}
	// Off by default: no --otlp flag at all.
	for _, a := range one[appsv1.DaemonSet](t, render(t)).Spec.Template.Spec.Containers[0].Args {
		if strings.HasPrefix(a, "--otlp.") {
			t.Errorf("default args have %s", a)
		}
	}
	// A plain OTLP/HTTP receiver given as host:port, as before.
	args := one[appsv1.DaemonSet](t, render(t, "--set", "otlp.enabled=true,otlp.endpoint=collector:4318,otlp.insecure=true")).Spec.Template.Spec.Containers[0].Args
	for _, a := range []string{"--otlp.endpoint=collector:4318", "--otlp.protocol=http/protobuf", "--otlp.insecure", "--otlp.semconv=none"} {
		if !slices.Contains(args, a) {
			t.Errorf("args %v lack %s", args, a)
		}
	}
}

func TestNoRBACProfile(t *testing.T) {
	objs := renderProfile(t, "no-rbac")
	for _, o := range objs {
		if o.kind != "apps/v1/DaemonSet" && o.kind != "v1/Service" {
			t.Errorf("rendered %s %s", o.kind, o.name)
		}
	}
	pod := one[appsv1.DaemonSet](t, objs).Spec.Template.Spec
	if pod.ServiceAccountName != "default" || !slices.Contains(pod.Containers[0].Args, "--no-attribution.kubernetes") {
		t.Errorf("service account %q, args %v", pod.ServiceAccountName, pod.Containers[0].Args)
	}
	if _, ok := hostPaths(pod)["/var/lib/kubelet/pod-resources"]; ok {
		t.Error("pod-resources mounted with Kubernetes attribution off")
	}
}

// hostile are strings the schema accepts that YAML reads as something else
// when a template pastes them unquoted: a number, a boolean, a value cut at
// a comment, a mapping.
var hostile = []string{"2024", "on", "team a #1", "prod: eu"}

// Every string from the values reaches the objects as given (strict
// decoding refuses a number or a mapping where a string belongs; the
// comparisons catch a cut one).
func TestStringValuesReachObjectsAsGiven(t *testing.T) {
	helmBin(t)
	for _, v := range hostile {
		t.Run(v, func(t *testing.T) {
			args := []string{"--set", "amd.enabled=true,gaudi.enabled=true,otlp.enabled=true,otlp.endpoint=http://otel:4318"}
			// A header name is an HTTP token and a resource domain/name
			// without blanks (the schema refuses others, as the exporter
			// does): v with what they cannot hold taken out.
			header := strings.NewReplacer(" ", "", ":", "").Replace(v)
			resource := "example.com/" + strings.ReplaceAll(v, " ", "-")
			for _, s := range []string{
				"serviceMonitor.cluster=" + v, "otlp.headers.X-Scope-OrgID=" + v, "otlp.clusterName=" + v,
				"otlp.urlPath=/" + v, "otlp.headersFromSecrets[0].header=" + header, "otlp.headersFromSecrets[0].secretName=s",
				"otlp.headersFromSecrets[0].secretKey=k", "extraArgs[0]=" + v, "kubernetes.podLabels[0]=" + v,
				"kubernetes.resources[0]=" + resource, "kubernetes.cdiSpecDir=/" + v, "nvidia.nvmlLibrary=" + v,
				"nvidia.visibleDevices=" + v, "gaudi.hlsmiPath=" + v,
			} {
				args = append(args, "--set-string", s)
			}
			objs := render(t, args...)
			sm := one[monitoringv1.ServiceMonitor](t, objs)
			if got := relabel(t, operatorTarget(), sm.Spec.Endpoints[0].RelabelConfigs)["cluster"]; got != v {
				t.Errorf("serviceMonitor.cluster %q: cluster label %q", v, got)
			}
			want := map[string][]string{
				"": {v, "--otlp.header=X-Scope-OrgID=" + v, "--otlp.k8s-cluster-name=" + v, "--otlp.url-path=/" + v,
					"--otlp.header-from-env=" + header + "=XPU_OTLP_HEADER_0", "--kubernetes.pod-label=" + v,
					"--kubernetes.resource=" + resource, "--kubernetes.cdi-spec-dir=/" + v},
				"nvidia": {"--nvidia.nvml-library=" + v},
				"gaudi":  {"--gaudi.hl-smi-path=" + v},
			}
			for _, ds := range all[appsv1.DaemonSet](objs) {
				c := ds.Spec.Template.Spec.Containers[0]
				var missing []string
				for _, a := range append(want[""], want[ds.Spec.Template.Labels["xpu-exporter.io/vendor"]]...) {
					if !slices.Contains(c.Args, a) {
						missing = append(missing, a)
					}
				}
				if len(missing) > 0 {
					t.Errorf("%s: args %q lack %q", ds.Name, c.Args, missing)
				}
				if _, ok := hostPaths(ds.Spec.Template.Spec)["/"+v]; !ok {
					t.Errorf("%s: CDI directory %q not mounted: %v", ds.Name, "/"+v, hostPaths(ds.Spec.Template.Spec))
				}
				if e, ok := env(c)["NVIDIA_VISIBLE_DEVICES"]; ok && e.Value != v {
					t.Errorf("%s: NVIDIA_VISIBLE_DEVICES=%q, want %q", ds.Name, e.Value, v)
				}
			}
		})
	}
}

// Names, namespaces and label keys that YAML would read as a number or a
// boolean, yet valid in Kubernetes, reach the objects as given.
func TestNamesReachObjectsAsGiven(t *testing.T) {
	helmBin(t)
	for _, v := range []string{"2024", "on"} {
		t.Run(v, func(t *testing.T) {
			sets := []string{"nameOverride=" + v, "fullnameOverride=" + v, "serviceAccount.name=" + v,
				"nvidia.runtimeClassName=" + v, "priorityClassName=" + v, "dashboards.label=" + v, "nvidia.nodeLabels[0]=" + v}
			args := []string{"template", v, ".", "--namespace", v}
			for _, s := range sets {
				args = append(args, "--set-string", s)
			}
			out, err := helm(t, args...)
			if err != nil {
				t.Fatal(err)
			}
			objs, err := decodeAll(out)
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range objs {
				meta := reflect.ValueOf(o.obj).Elem().FieldByName("ObjectMeta").Interface().(metav1.ObjectMeta)
				if !clusterScoped[o.kind] && meta.Namespace != v {
					t.Errorf("%s %s: namespace %q, want %q", o.kind, o.name, meta.Namespace, v)
				}
				if meta.Labels["app.kubernetes.io/instance"] != v || meta.Labels["app.kubernetes.io/name"] != v {
					t.Errorf("%s %s: labels %v, want instance and name %q", o.kind, o.name, meta.Labels, v)
				}
			}
			for _, kind := range []string{"v1/Service", "v1/ServiceAccount", "monitoring.coreos.com/v1/ServiceMonitor", "rbac.authorization.k8s.io/v1/ClusterRole"} {
				if !slices.ContainsFunc(objs, func(o object) bool { return o.kind == kind && o.name == v }) {
					t.Errorf("no %s named %q", kind, v)
				}
			}
			crb := one[rbacv1.ClusterRoleBinding](t, objs)
			if s := crb.Subjects[0]; s.Name != v || s.Namespace != v {
				t.Errorf("ClusterRoleBinding subject %+v, want %q in %q", s, v, v)
			}
			if sm := one[monitoringv1.ServiceMonitor](t, objs); !slices.Equal(sm.Spec.NamespaceSelector.MatchNames, []string{v}) {
				t.Errorf("ServiceMonitor namespaces %v", sm.Spec.NamespaceSelector.MatchNames)
			}
			pod := one[appsv1.DaemonSet](t, objs).Spec.Template.Spec
			if pod.ServiceAccountName != v || pod.PriorityClassName != v || pod.RuntimeClassName == nil || *pod.RuntimeClassName != v {
				t.Errorf("pod serviceAccountName %q priorityClassName %q runtimeClassName %v, want %q", pod.ServiceAccountName, pod.PriorityClassName, pod.RuntimeClassName, v)
			}
			if k := pod.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions[0].Key; k != v {
				t.Errorf("node label %q, want %q", k, v)
			}
			for _, cm := range all[corev1.ConfigMap](objs) {
				if cm.Labels[v] != "1" {
					t.Errorf("ConfigMap %s: labels %v, want %s=1", cm.Name, cm.Labels, v)
				}
			}
			// The job label, where the shipped rules and dashboards are off.
			out, err = helm(t, "template", release, ".", "--set", "prometheusRule.enabled=false,dashboards.enabled=false", "--set-string", "serviceMonitor.jobLabel="+v)
			if err != nil {
				t.Fatal(err)
			}
			if objs, err = decodeAll(out); err != nil {
				t.Fatal(err)
			}
			if job := relabel(t, operatorTarget(), one[monitoringv1.ServiceMonitor](t, objs).Spec.Endpoints[0].RelabelConfigs)["job"]; job != v {
				t.Errorf("serviceMonitor.jobLabel %q: job %q", v, job)
			}
		})
	}
}

// Values the schema or the templates refuse.
func TestRefusedValues(t *testing.T) {
	helmBin(t)
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown top-level key", []string{"--set", "replicas=2"}, "replicas"},
		{"misspelt nested key", []string{"--set", "nvidia.enabeld=true"}, "enabeld"},
		{"bad metadata source", []string{"--set", "kubernetes.metadata.source=apiserver"}, "source"},
		{"bad log level", []string{"--set", "log.level=trace"}, "level"},
		{"no vendor", []string{"--set", "nvidia.enabled=false"}, "enable at least one"},
		// A values file kept from the old default (maxUnavailable 0 beside
		// maxSurge 1) merges with the new one into 0 and 0, which the API
		// server refuses at the upgrade.
		{"rollout that can replace no pod", []string{"--set", "updateStrategy.rollingUpdate.maxUnavailable=0"}, "maxUnavailable and maxSurge are both 0"},
		{"OTLP without endpoint", []string{"--set", "otlp.enabled=true"}, "endpoint"},
		{"OTLP endpoint with a query", []string{"--set", "otlp.enabled=true,otlp.endpoint=https://c:4318/?token=x"}, "endpoint"},
		{"OTLP resource attribute key with a comma", []string{"--set", "otlp.enabled=true,otlp.endpoint=c:4318,otlp.resourceAttributes.a\\,b=c"}, "resourceAttributes"},
		{"OTLP protocol http/json", []string{"--set", "otlp.enabled=true,otlp.endpoint=c:4318,otlp.protocol=http/json"}, "protocol"},
		{"OTLP client certificate without key", []string{"--set", "otlp.enabled=true,otlp.endpoint=c:4318,otlp.tls.secretName=s,otlp.tls.certFile=tls.crt"}, "go together"},
		{"OTLP client certificate without Secret", []string{"--set", "otlp.enabled=true,otlp.endpoint=c:4318,otlp.tls.certFile=tls.crt,otlp.tls.keyFile=tls.key"}, "secretName"},
		// What the exporter refuses at start: every pod would crash-loop.
		{"OTLP https endpoint with insecure", []string{"--set", "otlp.enabled=true,otlp.endpoint=https://c:4318,otlp.insecure=true"}, "otlp.insecure"},
		{"OTLP http endpoint with a CA", []string{"--set", "otlp.enabled=true,otlp.endpoint=http://c:4318,otlp.tls.secretName=s"}, "plain text"},
		{"OTLP insecure host:port with a client certificate", []string{"--set", "otlp.enabled=true,otlp.endpoint=c:4318,otlp.insecure=true,otlp.tls.secretName=s,otlp.tls.caFile=,otlp.tls.certFile=c,otlp.tls.keyFile=k"}, "plain text"},
		{"OTLP interval 0s", []string{"--set", "otlp.enabled=true,otlp.endpoint=c:4318,otlp.interval=0s"}, "interval"},
		{"OTLP interval empty", []string{"--set", "otlp.enabled=true,otlp.endpoint=c:4318,otlp.interval="}, "interval"},
		{"OTLP interval in years", []string{"--set", "otlp.enabled=true,otlp.endpoint=c:4318,otlp.interval=1y"}, "interval"},
		{"OTLP timeout in years", []string{"--set", "otlp.enabled=true,otlp.endpoint=c:4318,otlp.timeout=1y"}, "timeout"},
		{"hl-smi host path of a type that creates it", []string{"--set", "gaudi.enabled=true", "--set-json", `gaudi.hlsmiHostPaths=[{"path":"/x","type":"DirectoryOrCreate"}]`}, "hlsmiHostPaths"},
		{"hl-smi fields without index", []string{"--set", "nvidia.enabled=false,gaudi.enabled=true,gaudi.queryFields={uuid,name}"}, "gaudi.queryFields must include index"},
		// probe6-ops D2, D3: values the exporter refuses, or that take the
		// pods out of their Service, without a word.
		{"hl-smi field the exporter does not read", []string{"--set", "nvidia.enabled=false,gaudi.enabled=true,gaudi.queryFields={index,power}"}, "queryFields"},
		{"resource pattern without a domain", []string{"--set", "kubernetes.resources={gpu}"}, "resources"},
		{"OTLP header name with =", []string{"--set", "otlp.enabled=true,otlp.endpoint=c:4318", "--set-json", `otlp.headersFromSecrets=[{"header":"X=Y","secretName":"s","secretKey":"k"}]`}, "header"},
		{"OTLP gRPC header name with !", []string{"--set", "otlp.enabled=true,otlp.endpoint=c:4317,otlp.protocol=grpc", "--set-json", `otlp.headersFromSecrets=[{"header":"X!Org","secretName":"s","secretKey":"k"}]`}, "gRPC metadata key"},
		{"pod label overriding the component", []string{"--set", "podLabels.app\\.kubernetes\\.io/component=gpu-monitoring"}, "podLabels.app.kubernetes.io/component"},
		{"job the rules do not select", []string{"--set", "serviceMonitor.jobLabel=gpus"}, "jobLabel"},
		{"basic auth without a password", []string{"--set", "serviceMonitor.basicAuth.username.name=s,serviceMonitor.basicAuth.username.key=u"}, "basicAuth"},
		{"basic auth with a literal password", []string{"--set", "serviceMonitor.basicAuth.username.name=s,serviceMonitor.basicAuth.username.key=u,serviceMonitor.basicAuth.password=hunter2"}, "password"},
		{"relative GKE driver directory", []string{"--set", "nvidia.gke.enabled=true,nvidia.gke.driverDir=bin/nvidia"}, "driverDir"},
		{"relative socket directory", []string{"--set", "kubernetes.podResourcesDir=kubelet"}, "podResourcesDir"},
		// The namespace's default account would get cluster-wide pod read.
		{"RBAC for the default account", []string{"--set", "serviceAccount.create=false"}, `"default" ServiceAccount`},
		{"tuning an alert that does not exist", []string{"--set", "prometheusRule.alerts.XpuGpuOnFire.enabled=false"}, "XpuGpuOnFire: no such alert"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := helm(t, append([]string{"template", release, ".", "--namespace", namespace}, c.args...)...)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("want an error mentioning %q, got %v", c.want, err)
			}
		})
	}
	// An existing account of its own may be bound, and the default one
	// may run without the chart's RBAC.
	for _, set := range []string{"serviceAccount.create=false,serviceAccount.name=xpu-reader", "serviceAccount.create=false,rbac.create=false"} {
		if _, err := helm(t, "template", release, ".", "--set", set); err != nil {
			t.Errorf("--set %s: %v", set, err)
		}
	}
	// TLS to an https or host:port endpoint, plain text to an http one or
	// with insecure, and hl-smi fields with index are accepted.
	for _, set := range []string{
		"otlp.enabled=true,otlp.endpoint=https://c:4318,otlp.tls.secretName=s",
		"otlp.enabled=true,otlp.endpoint=c:4318,otlp.tls.secretName=s",
		"otlp.enabled=true,otlp.endpoint=http://c:4318,otlp.insecure=true",
		"otlp.enabled=true,otlp.endpoint=c:4318,otlp.insecure=true,otlp.interval=1h30m",
		"nvidia.enabled=false,gaudi.enabled=true,gaudi.queryFields={uuid,index}",
		"kubernetes.resources={example.com/npu-*}",
		"podLabels.team=ml",
	} {
		if _, err := helm(t, "template", release, ".", "--set", set); err != nil {
			t.Errorf("--set %s: %v", set, err)
		}
	}
	// The job label may change when the chart ships no rules or dashboards.
	if _, err := helm(t, "template", release, ".", "--set", "serviceMonitor.jobLabel=gpus,prometheusRule.enabled=false,dashboards.enabled=false"); err != nil {
		t.Error(err)
	}
}

// ---------------------------------------------------------------------------
// The rendered flags against the real exporter.

var (
	exporterOnce sync.Once
	exporterPath string
	exporterErr  error
)

func exporter(t *testing.T) string {
	t.Helper()
	exporterOnce.Do(func() {
		dir, err := os.MkdirTemp("", "xpu-chart-test")
		if err != nil {
			exporterErr = err
			return
		}
		exporterPath = filepath.Join(dir, "xpu_exporter")
		cmd := exec.Command("go", "build", "-o", exporterPath, ".")
		cmd.Dir = ".."
		cmd.Env = append(os.Environ(), "CGO_ENABLED=1", "CGO_CFLAGS=-Wno-deprecated-declarations")
		if out, err := cmd.CombinedOutput(); err != nil {
			exporterErr = fmt.Errorf("building the exporter: %v\n%s", err, out)
		}
	})
	if exporterErr != nil {
		t.Fatal(exporterErr)
	}
	return exporterPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if exporterPath != "" {
		os.RemoveAll(filepath.Dir(exporterPath))
	}
	os.Exit(code)
}

// The exporter parses every rendered argument list: kingpin runs --version
// only once all flags parsed, so the binary exits 0 exactly when it accepts
// them.
func TestArgsAcceptedByExporter(t *testing.T) {
	helmBin(t)
	bin := exporter(t)
	for _, p := range profiles(t) {
		for _, ds := range all[appsv1.DaemonSet](render(t, p.args...)) {
			var args []string
			for _, a := range ds.Spec.Template.Spec.Containers[0].Args {
				// $(VAR) is expanded by the kubelet.
				args = append(args, regexp.MustCompile(`\$\([A-Z0-9_]+\)`).ReplaceAllString(a, "x"))
			}
			cmd := exec.Command(bin, append(args, "--version")...)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("%s/%s: the exporter refuses %v: %v\n%s", p.name, ds.Name, args, err, out)
			}
		}
	}
}

// ---------------------------------------------------------------------------
// Values, schema and templates agree (no helm needed).

func loadYAML(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return m
}

// paths lists every key path of values.yaml; leaves are the paths whose
// value is not a non-empty map.
func paths(prefix string, m map[string]any, all, leaves map[string]bool) {
	for k, v := range m {
		p := prefix + "." + k
		all[p] = true
		if sub, ok := v.(map[string]any); ok && len(sub) > 0 {
			paths(p, sub, all, leaves)
		} else {
			leaves[p] = true
		}
	}
}

func templateRefs(t *testing.T) map[string][]string {
	t.Helper()
	files, _ := filepath.Glob("templates/*")
	if len(files) == 0 {
		t.Fatal("no templates")
	}
	ref := regexp.MustCompile(`\.Values((?:\.[A-Za-z_][A-Za-z0-9_]*)+)`)
	bare := regexp.MustCompile(`\.Values\b(?:[^.]|$)`)
	refs := map[string][]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if bare.MatchString(line) {
				t.Errorf("%s: %q uses .Values as a whole; refer to each value by its full path so that this test can follow it", f, strings.TrimSpace(line))
			}
		}
		for _, m := range ref.FindAllStringSubmatch(string(b), -1) {
			refs[m[1]] = append(refs[m[1]], filepath.Base(f))
		}
	}
	return refs
}

func TestValuesDeclaredAndUsed(t *testing.T) {
	values := loadYAML(t, "values.yaml")
	allPaths, leaves := map[string]bool{}, map[string]bool{}
	paths("", values, allPaths, leaves)
	refs := templateRefs(t)

	// Every value a template uses is declared in values.yaml.
	for r, files := range refs {
		if !allPaths[r] {
			t.Errorf("templates %v use .Values%s, which values.yaml does not declare", files, r)
		}
	}
	// Every value declared is used (directly or through a parent passed whole).
	for leaf := range leaves {
		used := false
		for r := range refs {
			if leaf == r || strings.HasPrefix(leaf, r+".") {
				used = true
				break
			}
		}
		if !used {
			t.Errorf("values.yaml declares %s, which no template uses", leaf[1:])
		}
	}
}

func TestSchemaDeclaresEveryValue(t *testing.T) {
	values := loadYAML(t, "values.yaml")
	var schema map[string]any
	b, err := os.ReadFile("values.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &schema); err != nil {
		t.Fatal(err)
	}
	var walk func(path string, v any, s map[string]any)
	walk = func(path string, v any, s map[string]any) {
		typ, _ := s["type"].(string)
		if typ == "" {
			t.Errorf("schema of %s has no type", path)
			return
		}
		if d, _ := s["description"].(string); d == "" && path != "" {
			t.Errorf("schema of %s has no description", path)
		}
		want := map[string]string{"string": "string", "boolean": "bool", "integer": "float64", "array": "[]interface {}", "object": "map[string]interface {}"}[typ]
		if got := fmt.Sprintf("%T", v); got != want {
			t.Errorf("values.yaml %s is a %s, the schema says %s", path, got, typ)
		}
		props, ok := s["properties"].(map[string]any)
		if !ok {
			return // a free-form value passed whole to a template (toYaml)
		}
		if s["additionalProperties"] != false {
			t.Errorf("schema of %s accepts unknown keys", path)
		}
		m, _ := v.(map[string]any)
		var keys []string
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			ps, ok := props[k].(map[string]any)
			if !ok {
				t.Errorf("values.yaml %s.%s is not in values.schema.json", path, k)
				continue
			}
			walk(path+"."+k, m[k], ps)
		}
		for k := range props {
			if _, ok := m[k]; !ok {
				t.Errorf("values.schema.json declares %s.%s, which values.yaml does not (document every key there)", path, k)
			}
		}
	}
	walk("", values, schema)
}

// Chart.yaml's versions follow the repository's VERSION file, so that the
// default image tag is the exporter built from the same tree.
func TestChartVersion(t *testing.T) {
	b, err := os.ReadFile("../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	version := strings.TrimSpace(string(b))
	chart := loadYAML(t, "Chart.yaml")
	if chart["appVersion"] != version || chart["version"] != version {
		t.Errorf("Chart.yaml version %v appVersion %v, VERSION %s: update Chart.yaml", chart["version"], chart["appVersion"], version)
	}
}

// The schema offers as hl-smi fields only those the exporter reads
// (--gaudi.query-fields refuses any other at start), so a value it would
// refuse fails at install rather than crash-looping every Gaudi pod; and
// every field it asks for by default.
func TestSchemaGaudiFieldsAreTheExportersFields(t *testing.T) {
	b, err := os.ReadFile("values.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties struct {
			Gaudi struct {
				Properties struct {
					QueryFields struct {
						Items struct {
							Enum []string `json:"enum"`
						} `json:"items"`
					} `json:"queryFields"`
				} `json:"properties"`
			} `json:"gaudi"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(b, &schema); err != nil {
		t.Fatal(err)
	}
	enum := schema.Properties.Gaudi.Properties.QueryFields.Items.Enum
	for _, f := range enum {
		if !gaudi.KnownField(f) {
			t.Errorf("the schema offers hl-smi field %s, which the exporter refuses", f)
		}
	}
	for _, f := range gaudi.DefaultFields {
		if !slices.Contains(enum, f) {
			t.Errorf("the schema refuses hl-smi field %s, which the exporter asks for by default", f)
		}
	}
}
