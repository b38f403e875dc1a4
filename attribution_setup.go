package main

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/alecthomas/kingpin/v2"

	"github.com/xpu-exporter/xpu_exporter/attribution"
	"github.com/xpu-exporter/xpu_exporter/attribution/kubernetes"
	"github.com/xpu-exporter/xpu_exporter/attribution/process"
	"github.com/xpu-exporter/xpu_exporter/attribution/slurm"
	"github.com/xpu-exporter/xpu_exporter/demo"
)

// attributionFlags say where owners come from. Each source switches itself
// off, with one log line, on a node that does not have it, unless it was
// asked for explicitly.
type attributionFlags struct {
	kubernetes, processes, slurm                        *bool
	resourceSlices                                      *bool
	podResourcesSocket, podsAPISocket                   *string
	kubeconfig, nodeName, hostNode                      *string
	cdiSpecDir                                          *string
	resources, podLabels, draDrivers, exporterVendors   *[]string
	procfs, rootfs, sysfs                               *string
	scontrol, squeue, slurmNode, gresOrder              *string
	setPodResources, setProcfs, setSlurm                bool
	setScontrol, setSqueue, setSlurmNodes               bool
	setKubernetes, setPodsAPI, setRootfs, setCDISpecDir bool
	setSysfs                                            bool
	// passwd names UIDs; empty reads <rootfs>/etc/passwd.
	passwd string
	// exits watches the demo's simulated processes in place of pidfds.
	exits *demo.PIDWatcher
}

func addAttributionFlags(a *kingpin.Application) *attributionFlags {
	f := &attributionFlags{}
	f.kubernetes = a.Flag("attribution.kubernetes",
		"Attribute devices to the Kubernetes containers they are allocated to (kubelet pod-resources API). Off when the socket does not exist.").Default("true").IsSetByUser(&f.setKubernetes).Bool()
	f.podResourcesSocket = a.Flag("kubernetes.pod-resources-socket",
		"Kubelet pod-resources API socket.").Default(kubernetes.DefaultPodResourcesSocket).IsSetByUser(&f.setPodResources).String()
	f.podsAPISocket = a.Flag("kubernetes.pods-api-socket",
		"Kubelet Pods API socket (Kubernetes 1.37+): pod metadata without RBAC. Used when it exists.").Default(kubernetes.DefaultPodsAPISocket).IsSetByUser(&f.setPodsAPI).String()
	f.kubeconfig = a.Flag("kubernetes.kubeconfig",
		"Kubeconfig for the API server pod-metadata watch when there is no Pods API (its user authenticates by token, tokenFile or client certificate: exec and auth-provider plugins are refused at start); empty uses the in-cluster configuration.").Default("").String()
	f.nodeName = a.Flag("kubernetes.node-name",
		"This node's name, scoping the API server watch to its pods (the chart sets NODE_NAME from the downward API).").Envar("NODE_NAME").Default("").String()
	f.hostNode = a.Flag("node-name",
		"This node's name, where --kubernetes.node-name is not given (it also scopes an API server watch): in /devices, OTLP's host, and the node of --cost.file's per-node prices. Default: the Slurm node name, else the host name (a pod's is its own name: the chart sets XPU_NODE_NAME from the downward API).").Envar("XPU_NODE_NAME").Default("").String()
	f.cdiSpecDir = a.Flag("kubernetes.cdi-spec-dir",
		"Directory of the CDI specs DRA drivers write on the node, which tell the GPU behind each device of a DRA ResourceClaim. Read only while some container holds a claim; each spec is parsed again only when it changes. Empty: not read, and DRA-allocated devices that --kubernetes.resourceslices does not identify are not attributed (counted in xpu_attribution_unresolved_claim_devices).").Default(kubernetes.DefaultCDISpecDir).IsSetByUser(&f.setCDISpecDir).String()
	f.resourceSlices = a.Flag("kubernetes.resourceslices",
		"Identify DRA-allocated devices that the CDI specs do not from this node's ResourceSlices, watched through the API server, and leave out the devices of claims allocated with admin access, read from their ResourceClaims (RBAC: resourceslices list and watch, cluster-wide, and resourceclaims get; needs --kubernetes.node-name).").Default("false").Bool()
	f.draDrivers = a.Flag("kubernetes.dra-driver",
		"Extra DRA driver whose claims hold accelerators. Repeatable; added to "+strings.Join(kubernetes.DefaultDRADrivers, ", ")+". Claims of other drivers (IMEX channels, NICs) are ignored.").Strings()
	f.exporterVendors = a.Flag("kubernetes.exporter-vendor",
		"A vendor (nvidia, amd, habana) whose devices an exporter of this node serves, where several split them (the chart's DaemonSet per vendor gives each all of its enabled ones). Repeatable. Each pod's inference engine is then served by one exporter: that of the first vendor, in this order, whose devices the pod holds, else of the first with allocatable devices on the node; each other exporter names in xpu_inference_device_info the pod's devices it reads. A listed target that is no pod's of this node (--engines.target, --engines.config: of a unit, of no owner) is served as the engine of a pod holding no device, each other exporter naming the devices it reads the unit's processes on. A listed vendor's exporter must run wherever its devices are (the chart's DaemonSets follow the device plugins' node labels): an engine left to one that does not is served by none. Unset: this exporter is the node's only one, and serves every engine.").Enums(kubernetes.VendorNVIDIA, kubernetes.VendorAMD, kubernetes.VendorHabana)
	f.resources = a.Flag("kubernetes.resource",
		"Extra device-plugin resource name pattern whose devices are accelerators, e.g. example.com/npu-*. Repeatable; added to "+strings.Join(kubernetes.DefaultResourcePatterns, ", ")+".").Strings()
	f.podLabels = a.Flag("kubernetes.pod-label",
		"Kubernetes pod label key (e.g. team, app.kubernetes.io/name) copied onto xpu_workload_info as label_<key>, sanitised as kube-state-metrics names it (label_team, label_app_kubernetes_io_name). Unlike kube-state-metrics, keys given here that sanitise alike (team, Team) are label_team_conflict1 and label_team_conflict2 on every pod, also on one that has only one of them; a list where a suffix makes another key's name is refused. Repeatable.").Strings()
	f.processes = a.Flag("attribution.processes",
		"Attribute GPU processes to pods, Slurm jobs or systemd units through procfs (needs the host's PID namespace).").Default("true").Bool()
	f.procfs = a.Flag("path.procfs", "procfs mountpoint.").Default("/proc").IsSetByUser(&f.setProcfs).String()
	f.sysfs = a.Flag("path.sysfs", "sysfs mountpoint: amdgpu devices (/sys/class/drm), and the device nodes Gaudi processes hold.").Default("/sys").IsSetByUser(&f.setSysfs).String()
	f.rootfs = a.Flag("path.rootfs", "rootfs mountpoint, for /etc/passwd.").Default("/").IsSetByUser(&f.setRootfs).String()
	f.slurm = a.Flag("attribution.slurm",
		"Attribute devices to Slurm jobs (scontrol, squeue). Off when scontrol is not found.").Default("true").IsSetByUser(&f.setSlurm).Bool()
	f.scontrol = a.Flag("slurm.scontrol-path", "scontrol binary.").Default("scontrol").IsSetByUser(&f.setScontrol).String()
	f.squeue = a.Flag("slurm.squeue-path", "squeue binary.").Default("squeue").IsSetByUser(&f.setSqueue).String()
	f.slurmNode = a.Flag("slurm.node-name", "This node's name in Slurm; empty means the short host name, or the name the node's one-node jobs give it.").Default("").IsSetByUser(&f.setSlurmNodes).String()
	f.gresOrder = a.Flag("slurm.gres-order",
		"How Slurm numbers this node's GPUs in GRES indices: vendor (the order autodetection gives: NVML's for NVIDIA, AutoDetect=nvml or gres.conf Links=; ROCm SMI's for AMD, by PCI address since ROCm 6.0, AutoDetect=rsmi) or device-file (by /dev/nvidiaN or /dev/dri/renderDN, for a gres.conf listing File= without Links=, or AutoDetect=rsmi before ROCm 6.0). nvml is vendor's former name.").Default("vendor").Enum("vendor", "nvml", "device-file")
	return f
}

