package slurm

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// esInvalidJobID is Slurm's ESLURM_INVALID_JOB_ID.
const esInvalidJobID = 2017

// jsonResponse is the part of `scontrol --json show job` (data_parser
// v0.0.39 and later, Slurm 23.02+) and of `squeue --json` (v0.0.38 and
// later) that the exporter reads. The job fields kept their names across
// these versions; only job_state changed from a string to a list.
type jsonResponse struct {
	Jobs   []jsonJob `json:"jobs"`
	Errors []struct {
		Description string `json:"description"`
		Error       string `json:"error"`
		ErrorNumber int    `json:"error_number"`
	} `json:"errors"`
}

type jsonJob struct {
	JobID      json.Number `json:"job_id"`
	ArrayJobID parentID    `json:"array_job_id"`
	HetJobID   parentID    `json:"het_job_id"`
	Name       string      `json:"name"`
	UserName   string      `json:"user_name"`
	UserID     json.Number `json:"user_id"`
	Account    string      `json:"account"`
	Partition  string      `json:"partition"`
	QOS        string      `json:"qos"`
	JobState   jobState    `json:"job_state"`
	Nodes      string      `json:"nodes"`
	// GresDetail has one entry per node of the job, in the order of the
	// expanded node list.
	GresDetail []string `json:"gres_detail"`
}

// parentID is an array's or heterogeneous job's ID: a number before
// data_parser v0.0.40, {"set": …, "infinite": …, "number": …} from v0.0.40
// on; 0 or unset for a job that is neither's.
type parentID string

func (p *parentID) UnmarshalJSON(data []byte) error {
	var n json.Number
	if err := json.Unmarshal(data, &n); err == nil {
		*p = parentID(n.String())
	} else {
		var v struct {
			Set      bool        `json:"set"`
			Infinite bool        `json:"infinite"`
			Number   json.Number `json:"number"`
		}
		if err := json.Unmarshal(data, &v); err != nil {
			return err
		}
		if v.Set && !v.Infinite {
			*p = parentID(v.Number.String())
		}
	}
	if *p == "0" || !isJobNumber(string(*p)) {
		*p = ""
	}
	return nil
}

// jobState is "RUNNING" before data_parser v0.0.40 and ["RUNNING",
// "COMPLETING"] (base state first, then flags) from v0.0.40 on.
type jobState string

func (s *jobState) UnmarshalJSON(data []byte) error {
	var one string
	if err := json.Unmarshal(data, &one); err == nil {
		*s = jobState(one)
		return nil
	}
	var list []string
	if err := json.Unmarshal(data, &list); err != nil {
		return fmt.Errorf("job_state: %w", err)
	}
	if len(list) > 0 {
		*s = jobState(list[0])
	}
	return nil
}

// ParseJobJSON parses the JSON of `scontrol --json show job` or `squeue
// --json`. A response with no job is ErrJobNotFound when Slurm says so or
// says nothing, and an error carrying Slurm's message otherwise.
func ParseJobJSON(out []byte) ([]Job, error) {
	var resp jsonResponse
	if err := json.Unmarshal(out, &resp); err != nil {
		return nil, fmt.Errorf("decode scontrol JSON: %w", err)
	}
	if len(resp.Jobs) == 0 {
		var msgs []string
		for _, e := range resp.Errors {
			if e.ErrorNumber == esInvalidJobID {
				return nil, ErrJobNotFound
			}
			msgs = append(msgs, strings.TrimSpace(e.Description+" "+e.Error))
		}
		if len(msgs) == 0 {
			return nil, ErrJobNotFound
		}
		return nil, fmt.Errorf("scontrol: %s", strings.Join(msgs, "; "))
	}

	b := newBudget()
	jobs := make([]Job, 0, len(resp.Jobs))
	for _, j := range resp.Jobs {
		id := j.JobID.String()
		if !isJobNumber(id) {
			return nil, fmt.Errorf("invalid job_id %q in scontrol JSON", id)
		}
		job := Job{
			ID:         id,
			ArrayJobID: string(j.ArrayJobID),
			HetJobID:   string(j.HetJobID),
			Name:       j.Name,
			User:       j.UserName,
			Account:    j.Account,
			Partition:  j.Partition,
			QOS:        j.QOS,
			State:      string(j.JobState),
			NodeList:   j.Nodes,
		}
		if job.User == "" {
			if _, err := strconv.ParseUint(j.UserID.String(), 10, 32); err == nil {
				job.User = j.UserID.String()
			}
		}
		if len(j.GresDetail) > 0 {
			// Without one entry per node the pairing would be a guess.
			if nodes, err := b.expand(j.Nodes); err == nil && len(nodes) == len(j.GresDetail) {
				for i, gres := range j.GresDetail {
					b.addGPUs(&job, nodes[i:i+1], gres)
				}
			}
		}
		jobs = append(jobs, job)
	}
	return jobs, nil
}
