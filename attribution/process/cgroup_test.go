package process

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/xpu-exporter/xpu_exporter/attribution/internal/slurmid"
)

// IDs used in the fixture trees under fixtures/procfs and fixtures/cgroup.
const (
	podContainerd  = "0f41e3a6-d1a8-4d4b-ac1d-0a3eb3974ef2"
	ctrContainerd  = "1f311134efe1f98d5a9e049b42d7c73c3f9d825abe3319e16e21cfa65fa368b7"
	podCrio        = "e7c27475-8e0c-4e99-ad10-5d5b4fe96e68"
	ctrCrio        = "fc7fe9c12d74a4246c13f9200b5209ea8e4c96c0702c1b13a97ec9cdf467a214"
	podDocker      = "1006a522-b386-4744-a356-88dba850878e"
	ctrDocker      = "e6e2d858bd59da036652564d29a5601bd7d35ab74632f1084b90c787a99efc59"
	podCgroupfs    = "971b20f4-7dc4-4d6d-acd4-899fb3685ba7"
	ctrCgroupfs    = "1912e1b5d55f3cd500dbe67e0217d2114161a989fbb3a280f06e27b4f95da56d"
	podGuaranteed  = "9f68d95a-23f5-4635-a0e0-428208b97cb6"
	ctrGuaranteed  = "e51bf8c6235d04c1a724e3f471267ad27d370bdcb509d91734be40e16f3cc101"
	podKind        = "cb07bc8f-183a-4f8b-a7b2-2a88c185c7ac"
	ctrKind        = "6816e6b790b81f82256016990d23aa4087e07d558aaf303364d144ad4a7ba608"
	podStatic      = "ae37a9c96c8fabdeb274855fe9fe4ee3"
	ctrStatic      = "fa7d38d9663b72193129b1cb665acbfae283e6d76605b3d93315698bdcb77dae"
	ctrStandalone  = "d95fe228608b8245a4a98dfc986d574f55370a84408601bb6b16f65a1f2735b2"
	ctrPodman      = "7c1f0a3b9e2d4c5f6a7b8c9d0e1f2a3b4c5d6e7f8091a2b3c4d5e6f708192a3b"
	fixturesProcfs = "../../fixtures/procfs"
	fixturesCgroup = "../../fixtures/cgroup"
)

