package process

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

const fixturesPasswd = fixturesProcfs + "/etc/passwd"

func TestReaderProcess(t *testing.T) {
	tests := []struct {
		dir  string
		pid  int
		want Info
	}{
		{
			dir: "k8s-systemd-containerd-v2", pid: 52817,
			want: Info{PID: 52817, Comm: "python3", UID: 1000, User: "alice", Cgroup: Cgroup{PodUID: podContainerd, ContainerID: ctrContainerd}},
		},
		{
			dir: "k8s-systemd-crio-guaranteed-v2", pid: 61204,
			want: Info{PID: 61204, Comm: "vllm", UID: 1001, User: "bob", Cgroup: Cgroup{PodUID: podCrio, ContainerID: ctrCrio}},
		},
		{
			dir: "k8s-systemd-docker-besteffort-v1", pid: 30411,
			want: Info{PID: 30411, Comm: "tritonserver", UID: 0, User: "root", Cgroup: Cgroup{PodUID: podDocker, ContainerID: ctrDocker}},
		},
		{
			dir: "k8s-cgroupfs-burstable-v1", pid: 24580,
			want: Info{PID: 24580, Comm: "python", UID: 65534, User: "nobody", Cgroup: Cgroup{PodUID: podCgroupfs, ContainerID: ctrCgroupfs}},
		},
		{
			dir: "k8s-cgroupfs-guaranteed-v2", pid: 8812,
			want: Info{PID: 8812, Comm: "torchrun", UID: 1000, User: "alice", Cgroup: Cgroup{PodUID: podGuaranteed, ContainerID: ctrGuaranteed}},
		},
		{
			// UID 2000 is not in the passwd file: reported by number.
			dir: "k8s-kind-nested-v2", pid: 101977,
			want: Info{PID: 101977, Comm: "python3", UID: 2000, User: "2000", Cgroup: Cgroup{PodUID: podKind, ContainerID: ctrKind}},
		},
		{
			dir: "slurm-v1-task-cgroup", pid: 18724,
			want: Info{PID: 18724, Comm: "sleep", UID: 0, User: "root", Cgroup: Cgroup{SlurmJobID: "16", SlurmStep: "batch"}},
		},
		{
			dir: "slurm-v1-proctrack", pid: 18232,
			want: Info{PID: 18232, Comm: "sleep", UID: 0, User: "root", Cgroup: Cgroup{SlurmJobID: "12", SlurmStep: "batch"}},
		},
		{
			dir: "slurm-v1-plain", pid: 90121,
			want: Info{PID: 90121, Comm: "python3", UID: 1000, User: "alice", Cgroup: Cgroup{SlurmJobID: "4242", SlurmStep: "0"}},
		},
		{
			dir: "slurm-v2", pid: 77310,
			want: Info{PID: 77310, Comm: "python3", UID: 1001, User: "bob", Cgroup: Cgroup{SlurmJobID: "4243", SlurmStep: "batch"}},
		},
		{
			dir: "slurm-v2-multi-slurmd", pid: 77544,
			want: Info{PID: 77544, Comm: "a.out", UID: 1000, User: "alice", Cgroup: Cgroup{SlurmJobID: "4244", SlurmStep: "0"}},
		},
		{
			dir: "slurm-v2-sluid", pid: 81002,
			want: Info{PID: 81002, Comm: "python3", UID: 1000, User: "alice", Cgroup: Cgroup{SlurmSLUID: "s5K1KKYAYG5D00", SlurmStep: "0"}},
		},
		{
			dir: "slurm-linuxproc", pid: 17668,
			want: Info{PID: 17668, Comm: "sleep", UID: 0, User: "root", Cgroup: Cgroup{SystemdPath: "/"}},
		},
		{
			dir: "systemd-service-v2", pid: 1432,
			want: Info{PID: 1432, Comm: "ollama", UID: 998, User: "ollama", Cgroup: Cgroup{Unit: "ollama.service", Slice: "system.slice"}},
		},
		{
			dir: "systemd-session-v2", pid: 40213,
			want: Info{PID: 40213, Comm: "python3", UID: 1000, User: "alice", Cgroup: Cgroup{Unit: "session-3.scope", Slice: "user-1000.slice"}},
		},
		{
			dir: "systemd-service-v1", pid: 2290,
			want: Info{PID: 2290, Comm: "python3", UID: 1001, User: "bob", Cgroup: Cgroup{Unit: "vllm.service", Slice: "system.slice"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.dir, func(t *testing.T) {
			r := &Reader{Root: filepath.Join(fixturesProcfs, tc.dir), PasswdPath: fixturesPasswd}
			got, err := r.Process(tc.pid)
			if err != nil {
				t.Fatal(err)
			}
			// The path is covered by the ParseCgroup tests.
			got.Cgroup.Path = ""
			if got != tc.want {
				t.Errorf("Process(%d) =\n%+v\nwant\n%+v", tc.pid, got, tc.want)
			}
		})
	}
}

func TestReaderProcessMissing(t *testing.T) {
	r := &Reader{Root: filepath.Join(fixturesProcfs, "systemd-service-v2")}
	_, err := r.Process(999999)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Process(999999) error = %v, want fs.ErrNotExist", err)
	}
	if !strings.Contains(err.Error(), "/proc/999999/cgroup") {
		t.Errorf("error %q does not name the file", err)
	}
	if _, err := r.Process(0); err == nil {
		t.Error("Process(0) succeeded, want an error")
	}
}

func TestReaderProcessNoPasswd(t *testing.T) {
	for _, passwd := range []string{"", filepath.Join(t.TempDir(), "missing")} {
		r := &Reader{Root: filepath.Join(fixturesProcfs, "systemd-service-v2"), PasswdPath: passwd}
		got, err := r.Process(1432)
		if err != nil {
			t.Fatal(err)
		}
		if got.User != "998" {
			t.Errorf("PasswdPath %q: User = %q, want the numeric UID", passwd, got.User)
		}
	}
}

// writeProc writes a fake /proc/<pid> with the given files.
func writeProc(t *testing.T, pid string, files map[string][]byte) string {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, pid)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestReaderProcessHostileFiles(t *testing.T) {
	status := []byte("Name:\tx\nUid:\t1000\t1000\t1000\t1000\n")
	tests := []struct {
		name    string
		files   map[string][]byte
		wantErr string
	}{
		{
			name:    "oversized cgroup",
			files:   map[string][]byte{"cgroup": bytes.Repeat([]byte("0::/a\n"), maxCgroupSize), "status": status, "comm": []byte("x\n")},
			wantErr: "file too large",
		},
		{
			name:    "status without Uid",
			files:   map[string][]byte{"cgroup": []byte("0::/\n"), "status": []byte("Name:\tx\n"), "comm": []byte("x\n")},
			wantErr: "no Uid line",
		},
		{
			name:    "status with garbage Uid",
			files:   map[string][]byte{"cgroup": []byte("0::/\n"), "status": []byte("Uid:\t-1\n"), "comm": []byte("x\n")},
			wantErr: "no Uid line",
		},
		{
			name:    "missing comm",
			files:   map[string][]byte{"cgroup": []byte("0::/\n"), "status": status},
			wantErr: "read /proc/7/comm",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := &Reader{Root: writeProc(t, "7", tc.files)}
			_, err := r.Process(7)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Process() error = %v, want %q", err, tc.wantErr)
			}
		})
	}

	t.Run("oversized status is truncated, not refused", func(t *testing.T) {
		huge := append(append([]byte{}, status...), bytes.Repeat([]byte("Groups:\t1 2 3\n"), maxStatusSize)...)
		r := &Reader{Root: writeProc(t, "7", map[string][]byte{"cgroup": []byte("0::/\n"), "status": huge, "comm": []byte("x\n")})}
		got, err := r.Process(7)
		if err != nil {
			t.Fatal(err)
		}
		if got.UID != 1000 {
			t.Errorf("UID = %d, want 1000", got.UID)
		}
	})
}

