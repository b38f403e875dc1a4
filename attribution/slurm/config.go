package slurm

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// configTTL is how long the answer of `scontrol show config` is reused:
// PrivateData and SlurmUser change only when slurmctld is reconfigured.
const configTTL = 10 * time.Minute

// JobsHidden says whether slurmctld hides other users' jobs from the user
// scontrol and squeue run as. With PrivateData=jobs it leaves a job out of
// every listing, and answers "Invalid job id specified" for it alone,
// unless the caller owns it, coordinates its account, or is privileged
// (_hide_job_user_rec, src/slurmctld/job_mgr.c:10397-10412, applied at
// l.10433 and l.10647 @ slurm-23-11-1-1): root, SlurmUser, or an operator
// in the accounting database (validate_operator_user_rec, proc_req.c).
// Root and SlurmUser are told here; an operator is not, and is taken for
// an ordinary user. The answer of `scontrol show config` is cached for
// configTTL, a failure for notFoundTTL; as root nothing is asked.
func (c *Client) JobsHidden(ctx context.Context) (bool, error) {
	uid := os.Geteuid()
	if c.UID != nil {
		uid = *c.UID
	}
	if uid == 0 {
		return false, nil
	}
	cfg, err := askCached(ctx, c, &c.config, "", parseConfig, "show", "config")
	return cfg.hides(uid), err
}

// scontrolAnswer is an answer of scontrol about key (a node, or none),
// kept until expires: for configTTL, a failure for notFoundTTL.
type scontrolAnswer[T any] struct {
	key     string
	val     T
	err     error
	expires time.Time
}

// askCached returns a's answer about key while it lasts, else runs
// scontrol with args, parses its output and keeps the answer in a.
func askCached[T any](ctx context.Context, c *Client, a *scontrolAnswer[T], key string, parse func([]byte) (T, error), args ...string) (T, error) {
	c.mu.Lock()
	if a.key == key && time.Now().Before(a.expires) {
		val, err := a.val, a.err
		c.mu.Unlock()
		return val, err
	}
	c.mu.Unlock()

	out, err := c.run(ctx, args...)
	var val T
	if err == nil {
		val, err = parse(out)
	}
	ttl := configTTL
	if err != nil {
		ttl = notFoundTTL
	}
	c.mu.Lock()
	*a = scontrolAnswer[T]{key: key, val: val, err: err, expires: time.Now().Add(ttl)}
	c.mu.Unlock()
	return val, err
}

// slurmConfig is what the exporter reads of `scontrol show config`.
type slurmConfig struct {
	privateJobs bool
	slurmUserID int
}

func (cfg slurmConfig) hides(uid int) bool { return cfg.privateJobs && uid != cfg.slurmUserID }

// parseConfig reads the "PrivateData" and "SlurmUser" lines of `scontrol
// show config`, printed "%-23s = %s" (slurm_print_key_pairs,
// src/api/config_info.c:2412 @ slurm-23-11-1-1): PrivateData a comma list
// of accounts, events, jobs, nodes, … or "none" (private_data_string,
// src/common/slurm_protocol_defs.c:4426), SlurmUser "name(uid)"
// (config_info.c:1363,1520-1524 @ slurm-23-11-1-1; l.1346,1512 @
// slurm-21-08-8-2; l.981,1072 @ slurm-25-11-0-1).
func parseConfig(out []byte) (slurmConfig, error) {
	var cfg slurmConfig
	found := 0
	for line := range strings.Lines(string(out)) {
		key, value, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		value = strings.TrimSpace(value)
		switch strings.TrimSpace(key) {
		case "PrivateData":
			cfg.privateJobs = slices.Contains(strings.Split(value, ","), "jobs")
			found++
		case "SlurmUser":
			open := strings.LastIndexByte(value, '(')
			id, err := strconv.Atoi(strings.TrimSuffix(value[open+1:], ")"))
			if open < 0 || !strings.HasSuffix(value, ")") || err != nil {
				return slurmConfig{}, fmt.Errorf("scontrol show config: SlurmUser %q", value)
			}
			cfg.slurmUserID = id
			found++
		}
	}
	if found != 2 {
		return slurmConfig{}, fmt.Errorf("scontrol show config: no PrivateData or SlurmUser line")
	}
	return cfg, nil
}