// cgroupCases maps every fixture cgroup file to what ParseCgroup must find in
// it. The Path expectations are the layouts' own: they show which hierarchy
// line the owner was taken from.
var cgroupCases = []struct {
	file string
	want Cgroup
}{
	// Kubernetes, systemd cgroup driver.
	{
		file: "procfs/k8s-systemd-containerd-v2/52817/cgroup",
		want: Cgroup{
			Path:        "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0f41e3a6_d1a8_4d4b_ac1d_0a3eb3974ef2.slice/cri-containerd-" + ctrContainerd + ".scope",
			PodUID:      podContainerd,
			ContainerID: ctrContainerd,
		},
	},
	{
		file: "procfs/k8s-systemd-crio-guaranteed-v2/61204/cgroup",
		want: Cgroup{
			Path:        "/kubepods.slice/kubepods-pode7c27475_8e0c_4e99_ad10_5d5b4fe96e68.slice/crio-" + ctrCrio + ".scope",
			PodUID:      podCrio,
			ContainerID: ctrCrio,
		},
	},
	{
		// cgroup v1, 13 hierarchies, all placed alike; freezer is read.
		file: "procfs/k8s-systemd-docker-besteffort-v1/30411/cgroup",
		want: Cgroup{
			Path:        "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1006a522_b386_4744_a356_88dba850878e.slice/docker-" + ctrDocker + ".scope",
			PodUID:      podDocker,
			ContainerID: ctrDocker,
		},
	},
	{
		// kind: the node is a Docker container and the kubelet runs with
		// --cgroup-root=/kubelet.
		file: "procfs/k8s-kind-nested-v2/101977/cgroup",
		want: Cgroup{
			Path:        "/system.slice/docker-24750085d7801596fb7ac3e190e4fa61a4e5253831e85dcc946050a9837f69b9.scope/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-podcb07bc8f_183a_4f8b_a7b2_2a88c185c7ac.slice/cri-containerd-" + ctrKind + ".scope",
			PodUID:      podKind,
			ContainerID: ctrKind,
		},
	},
	// Kubernetes, cgroupfs driver.
	{
		file: "procfs/k8s-cgroupfs-burstable-v1/24580/cgroup",
		want: Cgroup{
			Path:        "/kubepods/burstable/pod" + podCgroupfs + "/" + ctrCgroupfs,
			PodUID:      podCgroupfs,
			ContainerID: ctrCgroupfs,
		},
	},
	{
		file: "procfs/k8s-cgroupfs-guaranteed-v2/8812/cgroup",
		want: Cgroup{
			Path:        "/kubepods/pod" + podGuaranteed + "/" + ctrGuaranteed,
			PodUID:      podGuaranteed,
			ContainerID: ctrGuaranteed,
		},
	},
	// Kubernetes edge cases.
	{
		file: "cgroup/deleted-v2.cgroup",
		want: Cgroup{
			Path:        "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0f41e3a6_d1a8_4d4b_ac1d_0a3eb3974ef2.slice/cri-containerd-" + ctrContainerd + ".scope",
			PodUID:      podContainerd,
			ContainerID: ctrContainerd,
		},
	},
	{
		file: "cgroup/static-pod-cgroupfs-v2.cgroup",
		want: Cgroup{
			Path:        "/kubepods/burstable/pod" + podStatic + "/" + ctrStatic,
			PodUID:      podStatic,
			ContainerID: ctrStatic,
		},
	},
	{
		// conmon belongs to the pod but is not the container.
		file: "cgroup/crio-conmon-v2.cgroup",
		want: Cgroup{
			Path:   "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pode7c27475_8e0c_4e99_ad10_5d5b4fe96e68.slice/crio-conmon-" + ctrCrio + ".scope",
			PodUID: podCrio,
		},
	},
	{
		file: "cgroup/pod-level-cgroupfs-v1.cgroup",
		want: Cgroup{Path: "/kubepods/besteffort/pod" + podCgroupfs, PodUID: podCgroupfs},
	},
	{
		// A container that makes its own sub-cgroups is still the container.
		file: "cgroup/container-subcgroup-v2.cgroup",
		want: Cgroup{
			Path:        "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0f41e3a6_d1a8_4d4b_ac1d_0a3eb3974ef2.slice/cri-containerd-" + ctrContainerd + ".scope/init.scope",
			PodUID:      podContainerd,
			ContainerID: ctrContainerd,
		},
	},
	{
		// Hybrid node whose unified and name=systemd hierarchies still
		// show containerd's service: the v1 controllers hold the pod.
		file: "cgroup/hybrid-unified-differs.cgroup",
		want: Cgroup{
			Path:        "/kubepods/burstable/pod" + podCgroupfs + "/" + ctrCgroupfs,
			PodUID:      podCgroupfs,
			ContainerID: ctrCgroupfs,
		},
	},
	// Slurm, cgroup v1: real captures from Slurm 22.05 (fixtures/slurm).
	{
		file: "slurm/22.05/cgroup-v1-task-cgroup/proc-cgroup-job16-gpu-sleep.txt",
		want: Cgroup{Path: "/slurm_vm/uid_0/job_16/step_batch", SlurmJobID: "16", SlurmStep: "batch"},
	},
	{
		file: "slurm/22.05/cgroup-v1-task-cgroup/proc-cgroup-job17-srun-gpu1.txt",
		want: Cgroup{Path: "/slurm_vm/uid_0/job_17/step_0", SlurmJobID: "17", SlurmStep: "0"},
	},
	{
		file: "slurm/22.05/cgroup-v1-proctrack-only/proc-cgroup-job12-gpu-sleep.txt",
		want: Cgroup{Path: "/slurm_vm/uid_0/job_12/step_batch", SlurmJobID: "12", SlurmStep: "batch"},
	},
	{
		file: "slurm/22.05/linuxproc/proc-cgroup-job7-gpu-sleep.txt",
		want: Cgroup{Path: "/process_api/69b7b31eddf8ad9eb29e3a41c82a9024", SystemdPath: "/"},
	},
	// Slurm, cgroup v1: the same, in process trees, and constructed ones.
	{
		// Real capture: task/cgroup on a multiple-slurmd (Debian) build.
		file: "procfs/slurm-v1-task-cgroup/18724/cgroup",
		want: Cgroup{Path: "/slurm_vm/uid_0/job_16/step_batch", SlurmJobID: "16", SlurmStep: "batch"},
	},
	{
		// Real capture: proctrack/cgroup alone, only freezer knows the job
		// and memory holds an unrelated path.
		file: "procfs/slurm-v1-proctrack/18232/cgroup",
		want: Cgroup{Path: "/slurm_vm/uid_0/job_12/step_batch", SlurmJobID: "12", SlurmStep: "batch"},
	},
	{
		// Real capture: slurmstepd is at job level in freezer, at step
		// level in memory.
		file: "cgroup/slurm-v1-slurmstepd-real.cgroup",
		want: Cgroup{Path: "/slurm_vm/uid_0/job_15", SlurmJobID: "15", SlurmStep: "batch"},
	},
	{
		// name=systemd shows slurmd.service; the job wins.
		file: "procfs/slurm-v1-plain/90121/cgroup",
		want: Cgroup{Path: "/slurm/uid_1000/job_4242/step_0/task_0", SlurmJobID: "4242", SlurmStep: "0"},
	},
	{
		file: "cgroup/slurm-v1-interactive.cgroup",
		want: Cgroup{Path: "/slurm/uid_1001/job_977/step_interactive/task_0", SlurmJobID: "977", SlurmStep: "interactive"},
	},
	{
		// Real capture: proctrack/linuxproc leaves no trace in cgroups.
		file: "procfs/slurm-linuxproc/17668/cgroup",
		want: Cgroup{Path: "/process_api/69b7b31eddf8ad9eb29e3a41c82a9024", SystemdPath: "/"},
	},
	// Slurm, cgroup v2.
	{
		file: "procfs/slurm-v2/77310/cgroup",
		want: Cgroup{Path: "/system.slice/slurmstepd.scope/job_4243/step_batch/user/task_0", SlurmJobID: "4243", SlurmStep: "batch"},
	},
	{
		file: "procfs/slurm-v2-multi-slurmd/77544/cgroup",
		want: Cgroup{Path: "/system.slice/gpu-node07_slurmstepd.scope/job_4244/step_0/user/task_1", SlurmJobID: "4244", SlurmStep: "0"},
	},
	{
		file: "procfs/slurm-v2-sluid/81002/cgroup",
		want: Cgroup{Path: "/system.slice/slurmstepd.scope/s5K1KKYAYG5D00/step_0/user/task_0", SlurmSLUID: "s5K1KKYAYG5D00", SlurmStep: "0"},
	},
	{
		file: "cgroup/slurmstepd-v2.cgroup",
		want: Cgroup{Path: "/system.slice/slurmstepd.scope/job_4243/step_0/slurm", SlurmJobID: "4243", SlurmStep: "0"},
	},
	{
		file: "cgroup/slurm-het-step-v2.cgroup",
		want: Cgroup{Path: "/system.slice/slurmstepd.scope/job_2010/step_0+1/user/task_0", SlurmJobID: "2010", SlurmStep: "0+1"},
	},
	{
		// slurmstepd's waiting area before it has a job directory.
		file: "cgroup/slurmstepd-parking-v2.cgroup",
		want: Cgroup{Path: "/system.slice/slurmstepd.scope/system", Unit: "slurmstepd.scope", Slice: "system.slice"},
	},
	{
		// proctrack/linuxproc without a cgroup plugin: slurmstepd and its
		// tasks stay in slurmd's unit.
		file: "cgroup/slurmd-service-v2.cgroup",
		want: Cgroup{Path: "/system.slice/slurmd.service", Unit: "slurmd.service", Slice: "system.slice"},
	},
	{
		// The same on cgroup v1 (hybrid): name=systemd names the unit.
		file: "cgroup/slurmd-service-v1.cgroup",
		want: Cgroup{Path: "/system.slice/slurmd.service", Unit: "slurmd.service", Slice: "system.slice"},
	},
	{
		// slurmd in a pod (Slinky and the like): both owners are reported.
		file: "cgroup/slurm-in-pod-v2.cgroup",
		want: Cgroup{
			Path:        "/kubepods.slice/kubepods-pod9f68d95a_23f5_4635_a0e0_428208b97cb6.slice/cri-containerd-" + ctrGuaranteed + ".scope/system.slice/slurmstepd.scope/job_31/step_extern/user/task_special",
			PodUID:      podGuaranteed,
			ContainerID: ctrGuaranteed,
			SlurmJobID:  "31",
			SlurmStep:   "extern",
		},
	},
	// Bare metal.
	{
		file: "procfs/systemd-service-v2/1432/cgroup",
		want: Cgroup{Path: "/system.slice/ollama.service", Unit: "ollama.service", Slice: "system.slice"},
	},
	{
		file: "procfs/systemd-session-v2/40213/cgroup",
		want: Cgroup{Path: "/user.slice/user-1000.slice/session-3.scope", Unit: "session-3.scope", Slice: "user-1000.slice"},
	},
	{
		file: "procfs/systemd-service-v1/2290/cgroup",
		want: Cgroup{Path: "/system.slice/vllm.service", Unit: "vllm.service", Slice: "system.slice"},
	},
	{
		file: "cgroup/docker-standalone-v2.cgroup",
		want: Cgroup{Path: "/system.slice/docker-" + ctrStandalone + ".scope", Unit: "docker-" + ctrStandalone + ".scope", Slice: "system.slice"},
	},
	{
		file: "cgroup/docker-standalone-v1.cgroup",
		want: Cgroup{Path: "/system.slice/docker-" + ctrStandalone + ".scope", Unit: "docker-" + ctrStandalone + ".scope", Slice: "system.slice"},
	},
	{
		// Rootless podman inside the user's service manager; the payload
		// moved itself to a "container" sub-cgroup.
		file: "cgroup/podman-rootless-v2.cgroup",
		want: Cgroup{
			Path:  "/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-" + ctrPodman + ".scope/container",
			Unit:  "libpod-" + ctrPodman + ".scope",
			Slice: "user.slice",
		},
	},
	{
		file: "cgroup/systemd-run-scope-v2.cgroup",
		want: Cgroup{Path: "/system.slice/run-r9c4e0f7a2b6d41e8a3f5c7b9d1e2f4a6.scope", Unit: "run-r9c4e0f7a2b6d41e8a3f5c7b9d1e2f4a6.scope", Slice: "system.slice"},
	},
	{
		file: "cgroup/user-manager-run-v2.cgroup",
		want: Cgroup{Path: "/user.slice/user-1000.slice/user@1000.service/app.slice/run-u7.service", Unit: "run-u7.service", Slice: "app.slice"},
	},
	{
		// Hybrid: only name=systemd and the unified hierarchy know the
		// session; the v1 controllers stop at user.slice.
		file: "cgroup/session-v1-hybrid.cgroup",
		want: Cgroup{Path: "/user.slice/user-1001.slice/session-c2.scope", Unit: "session-c2.scope", Slice: "user-1001.slice"},
	},
	{
		file: "cgroup/init-scope-v2.cgroup",
		want: Cgroup{Path: "/init.scope", Unit: "init.scope"},
	},
	{
		file: "cgroup/root-only-v2.cgroup",
		want: Cgroup{Path: "/"},
	},
	{
		file: "cgroup/bare-metal-v1-unmanaged.cgroup",
		want: Cgroup{Path: "/", SystemdPath: "/"},
	},
	{
		// Docker's cgroupfs driver (its default on cgroup v1) on a node
		// systemd runs: /docker/<id> in every hierarchy, systemd's own
		// included, outside any unit.
		file: "cgroup/docker-cgroupfs-v1.cgroup",
		want: Cgroup{Path: "/docker/cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc", SystemdPath: "/docker/cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"},
	},
}

