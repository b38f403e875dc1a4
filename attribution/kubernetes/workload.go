package kubernetes

import (
	"strconv"
	"strings"
)

// Owner is an owner reference of a pod.
type Owner struct {
	APIVersion string
	Kind       string
	Name       string
	// Controller marks the managing owner; a pod has at most one.
	Controller bool
}

// Pod labels that name a workload above the pod's direct owner.
const (
	labelPodTemplateHash         = "pod-template-hash"
	labelRolloutsPodTemplateHash = "rollouts-pod-template-hash"
	labelJobSetName              = "jobset.sigs.k8s.io/jobset-name"
	labelLeaderWorkerSetName     = "leaderworkerset.sigs.k8s.io/name"
)

// The range of CronJob-made Job name suffixes accepted: scheduled times in
// minutes since the epoch from 2016, when CronJobs appeared, to 2100. Every
// such number has 8 digits, and none reads as a YYYYMMDD date of this
// century (those are below 21000000), so "report-20240101" stays a Job.
const (
	minCronJobMinute = 1451606400 / 60 // 2016-01-01T00:00:00Z
	maxCronJobMinute = 4102444800 / 60 // 2100-01-01T00:00:00Z
)

// ResolveWorkload names the workload a pod belongs to and its kind, from
// the pod's name, labels and owner references alone: the exporter reads
// pods and nothing else, so it cannot follow a ReplicaSet or Job to its own
// owner and infers the step above from the names and labels the controllers
// write.
//
//   - ReplicaSet whose name is "<deployment>-<pod-template-hash label>":
//     Deployment; with Argo Rollouts' "rollouts-pod-template-hash" label
//     instead: Rollout. Any other ReplicaSet: ReplicaSet.
//   - Job of a JobSet (its "jobset.sigs.k8s.io/jobset-name" label): JobSet.
//   - Job named "<cronjob>-<n>", n an 8-digit scheduled time in minutes
//     since the epoch, which is how the CronJob controller names the Jobs
//     it creates: CronJob. A Job someone named like that by hand is taken
//     for a CronJob's too; no label on the pod tells them apart.
//   - StatefulSet of a LeaderWorkerSet (its "leaderworkerset.sigs.k8s.io/name"
//     label): LeaderWorkerSet. Its worker pods are owned by StatefulSets
//     that are owned by the leader pod, so only the label names the set.
//   - Any other owner (StatefulSet, DaemonSet, Job, or a custom resource
//     such as RayCluster or PyTorchJob): that owner's kind and name.
//   - No owner: the pod itself, kind "Pod".
//
// Built-in kinds are recognised only in their own API group, so a custom
// resource that happens to be called "Job" is reported as it is.
func ResolveWorkload(podName string, labels map[string]string, owners []Owner) (name, kind string) {
	o, ok := controllerOf(owners)
	if !ok {
		return podName, "Pod"
	}
	group := apiGroup(o.APIVersion)
	switch {
	case group == "apps" && o.Kind == "ReplicaSet":
		if base, ok := trimHash(o.Name, labels[labelPodTemplateHash]); ok {
			return base, "Deployment"
		}
		if base, ok := trimHash(o.Name, labels[labelRolloutsPodTemplateHash]); ok {
			return base, "Rollout"
		}
	case group == "apps" && o.Kind == "StatefulSet":
		if lws := labels[labelLeaderWorkerSetName]; lws != "" {
			return lws, "LeaderWorkerSet"
		}
	case group == "batch" && o.Kind == "Job":
		if js := labels[labelJobSetName]; js != "" {
			return js, "JobSet"
		}
		if cron, ok := cronJobOf(o.Name); ok {
			return cron, "CronJob"
		}
	}
	return o.Name, o.Kind
}

// controllerOf picks the managing owner, or the first owner when none is
// marked as the controller.
func controllerOf(owners []Owner) (Owner, bool) {
	for _, o := range owners {
		if o.Controller && o.Kind != "" && o.Name != "" {
			return o, true
		}
	}
	for _, o := range owners {
		if o.Kind != "" && o.Name != "" {
			return o, true
		}
	}
	return Owner{}, false
}

// apiGroup returns the group of "group/version", and "" for the core group.
func apiGroup(apiVersion string) string {
	group, _, found := strings.Cut(apiVersion, "/")
	if !found {
		return ""
	}
	return group
}

// trimHash strips "-<hash>" from name.
func trimHash(name, hash string) (string, bool) {
	if hash == "" {
		return "", false
	}
	base, ok := strings.CutSuffix(name, "-"+hash)
	return base, ok && base != ""
}

// cronJobOf returns the CronJob name of a Job named "<cronjob>-<minutes>".
func cronJobOf(job string) (string, bool) {
	i := strings.LastIndexByte(job, '-')
	if i <= 0 {
		return "", false
	}
	suffix := job[i+1:]
	if len(suffix) != 8 || !isDigits(suffix) {
		return "", false
	}
	minute, _ := strconv.Atoi(suffix)
	if minute < minCronJobMinute || minute >= maxCronJobMinute {
		return "", false
	}
	return job[:i], true
}