// useDemo points every source the user did not set at the demo's
// simulated one, so that demo mode runs the real attribution code, and
// switches off the sources the scenario does not simulate: a demo must not
// mix in the machine it runs on unless asked to, and must when asked to.
// The simulated passwd names the simulated processes' UIDs only: an
// explicit --path.procfs (real processes) or --path.rootfs (real users)
// reads <rootfs>/etc/passwd, as outside demo mode.
func (f *attributionFlags) useDemo(a *demo.Attribution) {
	switch {
	case f.setPodResources || f.setKubernetes:
	case a.Kubelet != nil:
		*f.podResourcesSocket = a.Kubelet.PodResourcesSocket()
		if !f.setPodsAPI {
			*f.podsAPISocket = a.Kubelet.PodsAPISocket()
		}
		if !f.setCDISpecDir && a.CDISpecDir != "" {
			*f.cdiSpecDir = a.CDISpecDir
		}
	default:
		*f.kubernetes = false
	}
	if a.Scontrol == "" && !f.setSlurm && !f.setScontrol {
		*f.slurm = false
	}
	if !f.setSysfs {
		*f.sysfs = a.Sysfs
	}
	if !f.setProcfs {
		*f.procfs = a.Procfs
		f.exits = a.Exits
		if !f.setRootfs {
			f.passwd = a.Passwd
		}
	}
	if !f.setSysfs && a.Sysfs != "" {
		*f.sysfs = a.Sysfs
	}
	if a.Scontrol != "" {
		if !f.setScontrol {
			*f.scontrol = a.Scontrol
		}
		if !f.setSqueue {
			*f.squeue = a.Squeue
		}
		if !f.setSlurmNodes {
			*f.slurmNode = a.Node
		}
	}
}

