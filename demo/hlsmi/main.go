// Command hlsmi is a stand-in for Intel Gaudi's hl-smi, for tests; see
// package hlsmisim for what it answers and how the environment steers it.
package main

import (
	"os"

	"github.com/xpu-exporter/xpu_exporter/demo/hlsmisim"
)

func main() { os.Exit(hlsmisim.Main(os.Args[1:])) }