func TestSlurmJobFromEnviron(t *testing.T) {
	tests := []struct {
		dir  string
		pid  int
		want string
		// capture is the real, newline-separated environment the fixture
		// was made from, if any.
		capture string
	}{
		{dir: "slurm-linuxproc", pid: 17668, want: "7", capture: "22.05/linuxproc/environ-job7-gpu-sleep.txt"},
		{dir: "slurm-v1-proctrack", pid: 18232, want: "12", capture: "22.05/cgroup-v1-proctrack-only/environ-job12-gpu-sleep.txt"},
		{dir: "slurm-v1-task-cgroup", pid: 18724, want: "16", capture: "22.05/cgroup-v1-task-cgroup/environ-job16-gpu-sleep.txt"},
		{dir: "slurm-v2-sluid", pid: 81002, want: "4245"},
		{dir: "systemd-session-v2", pid: 40213, want: ""},
		{dir: "k8s-systemd-containerd-v2", pid: 52817, want: ""},
	}
	for _, tc := range tests {
		t.Run(tc.dir, func(t *testing.T) {
			if tc.capture != "" {
				capture, err := os.ReadFile(filepath.Join("../../fixtures/slurm", tc.capture))
				if err != nil {
					t.Fatal(err)
				}
				environ, err := os.ReadFile(filepath.Join(fixturesProcfs, tc.dir, strconv.Itoa(tc.pid), "environ"))
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(environ, bytes.ReplaceAll(capture, []byte("\n"), []byte{0})) {
					t.Fatalf("procfs environ differs from the capture %s", tc.capture)
				}
			}
			r := &Reader{Root: filepath.Join(fixturesProcfs, tc.dir)}
			got, err := r.SlurmJobFromEnviron(tc.pid)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("SlurmJobFromEnviron(%d) = %q, want %q", tc.pid, got, tc.want)
			}
		})
	}
}