func TestParseCgroupFixtures(t *testing.T) {
	for _, tc := range cgroupCases {
		t.Run(tc.file, func(t *testing.T) {
			content, err := os.ReadFile(filepath.Join("../../fixtures", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			if got := ParseCgroup(content); got != tc.want {
				t.Errorf("ParseCgroup() =\n%+v\nwant\n%+v", got, tc.want)
			}
		})
	}
}

// ownerUnits is the OwnerUnit of every fixture of cgroupCases that names a
// systemd unit: the unit itself when it is the same at every start, else
// the stable owner of the transient unit.
var ownerUnits = map[string]string{
	"cgroup/slurmstepd-parking-v2.cgroup":    "slurmstepd.scope", // fixed name, not one per job
	"cgroup/slurmd-service-v2.cgroup":        "slurmd.service",
	"cgroup/slurmd-service-v1.cgroup":        "slurmd.service",
	"procfs/systemd-service-v2/1432/cgroup":  "ollama.service",
	"procfs/systemd-service-v1/2290/cgroup":  "vllm.service",
	"procfs/systemd-session-v2/40213/cgroup": "user-1000.slice", // session-3.scope: one per login
	"cgroup/session-v1-hybrid.cgroup":        "user-1001.slice", // session-c2.scope
	"cgroup/docker-standalone-v2.cgroup":     "docker",          // docker-<id>.scope: one per container
	"cgroup/docker-standalone-v1.cgroup":     "docker",
	"cgroup/podman-rootless-v2.cgroup":       "podman",          // libpod-<id>.scope
	"cgroup/systemd-run-scope-v2.cgroup":     "system.slice",    // run-r<hex>.scope: one per systemd-run
	"cgroup/user-manager-run-v2.cgroup":      "user-1000.slice", // run-u7.service in alice's user manager
	"cgroup/init-scope-v2.cgroup":            "init.scope",      // PID 1
}

func TestOwnerUnitFixtures(t *testing.T) {
	for _, tc := range cgroupCases {
		want, listed := ownerUnits[tc.file]
		if tc.want.Unit != "" && !listed {
			t.Errorf("%s names unit %s but has no OwnerUnit expectation", tc.file, tc.want.Unit)
			continue
		}
		if got := tc.want.OwnerUnit(); got != want {
			t.Errorf("%s: OwnerUnit() = %q, want %q", tc.file, got, want)
		}
	}
}

func TestOwnerUnit(t *testing.T) {
	for _, tc := range []struct {
		path, want string
	}{
		{"/system.slice/cri-containerd-" + ctrStandalone + ".scope", "containerd"},
		{"/machine.slice/crio-" + ctrStandalone + ".scope", "cri-o"},
		{"/machine.slice/libpod-" + ctrStandalone + ".scope", "podman"},
		{"/system.slice/nerdctl-" + ctrStandalone + ".scope", "containerd"},
		// Not a 64-hex ID: a unit someone named so, kept.
		{"/system.slice/docker-compose.scope", "docker-compose.scope"},
		{"/system.slice/docker-" + ctrStandalone[:12] + ".scope", "docker-" + ctrStandalone[:12] + ".scope"},
		{"/system.slice/docker.service", "docker.service"},
		// The user's service manager and what runs in it.
		{"/user.slice/user-1000.slice/user@1000.service", "user-1000.slice"},
		{"/user.slice/user-1000.slice/user@1000.service/init.scope", "user-1000.slice"},
		{"/user.slice/user-1000.slice/user@1000.service/app.slice/app-org.gnome.Terminal-4127.scope", "user-1000.slice"},
		{"/user.slice/user-1000.slice/user@1000.service/app.slice/app-gnome-firefox@9e1c.service", "user-1000.slice"},
		{"/user.slice/user-1000.slice/user@1000.service/app.slice/vllm.service", "vllm.service"},
		{"/user.slice/user-1000.slice/user@1000.service/app.slice/app-jupyter.service", "app-jupyter.service"},
		// A terminal's scope for each shell or pane.
		{"/user.slice/user-1000.slice/user@1000.service/app.slice/app-org.gnome.Terminal.slice/vte-spawn-d8eddbf4-b660-489d-aa16-8ca2889edf5d.scope", "user-1000.slice"},
		{"/user.slice/user-1000.slice/user@1000.service/app.slice/app-tmux.slice/tmux-spawn-2f6c1c5e-8a0d-4f0e-9f2b-7a1d3c4b5e6f.scope", "user-1000.slice"},
		{"/user.slice/user-1000.slice/user@1000.service/app.slice/vte-spawn-main.scope", "vte-spawn-main.scope"},
		{"/user.slice/user-1000.slice/user@1000.service/app.slice/tmux-spawn-2f6c1c5e-8a0d-4f0e-9f2b-7a1d3c4b5e6f.service", "tmux-spawn-2f6c1c5e-8a0d-4f0e-9f2b-7a1d3c4b5e6f.service"},
		// systemd-run's generated names, and names that only look alike.
		{"/system.slice/run-u89.service", "system.slice"},
		{"/system.slice/run-p4242-i4243.scope", "system.slice"},
		{"/system.slice/run-rABC.scope", "run-rABC.scope"},
		// systemd-run before v230 named its units after its own PID
		// (src/run/run.c: "run-"PID_FMT".scope", and .service).
		{"/system.slice/run-24311.scope", "system.slice"},
		{"/system.slice/run-24400.service", "system.slice"},
		{"/system.slice/run-jupyter.service", "run-jupyter.service"},
		{"/system.slice/runner.service", "runner.service"},
		{"/system.slice/getty@tty1.service", "getty@tty1.service"},
		// A container that runs its own service manager: its units are
		// the container's, whose owner is the runtime, not a host unit
		// of the same name.
		{"/system.slice/docker-" + ctrStandalone + ".scope/system.slice/jupyter.service", "docker"},
		{"/machine.slice/libpod-" + ctrPodman + ".scope/container/system.slice/jupyter.service", "podman"},
		{"/system.slice/jupyter.service", "jupyter.service"},
		// A login scope outside any slice has nothing more stable.
		{"/session-3.scope", "session-3.scope"},
		{"/session-.scope", "session-.scope"},
		{"/machine.slice/session-3.scope", "machine.slice"},
	} {
		cg := ParseCgroup([]byte("0::" + tc.path + "\n"))
		if got := cg.OwnerUnit(); got != tc.want {
			t.Errorf("OwnerUnit(%s) = %q, want %q", tc.path, got, tc.want)
		}
	}
	if got := (Cgroup{Path: "/"}).OwnerUnit(); got != "" {
		t.Errorf("no unit: OwnerUnit() = %q, want empty", got)
	}
}

// slurmdCgroups are the fixtures of cgroupCases whose process may be a task
// of a job that no job cgroup holds (proctrack/linuxproc), whose job only
// slurmd or the environment can tell; every other fixture's may not.
var slurmdCgroups = map[string]bool{
	// Real proctrack/linuxproc captures on a node without systemd: the
	// unified and name=systemd hierarchies are at the root, memory at the
	// capture tool's own cgroup, where slurmd was started.
	"slurm/22.05/linuxproc/proc-cgroup-job7-gpu-sleep.txt": true,
	"procfs/slurm-linuxproc/17668/cgroup":                  true,
	"cgroup/root-only-v2.cgroup":                           true,
	"cgroup/bare-metal-v1-unmanaged.cgroup":                true,
	// A container's, which is slurmd's where Slurm runs in it: the
	// resolver asks for a slurmstepd ancestor before the environment.
	"cgroup/docker-cgroupfs-v1.cgroup": true,
	"cgroup/slurmd-service-v2.cgroup":  true,
	"cgroup/slurmd-service-v1.cgroup":  true,
	// cgroup/v2's waiting area, where tasks stay when no plugin makes job
	// directories.
	"cgroup/slurmstepd-parking-v2.cgroup": true,
}

func TestSlurmdCgroup(t *testing.T) {
	for _, tc := range cgroupCases {
		if got := tc.want.SlurmdCgroup(); got != slurmdCgroups[tc.file] {
			t.Errorf("%s: SlurmdCgroup() = %v, want %v", tc.file, got, slurmdCgroups[tc.file])
		}
	}
	for _, tc := range []struct {
		path string
		want bool
	}{
		{"/system.slice/gpu-node07_slurmstepd.scope/system", true},
		// cgroup/v2 moves slurmd itself into a sub-cgroup of its unit.
		{"/system.slice/slurmd.service/slurmd", true},
		{"/system.slice/slurmctld.service", false},
		{"/system.slice/slurmd-exporter.service", false},
		{"/system.slice/slurm_vm.scope", false},
		{"/user.slice/user-1001.slice/session-3.scope", false},
		{"/user.slice", false},
		{"/system.slice/slurmstepd.scope/job_7/step_0/user/task_0", false},
	} {
		if got := ParseCgroup([]byte("0::" + tc.path + "\n")).SlurmdCgroup(); got != tc.want {
			t.Errorf("SlurmdCgroup(%s) = %v, want %v", tc.path, got, tc.want)
		}
	}
}

// Every fixture file must be covered by a case, so a new layout cannot be
// added without its expectation.
func TestParseCgroupFixturesAllCovered(t *testing.T) {
	covered := make(map[string]bool)
	for _, tc := range cgroupCases {
		covered[tc.file] = true
	}
	for _, pattern := range []string{
		fixturesProcfs + "/*/*/cgroup",
		fixturesCgroup + "/*.cgroup",
		"../../fixtures/slurm/*/*/proc-cgroup-*.txt",
	} {
		files, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		if len(files) == 0 {
			t.Fatalf("no fixtures match %s", pattern)
		}
		for _, f := range files {
			rel, err := filepath.Rel("../../fixtures", f)
			if err != nil {
				t.Fatal(err)
			}
			if !covered[filepath.ToSlash(rel)] {
				t.Errorf("fixture %s has no case in cgroupCases", rel)
			}
		}
	}
}

func TestParseCgroupRejects(t *testing.T) {
	tests := []struct {
		name    string
		content string
		want    Cgroup
	}{
		{name: "empty", content: "", want: Cgroup{}},
		{name: "no colons", content: "garbage\n\x00\xff\n", want: Cgroup{}},
		{name: "relative path", content: "0::kubepods/pod" + podCgroupfs + "/" + ctrCgroupfs + "\n", want: Cgroup{}},
		{
			name:    "pod without kubepods ancestor",
			content: "0::/system.slice/pod" + podCgroupfs + "/" + ctrCgroupfs + "\n",
			want:    Cgroup{Path: "/system.slice/pod" + podCgroupfs + "/" + ctrCgroupfs},
		},
		{
			name:    "malformed pod UID",
			content: "0::/kubepods/burstable/pod971b20f4-7dc4-4d6d-acd4-899fb3685ba/" + ctrCgroupfs + "\n",
			want:    Cgroup{Path: "/kubepods/burstable/pod971b20f4-7dc4-4d6d-acd4-899fb3685ba/" + ctrCgroupfs},
		},
		{
			name:    "short container ID",
			content: "0::/kubepods/burstable/pod" + podCgroupfs + "/1912e1b5d55f\n",
			want:    Cgroup{Path: "/kubepods/burstable/pod" + podCgroupfs + "/1912e1b5d55f", PodUID: podCgroupfs},
		},
		{
			name:    "upper-case UID is canonicalised",
			content: "0::/kubepods/pod" + strings.ToUpper(podCgroupfs) + "\n",
			want:    Cgroup{Path: "/kubepods/pod" + strings.ToUpper(podCgroupfs), PodUID: podCgroupfs},
		},
		{
			name:    "job directory outside a Slurm root",
			content: "0::/home/alice/job_12/step_0\n",
			want:    Cgroup{Path: "/home/alice/job_12/step_0"},
		},
		{
			name:    "non-numeric job",
			content: "4:memory:/slurm/uid_0/job_12a/step_0\n",
			want:    Cgroup{Path: "/slurm/uid_0/job_12a/step_0"},
		},
		{
			name:    "malformed SLUID",
			content: "0::/system.slice/slurmstepd.scope/s5K1KKYAYG5DU0/step_0\n",
			want:    Cgroup{Path: "/system.slice/slurmstepd.scope/s5K1KKYAYG5DU0/step_0", Unit: "slurmstepd.scope", Slice: "system.slice"},
		},
		{
			name:    "job without step",
			content: "0::/system.slice/slurmstepd.scope/job_7\n",
			want:    Cgroup{Path: "/system.slice/slurmstepd.scope/job_7", SlurmJobID: "7"},
		},
		{
			name:    "bad step name is dropped, job kept",
			content: "0::/system.slice/slurmstepd.scope/job_7/step_BAD!\n",
			want:    Cgroup{Path: "/system.slice/slurmstepd.scope/job_7/step_BAD!", SlurmJobID: "7"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := ParseCgroup([]byte(tc.content)); got != tc.want {
				t.Errorf("ParseCgroup(%q) =\n%+v\nwant\n%+v", tc.content, got, tc.want)
			}
		})
	}
}

func FuzzParseCgroup(f *testing.F) {
	for _, tc := range cgroupCases {
		content, err := os.ReadFile(filepath.Join("../../fixtures", tc.file))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(content)
	}
	f.Add([]byte("0::/kubepods/podFFFFFFFF_FFFF_FFFF_FFFF_FFFFFFFFFFFF/x\n"))
	f.Add([]byte("1:name=systemd:/slurm/uid_/job_/step_\n0::"))

	f.Fuzz(func(t *testing.T, content []byte) {
		cg := ParseCgroup(content)
		if cg.PodUID != "" {
			if _, ok := canonicalPodUID(cg.PodUID); !ok {
				t.Errorf("PodUID %q is not canonical", cg.PodUID)
			}
			if cg.PodUID != strings.ToLower(cg.PodUID) || len(cg.PodUID) != 36 && len(cg.PodUID) != 32 {
				t.Errorf("PodUID %q is neither a dashed UUID nor a static pod hash", cg.PodUID)
			}
		}
		if cg.ContainerID != "" && (cg.PodUID == "" || len(cg.ContainerID) != 64 || !isHex(cg.ContainerID)) {
			t.Errorf("ContainerID %q without pod or not 64 hex", cg.ContainerID)
		}
		if cg.SlurmJobID != "" && !isDigits(cg.SlurmJobID) {
			t.Errorf("SlurmJobID %q is not numeric", cg.SlurmJobID)
		}
		if cg.SlurmJobID != "" && cg.SlurmSLUID != "" {
			t.Errorf("both SlurmJobID %q and SlurmSLUID %q", cg.SlurmJobID, cg.SlurmSLUID)
		}
		if cg.SlurmSLUID != "" && !slurmid.IsSLUID(cg.SlurmSLUID) {
			t.Errorf("SlurmSLUID %q is malformed", cg.SlurmSLUID)
		}
		if cg.SlurmStep != "" && cg.SlurmJobID == "" && cg.SlurmSLUID == "" {
			t.Errorf("SlurmStep %q without a job", cg.SlurmStep)
		}
		owned := cg.PodUID != "" || cg.SlurmJobID != "" || cg.SlurmSLUID != ""
		if owned && (cg.Unit != "" || cg.Slice != "") {
			t.Errorf("unit %q/slice %q set for an owned process", cg.Unit, cg.Slice)
		}
		if owned && cg.SlurmdCgroup() {
			t.Errorf("%+v: a pod's or job's process is taken for one outside every job cgroup", cg)
		}
		if cg.Path != "" && !strings.Contains(string(content), cg.Path) {
			t.Errorf("Path %q is not in the input", cg.Path)
		}
		// The owner unit is a unit or slice of the path, or a name made
		// from one: never empty when there is a unit, never from nowhere.
		switch u := cg.OwnerUnit(); {
		case cg.Unit != "" && u == "":
			t.Errorf("unit %q has an empty owner unit", cg.Unit)
		case u == "", u == cg.Unit, u == cg.Slice, strings.HasPrefix(u, "user-") && strings.HasSuffix(u, ".slice"):
		case slices.ContainsFunc(runtimeScopes, func(r struct{ prefix, runtime string }) bool { return r.runtime == u }):
		default:
			t.Errorf("owner unit %q of %+v comes from nowhere", u, cg)
		}
	})
}

// TestParseCgroupNamespacedAndDelegated: what the kernel prints for another
// process's cgroup depends on the reader, and what part of the tree its
// owner may name. An exporter in a cgroup namespace of its own (every
// unprivileged container on a cgroup v2 node under containerd, Docker or
// Podman) reads paths relative to its own cgroup, one "/.." per level above
// it (cgroup_namespaces(7): "the pathname ... is relative to the cgroup
// namespace root of the reading process"); under a user's service manager
// (user@<uid>.service, which systemd delegates to the user) the user names
// the cgroups, so a pod or Slurm job there is forged (found by probing:
// every pod's usage unattributed in the chart's pods; a login user's usage
// billed to another pod or job).
func TestParseCgroupNamespacedAndDelegated(t *testing.T) {
	podU := strings.ReplaceAll(podCgroupfs, "-", "_")
	for _, tc := range []struct {
		name, content string
		want          Cgroup
	}{
		{
			// The exporter, Burstable, reads a Guaranteed pod three
			// levels up: kubepods.slice is their common ancestor.
			name:    "namespaced guaranteed pod",
			content: "0::/../../../kubepods-pod" + podU + ".slice/cri-containerd-" + ctrCgroupfs + ".scope\n",
			want:    Cgroup{Path: "/../../../kubepods-pod" + podU + ".slice/cri-containerd-" + ctrCgroupfs + ".scope", PodUID: podCgroupfs, ContainerID: ctrCgroupfs},
		},
		{
			name:    "namespaced burstable pod",
			content: "0::/../../kubepods-burstable-pod" + podU + ".slice/cri-containerd-" + ctrCgroupfs + ".scope\n",
			want:    Cgroup{Path: "/../../kubepods-burstable-pod" + podU + ".slice/cri-containerd-" + ctrCgroupfs + ".scope", PodUID: podCgroupfs, ContainerID: ctrCgroupfs},
		},
		{
			name:    "namespaced besteffort pod",
			content: "0::/../../../kubepods-besteffort.slice/kubepods-besteffort-pod" + podU + ".slice/crio-" + ctrCgroupfs + ".scope\n",
			want:    Cgroup{Path: "/../../../kubepods-besteffort.slice/kubepods-besteffort-pod" + podU + ".slice/crio-" + ctrCgroupfs + ".scope", PodUID: podCgroupfs, ContainerID: ctrCgroupfs},
		},
		{
			// cgroupfs driver: the exporter in kubepods/burstable/pod<E>/<X>.
			name:    "namespaced cgroupfs pod",
			content: "0::/../../pod" + podCgroupfs + "/" + ctrCgroupfs + "\n",
			want:    Cgroup{Path: "/../../pod" + podCgroupfs + "/" + ctrCgroupfs, PodUID: podCgroupfs, ContainerID: ctrCgroupfs},
		},
		{
			name:    "namespaced cgroupfs besteffort pod",
			content: "0::/../../besteffort/pod" + podCgroupfs + "/" + ctrCgroupfs + "\n",
			want:    Cgroup{Path: "/../../besteffort/pod" + podCgroupfs + "/" + ctrCgroupfs, PodUID: podCgroupfs, ContainerID: ctrCgroupfs},
		},
		{
			name:    "namespaced host service",
			content: "0::/../../../../system.slice/trainer.service\n",
			want:    Cgroup{Path: "/../../../../system.slice/trainer.service", Unit: "trainer.service", Slice: "system.slice"},
		},
		{
			// Up to the root and down a user's delegated tree: a rootless
			// Kubernetes' pod, or forged; its user's either way.
			name:    "namespaced forged pod",
			content: "0::/../../../../user.slice/user-1001.slice/user@1001.service/app.slice/kubepods/pod" + podCgroupfs + "\n",
			want:    Cgroup{Path: "/../../../../user.slice/user-1001.slice/user@1001.service/app.slice/kubepods/pod" + podCgroupfs, Unit: "user@1001.service", Slice: "user-1001.slice", Delegated: true},
		},
		{
			name:    "forged pod",
			content: "0::/user.slice/user-1001.slice/user@1001.service/app.slice/kubepods/pod" + podCgroupfs + "\n",
			want:    Cgroup{Path: "/user.slice/user-1001.slice/user@1001.service/app.slice/kubepods/pod" + podCgroupfs, Unit: "user@1001.service", Slice: "user-1001.slice", Delegated: true},
		},
		{
			name:    "forged systemd pod slice",
			content: "0::/user.slice/user-1001.slice/user@1001.service/app.slice/kubepods-burstable-pod" + podU + ".slice/x.scope\n",
			want:    Cgroup{Path: "/user.slice/user-1001.slice/user@1001.service/app.slice/kubepods-burstable-pod" + podU + ".slice/x.scope", Unit: "x.scope", Slice: "kubepods-burstable-pod" + podU + ".slice"},
		},
		{
			name:    "forged Slurm job",
			content: "0::/user.slice/user-1001.slice/user@1001.service/app.slice/slurmstepd.scope/job_10/step_0/user/task_0\n",
			want:    Cgroup{Path: "/user.slice/user-1001.slice/user@1001.service/app.slice/slurmstepd.scope/job_10/step_0/user/task_0", Unit: "slurmstepd.scope", Slice: "app.slice", Delegated: true},
		},
		{
			name:    "forged Slurm v1 job",
			content: "4:memory:/user.slice/user-1001.slice/user@1001.service/slurm/uid_0/job_13/step_0\n",
			want:    Cgroup{Path: "/user.slice/user-1001.slice/user@1001.service/slurm/uid_0/job_13/step_0", Unit: "user@1001.service", Slice: "user-1001.slice", Delegated: true},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ParseCgroup([]byte(tc.content))
			if got != tc.want {
				t.Errorf("ParseCgroup(%q) =\n%+v\nwant\n%+v", tc.content, got, tc.want)
			}
			if tc.want.PodUID == "" && got.SlurmdCgroup() {
				t.Errorf("%s: taken for slurmd's cgroup, whose tasks' environment names their job", tc.name)
			}
			// A pod or job below a user's service manager is the user's.
			if unit := got.OwnerUnit(); tc.want.Delegated && unit != "user-1001.slice" {
				t.Errorf("%s: OwnerUnit() = %q, want the user's user-1001.slice", tc.name, unit)
			}
		})
	}
}
