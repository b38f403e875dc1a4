package slurm

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/xpu-exporter/xpu_exporter/attribution/internal/slurmid"
)

// restOfLine are the keys whose value runs to the end of the line: scontrol
// prints them unquoted and last on their line, and they may contain spaces
// and "=" (job names, comments, command lines, paths).
var restOfLine = map[string]bool{
	"JobName":       true,
	"Comment":       true,
	"AdminComment":  true,
	"SystemComment": true,
	"Command":       true,
	"WorkDir":       true,
	"StdErr":        true,
	"StdIn":         true,
	"StdOut":        true,
}

type pair struct{ key, value string }

// ErrUntrustedRecord is returned for scontrol text in which a job's free
// text (its name, comment, working directory, output paths…) has written
// lines that cannot be told from Slurm's: the job's metadata and GPUs are
// then not known. For a job it is remembered like an answer.
var ErrUntrustedRecord = errors.New("job record holds lines written by its free text")

// ErrIncompleteRecord is returned for scontrol text in which a job's
// record lacks the UserId= or JobState= that scontrol prints in every
// record: the record was cut short (a "JobId=" line its free text forged
// starts another) or is not scontrol's. Like ErrUntrustedRecord, the
// job's metadata and GPUs are then not known, and it is remembered like
// an answer.
var ErrIncompleteRecord = errors.New("job record lacks UserId or JobState")

// onceKeys are the keys the parser relies on that scontrol prints once in
// a record, every one at a fixed place (src/api/job_info.c:437-790 @
// slurm-23-11-1-1): seen twice, one was written by free text, and which
// is Slurm's cannot be told. Socks/Node= and JOB_GRES= mark where the
// per-node detail lines are.
var onceKeys = map[string]bool{
	"JobId": true, "ArrayJobId": true, "HetJobId": true, "JobName": true, "UserId": true, "Account": true, "QOS": true,
	"JobState": true, "Partition": true, "NodeList": true, "Socks/Node": true, "JOB_GRES": true,
}

// ParseJobText parses the records of `scontrol show job` (with or without
// --details): records start with "JobId=" at the beginning of a line and
// hold space-separated Key=Value pairs over several indented lines. With
// --details, lines starting with "Nodes=" give the CPUs, memory and GRES
// allocated on a group of nodes, from which Job.GPUs is filled.
//
// scontrol prints free text raw (JobName=%s at src/api/job_info.c:397 @
// slurm-21-08-8-2, :449 @ slurm-23-11-1-1, src/scontrol/info_job.c:198 @
// slurm-25-11-0-1; Comment=, WorkDir=, StdOut= likewise), and slurmctld
// checks only its length (_test_strlen, src/slurmctld/job_mgr.c:8007 @
// slurm-23-11-1-1), so any user can write lines into a record. Hence:
//   - "Nodes=" lines count only where Slurm prints them, right after the
//     record's JOB_GRES= line (job_info.c:787-896 @ slurm-23-11-1-1) or,
//     before 20.02, its Socks/Node= line, with no free text in between;
//   - a record with a key of onceKeys twice makes the output
//     ErrUntrustedRecord, and one without the UserId= or JobState= that
//     every record has (a forged "JobId=" line cut it short)
//     ErrIncompleteRecord. Free text can only
//     harm the job it belongs to, and the records of one output are one
//     job's (its array or heterogeneous components, one user's).
func ParseJobText(out []byte) ([]Job, error) {
	type record struct {
		seen map[string]bool
		// detail says the previous line was Socks/Node=, JOB_GRES= or a
		// detail line: a "Nodes=" line here is one of Slurm's.
		detail bool
	}
	var (
		jobs    []Job
		records []record
		cur     *Job
		rec     *record
		b       = newBudget()
	)
	for raw := range bytes.SplitSeq(out, []byte("\n")) {
		line := strings.TrimSpace(string(raw))
		if strings.HasPrefix(string(raw), "JobId=") {
			jobs = append(jobs, Job{})
			records = append(records, record{seen: map[string]bool{}})
			cur, rec = &jobs[len(jobs)-1], &records[len(records)-1]
		}
		if cur == nil || line == "" {
			continue
		}
		pairs := splitPairs(line)
		if len(pairs) > 0 && pairs[0].key == "Nodes" {
			if !rec.detail {
				continue
			}
			// "Nodes=<host list> CPU_IDs=… Mem=… GRES=<allocation>"
			// (GRES_IDX= before Slurm 20.02).
			nodes, err := b.expand(pairs[0].value)
			if err != nil {
				continue
			}
			for _, p := range pairs[1:] {
				if p.key == "GRES" || p.key == "GRES_IDX" {
					b.addGPUs(cur, nodes, p.value)
				}
			}
			continue
		}
		rec.detail = len(pairs) > 0 && (pairs[0].key == "Socks/Node" || pairs[0].key == "JOB_GRES")
		first := strings.HasPrefix(string(raw), "JobId=")
		for _, p := range pairs {
			if onceKeys[p.key] && rec.seen[p.key] {
				return nil, fmt.Errorf("%w: %s twice in the record of job %s", ErrUntrustedRecord, p.key, cur.ID)
			}
			if (p.key == "ArrayJobId" || p.key == "HetJobId") && !first {
				// Slurm prints them on the record's first line alone.
				return nil, fmt.Errorf("%w: %s after the first line of the record of job %s", ErrUntrustedRecord, p.key, cur.ID)
			}
			rec.seen[p.key] = true
			applyTextField(cur, p)
		}
	}

	valid := jobs[:0]
	for i, j := range jobs {
		if !isJobNumber(j.ID) {
			continue
		}
		if !records[i].seen["UserId"] || !records[i].seen["JobState"] {
			return nil, fmt.Errorf("%w: the record of job %s", ErrIncompleteRecord, j.ID)
		}
		valid = append(valid, j)
	}
	if len(valid) == 0 {
		return nil, errors.New("no job record in scontrol output")
	}
	return valid, nil
}

