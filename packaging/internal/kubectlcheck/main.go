// Command kubectlcheck stands in for kubectl when make readme-check runs the
// README's Kubernetes commands without a cluster: it checks each command
// against the objects `helm template` rendered for the releases the README
// installed (the *.yaml files in -state), and exits non-zero when the
// command would find nothing or act on the wrong thing.
//
//	kubectlcheck -state DIR -- [--namespace NS] VERB ARGS…
//	kubectlcheck -state DIR -scrape-config FILE
//
// Verbs: create namespace, label namespace, get, port-forward. With
// -scrape-config it checks a Prometheus configuration's Kubernetes pod
// discovery instead: that its namespaces, label selectors and port-name
// relabeling find the rendered exporter pods (Debian's promtool is built
// without Kubernetes discovery, so it cannot).
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

type object struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace"`
		Labels    map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		Template struct {
			Metadata struct {
				Labels map[string]string `json:"labels"`
			} `json:"metadata"`
			Spec struct {
				HostPID    bool `json:"hostPID"`
				Containers []struct {
					Ports []struct {
						Name string `json:"name"`
					} `json:"ports"`
				} `json:"containers"`
				Volumes []struct {
					HostPath *struct{} `json:"hostPath"`
				} `json:"volumes"`
			} `json:"spec"`
		} `json:"template"`
		Ports []struct {
			Name string `json:"name"`
			Port int    `json:"port"`
		} `json:"ports"`
	} `json:"spec"`
}

func main() {
	state := flag.String("state", "", "directory of rendered releases (*.yaml) and created namespaces (namespaces)")
	scrapeConfig := flag.String("scrape-config", "", "check this Prometheus configuration's Kubernetes pod discovery")
	flag.Parse()
	var err error
	if *scrapeConfig != "" {
		err = checkScrapeConfig(*state, *scrapeConfig)
	} else {
		err = run(*state, flag.Args())
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubectl (checked offline):", err)
		os.Exit(1)
	}
}

func load(state string) ([]object, error) {
	files, _ := filepath.Glob(filepath.Join(state, "*.yaml"))
	var objs []object
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
		for {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, err
			}
			var o object
			if err := yaml.Unmarshal(doc, &o); err != nil {
				return nil, err
			}
			if o.Kind != "" {
				objs = append(objs, o)
			}
		}
	}
	return objs, nil
}

func run(state string, args []string) error {
	objs, err := load(state)
	if err != nil {
		return err
	}
	ns, selector, rest := "default", labels.Everything(), []string{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		val := func() (string, error) {
			if k, v, ok := strings.Cut(a, "="); ok && strings.HasPrefix(k, "--") {
				return v, nil
			}
			if i+1 >= len(args) {
				return "", fmt.Errorf("%s needs a value", a)
			}
			i++
			return args[i], nil
		}
		switch {
		case a == "-n" || strings.HasPrefix(a, "--namespace"):
			if ns, err = val(); err != nil {
				return err
			}
		case a == "-l" || strings.HasPrefix(a, "--selector"):
			s, err := val()
			if err != nil {
				return err
			}
			if selector, err = labels.Parse(s); err != nil {
				return err
			}
		case a == "-o" || strings.HasPrefix(a, "--output"):
			if _, err := val(); err != nil {
				return err
			}
		case strings.HasPrefix(a, "-"):
			return fmt.Errorf("flag %s not checked here", a)
		default:
			rest = append(rest, a)
		}
	}
	if len(objs) == 0 {
		return errors.New("no release installed before this command")
	}
	inNS := func(o object) bool { return o.Metadata.Namespace == ns }
	if len(rest) == 0 {
		return errors.New("no verb")
	}
	switch verb := rest[0]; {
	case verb == "create" && len(rest) == 3 && rest[1] == "namespace":
		return os.WriteFile(filepath.Join(state, "namespace-"+rest[2]), nil, 0o644)
	case verb == "label" && len(rest) >= 4 && rest[1] == "namespace":
		target := rest[2]
		needsPrivileged := false
		found := false
		for _, o := range objs {
			if o.Metadata.Namespace != target {
				continue
			}
			found = true
			if o.Kind == "DaemonSet" && (o.Spec.Template.Spec.HostPID || hasHostPath(o)) {
				needsPrivileged = true
			}
		}
		if !found {
			return fmt.Errorf("namespace %s holds nothing the README installed", target)
		}
		for _, kv := range rest[3:] {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return fmt.Errorf("label %q is not key=value", kv)
			}
			if errs := append(validation.IsQualifiedName(k), validation.IsValidLabelValue(v)...); len(errs) > 0 {
				return fmt.Errorf("label %s: %v", kv, errs)
			}
			if k == "pod-security.kubernetes.io/enforce" && needsPrivileged && v != "privileged" {
				return fmt.Errorf("%s=%s refuses the exporter pods (hostPID, hostPath)", k, v)
			}
		}
		fmt.Printf("namespace/%s labeled (checked offline)\n", target)
		return nil
	case verb == "get" && len(rest) == 2:
		for _, typ := range strings.Split(rest[1], ",") {
			n := 0
			for _, o := range objs {
				if !inNS(o) {
					continue
				}
				switch typ {
				case "daemonsets", "daemonset", "ds":
					if o.Kind == "DaemonSet" && selector.Matches(labels.Set(o.Metadata.Labels)) {
						fmt.Printf("daemonset.apps/%s\n", o.Metadata.Name)
						n++
					}
				case "pods", "pod", "po":
					if o.Kind == "DaemonSet" && selector.Matches(labels.Set(o.Spec.Template.Metadata.Labels)) {
						fmt.Printf("pod/%s-… (one per node)\n", o.Metadata.Name)
						n++
					}
				case "services", "service", "svc":
					if o.Kind == "Service" && selector.Matches(labels.Set(o.Metadata.Labels)) {
						fmt.Printf("service/%s\n", o.Metadata.Name)
						n++
					}
				default:
					return fmt.Errorf("get %s: type not checked here", typ)
				}
			}
			if n == 0 {
				return fmt.Errorf("get %s -n %s -l %s would find nothing", typ, ns, selector)
			}
		}
		return nil
	case verb == "port-forward" && len(rest) == 3:
		kind, name, ok := strings.Cut(rest[1], "/")
		if !ok || (kind != "service" && kind != "svc") {
			return fmt.Errorf("port-forward %s: only service/NAME is checked", rest[1])
		}
		local, remote, _ := strings.Cut(rest[2], ":")
		if remote == "" {
			remote = local
		}
		port, err := strconv.Atoi(remote)
		if err != nil {
			return err
		}
		for _, o := range objs {
			if o.Kind == "Service" && inNS(o) && o.Metadata.Name == name {
				for _, p := range o.Spec.Ports {
					if p.Port == port {
						fmt.Printf("Forwarding from 127.0.0.1:%s -> %d (checked offline)\n", local, port)
						return nil
					}
				}
				return fmt.Errorf("service %s has no port %d", name, port)
			}
		}
		return fmt.Errorf("no service %s in namespace %s", name, ns)
	default:
		return fmt.Errorf("%v: not checked here", rest)
	}
}

