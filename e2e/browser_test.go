package e2e

import (
	"context"
	"image/png"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xpu-exporter/xpu_exporter/internal/testenv"
)

// chromium returns Debian's headless browser, or skips the test where it is
// not installed; CI installs it, so there a missing browser fails.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if path, ok := testenv.Find(name); ok {
			return path
		}
	}
	testenv.Unavailable(t, "chromium not installed", "make test-deps installs Debian's chromium package")
	return ""
}

// headless runs chromium on url with extra arguments and returns its stdout.
// The flags keep it off the network: this machine has none.
func headless(t *testing.T, browser, url string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	base := []string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", "--user-data-dir=" + t.TempDir(),
	}
	cmd := exec.CommandContext(ctx, browser, append(append(base, args...), url)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium %v: %v\n%s", args, err, stderr.String())
	}
	return string(out)
}

func TestDevicesPageInBrowser(t *testing.T) {
	browser := chromium(t)
	e, _ := startWithKubelet(t)
	url := "http://" + e.addr + "/devices"
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if _, body := get(t, http.DefaultClient, url); strings.Contains(body, "StatefulSet") {
			break
		}
	}

	dom := headless(t, browser, url, "--dump-dom")
	for _, want := range []string{"Devices on e2e-node", "DEMO MODE", "trainer-0", "notebook-c", "unattributed", "MIG 3g.40gb", "no owner"} {
		if !strings.Contains(dom, want) {
			t.Errorf("rendered page lacks %q", want)
		}
	}

	shot := filepath.Join(t.TempDir(), "devices.png")
	headless(t, browser, url, "--window-size=1400,900", "--hide-scrollbars", "--screenshot="+shot)
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	b := img.Bounds()
	if b.Dx() != 1400 || b.Dy() != 900 {
		t.Errorf("screenshot is %dx%d, want 1400x900", b.Dx(), b.Dy())
	}
	// A rendered table has text (dark pixels) over much of the page, and
	// the demo banner's yellow; a blank or error page has neither.
	var dark, yellow int
	for y := b.Min.Y; y < b.Max.Y; y += 2 {
		for x := b.Min.X; x < b.Max.X; x += 2 {
			r, g, bl, _ := img.At(x, y).RGBA()
			r, g, bl = r>>8, g>>8, bl>>8
			if r < 90 && g < 90 && bl < 90 {
				dark++
			}
			if r > 240 && g > 230 && bl > 190 && bl < 215 {
				yellow++
			}
		}
	}
	if dark < 2000 || yellow < 500 {
		t.Errorf("screenshot looks empty: %d dark and %d banner pixels sampled", dark, yellow)
	}
	if dir := os.Getenv("XPU_E2E_SCREENSHOTS"); dir != "" {
		data, _ := os.ReadFile(shot)
		os.WriteFile(filepath.Join(dir, "devices.png"), data, 0o644)
	}
}
