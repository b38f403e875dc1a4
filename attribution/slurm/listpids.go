package slurm

import (
	"bytes"
	"errors"
	"strconv"
	"strings"

	"github.com/xpu-exporter/xpu_exporter/attribution/internal/slurmid"
)

// StepProcess is one row of `scontrol listpids`: a process that slurmd
// knows to belong to a job step on this node.
type StepProcess struct {
	PID    int
	JobID  string
	StepID string
}

// ParseListPIDs parses the table of `scontrol listpids`:
//
//	PID      JOBID    STEPID   LOCALID GLOBALID
//	18723    16       batch    0       0
//	18724    16       batch    -       -
//
// LOCALID and GLOBALID (the task rank, "-" for a task's children) are not
// kept: every process of a step belongs to its job alike. Rows that do not
// parse, and the PID -1 that some versions print for an extern step
// without processes, are skipped.
func ParseListPIDs(out []byte) ([]StepProcess, error) {
	lines := bytes.Split(out, []byte("\n"))
	header := strings.Fields(string(lines[0]))
	if len(header) < 3 || header[0] != "PID" || header[1] != "JOBID" || header[2] != "STEPID" {
		return nil, errors.New("scontrol listpids: no PID JOBID STEPID header")
	}
	var procs []StepProcess
	for _, line := range lines[1:] {
		fields := strings.Fields(string(line))
		if len(fields) < 3 {
			continue
		}
		pid, err := strconv.Atoi(fields[0])
		if err != nil || pid <= 0 || !isJobNumber(fields[1]) || !slurmid.IsStep(fields[2]) {
			continue
		}
		procs = append(procs, StepProcess{PID: pid, JobID: fields[1], StepID: fields[2]})
	}
	return procs, nil
}