func TestSlurmJobFromEnvironHostile(t *testing.T) {
	tests := []struct {
		name    string
		environ []byte
		want    string
	}{
		{name: "older name only", environ: []byte("SLURM_JOBID=12\x00"), want: "12"},
		{name: "new name wins", environ: []byte("SLURM_JOBID=12\x00SLURM_JOB_ID=13\x00"), want: "13"},
		{name: "not a number", environ: []byte("SLURM_JOB_ID=12;rm -rf\x00"), want: ""},
		{name: "no terminator at end", environ: []byte("A=b\x00SLURM_JOB_ID=99"), want: "99"},
		{name: "empty", environ: nil, want: ""},
		{
			// Past the read limit the last variable may be cut short
			// ("…=1234" read as "…=12"): it must be ignored.
			name:    "cut at the limit",
			environ: append(bytes.Repeat([]byte("X"), maxEnvironSize-len("\x00SLURM_JOB_ID=12")), []byte("\x00SLURM_JOB_ID=1234\x00")...),
			want:    "",
		},
		{
			name:    "before a huge variable",
			environ: append([]byte("SLURM_JOB_ID=5\x00BIG="), bytes.Repeat([]byte("y"), 2*maxEnvironSize)...),
			want:    "5",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := &Reader{Root: writeProc(t, "7", map[string][]byte{"environ": tc.environ})}
			got, err := r.SlurmJobFromEnviron(7)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("SlurmJobFromEnviron() = %q, want %q", got, tc.want)
			}
		})
	}

	r := &Reader{Root: t.TempDir()}
	if _, err := r.SlurmJobFromEnviron(7); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing process: error = %v, want fs.ErrNotExist", err)
	}
}