func applyTextField(j *Job, p pair) {
	switch p.key {
	case "JobId":
		if j.ID == "" {
			j.ID = p.value
		}
	case "ArrayJobId", "HetJobId":
		// Printed on the record's first line before JobName, only for an
		// array task ("ArrayJobId=%u ArrayTaskId=%u") and a heterogeneous
		// job's component ("HetJobId=%u HetJobOffset=%u"):
		// src/api/job_info.c, slurm_sprint_job_info.
		if isJobNumber(p.value) {
			if p.key == "ArrayJobId" {
				j.ArrayJobID = p.value
			} else {
				j.HetJobID = p.value
			}
		}
	case "JobName":
		j.Name = p.value
	case "UserId":
		j.User = userFromText(p.value)
	case "Account":
		j.Account = nullable(p.value)
	case "Partition":
		j.Partition = nullable(p.value)
	case "QOS":
		j.QOS = nullable(p.value)
	case "JobState":
		j.State = p.value
	case "NodeList":
		j.NodeList = nullable(p.value)
	}
}

// splitPairs splits one line into Key=Value pairs. A word that does not
// start with a key continues the previous value, so values with spaces
// survive unless they contain " Word=", which only restOfLine values do.
func splitPairs(line string) []pair {
	var pairs []pair
	words := strings.Split(line, " ")
	for i, w := range words {
		key, value, ok := strings.Cut(w, "=")
		if ok && isTextKey(key) {
			if restOfLine[key] {
				value = strings.Join(append([]string{value}, words[i+1:]...), " ")
				return append(pairs, pair{key, strings.TrimSpace(value)})
			}
			pairs = append(pairs, pair{key, value})
			continue
		}
		if len(pairs) > 0 {
			last := &pairs[len(pairs)-1]
			last.value = strings.TrimSpace(last.value + " " + w)
		}
	}
	return pairs
}

// isTextKey accepts scontrol's keys: letters, digits, "_", and the ":" and
// "/" of keys like AllocNode:Sid and CPUs/Task.
func isTextKey(s string) bool {
	if s == "" || !isLetter(s[0]) {
		return false
	}
	for i := range len(s) {
		c := s[i]
		if !isLetter(c) && !('0' <= c && c <= '9') && c != '_' && c != ':' && c != '/' {
			return false
		}
	}
	return true
}

func isLetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

// userFromText turns "alice(1000)" into "alice", and a UID Slurm could not
// name, "(null)(1000)" or "1000(1000)", into "1000".
func userFromText(v string) string {
	open := strings.LastIndexByte(v, '(')
	if open < 0 || !strings.HasSuffix(v, ")") {
		return nullable(v)
	}
	if name := nullable(v[:open]); name != "" {
		return name
	}
	return v[open+1 : len(v)-1]
}

// nullable maps Slurm's "(null)" for an unset field to "".
func nullable(v string) string {
	if v == "(null)" {
		return ""
	}
	return v
}

// isJobNumber accepts a job ID as scontrol prints it: decimal, at most
// 32 bits.
func isJobNumber(s string) bool {
	if s == "" || len(s) > 10 {
		return false
	}
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// ErrOtherJobsRecord is returned when scontrol, asked for a job by its
// number, prints no record with that JobId: the records are other jobs'.
// Slurm does so for an array's ArrayJobId once the task that has that ID
// is purged (the array's other tasks are printed), a job that ended; its
// labels, and worse its GRES, are no other job's.
var ErrOtherJobsRecord = errors.New("scontrol printed other jobs' records")

// pickJob selects the job asked for among the records scontrol returned for
// id: asking for an array or heterogeneous job's ID returns all its parts,
// and asking for an array task (123_4), a heterogeneous job's component
// (123+1) or a SLUID returns one record whose JobId differs from what was
// asked. A record that free text wrote into the output comes after the
// real one it sits in, so the first record with the ID, or for a task or
// SLUID the first record, is Slurm's.
func pickJob(jobs []Job, id string) (Job, error) {
	for _, j := range jobs {
		if j.ID == id {
			return j, nil
		}
	}
	switch {
	case isJobNumber(id) && len(jobs) > 0:
		return Job{}, fmt.Errorf("%w: asked for job %s, got %d records, the first of job %s", ErrOtherJobsRecord, id, len(jobs), jobs[0].ID)
	case len(jobs) == 1 || strings.Contains(id, "_") || slurmid.IsSLUID(id):
		return jobs[0], nil
	}
	return Job{}, fmt.Errorf("%d job records for %s, none with that ID", len(jobs), id)
}
