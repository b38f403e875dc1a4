package kubernetes

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

var (
	invalidLabelChar = regexp.MustCompile(`[^a-zA-Z0-9_]`)
	lowerThenUpper   = regexp.MustCompile(`([a-z0-9])([A-Z])`)
)

// LabelAllowList is the pod labels copied onto samples, each as
// "label_<name>", named exactly as kube-state-metrics names them in
// kube_pod_labels so that the two join on the same label names: characters
// outside [a-zA-Z0-9_] become "_", camelCase becomes snake_case, and names
// that then collide get "_conflict<n>" suffixes in the order of their
// Kubernetes keys.
//
// kube-state-metrics resolves collisions among the labels a pod actually
// has; here they are resolved once over the allow-list, so that every
// sample carries the same label names whatever labels its pod has. The two
// differ only when a pod lacks one of two colliding labels.
type LabelAllowList struct {
	keys  []string
	names []string
}

// NewLabelAllowList builds an allow-list of pod label keys. Duplicates are
// ignored; an empty key is an error.
func NewLabelAllowList(keys ...string) (*LabelAllowList, error) {
	l := &LabelAllowList{}
	for _, k := range keys {
		if strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("empty pod label key in allow-list %q", keys)
		}
		l.keys = append(l.keys, k)
	}
	slices.Sort(l.keys)
	l.keys = slices.Compact(l.keys)

	type conflict struct{ count, first int }
	conflicts := map[string]*conflict{}
	for _, k := range l.keys {
		name := "label_" + SanitizeLabelName(k)
		if c, ok := conflicts[name]; ok {
			if c.count == 1 {
				l.names[c.first] = fmt.Sprintf("%s_conflict1", l.names[c.first])
			}
			c.count++
			name = fmt.Sprintf("%s_conflict%d", name, c.count)
		} else {
			conflicts[name] = &conflict{count: 1, first: len(l.names)}
		}
		l.names = append(l.names, name)
	}
	// A conflict's suffix may make the name another key has (team and
	// Team are label_team_conflict1 and _conflict2, and so is the key
	// team_conflict1): one name twice on a sample makes the whole
	// exposition unparseable.
	for i, name := range l.names {
		if j := slices.Index(l.names[i+1:], name); j >= 0 {
			return nil, fmt.Errorf("pod label keys %q and %q both become the label name %s: leave one out of the allow-list", l.keys[i], l.keys[i+1+j], name)
		}
	}
	return l, nil
}

// Names returns the Prometheus label names, in a fixed order.
func (l *LabelAllowList) Names() []string { return slices.Clone(l.names) }

// Values returns the values of the allowed labels of a pod, in the order of
// Names; a label the pod does not have is "", which Prometheus treats as
// absent.
func (l *LabelAllowList) Values(podLabels map[string]string) []string {
	values := make([]string, len(l.keys))
	for i, k := range l.keys {
		values[i] = podLabels[k]
	}
	return values
}

// SanitizeLabelName turns a Kubernetes label key into the part of a
// Prometheus label name that kube-state-metrics puts after its prefix:
// invalid characters become "_" and camelCase becomes snake_case.
func SanitizeLabelName(key string) string {
	s := invalidLabelChar.ReplaceAllString(key, "_")
	return strings.ToLower(lowerThenUpper.ReplaceAllString(s, "${1}_${2}"))
}
