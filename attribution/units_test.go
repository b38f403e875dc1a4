package attribution

import (
	"context"
	"testing"
)

// Transient systemd units are one per container, login or run: as owner
// labels they would make a new owner, and new series, every time. Processes
// in them belong to a stable owner instead: the container runtime, or the
// user's slice, or the enclosing slice; the user and command labels still
// tell the processes apart.
func TestResolveTransientUnitsHaveStableOwners(t *testing.T) {
	const (
		ctr1 = "d95fe228608b8245a4a98dfc986d574f55370a84408601bb6b16f65a1f2735b2"
		ctr2 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	)
	for _, tc := range []struct {
		name     string
		cgroups  map[uint32]string
		wantUnit string // the one owner's unit label
	}{
		{"two docker containers", map[uint32]string{
			10: "/system.slice/docker-" + ctr1 + ".scope",
			11: "/system.slice/docker-" + ctr2 + ".scope",
		}, "docker"},
		{"two podman containers", map[uint32]string{
			10: "/machine.slice/libpod-" + ctr1 + ".scope",
			11: "/machine.slice/libpod-" + ctr2 + ".scope/container",
		}, "podman"},
		{"two containerd containers outside Kubernetes", map[uint32]string{
			10: "/system.slice/cri-containerd-" + ctr1 + ".scope",
			11: "/system.slice/cri-containerd-" + ctr2 + ".scope",
		}, "containerd"},
		{"two logins of one user", map[uint32]string{
			10: "/user.slice/user-1000.slice/session-3.scope",
			11: "/user.slice/user-1000.slice/session-c12.scope",
		}, "user-1000.slice"},
		{"a login and the user's service manager", map[uint32]string{
			10: "/user.slice/user-1000.slice/session-3.scope",
			11: "/user.slice/user-1000.slice/user@1000.service/init.scope",
			12: "/user.slice/user-1000.slice/user@1000.service",
		}, "user-1000.slice"},
		{"systemd-run in a login and in the user manager", map[uint32]string{
			10: "/user.slice/user-1000.slice/user@1000.service/app.slice/run-u7.service",
			11: "/user.slice/user-1000.slice/user@1000.service/app.slice/run-r0a1b2c3d4e5f60718293a4b5c6d7e8f9.scope",
			12: "/user.slice/user-1000.slice/user@1000.service/app.slice/app-org.gnome.Terminal-4127.scope",
		}, "user-1000.slice"},
		{"two systemd-run scopes of the system", map[uint32]string{
			10: "/system.slice/run-r0a1b2c3d4e5f60718293a4b5c6d7e8f9.scope",
			11: "/system.slice/run-p4242-i4243.scope",
			12: "/system.slice/run-u89.service",
		}, "system.slice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var pids []uint32
			for pid := range tc.cgroups {
				pids = append(pids, pid)
			}
			r := New(Config{Procfs: procfs(t, tc.cgroups)})
			own := r.Resolve(context.Background(), []Device{{UUID: gpuA, MIGIndex: -1, GRESIndex: -1, PIDs: pids}}).Devices[gpuA]
			if len(own.Claims) != 1 {
				t.Fatalf("%d owners %+v, want one", len(own.Claims), own.Claims)
			}
			if o := own.Claims[0].Owner; o.Unit != tc.wantUnit || o.User != "alice" || o.Command != "python3" {
				t.Errorf("owner %+v, want unit %q, user alice, command python3", o, tc.wantUnit)
			}
		})
	}
}

// Units that are the same at every start keep their own name.
func TestResolveStableUnitsKeepTheirNames(t *testing.T) {
	for cgroup, want := range map[string]string{
		"/system.slice/ollama.service":          "ollama.service",
		"/system.slice/slurmstepd.scope/system": "slurmstepd.scope",
		"/init.scope":                           "init.scope",
		"/user.slice/user-1000.slice/user@1000.service/app.slice/vllm.service": "vllm.service",
		"/system.slice/getty@tty1.service":                                     "getty@tty1.service",
		"/system.slice/runner.service":                                         "runner.service",
	} {
		r := New(Config{Procfs: procfs(t, map[uint32]string{10: cgroup})})
		own := r.Resolve(context.Background(), []Device{{UUID: gpuA, MIGIndex: -1, GRESIndex: -1, PIDs: []uint32{10}}}).Devices[gpuA]
		if len(own.Claims) != 1 || own.Claims[0].Owner.Unit != want {
			t.Errorf("%s: owners %+v, want unit %q", cgroup, own.Claims, want)
		}
	}
}