func hasHostPath(o object) bool {
	for _, v := range o.Spec.Template.Spec.Volumes {
		if v.HostPath != nil {
			return true
		}
	}
	return false
}

type promConfig struct {
	ScrapeConfigs []struct {
		JobName      string `json:"job_name"`
		HonorLabels  bool   `json:"honor_labels"`
		KubernetesSD []struct {
			Role       string `json:"role"`
			Namespaces struct {
				Names []string `json:"names"`
			} `json:"namespaces"`
			Selectors []struct {
				Role  string `json:"role"`
				Label string `json:"label"`
			} `json:"selectors"`
		} `json:"kubernetes_sd_configs"`
		RelabelConfigs []struct {
			SourceLabels []string `json:"source_labels"`
			Regex        string   `json:"regex"`
			Action       string   `json:"action"`
			TargetLabel  string   `json:"target_label"`
		} `json:"relabel_configs"`
	} `json:"scrape_configs"`
}

func checkScrapeConfig(state, file string) error {
	objs, err := load(state)
	if err != nil {
		return err
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var cfg promConfig
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		return err
	}
	for _, sc := range cfg.ScrapeConfigs {
		if len(sc.KubernetesSD) == 0 {
			continue
		}
		if !sc.HonorLabels {
			return fmt.Errorf("job %s: honor_labels is off: owner labels would be renamed exported_*", sc.JobName)
		}
		for _, sd := range sc.KubernetesSD {
			if sd.Role != "pod" {
				return fmt.Errorf("job %s: role %s not checked here", sc.JobName, sd.Role)
			}
			found := 0
			for _, o := range objs {
				if o.Kind != "DaemonSet" || !contains(sd.Namespaces.Names, o.Metadata.Namespace) {
					continue
				}
				ok := true
				for _, s := range sd.Selectors {
					sel, err := labels.Parse(s.Label)
					if err != nil {
						return err
					}
					ok = ok && sel.Matches(labels.Set(o.Spec.Template.Metadata.Labels))
				}
				for _, rc := range sc.RelabelConfigs {
					if rc.Action == "keep" && len(rc.SourceLabels) == 1 && rc.SourceLabels[0] == "__meta_kubernetes_pod_container_port_name" {
						named := false
						for _, c := range o.Spec.Template.Spec.Containers {
							for _, p := range c.Ports {
								named = named || p.Name == rc.Regex
							}
						}
						ok = ok && named
					}
				}
				if ok {
					found++
					fmt.Printf("job %s finds the pods of DaemonSet %s/%s\n", sc.JobName, o.Metadata.Namespace, o.Metadata.Name)
				}
			}
			if found == 0 {
				return fmt.Errorf("job %s finds none of the rendered exporter pods", sc.JobName)
			}
		}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
