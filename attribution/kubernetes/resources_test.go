package kubernetes

import "testing"

func TestResourceMatcherDefaults(t *testing.T) {
	m, err := NewResourceMatcher(DefaultResourcePatterns...)
	if err != nil {
		t.Fatal(err)
	}
	for resource, want := range map[string]bool{
		"nvidia.com/gpu":          true,
		"nvidia.com/gpu.shared":   true,
		"nvidia.com/mig-1g.10gb":  true,
		"nvidia.com/mig-3g.40gb":  true,
		"amd.com/gpu":             true,
		"amd.com/cpx_nps4":        true,
		"habana.ai/gaudi":         true,
		"habana.ai/gaudi2":        true,
		"nvidia.com/gpu.mem":      false,
		"nvidia.com/gpux":         false,
		"nvidia.com/mig":          false,
		"xnvidia.com/gpu":         false,
		"rdma/hca_shared_devices": false,
		"amd.com/xilinx_u250":     false,
		"cpu":                     false,
		"":                        false,
	} {
		if got := m.Match(resource); got != want {
			t.Errorf("Match(%q) = %v, want %v", resource, got, want)
		}
	}
}

func TestGlobMatch(t *testing.T) {
	tests := []struct {
		pattern, s string
		want       bool
	}{
		{"a/b", "a/b", true},
		{"a/b", "a/bc", false},
		{"a/*", "a/", true},
		{"a/*", "a/anything.at-all", true},
		{"*", "", true},
		{"*/gpu", "vendor.example/gpu", true},
		{"a/*x*y", "a/1x2x3y", true},
		{"a/*x*y", "a/1x2x3", false},
		{"a/**", "a/b", true},
		{"a/*b*", "a/ccc", false},
		{"a/?", "a/b", false},
		{"a/[bc]", "a/b", false},
		{"a/[bc]", "a/[bc]", true},
	}
	for _, tt := range tests {
		if got := globMatch(tt.pattern, tt.s); got != tt.want {
			t.Errorf("globMatch(%q, %q) = %v, want %v", tt.pattern, tt.s, got, tt.want)
		}
	}
}

func TestNewResourceMatcherRejects(t *testing.T) {
	for _, p := range []string{"", "gpu", "/gpu", "nvidia.com/", "nvidia.com/gpu shared", "nvidia.com/gpu\n"} {
		if _, err := NewResourceMatcher("nvidia.com/gpu", p); err == nil {
			t.Errorf("NewResourceMatcher accepted %q", p)
		}
	}
}
