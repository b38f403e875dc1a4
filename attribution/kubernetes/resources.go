package kubernetes

import (
	"fmt"
	"strings"
)

// DefaultResourcePatterns are the device-plugin resources that name
// accelerators. Besides the usual names they cover "nvidia.com/gpu.shared",
// the name the NVIDIA plugin gives time-sliced or MPS GPUs when sharing is
// configured with renaming, and the ROCm plugin's per-partition resources
// ("amd.com/cpx_nps4": compute and memory partition mode) that it registers
// when a node's GPUs are partitioned differently.
var DefaultResourcePatterns = []string{
	"nvidia.com/gpu",
	"nvidia.com/gpu.shared",
	"nvidia.com/mig-*",
	"amd.com/gpu",
	"amd.com/*_nps*",
	"habana.ai/gaudi*",
}

// ResourceMatcher selects the resource names whose devices are accelerators.
// A pattern is a resource name in which "*" matches any run of characters;
// no other character is special.
type ResourceMatcher struct {
	patterns []string
}

// NewResourceMatcher validates patterns. Each must look like an extended
// resource name, "domain/name", so that a typo such as "gpu" is reported
// rather than silently matching nothing.
func NewResourceMatcher(patterns ...string) (*ResourceMatcher, error) {
	m := &ResourceMatcher{}
	for _, p := range patterns {
		if p == "" || strings.ContainsFunc(p, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
			return nil, fmt.Errorf("resource pattern %q: empty or contains a space or control character", p)
		}
		domain, name, found := strings.Cut(p, "/")
		if !found || domain == "" || name == "" {
			return nil, fmt.Errorf("resource pattern %q is not of the form domain/name", p)
		}
		m.patterns = append(m.patterns, p)
	}
	return m, nil
}

// Match reports whether resource matches one of the patterns.
func (m *ResourceMatcher) Match(resource string) bool {
	for _, p := range m.patterns {
		if globMatch(p, resource) {
			return true
		}
	}
	return false
}

// globMatch matches s against pattern, where "*" matches any run of bytes.
// Greedy matching with backtracking to the last star is linear in practice
// and never recurses.
func globMatch(pattern, s string) bool {
	p, i := 0, 0
	star, mark := -1, 0
	for i < len(s) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, i
			p++
		case p < len(pattern) && pattern[p] == s[i]:
			p++
			i++
		case star >= 0:
			mark++
			p, i = star+1, mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}
