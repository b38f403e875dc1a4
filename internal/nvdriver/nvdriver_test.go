package nvdriver

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "fixtures", "nvdriver", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []byte
		want GPU
	}{
		{"answered", fixture(t, "information-h100"),
			GPU{BusID: "0000:3b:00.0", Model: "NVIDIA H100 80GB HBM3", UUID: "GPU-7a3c1b2e-5f4d-4e6a-9b8c-0d1e2f3a4b5c", Minor: 3}},
		{"no UUID line", fixture(t, "information-no-uuid"),
			GPU{BusID: "0000:5c:00.0", Model: "NVIDIA H100 80GB HBM3", Minor: 4}},
		{"excluded, model unknown, upper-case address", []byte("Model: \t\t Unknown\nBus Location: \t 0000:AF:00.0\nGPU Excluded:\t Yes\n"),
			GPU{BusID: "0000:af:00.0", Minor: -1, Excluded: true}},
		{"a UUID that is none, a minor that is none", []byte("GPU UUID: \t ????\nDevice Minor: \t -1\nBus Location: \t 0000:01:00.0\n"),
			GPU{BusID: "0000:01:00.0", Minor: -1}},
		{"no colon anywhere", []byte("garbage\n\x00\xff"), GPU{Minor: -1}},
	} {
		if got := Parse(tc.in); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func writeTable(t *testing.T, files map[string][]byte) string {
	t.Helper()
	root := t.TempDir()
	for bus, b := range files {
		dir := filepath.Join(root, "driver", "nvidia", "gpus", bus)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if b != nil {
			if err := os.WriteFile(filepath.Join(dir, "information"), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return root
}

func TestGPUs(t *testing.T) {
	root := writeTable(t, map[string][]byte{"0000:3b:00.0": fixture(t, "information-h100"), "0000:5c:00.0": fixture(t, "information-no-uuid")})
	gpus, err := GPUs(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(gpus) != 2 || gpus[0].BusID != "0000:3b:00.0" || gpus[1].BusID != "0000:5c:00.0" || gpus[1].UUID != "" {
		t.Errorf("got %+v", gpus)
	}

	// A table a GPU is missing from, or that is not there, names no GPU
	// by elimination: each is an error.
	for name, root := range map[string]string{
		"no driver":             t.TempDir(),
		"a GPU without a file":  writeTable(t, map[string][]byte{"0000:3b:00.0": fixture(t, "information-h100"), "0000:5c:00.0": nil}),
		"a file without a bus":  writeTable(t, map[string][]byte{"0000:3b:00.0": []byte("Model: \t\t X\n")}),
		"a file past the bound": writeTable(t, map[string][]byte{"0000:3b:00.0": []byte("Bus Location: \t 0000:3b:00.0\n" + strings.Repeat("x", maxFileBytes))}),
	} {
		if gpus, err := GPUs(root); err == nil {
			t.Errorf("%s: %+v, want an error", name, gpus)
		}
	}
	if _, err := GPUs(t.TempDir()); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("no driver: %v, want fs.ErrNotExist", err)
	}
}
