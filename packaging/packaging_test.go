// Package packaging holds the release packaging: the nfpm configuration,
// maintainer scripts, Makefile fragment, install README and their checks.
// Its tests check what can be checked without building anything: the
// Dockerfile (no container engine runs in CI) and .dockerignore, the nfpm
// configuration and the scripts. make package-check, install-check and
// readme-check check the built artifacts.
package packaging

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

const root = ".."

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	cmd, args string
}

func dockerfile(t *testing.T) []instruction {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []instruction
	var cur string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasSuffix(line, "\\") {
			cur += strings.TrimSuffix(line, "\\") + " "
			continue
		}
		line = cur + line
		cur = ""
		cmd, args, _ := strings.Cut(line, " ")
		out = append(out, instruction{strings.ToUpper(cmd), strings.TrimSpace(args)})
	}
	return out
}

// makeTargets lists the targets the Makefiles define.
func makeTargets(t *testing.T) map[string]bool {
	t.Helper()
	targets := map[string]bool{}
	re := regexp.MustCompile(`(?m)^([A-Za-z0-9_.%-]+(?:\s+[A-Za-z0-9_.%-]+)*)\s*:([^=]|$)`)
	for _, f := range []string{"Makefile", "packaging/packaging.mk", "chart/chart.mk", "mixin/mixin.mk"} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			for _, name := range strings.Fields(m[1]) {
				targets[name] = true
			}
		}
	}
	return targets
}

func TestDockerfile(t *testing.T) {
	ins := dockerfile(t)
	var froms []string
	var buildRun, copyFrom, user, entrypoint string
	exposed := false
	for _, in := range ins {
		switch in.cmd {
		case "FROM":
			froms = append(froms, in.args)
		case "RUN":
			if strings.HasPrefix(in.args, "make ") {
				buildRun = in.args
			}
		case "COPY":
			if strings.HasPrefix(in.args, "--from=build ") {
				copyFrom = in.args
			}
		case "USER":
			user = in.args
		case "EXPOSE":
			exposed = in.args == "9835"
		case "ENTRYPOINT":
			entrypoint = in.args
		}
	}
	if len(froms) != 2 || !strings.Contains(froms[0], "AS build") || !strings.HasPrefix(froms[0], "--platform=$BUILDPLATFORM ") {
		t.Errorf("want a build stage on the build platform and a runtime stage, got FROM %q", froms)
	}
	if len(froms) == 2 && !strings.HasPrefix(froms[1], "gcr.io/distroless/base-") {
		t.Errorf("runtime base %q: want distroless base (glibc for cgo)", froms[1])
	}
	// The build step is a make target that make dist runs too.
	m := regexp.MustCompile(`^make (release-binary) ARCH=\$\{TARGETARCH\}`).FindStringSubmatch(buildRun)
	if m == nil {
		t.Fatalf("build step %q: want make release-binary ARCH=${TARGETARCH}", buildRun)
	}
	targets := makeTargets(t)
	if !targets[m[1]] || !targets["release-binary-%"] {
		t.Errorf("make %s is not defined in the Makefiles", m[1])
	}
	mk, _ := os.ReadFile(filepath.Join(root, "packaging/packaging.mk"))
	if !strings.Contains(string(mk), "dist-archive-%: release-binary-%") {
		t.Error("make dist no longer builds its binaries with release-binary: the image would be built by steps CI does not run")
	}
	// It copies what release-binary writes.
	if !strings.Contains(copyFrom, "/src/dist/stage/linux-${TARGETARCH}/xpu_exporter ") || !strings.Contains(string(mk), "DIST_STAGE   = dist/stage/linux-$(1)") {
		t.Errorf("COPY %q does not take release-binary's output dist/stage/linux-ARCH/xpu_exporter", copyFrom)
	}
	if !regexp.MustCompile(`^[1-9][0-9]*:[1-9][0-9]*$`).MatchString(user) {
		t.Errorf("USER %q: want a numeric non-root user", user)
	}
	if !exposed || entrypoint != `["/bin/xpu_exporter"]` {
		t.Errorf("EXPOSE 9835 %v, ENTRYPOINT %s", exposed, entrypoint)
	}
}

