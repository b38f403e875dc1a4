package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/alecthomas/kingpin/v2"

	"github.com/xpu-exporter/xpu_exporter/attribution"
	"github.com/xpu-exporter/xpu_exporter/attribution/kubernetes/kubelettest"
	"github.com/xpu-exporter/xpu_exporter/demo"
)

// writeProc lays out one process of uid in a procfs tree under root, in
// the systemd unit named unit.
func writeProc(t *testing.T, root string, pid, uid, unit string) {
	t.Helper()
	dir := filepath.Join(root, pid)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{
		"cgroup": "0::/system.slice/" + unit + "\n",
		"status": "Name:\tpython3\nUid:\t" + uid + "\t" + uid + "\t" + uid + "\t" + uid + "\n",
		"comm":   "python3\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// In demo mode the README promises that flags given explicitly replace the
// simulated sources: --path.procfs the simulated processes, --path.rootfs
// the simulated passwd. A real procfs with the simulated passwd would name
// real UIDs after made-up users, so the simulated passwd goes with the
// simulated procfs only.
func TestDemoKeepsExplicitPaths(t *testing.T) {
	const pid, uid = "4242", "3999999" // a UID no host's passwd is likely to name
	sim, host := t.TempDir(), t.TempDir()
	writeProc(t, filepath.Join(sim, "proc"), pid, uid, "simulated.service")
	writeProc(t, filepath.Join(host, "proc"), pid, uid, "real.service")
	for dir, user := range map[string]string{sim: "bob", filepath.Join(host, "etc"): "alice"} {
		os.MkdirAll(dir, 0o755)
		line := user + ":x:" + uid + ":" + uid + "::/home/" + user + ":/bin/sh\n"
		if err := os.WriteFile(filepath.Join(dir, "passwd"), []byte(line), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	simulated := &demo.Attribution{Procfs: filepath.Join(sim, "proc"), Passwd: filepath.Join(sim, "passwd"), Node: "demo"}

	for _, tc := range []struct {
		name     string
		args     []string
		wantUnit string
		wantUser string
	}{
		{"nothing set: all simulated", nil, "simulated.service", "bob"},
		{"rootfs set: its passwd names the simulated processes", []string{"--path.rootfs=" + host}, "simulated.service", "alice"},
		// The default rootfs is /: this UID is named by number unless the
		// machine running the test happens to have it.
		{"procfs set: the real processes, named by the default rootfs", []string{"--path.procfs=" + filepath.Join(host, "proc")}, "real.service", uid},
		{"both set", []string{"--path.procfs=" + filepath.Join(host, "proc"), "--path.rootfs=" + host}, "real.service", "alice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			app := kingpin.New("test", "")
			f := addAttributionFlags(app)
			if _, err := app.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			f.useDemo(simulated)
			r, _, closeAll, err := f.resolver(slog.New(slog.DiscardHandler))
			defer closeAll()
			if err != nil || r == nil {
				t.Fatalf("resolver: %v, %v", r, err)
			}
			res := r.Resolve(context.Background(), []attribution.Device{{UUID: "GPU-1", Vendor: "nvidia", MIGIndex: -1, GRESIndex: -1, PIDs: []uint32{4242}}})
			claims := res.Devices["GPU-1"].Claims
			if len(claims) != 1 {
				t.Fatalf("claims %+v, want one", claims)
			}
			if o := claims[0].Owner; o.Unit != tc.wantUnit || o.User != tc.wantUser {
				t.Errorf("owner unit %q user %q, want %q %q", o.Unit, o.User, tc.wantUnit, tc.wantUser)
			}
		})
	}
}

// The demo's kubelet serves both sockets; a Pods API socket given
// explicitly is kept, the pod-resources socket is still the demo's.
func TestDemoKeepsExplicitPodsAPISocket(t *testing.T) {
	simulated := &demo.Attribution{Kubelet: &kubelettest.Server{}, Procfs: "/sim/proc", Passwd: "/sim/passwd"}
	app := kingpin.New("test", "")
	f := addAttributionFlags(app)
	if _, err := app.Parse([]string{"--kubernetes.pods-api-socket=/run/pods.sock"}); err != nil {
		t.Fatal(err)
	}
	f.useDemo(simulated)
	if *f.podsAPISocket != "/run/pods.sock" {
		t.Errorf("pods API socket %q, want the explicit /run/pods.sock", *f.podsAPISocket)
	}
	if want := simulated.Kubelet.PodResourcesSocket(); *f.podResourcesSocket != want {
		t.Errorf("pod-resources socket %q, want the demo's %q", *f.podResourcesSocket, want)
	}
}

// The demo's sysfs holds its AMD GPUs (and is empty without them, so that
// a demo never serves the host's GPUs); an explicit --path.sysfs is kept.
func TestDemoSysfs(t *testing.T) {
	simulated := &demo.Attribution{Procfs: "/sim/proc", Sysfs: "/sim/sys", Passwd: "/sim/passwd"}
	for args, want := range map[string]string{"": "/sim/sys", "--path.sysfs=/host/sys": "/host/sys"} {
		app := kingpin.New("test", "")
		f := addAttributionFlags(app)
		var argv []string
		if args != "" {
			argv = []string{args}
		}
		if _, err := app.Parse(argv); err != nil {
			t.Fatal(err)
		}
		f.useDemo(simulated)
		if *f.sysfs != want {
			t.Errorf("%q: sysfs %q, want %q", args, *f.sysfs, want)
		}
	}
}

// TestNodeName: the node's name, which /devices, OTLP and --cost.file's
// per-node prices use, is --kubernetes.node-name, else --node-name
// ($XPU_NODE_NAME, which the chart sets in every metadata mode and which
// starts no API server watch), else the Slurm node name.
func TestNodeName(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  string
		want string
	}{
		{[]string{"--kubernetes.node-name=k", "--node-name=n", "--slurm.node-name=s"}, "", "k"},
		{[]string{"--node-name=n", "--slurm.node-name=s"}, "", "n"},
		{[]string{"--slurm.node-name=s"}, "e", "e"},
		{[]string{"--slurm.node-name=s"}, "", "s"},
	} {
		t.Setenv("XPU_NODE_NAME", tc.env)
		t.Setenv("NODE_NAME", "")
		app := kingpin.New("test", "")
		f := addAttributionFlags(app)
		if _, err := app.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		if got := f.node(); got != tc.want {
			t.Errorf("%v with XPU_NODE_NAME=%q: node %q, want %q", tc.args, tc.env, got, tc.want)
		}
	}
}