// resolver builds the attribution resolver, the pod metadata source it
// uses (nil without one), and what must be closed with them.
func (f *attributionFlags) resolver(logger *slog.Logger) (*attribution.Resolver, kubernetes.MetadataSource, func(), error) {
	cfg := attribution.Config{Logger: logger}
	var closers []func()
	closeAll := func() {
		for _, c := range closers {
			c()
		}
	}
	if *f.kubernetes {
		if _, err := os.Stat(*f.podResourcesSocket); err != nil && !f.setPodResources {
			logger.Info("Kubernetes attribution off: no kubelet pod-resources socket", "socket", *f.podResourcesSocket)
		} else {
			client, err := kubernetes.Dial(*f.podResourcesSocket)
			if err != nil {
				return nil, nil, closeAll, err
			}
			closers = append(closers, func() { client.Close() })
			cfg.Kubelet = client
			// The NVIDIA driver's procfs tables turn the device minors of
			// a CDI spec into GPUs, so they are read from --path.procfs.
			if *f.cdiSpecDir != "" {
				cfg.CDI = &kubernetes.CDISpecs{Dir: *f.cdiSpecDir, ProcRoot: *f.procfs, SysRoot: *f.sysfs}
			}
			cfg.DRADrivers = append(append([]string{}, kubernetes.DefaultDRADrivers...), *f.draDrivers...)
			cfg.VendorExporters = *f.exporterVendors
			if *f.resourceSlices {
				slices, err := kubernetes.NewResourceSliceSource(*f.kubeconfig, *f.nodeName, logger)
				if err != nil {
					return nil, nil, closeAll, fmt.Errorf("--kubernetes.resourceslices: %w", err)
				}
				closers = append(closers, func() { slices.Close() })
				cfg.ResourceSlices, cfg.ClaimAccess = slices, slices
				logger.Info("DRA devices also identified from ResourceSlices", "node", *f.nodeName)
			}
			patterns := append(append([]string{}, kubernetes.DefaultResourcePatterns...), *f.resources...)
			if cfg.Resources, err = kubernetes.NewResourceMatcher(patterns...); err != nil {
				return nil, nil, closeAll, fmt.Errorf("--kubernetes.resource: %w", err)
			}
			if cfg.PodLabels, err = kubernetes.NewLabelAllowList(*f.podLabels...); err != nil {
				return nil, nil, closeAll, fmt.Errorf("--kubernetes.pod-label: %w", err)
			}
			meta, err := kubernetes.NewMetadataSource(kubernetes.MetadataConfig{
				PodsAPISocket: *f.podsAPISocket, Kubeconfig: *f.kubeconfig, NodeName: *f.nodeName, Logger: logger,
			})
			if err != nil {
				return nil, nil, closeAll, fmt.Errorf("pod metadata: %w", err)
			}
			closers = append(closers, func() { meta.Close() })
			// A Pods API socket that is not there yet is looked for
			// again (NewMetadataSource): the source serves no pod until
			// then, as none.
			if meta.Name() != kubernetes.SourceNone || *f.podsAPISocket != "" {
				cfg.Metadata = meta
			}
		}
	}
	if *f.processes {
		passwd := f.passwd
		if passwd == "" {
			passwd = filepath.Join(*f.rootfs, "etc", "passwd")
		}
		cfg.Procfs = &process.Reader{Root: *f.procfs, PasswdPath: passwd}
		if f.exits != nil {
			logger.Info("GPU processes are watched for their exit through the demo's simulated pidfds, so that a reused PID is read anew")
			cfg.Exits = f.exits
		} else if exits, err := process.NewExits(*f.procfs); err != nil {
			logger.Info("GPU processes are checked for a reused PID by their start time, a few each scrape, not watched for their exit", "err", err)
		} else {
			logger.Info("GPU processes are watched for their exit through pidfds, so that a reused PID is read anew")
			cfg.Exits = exits
			closers = append(closers, func() { exits.Close() })
		}
	}
	if *f.slurm {
		if _, err := exec.LookPath(*f.scontrol); err != nil && !f.setSlurm && !f.setScontrol {
			logger.Debug("Slurm attribution off: scontrol not found", "path", *f.scontrol)
		} else {
			cfg.Slurm = &slurm.Client{Path: *f.scontrol, SqueuePath: *f.squeue}
			cfg.NodeName = *f.slurmNode
			if cfg.NodeName == "" {
				host, err := os.Hostname()
				if err != nil {
					return nil, nil, closeAll, fmt.Errorf("slurm node name: %w", err)
				}
				cfg.NodeName, _, _ = strings.Cut(host, ".")
				cfg.LearnNodeName = true
			}
			logger.Info("Slurm attribution on", "scontrol", *f.scontrol, "node", cfg.NodeName)
		}
	}
	if cfg.Kubelet == nil && cfg.Procfs == nil && cfg.Slurm == nil {
		return nil, nil, closeAll, nil
	}
	return attribution.New(cfg), cfg.Metadata, closeAll, nil
}

// node is this node's name, for /devices.
func (f *attributionFlags) node() string {
	for _, n := range []string{*f.nodeName, *f.hostNode, *f.slurmNode} {
		if n != "" {
			return n
		}
	}
	host, err := os.Hostname()
	if err != nil {
		return "unknown"
	}
	return host
}