// ignored reports whether .dockerignore leaves path out of the build
// context (last matching pattern wins; a pattern matches a path or any of
// its parent directories).
func ignored(patterns []string, path string) bool {
	out := false
	for _, p := range patterns {
		neg := strings.HasPrefix(p, "!")
		p = strings.TrimPrefix(strings.TrimPrefix(p, "!"), "/")
		for dir := path; dir != "."; dir = filepath.Dir(dir) {
			if ok, _ := filepath.Match(p, dir); ok {
				out = !neg
				break
			}
			if ok, _ := filepath.Match(p, filepath.Base(dir)); ok && !strings.Contains(p, "/") && strings.HasPrefix(p, "*") {
				out = !neg
				break
			}
		}
	}
	return out
}

func TestDockerignoreKeepsTheBuildInputs(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			patterns = append(patterns, l)
		}
	}
	need := []string{"go.mod", "go.sum", "VERSION", "Makefile", "packaging/packaging.mk", "chart/chart.mk", "mixin/mixin.mk"}
	// Every file the main package's build reads: its packages' Go, C and
	// embedded files.
	cmd := exec.Command("go", "list", "-deps", "-f", `{{if not .Standard}}{{$d := .Dir}}{{range .GoFiles}}{{$d}}/{{.}}
{{end}}{{range .CgoFiles}}{{$d}}/{{.}}
{{end}}{{range .EmbedFiles}}{{$d}}/{{.}}
{{end}}{{end}}`, ".")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	abs, _ := filepath.Abs(root)
	for _, f := range strings.Fields(string(out)) {
		if rel, err := filepath.Rel(abs, f); err == nil && !strings.HasPrefix(rel, "..") {
			need = append(need, rel)
		}
	}
	for _, f := range need {
		if ignored(patterns, f) {
			t.Errorf(".dockerignore leaves out %s, which the image build needs", f)
		}
	}
	for _, f := range []string{".git/config", "bin/helm", "dist/sha256sums.txt", "xpu_exporter", "collector.test"} {
		if !ignored(patterns, f) {
			t.Errorf(".dockerignore sends %s to the builder", f)
		}
	}
}

func TestNfpmConfig(t *testing.T) {
	b, err := os.ReadFile("nfpm.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Name     string `json:"name"`
		Contents []struct {
			Src    string `json:"src"`
			Dst    string `json:"dst"`
			Type   string `json:"type"`
			Expand bool   `json:"expand"`
		} `json:"contents"`
		Scripts map[string]string `json:"scripts"`
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	mk, _ := os.ReadFile("packaging.mk")
	dsts := map[string]string{}
	for _, c := range cfg.Contents {
		dsts[c.Dst] = c.Type
		switch {
		case strings.Contains(c.Src, "${ARCH}"):
			// Staged by release-binary.
			if !c.Expand || !strings.HasPrefix(c.Src, "dist/stage/linux-${ARCH}/") {
				t.Errorf("%s: staged sources need expand: true under dist/stage/linux-${ARCH}/", c.Src)
			}
			if base := filepath.Base(c.Src); !strings.Contains(string(mk), "/"+base) && !strings.Contains(string(mk), "/"+base+" ") {
				t.Errorf("%s: release-binary does not stage %s", c.Src, base)
			}
		default:
			if _, err := os.Stat(filepath.Join(root, c.Src)); err != nil {
				t.Errorf("nfpm source %s: %v", c.Src, err)
			}
		}
	}
	for dst, typ := range map[string]string{
		"/usr/bin/xpu_exporter":                        "",
		"/usr/lib/systemd/system/xpu_exporter.service": "",
		"/etc/default/xpu_exporter":                    "config|noreplace",
		"/usr/lib/sysusers.d/xpu_exporter.conf":        "",
	} {
		got, ok := dsts[dst]
		if !ok || got != typ {
			t.Errorf("package file %s: type %q (present %v), want %q", dst, got, ok, typ)
		}
	}
	// The unit reads the flags file the package installs.
	unit, _ := os.ReadFile(filepath.Join(root, "examples/systemd/xpu_exporter.service"))
	if !strings.Contains(string(unit), "EnvironmentFile=-/etc/default/xpu_exporter") || !strings.Contains(string(unit), "User=xpu_exporter") {
		t.Error("examples/systemd/xpu_exporter.service no longer reads /etc/default/xpu_exporter as user xpu_exporter")
	}
	if !strings.Contains(string(unit), "\nExecStart=/usr/local/bin/xpu_exporter $XPU_EXPORTER_OPTS\n") {
		t.Error("packaging.mk rewrites ExecStart=/usr/local/bin/xpu_exporter; the unit's ExecStart changed")
	}
	sysusers, _ := os.ReadFile("xpu_exporter.sysusers")
	if !regexp.MustCompile(`(?m)^u xpu_exporter `).Match(sysusers) {
		t.Error("xpu_exporter.sysusers does not create the unit's user")
	}
	for _, s := range []string{"postinstall", "preremove", "postremove"} {
		p := filepath.Join(root, cfg.Scripts[s])
		if out, err := exec.Command("sh", "-n", p).CombinedOutput(); err != nil {
			t.Errorf("%s script %s: %v %s", s, p, err, out)
		}
	}
}

// serviceDirectives returns the [Service] directives of a unit file, by name,
// in the order given.
func serviceDirectives(t *testing.T, path string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	section := ""
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "["):
			section = line
		case section == "[Service]":
			k, v, _ := strings.Cut(line, "=")
			out[strings.TrimSpace(k)] = append(out[strings.TrimSpace(k)], strings.TrimSpace(v))
		}
	}
	return out
}