func TestPasswdReloadsOnChange(t *testing.T) {
	passwd := filepath.Join(t.TempDir(), "passwd")
	if err := os.WriteFile(passwd, []byte("first:x:1000:1000::/:/bin/sh\nshadowed:x:1000:1000::/:/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := &Reader{PasswdPath: passwd}
	if got := r.userName(1000); got != "first" {
		t.Fatalf("userName(1000) = %q, want the first entry", got)
	}

	if err := os.WriteFile(passwd, []byte("renamed:x:1000:1000::/:/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Make the change visible even on file systems with coarse timestamps.
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(passwd, later, later); err != nil {
		t.Fatal(err)
	}
	if got := r.userName(1000); got != "renamed" {
		t.Errorf("after the file changed, userName(1000) = %q, want %q", got, "renamed")
	}
}

func TestParsePasswd(t *testing.T) {
	data := []byte("root:x:0:0:root:/root:/bin/bash\n" +
		"+@netgroup::::::\n" +
		"-baduser:x:5:5::/:/bin/sh\n" +
		"# comment:x:6:6::/:/bin/sh\n" +
		"broken:x:notanumber:1::/:/bin/sh\n" +
		"short:x\n" +
		":x:7:7::/:/bin/sh\n" +
		"alice:x:1000:1000:Alice:/home/alice:/bin/bash")
	got := parsePasswd(data)
	want := map[int]string{0: "root", 1000: "alice"}
	if len(got) != len(want) {
		t.Fatalf("parsePasswd() = %v, want %v", got, want)
	}
	for uid, name := range want {
		if got[uid] != name {
			t.Errorf("uid %d = %q, want %q", uid, got[uid], name)
		}
	}
}

// TestReaderProcessCutName: the kernel keeps 15 bytes of a name, cutting a
// UTF-8 character if one spans the 15th byte; the part cut is dropped.
func TestReaderProcessCutName(t *testing.T) {
	tests := []struct {
		name, comm, want string
	}{
		// "a" + four 3-byte characters = 13 bytes, then 2 of the 3 bytes of 本.
		{"cut in a character", "a日本語日\xe6\x9c", "a日本語日"},
		// 1 + 3×4 + 1 = 14 bytes, then the first byte of a 4-byte 😀.
		{"cut after a lead byte", "a日本語日b\xf0", "a日本語日b"},
		{"15 whole bytes", "a日本語日bc", "a日本語日bc"},
		{"15 ASCII bytes", "abcdefghijklmno", "abcdefghijklmno"},
		// Not the kernel's cut: a process may name itself with any bytes;
		// each invalid one is U+FFFD, as it is served everywhere.
		{"shorter, invalid", "py\xffthon", "py\uFFFDthon"},
		{"15 bytes, invalid in the middle", "py\xffthon_abcdefg", "py\uFFFDthon_abcdefg"},
		{"15 bytes ending in a stray continuation byte", "abcdefghijklmn\x9c", "abcdefghijklmn\uFFFD"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := &Reader{Root: writeProc(t, "7", map[string][]byte{
				"cgroup": []byte("0::/\n"),
				"status": []byte("Name:\tx\nUid:\t1000\t1000\t1000\t1000\n"),
				"comm":   []byte(tc.comm + "\n"),
			})}
			got, err := r.Process(7)
			if err != nil {
				t.Fatal(err)
			}
			if got.Comm != tc.want {
				t.Errorf("Comm = %q, want %q", got.Comm, tc.want)
			}
		})
	}
}

// TestReadLimited reads files around the first buffer's size and the
// limit: every byte up to the limit arrives, one more is either cut
// (truncateOK) or refused.
func TestReadLimited(t *testing.T) {
	const limit = 3000
	for _, tc := range []struct {
		size       int
		truncateOK bool
		want       int // bytes returned; -1 for errTooLarge
	}{
		{0, false, 0},
		{1, false, 1},
		{1023, false, 1023},
		{1024, false, 1024},
		{1025, false, 1025},
		{2048, false, 2048},
		{limit, false, limit},
		{limit + 1, false, -1},
		{limit + 1, true, limit},
		{3 * limit, true, limit},
	} {
		path := filepath.Join(t.TempDir(), "f")
		data := bytes.Repeat([]byte("0123456789"), tc.size/10+1)[:tc.size]
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := readLimited(path, limit, tc.truncateOK)
		switch {
		case tc.want < 0:
			if !errors.Is(err, errTooLarge) {
				t.Errorf("%d bytes: error %v, want errTooLarge", tc.size, err)
			}
		case err != nil:
			t.Errorf("%d bytes: %v", tc.size, err)
		case !bytes.Equal(got, data[:tc.want]):
			t.Errorf("%d bytes, truncateOK %v: got %d bytes, want the first %d", tc.size, tc.truncateOK, len(got), tc.want)
		}
	}
}

// TestStartTicks reads field 22 of /proc/<pid>/stat, counted after the
// command name's last ')' (the name may hold blanks and parentheses).
func TestStartTicks(t *testing.T) {
	const fields = "S 1 100 100 0 -1 4194560 500 0 0 0 12 3 0 0 20 0 8 0 %s 123456789 200 18446744073709551615"
	for _, tc := range []struct {
		name, stat string
		want       uint64
		err        error
	}{
		{"plain", "4242 (python3) " + strings.Replace(fields, "%s", "987654", 1), 987654, nil},
		{"odd command", "4242 (a) b (c) d) " + strings.Replace(fields, "%s", "55", 1), 55, nil},
		{"too large", "4242 (x) " + strings.Replace(fields, "%s", "1", 1) + strings.Repeat(" 0", maxStatSize), 0, errTooLarge},
		{"missing", "", 0, fs.ErrNotExist},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if tc.stat != "" {
				if err := os.MkdirAll(filepath.Join(root, "4242"), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(root, "4242", "stat"), []byte(tc.stat+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			r := &Reader{Root: root}
			got, err := r.StartTicks(4242)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("error %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("StartTicks = %d, %v; want %d", got, err, tc.want)
			}
		})
	}
}

// BenchmarkStartTicks is the cost of one cached PID's start check, on
// this machine's procfs.
func BenchmarkStartTicks(b *testing.B) {
	r := &Reader{}
	pid := os.Getpid()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.StartTicks(pid); err != nil {
			b.Fatal(err)
		}
	}
}

// TestReaderNamesAreValidUTF8: every name a process's owner is made of
// (its command, its user from passwd, its cgroup path and the unit in it)
// comes out valid UTF-8, each invalid byte U+FFFD, as it is served: two
// names apart only in such bytes are one owner, not two owners whose
// series carry one label set.
func TestReaderNamesAreValidUTF8(t *testing.T) {
	root := writeProc(t, "7", map[string][]byte{
		"cgroup": []byte("0::/system.slice/tr\xffain.service\n"),
		"status": []byte("Name:\tx\nUid:\t1000\t1000\t1000\t1000\n"),
		"comm":   []byte("job\xfe\n"),
	})
	passwd := filepath.Join(t.TempDir(), "passwd")
	if err := os.WriteFile(passwd, []byte("b\xffob:x:1000:1000::/home/bob:/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := (&Reader{Root: root, PasswdPath: passwd}).Process(7)
	if err != nil {
		t.Fatal(err)
	}
	for what, c := range map[string][2]string{
		"command": {got.Comm, "job\uFFFD"},
		"user":    {got.User, "b\uFFFDob"},
		"path":    {got.Cgroup.Path, "/system.slice/tr\uFFFDain.service"},
		"unit":    {got.Cgroup.OwnerUnit(), "tr\uFFFDain.service"},
	} {
		if c[0] != c[1] {
			t.Errorf("%s %q, want %q", what, c[0], c[1])
		}
	}
}
