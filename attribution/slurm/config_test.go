package slurm

import (
	"context"
	"testing"
)

// TestJobsHidden: with PrivateData=jobs slurmctld hides other users' jobs
// from a caller that is neither root nor SlurmUser (_hide_job_user_rec,
// job_mgr.c:10397-10412 @ slurm-23-11-1-1). The stand-in prints the two
// lines as `scontrol show config` does ("%-23s = %s"). By hand, with
// SlurmUser slurm(64030):
//   - PrivateData jobs,usage: hidden from UID 1000; not from 64030; not
//     from root, who is not asked at all (no scontrol run);
//   - PrivateData usage or none: hidden from nobody;
//   - an answer without the lines: an error, hidden from nobody.
//
// Each case asks twice: one scontrol run at most (the answer cached).
// Found by probing: D3, the GPUs of the jobs Slurm hid were owned by
// nobody.
func TestJobsHidden(t *testing.T) {
	config := func(private string) string {
		return `printf 'Configuration data as of 2026-11-26T10:00:00\nPrivateData             = ` + private + `\nProctrackType           = proctrack/cgroup\nSlurmUser               = slurm(64030)\n'`
	}
	for _, tc := range []struct {
		name, body string
		uid        int
		want       bool
		wantErr    bool
		wantRuns   int
	}{
		{name: "private jobs, ordinary user", body: config("jobs,usage"), uid: 1000, want: true, wantRuns: 1},
		{name: "private jobs, SlurmUser", body: config("jobs,usage"), uid: 64030, wantRuns: 1},
		{name: "private jobs, root", body: config("jobs,usage"), uid: 0},
		{name: "private usage", body: config("usage"), uid: 1000, wantRuns: 1},
		{name: "nothing private", body: config("none"), uid: 1000, wantRuns: 1},
		{name: "no answer", body: `echo 'slurm_load_ctl_conf error: Unable to contact slurm controller' >&2; exit 1`, uid: 1000, wantErr: true, wantRuns: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path, calls := fakeScontrol(t, tc.body)
			c := &Client{Path: path, UID: &tc.uid}
			for range 2 {
				hidden, err := c.JobsHidden(context.Background())
				if hidden != tc.want || (err != nil) != tc.wantErr {
					t.Errorf("JobsHidden() = %v, %v; want %v, error %v", hidden, err, tc.want, tc.wantErr)
				}
			}
			if got := calls(); len(got) != tc.wantRuns || len(got) > 0 && got[0] != "show config" {
				t.Errorf("scontrol runs %q, want %d of show config", got, tc.wantRuns)
			}
		})
	}
}