// systemdTrue is systemd's parse_boolean for a true value.
func systemdTrue(v string) bool {
	switch strings.ToLower(v) {
	case "1", "yes", "y", "true", "t", "on":
		return true
	}
	return false
}

// The unit every install path ships must leave device access open: NVML
// opens /dev/nvidiactl and /dev/nvidia*, hl-smi /dev/accel/*. Under the
// default DevicePolicy=auto, a single allowed device turns device access
// into an allow-list of it and the pseudo devices (systemd.resource-control(5)).
// Directives that allow devices or close the policy on their own, per
// systemd.exec(5) and unit_patch_contexts in systemd's src/core/unit.c:
//   - ProtectClock=yes implies DeviceAllow=char-rtc r, which before systemd
//     252 closed every GPU device (systemd/systemd#18142);
//   - PrivateDevices=yes sets DevicePolicy=closed;
//   - DeviceAllow= and DevicePolicy=closed|strict do it by name.
//
// (RootImage=, MountImages= and encrypted credentials add devices only to a
// policy that is already closed.)
func TestUnitLeavesDeviceAccessOpen(t *testing.T) {
	unit := filepath.Join(root, "examples/systemd/xpu_exporter.service")
	d := serviceDirectives(t, unit)
	if len(d["ExecStart"]) == 0 {
		t.Fatalf("%s: no [Service] section read", unit)
	}
	for _, v := range d["ProtectClock"] {
		if systemdTrue(v) {
			t.Errorf("ProtectClock=%s implies DeviceAllow=char-rtc r: before systemd 252 every other device, /dev/nvidia* included, gets EPERM (systemd/systemd#18142)", v)
		}
	}
	for _, v := range d["PrivateDevices"] {
		if systemdTrue(v) {
			t.Errorf("PrivateDevices=%s sets DevicePolicy=closed: /dev/nvidia* and /dev/accel/* get EPERM", v)
		}
	}
	for _, v := range d["DeviceAllow"] {
		if v != "" {
			t.Errorf("DeviceAllow=%s makes device access an allow-list", v)
		}
	}
	for _, v := range d["DevicePolicy"] {
		if v != "" && v != "auto" {
			t.Errorf("DevicePolicy=%s closes device access", v)
		}
	}
	// What ProtectClock= protected stays protected by other means: no
	// CAP_SYS_TIME, and the calls that set a clock filtered.
	if caps := d["CapabilityBoundingSet"]; len(caps) == 0 || strings.Contains(strings.Join(caps, " "), "CAP_SYS_TIME") {
		t.Errorf("CapabilityBoundingSet=%q: want it set, without CAP_SYS_TIME", caps)
	}
	if !slices.Contains(d["SystemCallFilter"], "~@clock") {
		t.Errorf("SystemCallFilter=%q: want ~@clock, to keep the clock protected without ProtectClock=", d["SystemCallFilter"])
	}
}
