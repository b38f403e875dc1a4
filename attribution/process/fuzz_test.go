package process

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzReadProcess lays hostile cgroup, status, comm and environ files out as
// /proc/7 and reads them the way the exporter does, through the size limits.
// A process is either refused or described by what its files say.
func FuzzReadProcess(f *testing.F) {
	dirs, err := filepath.Glob(filepath.Join(fixturesProcfs, "*", "[0-9]*"))
	if err != nil || len(dirs) == 0 {
		f.Fatalf("no procfs fixtures: %v", err)
	}
	for _, dir := range dirs {
		var files [4][]byte
		for i, name := range []string{"cgroup", "status", "comm", "environ"} {
			if files[i], err = os.ReadFile(filepath.Join(dir, name)); err != nil {
				f.Fatal(err)
			}
		}
		f.Add(files[0], files[1], files[2], files[3])
	}
	f.Add([]byte("0::/\n"), []byte("Uid:\t0004294967295\n"), []byte("a\n\n"), []byte("SLURM_JOBID=1\x00SLURM_JOBID=2\x00SLURM_JOB_ID=\x00"))
	f.Add([]byte(""), []byte("Uid:4294967296\n"), []byte{}, []byte("SLURM_JOB_ID=3"))

	passwd, err := os.ReadFile(fixturesPasswd)
	if err != nil {
		f.Fatal(err)
	}
	names := parsePasswd(passwd)

	// One tree per fuzzing process, rewritten for each input: a new
	// directory per input would cost more than the reads under test.
	root := f.TempDir()
	if err := os.Mkdir(filepath.Join(root, "7"), 0o755); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, cgroup, status, comm, environ []byte) {
		for name, content := range map[string][]byte{"cgroup": cgroup, "status": status, "comm": comm, "environ": environ} {
			if err := os.WriteFile(filepath.Join(root, "7", name), content, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		r := &Reader{Root: root, PasswdPath: fixturesPasswd}

		info, err := r.Process(7)
		switch {
		case len(cgroup) > maxCgroupSize:
			if !errors.Is(err, errTooLarge) {
				t.Fatalf("a %d-byte cgroup file: error %v, want errTooLarge", len(cgroup), err)
			}
		case err != nil:
			if !strings.Contains(err.Error(), "no Uid line") {
				t.Fatalf("unexpected error %v", err)
			}
			if uidField(status) != "" {
				t.Fatalf("refused a status whose Uid line starts with a number: %v", err)
			}
		default:
			if info.PID != 7 || info.Cgroup != ParseCgroup(cgroup) {
				t.Fatalf("info %+v does not match the cgroup file", info)
			}
			if want := strings.TrimLeft(uidField(status), "0"); strconv.Itoa(info.UID) != want && !(info.UID == 0 && want == "") {
				t.Fatalf("UID %d, but the Uid line says %q", info.UID, uidField(status))
			}
			if name, ok := names[info.UID]; ok && info.User != name || !ok && info.User != strconv.Itoa(info.UID) {
				t.Fatalf("UID %d named %q", info.UID, info.User)
			}
			// comm is cut at the read limit, then loses one newline,
			// then, at the kernel's 15 bytes, a character cut short.
			want := comm[:min(len(comm), maxCommSize)]
			want = bytes.TrimSuffix(want, []byte("\n"))
			if !bytes.HasPrefix(want, []byte(info.Comm)) {
				t.Fatalf("comm %q read as %q", comm, info.Comm)
			}
			if cut := want[len(info.Comm):]; len(cut) > 0 && (len(want) != commLen || len(cut) >= utf8.UTFMax || !utf8.RuneStart(cut[0]) || utf8.FullRune(cut)) {
				t.Fatalf("comm %q read as %q: %q cut", comm, info.Comm, cut)
			}
		}

		job, err := r.SlurmJobFromEnviron(7)
		if err != nil {
			t.Fatalf("SlurmJobFromEnviron: %v", err)
		}
		if want := environJob(environ); job != want {
			t.Fatalf("SlurmJobFromEnviron = %q, want %q", job, want)
		}
	})
}

// uidField is the first field of the first "Uid:" line if it is a decimal
// UID (at most 2³²-1), else "". The kernel writes
// "Uid:\t<real>\t<effective>\t<saved>\t<fs>" (proc(5), /proc/pid/status).
func uidField(status []byte) string {
	if len(status) > maxStatusSize {
		status = status[:maxStatusSize]
	}
	for _, line := range strings.Split(string(status), "\n") {
		if !strings.HasPrefix(line, "Uid:") {
			continue
		}
		fields := strings.Fields(line[len("Uid:"):])
		if len(fields) == 0 {
			return ""
		}
		if _, err := strconv.ParseUint(fields[0], 10, 32); err != nil {
			return ""
		}
		return fields[0]
	}
	return ""
}

// environJob is the job an environment names, worked out from proc(5)'s
// environ format (NUL-separated NAME=value entries): the first numeric
// SLURM_JOB_ID, else the last numeric SLURM_JOBID. Inputs stay below the
// read limit, so no entry is cut.
func environJob(environ []byte) string {
	var older string
	for _, entry := range strings.Split(string(environ), "\x00") {
		name, value, _ := strings.Cut(entry, "=")
		if value == "" || strings.Trim(value, "0123456789") != "" {
			continue
		}
		switch name {
		case "SLURM_JOB_ID":
			return value
		case "SLURM_JOBID":
			older = value
		}
	}
	return older
}

// FuzzParsePasswd checks that every name parsePasswd returns is the first
// passwd(5) entry "name:password:UID:…" for its UID, and that none of the
// lines it must skip (NIS compat "+"/"-", comments) names anyone.
func FuzzParsePasswd(f *testing.F) {
	passwd, err := os.ReadFile(fixturesPasswd)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(passwd)
	f.Add([]byte("a:x:1:1::/:/bin/sh\nb:x:1:1::/:/bin/sh\n+c:x:2:2:::\n:x:3:3:::\nd:x:04294967295:0"))
	f.Fuzz(func(t *testing.T, data []byte) {
		names := parsePasswd(data)
		firsts := map[int]string{}
		for _, line := range strings.Split(string(data), "\n") {
			fields := strings.SplitN(line, ":", 4)
			if len(fields) < 4 || fields[0] == "" || strings.ContainsAny(fields[0][:1], "+-#") {
				continue
			}
			uid, err := strconv.ParseUint(fields[2], 10, 32)
			if err != nil {
				continue
			}
			if _, seen := firsts[int(uid)]; !seen {
				firsts[int(uid)] = fields[0]
			}
		}
		if len(names) != len(firsts) {
			t.Fatalf("parsePasswd named %d UIDs, the file has %d", len(names), len(firsts))
		}
		for uid, name := range names {
			if firsts[uid] != name {
				t.Fatalf("UID %d named %q, the first entry says %q", uid, name, firsts[uid])
			}
			if uid < 0 || uid > 1<<32-1 || strings.ContainsAny(name, ":\n") {
				t.Fatalf("UID %d name %q", uid, name)
			}
		}
	})
}
